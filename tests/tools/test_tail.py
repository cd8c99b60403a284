"""interlace-tail on synthetic run dirs: merge order across files, filters by job, node and
event name, non-JSON lines, and --follow's incremental reading (driven by a stub wait, so
nothing sleeps)."""
from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scheduler.tools import tail
from scheduler.tools.tail import Filters, Tail, follow, format_entry

T0 = 1_700_000_000.0


def rec(component: str, event: str, second: float, **fields) -> str:
    ts = datetime.fromtimestamp(T0 + second, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    return json.dumps({**fields, "event": event, "level": fields.pop("level", "info"),
                       "ts": ts, "component": component})


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def write(path: Path, *lines: str) -> None:
    append(path, "".join(line + "\n" for line in lines))


@pytest.fixture
def run(tmp_path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "scheduler.log",
          rec("scheduler", "scheduler_start", 0, policy="muri-s"),
          rec("scheduler", "job_submitted", 2, job_id=7, num_gpu=1),
          rec("scheduler", "round", 3, groups=[[7, 8]], launches=[7, 8], stops=[]),
          rec("scheduler", "job_started", 5, job_id=7, node="n1", nodes=["n1"],
              gpus={"n1": [0]}),
          rec("scheduler", "job_started", 5.5, job_id=8, node="n0", nodes=["n0"]),
          rec("scheduler", "agent_dead", 9, node="n0", level="warning", reason="no heartbeat"),
          rec("scheduler", "job_finished", 10, job_id=7, node="n1", end=99.5))
    write(d / "agent-n1.log",
          rec("agent-n1", "agent_start", 1, node="n1"),
          rec("agent-n1", "job_launched", 4, node="n1", job=7, gpus=[0]),
          "Traceback (most recent call last): not json",
          rec("agent-n1", "job_exited", 9.5, node="n1", job=7))
    write(d / "agent-n0.log", rec("agent-n0", "job_launched", 4.5, job=8))  # no node field
    write(d / "trainer-7.log", rec("trainer-7", "trainer_start", 4.2, start=0),
          rec("trainer-7", "trainer_finished", 9.2))
    (d / "scheduler.stderr").write_text("not a .log file, never read\n")
    return d


def events(entries) -> list[str]:
    return [e.record["event"] if e.record else "RAW" for e in entries]


def test_all_files_merge_by_timestamp_and_raw_lines_survive(run):
    got = Tail(run).snapshot()
    # the raw line takes its file's previous timestamp: it stays right after that line
    assert events(got) == [
        "scheduler_start", "agent_start", "job_submitted", "round", "job_launched", "RAW",
        "trainer_start", "job_launched", "job_started", "job_started", "agent_dead",
        "trainer_finished", "job_exited", "job_finished"]
    raw = got[events(got).index("RAW")]
    assert raw.source == "agent-n1" and raw.raw.startswith("Traceback")
    assert "agent-n1" in format_entry(raw) and "Traceback" in format_entry(raw)


def test_filter_by_job_follows_it_across_components(run):
    got = Tail(run, Filters(jobs=frozenset({7}))).snapshot()
    assert [(e.source, e.record["event"]) for e in got] == [
        ("scheduler", "job_submitted"), ("scheduler", "round"), ("agent-n1", "job_launched"),
        ("trainer-7", "trainer_start"), ("scheduler", "job_started"),
        ("trainer-7", "trainer_finished"), ("agent-n1", "job_exited"),
        ("scheduler", "job_finished")]


def test_filter_by_node_and_by_type(run):
    by_node = Tail(run, Filters(nodes=frozenset({"n0"}))).snapshot()
    assert [(e.source, e.record["event"]) for e in by_node] == [
        ("agent-n0", "job_launched"), ("scheduler", "job_started"), ("scheduler", "agent_dead")]
    by_type = Tail(run, Filters(types=("job_*",))).snapshot()
    assert set(events(by_type)) == {"job_submitted", "job_launched", "job_started",
                                    "job_exited", "job_finished"}
    both = Tail(run, Filters(jobs=frozenset({7}), nodes=frozenset({"n1"}),
                             types=("job_started", "job_finished"))).snapshot()
    assert events(both) == ["job_started", "job_finished"]


def test_format_is_one_readable_line(run):
    entry = next(e for e in Tail(run).snapshot() if e.record and e.record["event"] == "round")
    line = format_entry(entry)
    assert "\n" not in line
    fields = line.split()
    assert fields[1:3] == ["scheduler", "round"]
    assert "groups=[[7,8]]" in fields and "launches=[7,8]" in fields
    warn = next(e for e in Tail(run).snapshot() if e.record and e.record["event"] == "agent_dead")
    line = format_entry(warn)
    assert "WARNING agent_dead" in line and 'reason="no heartbeat"' in line


def test_main_prints_filtered_lines(run, capsys):
    assert tail.main([str(run), "--job", "8", "--type", "job_*"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "job_launched" in out[0] and "job_started" in out[1]


def test_main_missing_dir_is_one_line(tmp_path, capsys):
    assert tail.main([str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such run directory" in err[0]


def test_follow_reads_appended_lines_partial_lines_and_new_files(run):
    t = Tail(run, Filters(jobs=frozenset({9})))
    assert t.snapshot() == []
    steps = [
        # a line arrives in two writes: nothing until its newline is there
        lambda: append(run / "scheduler.log", rec("scheduler", "job_submitted", 20, job_id=9)[:30]),
        lambda: append(run / "scheduler.log",
                       rec("scheduler", "job_submitted", 20, job_id=9)[30:] + "\n"),
        lambda: write(run / "trainer-9.log", rec("trainer-9", "trainer_start", 21),
                      "garbage that is not json"),  # raw lines are hidden when filtering
        lambda: write(run / "agent-n2.log", rec("agent-n2", "job_launched", 20.5, job=9)),
    ]
    seen: list[list[str]] = []

    def wait(_seconds: float) -> bool:
        if not steps:
            return True  # stop following
        steps.pop(0)()
        seen.append([])
        return False

    follow(t, lambda e: seen[-1].append(e.record["event"] if e.record else "RAW"), wait)
    assert seen == [[], ["job_submitted"], ["trainer_start"], ["job_launched"]]


def test_non_json_and_odd_records_never_crash(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    (d / "weird.log").write_bytes(b'\xff\xfe binary\n[1,2]\n{"event": 5, "ts": "yesterday"}\n'
                                  b'{"no": "event"}\n\n{"ts": 12.5, "event": "x", "job_id": true}')
    assert tail.main([str(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 5  # blank line dropped; the unterminated last line is still shown
    assert tail.main([str(d), "--job", "1", "--node", "n0"]) == 0
    assert capsys.readouterr().out == ""


def test_main_writes_to_a_given_stream(run):
    buf = io.StringIO()
    assert tail.main([str(run), "--node", "n1", "--colour", "never"], out=buf) == 0
    lines = buf.getvalue().splitlines()
    assert lines and all("n1" in line for line in lines)
