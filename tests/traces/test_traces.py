"""Reader, writer and validator of Muri trace CSVs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # no conftest or install is assumed
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specs import load_spec, spec_path  # noqa: E402
from specs.limits import MAX_SECONDS, MAX_TRACE_SECONDS  # noqa: E402
from traces import (  # noqa: E402
    MODELS,
    STAGES_3,
    STAGES_4,
    JobRecord,
    Problem,
    TraceError,
    read_trace,
    validate,
    write_trace,
)

REFERENCE = ROOT.parent / "shared" / "reference"
HEADER = (
    "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
    "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority"
)


def row(job_id=0, num_gpu="8", submit="0", iters="100", model="vgg16", batch="16",
        duration="21400", interval="0", it="214", r0="82", r1="75", r2="66", prio="0"):
    return ",".join(
        str(x) for x in (job_id, num_gpu, submit, iters, model, batch, duration, interval,
                         it, r0, r1, r2, prio)
    )


def write(tmp_path: Path, *lines: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def problems_of(path: Path, **kwargs) -> list[Problem]:
    with pytest.raises(TraceError) as info:
        read_trace(path, **kwargs)
    # the validator must agree with the reader, problem for problem
    assert validate(path, **kwargs) == info.value.problems
    return info.value.problems


# ---------------------------------------------------------------- reading good files


@pytest.mark.skipif(not (REFERENCE / "trace3.csv").is_file(),
                    reason="reference trace ../shared/reference/trace3.csv not present")
def test_reference_trace3_reads_in_seconds():
    records = read_trace(REFERENCE / "trace3.csv")
    assert len(records) == 992
    assert [r.job_id for r in records] == list(range(992))
    first = records[0]
    assert first == JobRecord(
        job_id=0, num_gpu=4, submit_time=0.0, iterations=1046811,
        model_name="shufflenet_v2_x1_0", batch_size=128, duration=927475.0,
        interval=11174.0, iteration_time=0.886, stage_times=(0.703, 0.062, 0.017), priority=0,
    )
    assert records[1].submit_time == 1456.0 and records[1].priority == 1
    assert records[2].stage_times == (0.0005, 0.163, 0.018)  # "0.5" ms parses
    assert max(r.submit_time for r in records) == pytest.approx(8.166025e6)
    assert all(r.stage_names == STAGES_3 for r in records)
    assert not validate(records, spec=load_spec(spec_path("n8g8")))


@pytest.mark.skipif(not (REFERENCE / "trace3_pr.csv").is_file(),
                    reason="reference trace ../shared/reference/trace3_pr.csv not present")
def test_reference_backlog_trace_all_at_zero():
    records = read_trace(REFERENCE / "trace3_pr.csv")
    assert len(records) == 992
    assert {r.submit_time for r in records} == {0.0}


def test_minimal_file_units_and_defaults(tmp_path):
    header = HEADER.rsplit(",", 1)[0]  # no priority column
    path = write(tmp_path, header, row(prio="").rsplit(",", 1)[0], row(1, num_gpu="1", r2="0")[:-2])
    a, b = read_trace(path)
    assert a.priority == 0 and b.priority == 0
    assert a.submit_time == 0.0 and a.duration == 21.4 and a.iteration_time == 0.214
    assert a.stage_times == (0.082, 0.075, 0.066)
    assert b.stage_times[2] == 0.0  # a 1-GPU job may have no net stage


def test_integral_floats_accepted_for_integer_columns(tmp_path):
    path = write(tmp_path, HEADER, row(num_gpu="8.0", iters="1e2"))
    (r,) = read_trace(path)
    assert r.num_gpu == 8 and isinstance(r.num_gpu, int) and r.iterations == 100


def test_crlf_bom_blank_lines_and_spaces(tmp_path):
    path = tmp_path / "trace.csv"
    text = "\ufeff" + HEADER.replace(",", ", ") + "\r\n\r\n" + row() + "\r\n" + row(1) + "\r\n\r\n"
    path.write_text(text, encoding="utf-8", newline="")
    assert [r.job_id for r in read_trace(path)] == [0, 1]


def test_header_only_is_an_empty_trace(tmp_path):
    assert read_trace(write(tmp_path, HEADER)) == []


def test_four_stage_and_mixed_rows(tmp_path):
    header = HEADER.replace("resource_time_2,", "resource_time_2,resource_time_3,")
    path = write(tmp_path, header, row(r2="66,10"), row(1, r2="66,"))
    four, three = read_trace(path)
    assert four.stage_times == (0.082, 0.075, 0.066, 0.010) and four.stage_names == STAGES_4
    assert three.stage_times == (0.082, 0.075, 0.066)


def test_row_order_is_file_order(tmp_path):
    path = write(tmp_path, HEADER, row(5, submit="900"), row(2, submit="100"), row(9))
    assert [r.job_id for r in read_trace(path)] == [5, 2, 9]


# ---------------------------------------------------------------- every problem kind


def test_message_names_file_line_and_field(tmp_path):
    lines = [HEADER] + [row(i) for i in range(15)] + [row(15, num_gpu="-2")]
    path = write(tmp_path, *lines)
    (p,) = problems_of(path)
    assert (p.line, p.field) == (17, "num_gpu")
    assert str(p) == f"{path}:17: num_gpu: must be a positive integer, got '-2'"


def test_missing_column(tmp_path):
    header = HEADER.replace("iterations,", "")
    line = row().split(",")
    del line[3]
    (p,) = problems_of(write(tmp_path, header, ",".join(line)))
    assert (p.line, p.field, p.message) == (1, "iterations", "missing column")


def test_duplicate_column(tmp_path):
    (p,) = problems_of(write(tmp_path, HEADER + ",num_gpu", row() + ",8"))
    assert (p.line, p.field, p.message) == (1, "num_gpu", "duplicate column")


@pytest.mark.parametrize(
    "kwargs, field, fragment",
    [
        ({"submit": "-5"}, "submit_time", "must be non-negative, got '-5'"),
        ({"r1": "-0.5"}, "resource_time_1", "must be non-negative"),
        ({"duration": "-1"}, "duration", "must be non-negative"),
        ({"iters": "0"}, "iterations", "must be a positive integer, got '0'"),
        ({"iters": "1.5"}, "iterations", "must be a positive integer, got '1.5'"),
        ({"job_id": "-1"}, "job_id", "must be a non-negative integer"),
        ({"batch": "0"}, "batch_size", "must be a positive integer"),
        ({"it": "0"}, "iteration_time", "must be positive, got '0'"),
        ({"prio": "2"}, "priority", "must be 0 (guaranteed) or 1 (opportunistic), got '2'"),
    ],
)
def test_negative_or_out_of_range_value(tmp_path, kwargs, field, fragment):
    (p,) = problems_of(write(tmp_path, HEADER, row(**kwargs)))
    assert (p.line, p.field) == (2, field)
    assert fragment in p.message


@pytest.mark.parametrize(
    "kwargs, field, fragment",
    [
        ({"num_gpu": "eight"}, "num_gpu", "must be a number, got 'eight'"),
        ({"r0": "fast"}, "resource_time_0", "must be a number, got 'fast'"),
        ({"submit": "nan"}, "submit_time", "must be a finite number, got 'nan'"),
        ({"it": "inf"}, "iteration_time", "must be a finite number"),
        ({"iters": "1e999999"}, "iterations", "out of range"),
        ({"interval": ""}, "interval", "must not be empty"),
        ({"model": " "}, "model_name", "must be a non-empty name"),
    ],
)
def test_non_numeric_or_empty_value(tmp_path, kwargs, field, fragment):
    (p,) = problems_of(write(tmp_path, HEADER, row(**kwargs)))
    assert (p.line, p.field) == (2, field)
    assert fragment in p.message


def test_unknown_model_without_profile(tmp_path):
    path = write(tmp_path, HEADER, row(model="llama", r0="0", r1="0", r2="0"))
    (p,) = problems_of(path)
    assert (p.line, p.field) == (2, "model_name")
    assert "unknown model 'llama'" in p.message and "no stage profile" in p.message


def test_unknown_model_with_profile_is_fine(tmp_path):
    (r,) = read_trace(write(tmp_path, HEADER, row(model="llama")))
    assert r.model_name == "llama" and "llama" not in MODELS


def test_unknown_model_accepted_when_caller_knows_it(tmp_path):
    path = write(tmp_path, HEADER, row(model="llama", r0="0", r1="0", r2="0"))
    with pytest.raises(TraceError):  # known model, but no work per stage at all
        read_trace(path, known_models={"llama"})
    (p,) = validate(path, known_models={"llama"})
    assert p.field == "resource_time_0..resource_time_2" and "all zero" in p.message


def test_known_model_with_all_zero_stages(tmp_path):
    (p,) = problems_of(write(tmp_path, HEADER, row(r0="0", r1="0", r2="0")))
    assert "all zero" in p.message


def test_more_gpus_than_the_cluster(tmp_path):
    path = write(tmp_path, HEADER, row(num_gpu="8"), row(1, num_gpu="32"))
    assert len(read_trace(path)) == 2  # no spec, no such check
    spec = load_spec(spec_path("n2g8"))
    (p,) = problems_of(path, spec=spec)
    assert (p.line, p.field) == (3, "num_gpu")
    assert "32 GPUs" in p.message and "16" in p.message


def test_duplicate_job_id(tmp_path):
    (p,) = problems_of(write(tmp_path, HEADER, row(3), row(4), row(3)))
    assert (p.line, p.field) == (4, "job_id")
    assert "duplicate job_id 3" in p.message and "line 2" in p.message


def test_duplicate_id_found_even_on_faulty_row(tmp_path):
    probs = problems_of(write(tmp_path, HEADER, row(3), row(3, num_gpu="x")))
    assert {p.field for p in probs} == {"num_gpu", "job_id"}


def test_wrong_field_count(tmp_path):
    (p,) = problems_of(write(tmp_path, HEADER, row() + ",extra"))
    assert p.line == 2 and p.field is None and "expected 13 fields, got 14" in p.message


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.csv"
    path.write_bytes(content)
    (p,) = problems_of(path)
    assert "empty" in p.message and str(p).startswith(str(path))


def test_missing_file_directory_and_not_utf8(tmp_path):
    (p,) = problems_of(tmp_path / "nope.csv")
    assert "no such file" in p.message
    (p,) = problems_of(tmp_path)
    assert "directory" in p.message
    bad = tmp_path / "latin1.csv"
    bad.write_bytes((HEADER + "\n" + row(model="vgg16") + "\n").encode() + b"\xff\n")
    (p,) = problems_of(bad)
    assert p.line == 3 and "UTF-8" in p.message


def test_all_problems_are_collected_with_physical_lines(tmp_path):
    lines = [
        HEADER,
        row(0),
        "",  # blank line 3 still counts
        row(1, num_gpu="-2", r0="x"),
        '2,8,0,100,"vgg\n16",16,21400,0,214,82,75,66,0',  # a quoted field spans lines 5-6
        row(3, iters="abc"),
        row(0),
    ]
    probs = problems_of(write(tmp_path, *lines))
    # the quoted two-line model name is unknown but has a profile, so it is fine
    assert [(p.line, p.field) for p in probs] == [
        (4, "num_gpu"),
        (4, "resource_time_0"),
        (7, "iterations"),
        (8, "job_id"),
    ]
    assert str(TraceError(probs)).count("\n") == len(probs) - 1


# ---------------------------------------------------------------- validating records


def good_record(**changes) -> JobRecord:
    base = dict(job_id=0, num_gpu=8, submit_time=0.0, iterations=10, model_name="bert",
                batch_size=4, duration=1.92, interval=0.0, iteration_time=0.192,
                stage_times=(0.0005, 0.167, 0.059), priority=1)
    base.update(changes)
    return JobRecord(**base)


def test_validate_records_clean_and_faulty():
    assert validate([good_record(), good_record(job_id=1)]) == []
    probs = validate(
        [
            good_record(),
            good_record(job_id=1, submit_time=-1.0, stage_times=(0.1, 0.2)),
            good_record(job_id=0, num_gpu=32, model_name="llama", stage_times=(0.0, 0.0, 0.0)),
        ],
        spec=load_spec(spec_path("n2g8")),
    )
    assert [(p.file, p.line, p.field) for p in probs] == [
        ("<records>", 2, "stage_times"),
        ("<records>", 2, "submit_time"),
        ("<records>", 3, "num_gpu"),
        ("<records>", 3, "model_name"),
        ("<records>", 3, "job_id"),
    ]
    assert "first at record 1" in probs[-1].message


def test_validate_records_type_errors():
    probs = validate([good_record(num_gpu=2.5, iteration_time=float("nan"), priority=True)])
    assert {p.field for p in probs} == {"num_gpu", "iteration_time", "priority"}


# ---------------------------------------------------------------- writing


# every value within the trace limits (specs.limits), which the reader enforces
times = st.floats(min_value=0, max_value=MAX_TRACE_SECONDS, allow_nan=False,
                  allow_infinity=False)
stage_times = st.floats(min_value=0, max_value=MAX_SECONDS, allow_nan=False,
                        allow_infinity=False)
model_names = st.text(
    alphabet=st.sampled_from('abcxyz_019-.," '), min_size=1, max_size=12
).filter(lambda s: s.strip() == s)


@st.composite
def records(draw):
    n = draw(st.integers(0, 6))
    ids = draw(st.lists(st.integers(0, 10**9), min_size=n, max_size=n, unique=True))
    out = []
    for job_id in ids:
        stages = draw(st.lists(stage_times, min_size=3, max_size=4))
        stages[draw(st.integers(0, len(stages) - 1))] = draw(
            st.floats(min_value=1e-9, max_value=1e6)
        )
        iteration_time = draw(st.floats(min_value=1e-300, max_value=MAX_SECONDS))
        most = max(1, int(min(1e12, MAX_TRACE_SECONDS / iteration_time)))
        out.append(
            JobRecord(
                job_id=job_id,
                num_gpu=draw(st.integers(1, 512)),
                submit_time=draw(times),
                iterations=draw(st.integers(1, most)),
                model_name=draw(st.one_of(st.sampled_from(sorted(MODELS)), model_names)),
                batch_size=draw(st.integers(1, 4096)),
                duration=draw(times),
                interval=draw(times),
                iteration_time=iteration_time,
                stage_times=tuple(stages),
                priority=draw(st.integers(0, 1)),
            )
        )
    return out


@settings(max_examples=60, deadline=None)
@given(records())
def test_write_read_round_trip_is_exact(tmp_path_factory, recs):
    path = tmp_path_factory.mktemp("rt") / "t.csv"
    write_trace(path, recs)
    assert read_trace(path) == recs


def test_written_numbers_are_plain_milliseconds(tmp_path):
    path = tmp_path / "t.csv"
    write_trace(path, [good_record(submit_time=1.5, iteration_time=0.886, duration=0.5)])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == HEADER
    assert lines[1] == "0,8,1500,10,bert,4,500,0,886,0.5,167,59,1"


def test_write_rejects_bad_stage_count(tmp_path):
    with pytest.raises(ValueError, match="3 or 4"):
        write_trace(tmp_path / "t.csv", [good_record(stage_times=(1.0, 2.0))])


def test_model_catalogue():
    assert set(MODELS) == {"vgg16", "vgg19", "resnet18", "shufflenet_v2_x1_0", "bert", "gpt2",
                           "a2c", "dqn"}
    for name, profile in MODELS.items():
        assert profile.name == name and profile.batch_size > 0
        assert len(profile.stage_times) == 3 and min(profile.stage_times) >= 0
        assert 0.5 < profile.iteration_time / sum(profile.stage_times) < 1.5
    assert MODELS["bert"].stage_times[1] == pytest.approx(0.167)
    with pytest.raises(TypeError):
        MODELS["x"] = MODELS["bert"]  # type: ignore[index]
