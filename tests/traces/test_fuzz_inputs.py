"""Fuzzing the three readers that take input from outside: the trace CSV reader, the cluster
spec loader and the message decoder.

Each is fed random input and *mutated valid* input (a valid trace, spec or message with bytes
flipped, fields deleted or duplicated, garbage lines inserted). The contract checked: the
reader either returns a value or raises its own documented error type (TraceError, SpecError,
MessageError), never anything else, and the error says where and what (file and line for
files, a machine code and a reason for messages). Derandomized, so CI sees the same inputs.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.messages import SCHEMA, MessageError, decode, encode, make
from specs.spec import COLUMNS as SPEC_COLUMNS
from specs.spec import ClusterSpec, SpecError, load_spec
from traces import TraceError, read_trace, validate, write_trace
from traces.generate import generate
from traces.record import JobRecord

# FUZZ_EXAMPLES / FUZZ_RANDOM=1 for a longer, freshly random hunt than CI's fixed one
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")), deadline=None,
                derandomize=not os.environ.get("FUZZ_RANDOM"),
                suppress_health_check=list(HealthCheck))


# -- mutations of a valid text ---------------------------------------------------------------
GARBAGE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(['"', '""', '"a,b', ",,,,,,,,,,,,", "nan", "inf", "-1", "1e999999999",
                     "1e-999999999", "9" * 40, "\x00", "\ufeff", "\r", "0x10", "1_000",
                     "١٢", "  ", "job_id,num_gpu", "Infinity", "-0", "1E+400"]),
)


@st.composite
def mutated_text(draw, base: str) -> bytes:
    """`base` (a valid file) with a few random edits: on lines, on fields and on bytes."""
    lines = base.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "delete_field", "dup_field", "set_field",
                                   "garbage_line", "dup_line", "drop_line", "truncate"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if not lines:
            lines = [""]
        cells = lines[i].split(",")
        j = draw(st.integers(0, len(cells) - 1))
        if op == "delete_field":
            del cells[j]
        elif op == "dup_field":
            cells.insert(j, cells[j])
        elif op == "set_field":
            cells[j] = draw(GARBAGE)
        elif op == "garbage_line":
            lines.insert(i, draw(GARBAGE))
            continue
        elif op == "dup_line":
            lines.insert(i, lines[i])
            continue
        elif op == "drop_line":
            del lines[i]
            continue
        elif op == "truncate":
            cut = draw(st.integers(0, len(lines[i])))
            lines = lines[:i] + [lines[i][:cut]]
            continue
        lines[i] = ",".join(cells)
    data = bytearray("\n".join(lines).encode("utf-8"))
    for _ in range(draw(st.integers(0, 3))):  # byte flips may break UTF-8 on purpose
        if data:
            k = draw(st.integers(0, len(data) - 1))
            data[k] = draw(st.integers(0, 255))
    return bytes(data)


# -- traces -----------------------------------------------------------------------------------
def _valid_trace_text(tmp: Path) -> str:
    records = generate(6, 3, max_gpus=8)
    four = JobRecord(**{**{f: getattr(records[0], f) for f in records[0].__slots__},
                        "job_id": 99, "stage_times": (0.01, 0.02, 0.03, 0.04)})
    path = tmp / "valid.csv"
    write_trace(path, [*records, four])
    return path.read_text()


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _check_trace(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        records = read_trace(path)
    except TraceError as err:
        assert err.problems, "a TraceError lists at least one problem"
        for problem in err.problems:
            assert problem.file == str(path)
            assert problem.message.strip()
            assert str(problem).startswith(str(path))
            # only whole-file problems may lack a line number
            if problem.line is None:
                assert "empty" in problem.message or "file" in problem.message, problem
            else:
                assert 1 <= problem.line <= data.count(b"\n") + data.count(b"\r") + 1, problem
        # validate() finds exactly what read_trace refused for
        assert [str(p) for p in validate(path)] == [str(p) for p in err.problems]
        return
    # a mutation that is still a valid trace: every record is sane
    assert validate(records) == []
    for r in records:
        assert isinstance(r, JobRecord) and len(r.stage_times) in (3, 4)
        assert all(math.isfinite(t) and t >= 0 for t in r.stage_times)


def test_valid_trace_reads(fuzz_dir):
    path = fuzz_dir / "base.csv"
    text = _valid_trace_text(fuzz_dir)
    path.write_text(text)
    assert len(read_trace(path)) == 7


@FUZZ
@given(data=st.data())
def test_mutated_trace_raises_only_trace_error(fuzz_dir, data):
    base = _valid_trace_text(fuzz_dir)
    _check_trace(fuzz_dir / "mutated.csv", data.draw(mutated_text(base)))


@FUZZ
@given(blob=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_random_trace_bytes_raise_only_trace_error(fuzz_dir, blob):
    _check_trace(fuzz_dir / "random.csv", blob)


@FUZZ
@given(cells=st.lists(GARBAGE, min_size=12, max_size=14))
def test_garbage_in_every_column(fuzz_dir, cells):
    header = ("job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
              "iteration_time,resource_time_0,resource_time_1,resource_time_2,resource_time_3,"
              "priority")
    row = ",".join(c.replace("\n", " ") for c in cells)
    _check_trace(fuzz_dir / "cells.csv", f"{header}\n{row}\n".encode())


def test_trace_error_names_file_line_and_field(fuzz_dir):
    path = fuzz_dir / "bad.csv"
    lines = _valid_trace_text(fuzz_dir).split("\n")
    cells = lines[3].split(",")
    cells[1] = "two"
    lines[3] = ",".join(cells)
    path.write_text("\n".join(lines))
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}:4: num_gpu: must be a number, got 'two'"


# -- specs ------------------------------------------------------------------------------------
SPEC_TEXT = ",".join(SPEC_COLUMNS) + "\n1,3,4,32,128\n"


def _check_spec(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        spec = load_spec(path)
    except SpecError as err:
        assert err.file == str(path) and err.problems
        for text in err.problems:
            assert text.startswith(str(path)) and text.split(": ", 1)[1].strip()
        return
    assert isinstance(spec, ClusterSpec)
    assert all(isinstance(v, int) and v > 0 for v in (
        spec.num_switch, spec.nodes_per_switch, spec.gpus_per_node, spec.cpus_per_node,
        spec.mem_per_node))


@FUZZ
@given(data=st.data())
def test_mutated_spec_raises_only_spec_error(fuzz_dir, data):
    _check_spec(fuzz_dir / "mutated-spec.csv", data.draw(mutated_text(SPEC_TEXT)))


@FUZZ
@given(blob=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_random_spec_bytes_raise_only_spec_error(fuzz_dir, blob):
    _check_spec(fuzz_dir / "random-spec.csv", blob)


@FUZZ
@given(value=GARBAGE, column=st.integers(0, 4))
def test_spec_value_garbage_names_line_and_field(fuzz_dir, value, column):
    cells = ["1", "3", "4", "32", "128"]
    cells[column] = value.replace("\n", " ").replace("\r", " ").replace(",", ";")
    _check_spec(fuzz_dir / "cell-spec.csv", f"{','.join(SPEC_COLUMNS)}\n{','.join(cells)}\n"
                .encode())


# -- messages ---------------------------------------------------------------------------------
def _valid_messages() -> list[bytes]:
    job = {"job_id": 1, "num_gpu": 2, "submit_time": 0.0, "iterations": 10,
           "model_name": "resnet18", "batch_size": 32, "duration": 1.0, "interval": 0.0,
           "iteration_time": 0.1, "stage_times": [0.01, 0.02, 0.03], "priority": 0}
    msgs = [
        make("job.submit", "feeder", "f-1", job=job),
        make("agent.register", "agent.n0", "a-1", node="n0", gpus=[0, 1], cpus=8, mem=64.0,
             running=[{"job_id": 3, "iterations": 2.5}]),
        make("job.finished", "agent.n0", "a-2", job_id=3, node="n0", iterations=10.0, ok=True),
        make("reply", "scheduler", "s-1", re="f-1", ok=True, body={"accepted": True}),
        make("error", "broker", "b-1", re="x", code="bad", reason="why"),
        make("event.timing", "trainer.3", "t-1", seq=7, job_id=3,
             stages={"gpu": 0.1}, iteration_time=0.3, iterations=4.0),
    ]
    return [encode(m) for m in msgs]


VALID_MESSAGES = _valid_messages()
ANY_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**64, 2**64 - 1), st.floats(),
              st.text(max_size=8), st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(st.text(max_size=6), st.integers()),
                                            inner, max_size=3)),
    max_leaves=8)


def _check_decode(data: bytes) -> None:
    try:
        msg = decode(data)
    except MessageError as err:
        assert err.code and isinstance(err.code, str)
        assert err.reason and isinstance(err.reason, str)
        assert str(err).startswith(err.code + ": ")
        return
    # whatever got through is a well-formed message of a known type
    assert msg.type in SCHEMA and isinstance(msg.id, str) and isinstance(msg.sender, str)
    assert isinstance(msg.ts, float)
    encode(msg)  # and it can be sent on as it is


@FUZZ
@given(blob=st.binary(max_size=200))
def test_random_bytes_decode_or_message_error(blob):
    _check_decode(blob)


@FUZZ
@given(base=st.sampled_from(VALID_MESSAGES), data=st.data())
def test_flipped_bytes_of_valid_messages(base, data):
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        k = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[k] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[k:]
        else:
            buf[k:k] = data.draw(st.binary(min_size=1, max_size=4))
    _check_decode(bytes(buf))


@FUZZ
@given(base=st.sampled_from(VALID_MESSAGES), data=st.data())
def test_structurally_mutated_messages(base, data):
    raw = msgpack.unpackb(base, raw=False)
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["delete", "replace", "add", "nest"]))
        key = data.draw(st.sampled_from(sorted(raw))) if raw else "type"
        if op == "delete":
            raw.pop(key, None)
        elif op == "replace":
            raw[key] = data.draw(ANY_VALUE)
        elif op == "add":
            raw[data.draw(st.one_of(st.text(max_size=6), st.sampled_from(["seq", "re", "x"])))] \
                = data.draw(ANY_VALUE)
        else:
            raw[key] = {"inner": raw.get(key)}
    try:
        packed = msgpack.packb(raw, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return  # not even packable: nothing can send it
    _check_decode(packed)


@pytest.mark.parametrize("payload", [
    msgpack.packb({1: 2}),  # non-string keys
    msgpack.packb([1, 2, 3]),
    b"\xc1",  # reserved msgpack byte
    msgpack.packb({"type": "job.submit", "v": 1, "id": "x", "sender": "s",
                   "ts": float("nan"), "job": {}}),
    msgpack.packb({"type": "job.submit", "v": 1, "id": "x", "sender": "s", "ts": 1,
                   "job": {}, "seq": "no"}),
    b"\xdd\xff\xff\xff\xff",  # array32 announcing 4 billion items
    b"\xdf\xff\xff\xff\xff",  # map32 likewise
    msgpack.packb({"type": "event.log", "v": 1, "id": "x", "sender": "s", "ts": 1,
                   "seq": 1, "record": {"deep": [[[[[[[[[[[]]]]]]]]]]]}}),
])
def test_hostile_messages(payload):
    _check_decode(payload)


def test_time_with_a_huge_exponent_is_a_trace_error(fuzz_dir):
    """Regression: '1E1000010' in a time column raised decimal.Overflow from the reader."""
    path = fuzz_dir / "huge.csv"
    lines = _valid_trace_text(fuzz_dir).split("\n")
    cells = lines[1].split(",")
    cells[2] = "1E1000010"
    lines[1] = ",".join(cells)
    path.write_text("\n".join(lines))
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}:2: submit_time: must be a finite number, got '1E1000010'"


# -- a job record off the wire (what the scheduler's submit handler runs) -----------------------
@FUZZ
@given(base=st.just(msgpack.unpackb(VALID_MESSAGES[0], raw=False)["job"]), data=st.data())
def test_wire_job_validates_without_crashing(base, data):
    """validate() on records built from arbitrary submitted maps reports, never raises."""
    from traces.record import record_from_map

    job = dict(base)
    for _ in range(data.draw(st.integers(1, 3))):
        job[data.draw(st.sampled_from(sorted(base)))] = data.draw(ANY_VALUE)
    try:
        record = record_from_map(job)
    except (TypeError, ValueError):
        return
    problems = validate([record])
    assert all(p.file == "<records>" and p.line == 1 and p.message for p in problems)
