"""Malformed input of every format, drawn by hypothesis: the import ends either with a
balanced summary (each row kept or counted as dropped) or with problems that name the file,
never with a traceback; and the streaming parts agree with their plain counterparts."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from traces.cli import main  # noqa: E402
from traces.importers.helios import COLUMNS as HELIOS  # noqa: E402
from traces.importers.jsonstream import iter_array  # noqa: E402
from traces.importers.openb import COLUMNS as OPENB  # noqa: E402
from traces.importers.pai import JOB_COLUMNS, TASK_COLUMNS  # noqa: E402
from traces.importers.spill import Spill  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# cells that are sometimes right: numbers, times, names, and junk
CELL = st.one_of(
    st.sampled_from(["", "None", "nan", "0", "1", "8", "-3", "0.5", "1e400", "abc",
                     "2020-03-01 08:00:00", "2017-13-45 99:99:99", "1583000000", "COMPLETED",
                     "Failed", "j1", "h1", "BE"]),
    st.integers(-10**6, 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)


def csv_text(header, rows) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def row_strategy(width: int):
    exact = st.lists(CELL, min_size=width, max_size=width)
    return st.one_of(exact, exact, exact, st.lists(CELL, max_size=width + 2))


def data_rows(rows) -> int:
    """Rows the importer sees: csv's reader skips only rows whose every cell is blank."""
    return sum(1 for r in rows if any(c.strip() for c in r))


def check(capsys, tmp_path, argv, expected_rows: int | None, inputs) -> None:
    out = tmp_path / "out.csv"
    code = main([str(a) for a in (*argv, "--out", out)])
    stdout, err = capsys.readouterr()
    assert "Traceback" not in stdout + err and "internal error" not in err, err
    if code == 0:
        summary = json.loads((tmp_path / "out.csv.summary.json").read_text())
        assert summary["rows_read"] == summary["kept"] + sum(summary["dropped"].values())
        if expected_rows is not None:
            assert summary["rows_read"] == expected_rows
        assert len(out.read_text().splitlines()) == summary["kept"] + 1
    else:
        assert code == 1, err
        lines = err.strip().splitlines()
        assert lines and all(any(line.startswith(str(p)) for p in inputs) for line in lines), err


@FUZZ
@given(rows=st.lists(row_strategy(len(HELIOS)), max_size=12))
def test_helios_fuzz(capsys, tmp_path, rows):
    src = tmp_path / "cluster_log.csv"
    src.write_text(csv_text(HELIOS, rows), encoding="utf-8")
    check(capsys, tmp_path, ["import", "helios", src], data_rows(rows), [src])


@FUZZ
@given(rows=st.lists(row_strategy(len(OPENB)), max_size=12))
def test_openb_fuzz(capsys, tmp_path, rows):
    src = tmp_path / "openb_pod_list_x.csv"
    src.write_text(csv_text(OPENB, rows), encoding="utf-8")
    check(capsys, tmp_path, ["import", "openb", src], data_rows(rows), [src])


@FUZZ
@given(jobs=st.lists(row_strategy(len(JOB_COLUMNS)), max_size=10),
       tasks=st.lists(row_strategy(len(TASK_COLUMNS)), max_size=12))
def test_pai_fuzz(capsys, tmp_path, jobs, tasks):
    job_file, task_file = tmp_path / "pai_job_table.csv", tmp_path / "pai_task_table.csv"
    job_file.write_text(csv_text(None, jobs), encoding="utf-8")
    task_file.write_text(csv_text(None, tasks), encoding="utf-8")
    # a first row that happens to look like a header is read as one; count from the summary
    check(capsys, tmp_path, ["import", "pai", job_file, "--tasks", task_file], None,
          [job_file, task_file])


JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                        st.floats(allow_nan=False), CELL)
TIME = st.one_of(st.none(), st.sampled_from(["None", "2017-10-03 07:00:00",
                                             "2017-10-03 08:00:00", "2017-10-0 8"]), JSON_SCALAR)
