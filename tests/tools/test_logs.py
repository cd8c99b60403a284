"""`interlace-logs` (scheduler/tools/logs.py) on output files as the agent writes them:
launches marked and numbered, several ranks' lines labelled, -f reading on from where it
was, and bad input said in one line."""
from __future__ import annotations

from pathlib import Path

import pytest

from node_agent import joblog
from scheduler.tools import logs
from scheduler.tools.jobs import format_job, submit_main


def _write(path: Path, *parts: str) -> None:
    with open(path, "a") as fh:
        fh.write("".join(parts))


@pytest.fixture
def run(tmp_path) -> Path:
    (tmp_path / "trainers").mkdir()
    return tmp_path


def _main(*argv: str) -> tuple[int, list[str]]:
    out: list[str] = []
    return logs.main(list(argv), write=out.append), out


def test_one_rank_prints_its_lines_as_they_are_and_numbers_launches(run):
    _write(run / "trainers" / "4.stderr", joblog.marker(0, "n1", at=0), "a\nb\n",
           joblog.marker(180, "n2", at=0), "c\nno newline")
    rc, out = _main("--run-dir", str(run), "4")
    stamp = joblog.marker(0, "n1", at=0).rsplit(" at ", 1)[1].split()[0]
    assert rc == 0 and out == [
        f"--- launch 1 (from the start) on n1 at {stamp} ---", "a", "b",
        f"--- launch 2 (resumed at iteration 180) on n2 at {stamp} ---", "c", "no newline"]


def test_several_ranks_are_labelled_launch_by_launch(run):
    for rank in (1, 0):
        _write(run / "trainers" / f"4.r{rank}.stderr", joblog.marker(0, "n0"), f"x{rank}\n",
               joblog.marker(7.5, "n0"), f"y{rank}\n")
    _write(run / "trainers" / "40.r0.stderr", "another job's\n")
    rc, out = _main("--run-dir", str(run), "4")
    assert rc == 0
    assert [line.split(" on ")[0] for line in out] == [
        "--- launch 1 (from the start)", "[r0] x0", "[r1] x1",
        "--- launch 2 (resumed at iteration 7.5)", "[r0] y0", "[r1] y1"]


def test_lines_of_the_program_that_look_like_markers_are_its_own(run):
    _write(run / "trainers" / "4.stderr", "--- interlace: launch of mine ---\n")
    assert _main("--run-dir", str(run), "4") == (0, ["--- interlace: launch of mine ---"])


def test_following_prints_only_whole_new_lines_and_each_launch_once(run):
    r0, r1 = (run / "trainers" / f"4.r{r}.stderr" for r in (0, 1))
    _write(r0, joblog.marker(0, "n0"), "a\n")
    _write(r1, joblog.marker(0, "n0"), "b\n")
    out: list[str] = []
    printer = logs.Printer(logs.readers_for(run / "trainers", 4), out.append)
    printer.dump()
    assert len(out) == 3
    _write(r0, "half")
    assert printer.step() == 0  # not a whole line yet
    _write(r0, " line\n", joblog.marker(50, "n0"), "c\n")
    _write(r1, joblog.marker(50, "n0"), "d\n")
    printer.step()
    assert out[3] == "[r0] half line" and out[4].startswith("--- launch 2 (resumed at ")
    assert out[5:] == ["[r0] c", "[r1] d"]  # launch 2 announced once, not per rank


class Ends:
    """A scheduler that says the job runs, then that it ended."""

    def __init__(self, states):
        self.states = list(states)

    def now(self, force=False):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_follow_ends_with_the_job_after_a_last_read(run):
    path = run / "trainers" / "4.stderr"
    _write(path, joblog.marker(0, "n0"), "a\n")
    out: list[str] = []
    args = logs._parser().parse_args(["4", "-f"])

    def sleep(_):
        _write(path, "more\nlast, unended")

    assert logs.follow(args, run / "trainers", Ends(["running", "cancelled"]), out.append,
                       sleep) == 0
    assert out[1:] == ["a", "more", "last, unended"]


def test_follow_of_an_unknown_job_or_one_that_ended_without_output(run, capsys):
    args = logs._parser().parse_args(["4", "-f"])
    assert logs.follow(args, run / "trainers", Ends(["unknown"]), print) == 1
    assert "no job 4 on this scheduler" in capsys.readouterr().err
    assert logs.follow(args, run / "trainers", Ends(["finished"]), print) == 1
    assert "no output of job 4" in capsys.readouterr().err


def test_follow_stops_on_ctrl_c_with_one_line(run, capsys, monkeypatch):
    _write(run / "trainers" / "4.stderr", "a\n")

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(logs, "follow", interrupted)
    assert _main("--run-dir", str(run), "4", "-f")[0] == 130
    assert capsys.readouterr().err == "interlace-logs: interrupted\n"


@pytest.mark.parametrize("argv, rc, said", [
    (["4"], 1, "no output of job 4 in"),
    (["x"], 2, "JOB"),
    (["-1"], 2, ""),
])
def test_bad_input_is_one_line(run, capsys, argv, rc, said):
    with pytest.raises(SystemExit) if rc == 2 else _nothing():
        assert _main("--run-dir", str(run), *argv)[0] == rc
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and err.count("\n") == 1


def test_without_a_run_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("INTERLACE_ENDPOINTS", raising=False)
    assert _main("4")[0] == 2
    assert _main("--run-dir", str(tmp_path / "no"), "4")[0] == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_a_marker_round_trips():
    fields = joblog.parse_marker(joblog.marker(12.0, "n3", at=0))
    assert fields["start"] == "12" and fields["node"] == "n3"


def test_status_shows_a_commands_unreported_progress_as_unknown():
    job = {"job_id": 3, "state": "running", "num_gpu": 2, "iterations_done": 0.0,
           "iterations": 400, "nodes": ["n0"]}
    assert "0/400 it" in format_job(job)  # a packaged job (or an older scheduler)
    assert "?/400 it" in format_job(dict(job, progress_known=False))
    assert "12/400 it" in format_job(dict(job, iterations_done=12.0, progress_known=True))


def test_submit_own_workdir_refuses_a_file_named_relative_to_here(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    ep = str(tmp_path / "endpoints.json")  # never read: refused before connecting
    base = ["--endpoints", ep, "--gpus", "1", "--iterations", "9", "--own-workdir"]
    assert submit_main([*base, "--", "python", "train.py"]) == 2
    assert capsys.readouterr().err == ("interlace-submit: --own-workdir: train.py is relative "
                                       "to this directory, not the job's: give its absolute "
                                       "path\n")
    assert submit_main(base) == 2
    assert "only for a command" in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
