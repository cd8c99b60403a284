"""The interlace-trace command: exit codes and one stderr line per problem, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # no conftest or install is assumed
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from specs import spec_path  # noqa: E402
from traces import default_trace_path, generate, read_trace  # noqa: E402
from traces.cli import main  # noqa: E402

HEADER = (
    "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
    "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority"
)
GOOD = "0,8,0,100,vgg16,16,21400,0,214,82,75,66,0"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_generate_writes_a_valid_trace(tmp_path, capsys):
    out = tmp_path / "g.csv"
    code, stdout, err = run(capsys, "generate", "--jobs", "25", "--seed", "4", "--out", str(out),
                            "--max-gpus", "8", "--mean-interarrival", "60")
    assert (code, err) == (0, "")
    assert "25 jobs" in stdout
    assert read_trace(out) == generate(25, 4, max_gpus=8, mean_interarrival=60.0)
    code, _, _ = run(capsys, "generate", "--jobs", "5", "--seed", "4", "--out", str(out),
                     "--backlog")
    assert code == 0 and {r.submit_time for r in read_trace(out)} == {0.0}


def test_validate_ok_with_spec_by_name_and_path(capsys):
    trace = str(default_trace_path())
    assert run(capsys, "validate", trace)[0] == 0
    assert run(capsys, "validate", trace, "--spec", "n2g8")[0] == 0
    assert run(capsys, "validate", trace, "--spec", str(spec_path("n4g4")))[0] == 0


def test_validate_reports_one_line_per_problem(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([
        HEADER,
        GOOD,
        "1,-2,0,100,vgg16,16,21400,0,214,82,75,66,0",
        "2,8,0,abc,llama,16,21400,0,214,0,0,0,0",
        GOOD,
    ]) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "validate", str(bad))
    lines = err.splitlines()
    assert code == 1 and out == ""
    assert len(lines) == 4
    assert lines[0] == f"{bad}:3: num_gpu: must be a positive integer, got '-2'"
    assert lines[1].startswith(f"{bad}:4: iterations:")
    assert lines[2].startswith(f"{bad}:4: model_name: unknown model 'llama'")
    assert lines[3].startswith(f"{bad}:5: job_id: duplicate")


def test_validate_cluster_too_small(capsys):
    code, _, err = run(capsys, "validate", str(default_trace_path("philly_1k")), "--spec", "n2g8")
    assert code == 1
    lines = err.splitlines()
    # one line for all of them, naming the ways out, not one per job
    assert len(lines) == 1 and ": num_gpu: 47 jobs need more GPUs than the cluster's 16" in lines[0]
    assert "--spec" in lines[0] and "--max-gpus 16" in lines[0]


@pytest.mark.parametrize("kind", ["missing", "directory", "not_utf8", "empty"])
def test_unreadable_inputs_give_one_line(tmp_path, capsys, kind):
    path = tmp_path / "t.csv"
    if kind == "directory":
        path.mkdir()
    elif kind == "not_utf8":
        path.write_bytes(b"job_id,\xe9\n")
    elif kind == "empty":
        path.write_bytes(b"")
    code, _, err = run(capsys, "validate", str(path))
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith(str(path))


@pytest.mark.parametrize("spec", ["nope", "missing.csv", "DIR"])
def test_bad_spec_is_exit_1(tmp_path, capsys, spec):
    spec = str(tmp_path) if spec == "DIR" else spec
    code, _, err = run(capsys, "validate", str(default_trace_path()), "--spec", spec)
    assert code == 1 and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["validate"],
        ["generate", "--jobs", "0", "--seed", "1", "--out", "x.csv"],
        ["generate", "--jobs", "3", "--seed", "-1", "--out", "x.csv"],
        ["generate", "--jobs", "3", "--seed", "1"],
        ["generate", "--jobs", "3", "--seed", "1", "--out", "x.csv", "--mean-interarrival", "nan"],
        ["generate", "--jobs", "3", "--seed", "1", "--out", "x.csv", "--min-duration", "9",
         "--max-duration", "1"],
    ],
)
def test_usage_errors_are_exit_2(capsys, argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and "error" in err
    assert not (tmp_path / "x.csv").exists()


def test_unwritable_output_is_exit_1(tmp_path, capsys):
    code, _, err = run(capsys, "generate", "--jobs", "3", "--seed", "1", "--out",
                       str(tmp_path / "no" / "dir" / "x.csv"))
    assert code == 1 and len(err.splitlines()) == 1


def test_help_is_exit_0(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "generate" in out


def test_a_header_only_trace_is_refused_as_interlace_sim_refuses_it(tmp_path, capsys):
    from scheduler.sim import cli

    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n")
    code, out, err = run(capsys, "validate", str(path))
    assert code == 1 and out == ""
    assert err == f"{path}: no jobs (the file has a header and no rows)\n"
    assert cli.main(["--trace", str(path)]) == 1
    assert capsys.readouterr().err == f"interlace-sim: {err}"


def test_validate_help_names_the_packaged_specs(capsys):
    from specs import available_specs

    code, out, _ = run(capsys, "validate", "--help")
    assert code == 0
    assert all(name in " ".join(out.split()) for name in available_specs())