ATTEMPT = st.fixed_dictionaries({}, optional={
    "start_time": TIME, "end_time": TIME,
    "detail": st.one_of(JSON_SCALAR, st.lists(st.one_of(
        JSON_SCALAR, st.fixed_dictionaries({"ip": JSON_SCALAR}, optional={
            "gpus": st.one_of(JSON_SCALAR, st.lists(JSON_SCALAR, max_size=9))})), max_size=3)),
})
JOB = st.one_of(
    JSON_SCALAR,
    st.lists(JSON_SCALAR, max_size=3),
    st.fixed_dictionaries({}, optional={
        "status": st.one_of(st.sampled_from(["Pass", "Killed", "Failed"]), JSON_SCALAR),
        "vc": JSON_SCALAR, "user": JSON_SCALAR, "submitted_time": TIME,
        "jobid": st.one_of(st.sampled_from(["a1", "a2"]), JSON_SCALAR),
        "attempts": st.one_of(JSON_SCALAR, st.lists(st.one_of(ATTEMPT, JSON_SCALAR), max_size=3)),
    }),
)


@FUZZ
@given(jobs=st.lists(JOB, max_size=8), cut=st.one_of(st.none(), st.integers(0, 400)),
       junk=st.sampled_from(["", "x", "]", ",", "{", "\xff"]))
def test_philly_fuzz(capsys, tmp_path, jobs, cut, junk):
    text = json.dumps(jobs, indent=1)
    if cut is not None:  # a damaged file: truncated and trailed by junk
        text = text[:cut] + junk
    src = tmp_path / "cluster_job_log"
    src.write_text(text, encoding="utf-8")
    check(capsys, tmp_path, ["import", "philly", src], len(jobs) if cut is None else None, [src])


@settings(max_examples=80, deadline=None)
@given(value=st.lists(st.one_of(JSON_SCALAR, st.dictionaries(st.text(max_size=3), JSON_SCALAR,
                                                              max_size=3)), max_size=8),
       chunk=st.integers(1, 16), indent=st.sampled_from([None, 0, 2]))
def test_json_stream_matches_json_load(tmp_path_factory, value, chunk, indent):
    path = tmp_path_factory.mktemp("j") / "a.json"
    text = json.dumps(value, indent=indent)
    path.write_text(text, encoding="utf-8")
    got = list(iter_array(path, lambda _: None, chunk=chunk))
    assert [v for _, v in got] == json.loads(text)
    if indent is not None:  # one element per line after the '['
        starts = [line for line, _ in got]
        assert starts == sorted(starts) and all(s >= 2 for s in starts)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5).map(float), st.sampled_from("abcd")),
                     max_size=40),
       run_rows=st.integers(1, 7))
def test_spill_sorts_and_finds_duplicates_like_a_list(rows, run_rows):
    spill = Spill(run_rows=run_rows)
    try:
        for submit, key in rows:
            spill.add(submit, key, ())
        flags = spill.duplicates()
        merged = [(r[0], r[1]) for r in spill.merged()]
    finally:
        spill.close()
    assert merged == sorted((submit, seq) for seq, (submit, _) in enumerate(rows))
    seen: set[str] = set()
    for seq, (_, key) in enumerate(rows):
        assert bool(flags[seq]) == (key in seen)
        seen.add(key)


def test_spill_duplicates_survive_a_hash_collision(monkeypatch):
    """Two different ids with one 64-bit hash are not duplicates: only equal ids are."""
    import traces.importers.spill as spill_module

    monkeypatch.setattr(spill_module, "hash", lambda key: 7, raising=False)
    spill = Spill(run_rows=2)
    for submit, key in [(1.0, "x"), (0.0, "y"), (2.0, "x"), (3.0, "z")]:
        spill.add(submit, key, ())
    try:
        assert spill.duplicates().tolist() == [False, False, True, False]
    finally:
        spill.close()


@pytest.mark.parametrize("text", ["", "   ", "{}", "[1, 2", '{"a": [1]}', "[] []"])
def test_json_stream_rejects_non_lists(tmp_path, text):
    from traces.errors import TraceError

    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        list(iter_array(path, lambda _: None))
    assert all(p.file == str(path) for p in info.value.problems)
