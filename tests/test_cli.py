"""interlace-sim's contract: JSON lines with fixed keys, a table, clear one-line errors."""
from __future__ import annotations

import json

import pytest

from scheduler.cli import main

KEYS = {"policy", "jobs", "avg_jct", "p50_jct", "p99_jct", "makespan", "wall_s"}


def test_json_prints_one_object_per_policy_with_the_contract_keys(capsys):
    assert main(["--trace", "default", "--spec", "n2g8", "--policy", "muri-s,srsf", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    objs = [json.loads(line) for line in lines]
    assert [o["policy"] for o in objs] == ["muri-s", "srsf"]
    for o in objs:
        assert KEYS <= o.keys()
        assert o["jobs"] == 40 and 0 < o["p50_jct"] <= o["p99_jct"] <= o["makespan"]


def test_table_shows_each_policy_and_its_ratio_to_the_first(capsys):
    assert main(["--policy", "srsf,tiresias"]) == 0
    out = capsys.readouterr().out
    assert "srsf" in out and "tiresias" in out and "1.00x" in out


def test_plot_and_out_write_files(tmp_path):
    png, out = tmp_path / "cdf.png", tmp_path / "run"
    assert main(["--policy", "fifo", "--plot", str(png), "--out", str(out)]) == 0
    assert png.stat().st_size > 1000
    assert (out / "fifo-jobs.csv").read_text().count("\n") == 41
    assert json.loads((out / "fifo-summary.json").read_text())["jobs"] == 40


def test_bad_inputs_give_one_line_each_and_no_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,num_gpu\n1,x\n")
    rc = main(["--trace", str(bad), "--spec", str(tmp_path / "missing.csv"), "--policy", "nope"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert any("unknown policy 'nope'" in line for line in lines)
    assert any("missing.csv" in line for line in lines)
    assert any("bad.csv" in line for line in lines)
    assert all(line.startswith("interlace-sim: ") for line in lines)


def test_a_job_larger_than_the_cluster_is_reported_with_its_line(tmp_path, capsys):
    trace = tmp_path / "big.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
        "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
        "0,64,0,10,resnet18,32,1000,0,100,30,40,30,0\n")
    assert main(["--trace", str(trace), "--spec", "n2g8"]) == 1
    err = capsys.readouterr().err
    assert "big.csv:2" in err and "num_gpu" in err


def test_restart_overhead_replaces_the_per_model_table(tmp_path, capsys):
    # one job alone: its JCT is one restart overhead plus 10 iterations of 100 ms
    trace = tmp_path / "one.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
        "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
        "0,1,0,10,vgg16,32,1000,0,100,30,40,30,0\n")
    jcts = []
    for seconds in ("0", "123.5"):
        assert main(["--trace", str(trace), "--spec", "n2g8", "--policy", "srsf", "--json",
                     "--restart-overhead", seconds]) == 0
        jcts.append(json.loads(capsys.readouterr().out)["avg_jct"])
    assert jcts[0] == pytest.approx(1.0) and jcts[1] == pytest.approx(124.5)
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit):
            main(["--trace", str(trace), "--restart-overhead", bad])
        assert "--restart-overhead" in capsys.readouterr().err
