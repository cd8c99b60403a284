"""interlace-sim's contract: JSON lines with fixed keys, a table, clear one-line errors."""
from __future__ import annotations

import json

import pytest

from scheduler.sim.cli import main

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
    assert rc == 2  # a policy name that names none is a usage error; the others said too
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


@pytest.fixture
def no_simulation(monkeypatch):
    """Fails the test if a policy is simulated: output problems must be found before."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("simulated before checking the outputs")
    monkeypatch.setattr("scheduler.sim.cli.simulate", refuse)


@pytest.mark.parametrize("option, value, says", [
    ("--out", "/dev/null/x", "/dev/null is not a directory"),
    ("--out", "{tmp}/file.txt", "cannot create the directory (is not a directory)"),
    ("--plot", "{tmp}/no/such/dir/x.png", "no such directory"),
    ("--plot", "{tmp}/x.txt", "cannot draw a .txt file"),
    ("--plot", "{tmp}", "cannot draw a file without an extension"),
])
def test_unwritable_outputs_are_one_line_before_any_simulation(tmp_path, capsys, no_simulation,
                                                             option, value, says):
    value = value.format(tmp=tmp_path)
    (tmp_path / "file.txt").write_text("")
    assert main(["--policy", "fifo,srsf", option, value]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and out == ""
    assert err.splitlines() == [err.strip()]
    assert err.startswith(f"interlace-sim: {option} {value}: ") and says in err


def test_a_header_only_trace_is_refused_naming_the_file(tmp_path, capsys, no_simulation):
    trace = tmp_path / "empty.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,"
                     "interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,"
                     "priority\n")
    assert main(["--trace", str(trace)]) == 1
    assert capsys.readouterr().err == f"interlace-sim: {trace}: no jobs (the file has a header " \
                                      "and no rows)\n"


def test_off_a_terminal_each_policy_says_when_it_starts_and_ends(capsys):
    assert main(["--policy", "srsf,fifo", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2  # stdout keeps its contract: the JSON lines only
    lines = err.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["srsf", "srsf", "fifo", "fifo"]
    assert "simulating 40 jobs" in lines[0] and "done in" in lines[1]


def test_the_plot_is_titled_with_its_trace_spec_and_preset(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    titles = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig",
                        lambda fig, *a, **k: titles.append(fig.axes[0].get_title()) or
                        save(fig, *a, **k))
    assert main(["--policy", "srsf", "--spec", "n4g4", "--preset", "paper",
                 "--plot", str(tmp_path / "cdf.png")]) == 0
    assert titles == ["trace default, spec n4g4, preset paper"]


def test_help_and_readme_name_every_packaged_trace_and_spec(capsys):
    from pathlib import Path

    from specs import available_specs
    from traces import available_traces

    with pytest.raises(SystemExit):
        main(["--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    usage = next(line for line in readme.splitlines() if line.strip().startswith("interlace-sim"))
    for name in (*available_specs(), *available_traces()):
        assert name in helptext, name
        assert f"`{name}`" in readme, name
    # every option has a default: the usage line must not make one look required
    assert "[--trace" in usage and "[--spec" in usage and "[--policy" in usage


def test_explain_puts_the_crossing_cdfs_in_numbers_job_by_job(tmp_path, capsys):
    import csv

    assert main(["--policy", "srsf,muri-s", "--explain", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    jct = {p: {row["job_id"]: float(row["jct"]) for row in
               csv.DictReader(open(tmp_path / f"{p}-jobs.csv"))} for p in ("srsf", "muri-s")}
    sooner = [j for j in jct["srsf"] if jct["srsf"][j] < jct["muri-s"][j]]
    later = [j for j in jct["srsf"] if jct["srsf"][j] > jct["muri-s"][j]]
    assert f"srsf finishes {len(sooner) / 40:.0%} of them sooner, muri-s {len(later) / 40:.0%}" \
        in out
    gain = sum(jct["srsf"][j] - jct["muri-s"][j] for j in later) / 3600
    assert f"the jobs muri-s finishes sooner gain {gain:,.0f} job-hours" in out
    assert "x the job's time alone under srsf" in out and "longest tenth" in out


def test_explain_needs_two_policies_and_a_table(capsys):
    for argv in (["--policy", "srsf", "--explain"], ["--policy", "srsf,fifo", "--explain",
                                                     "--json"]):
        assert main(argv) == 2  # a usage error
        assert "--explain: needs two or more policies" in capsys.readouterr().err


def test_on_a_terminal_a_bar_and_no_lines():
    import io

    from scheduler.sim.cli import _Bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    bar = _Bar("muri-s", stream=stream, delay=0.0)
    bar.begin(10)
    bar(5, 10)
    bar.close()
    assert "simulating" not in stream.getvalue() and "done in" not in stream.getvalue()
    assert "5/10 jobs" in stream.getvalue() and stream.getvalue().endswith("\n")


def _two_jobs(tmp_path, first: str, second: str):
    """Two 1-GPU jobs of 1,000 iterations of 100 ms, both at t=0, on a cluster of one GPU."""
    trace, spec = tmp_path / "two.csv", tmp_path / "one_gpu.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
        "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
        f"0,1,0,1000,vgg16,32,100,0,100,{first},0\n1,1,0,1000,vgg16,32,100,0,100,{second},0\n")
    spec.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    "1,1,1,8,64\n")
    return ["--trace", str(trace), "--spec", str(spec), "--restart-overhead", "0", "--json"]


def _avg(capsys) -> float:
    return json.loads(capsys.readouterr().out)["avg_jct"]


def test_max_group_one_runs_jobs_one_after_another(tmp_path, capsys):
    # complementary jobs: alone one after the other, they end at 100 s and 200 s
    run = _two_jobs(tmp_path, "80,10,10", "10,10,80") + ["--policy", "muri-s"]
    assert main(run + ["--max-group", "1"]) == 0
    assert _avg(capsys) == pytest.approx(150.0)
    assert main(run + ["--max-group", "2"]) == 0
    assert _avg(capsys) < 150.0 - 1.0  # interleaved: both end sooner than one after the other
    with pytest.raises(SystemExit):
        main(run + ["--max-group", "0"])
    assert "--max-group: must be an integer in [1, 4]" in capsys.readouterr().err


def test_auto_unpack_overrides_the_preset(tmp_path, capsys):
    # the same one-stage profile twice (the stage both need each slot of the cycle): the
    # pair runs slower than its two jobs one after the other; auto-unpack splits it, as
    # groups of one would run
    run = _two_jobs(tmp_path, "0,100,0", "0,100,0") + ["--policy", "muri-l", "--preset", "paper"]
    results = {}
    for extra in (["--auto-unpack", "on"], ["--auto-unpack", "off"], ["--max-group", "1"], []):
        assert main(run + extra) == 0
        results[" ".join(extra)] = _avg(capsys)
    assert results["--auto-unpack on"] == results["--max-group 1"]
    assert results["--auto-unpack off"] == results[""] > results["--auto-unpack on"]


def test_no_interference_runs_groups_at_the_models_own_pace(tmp_path, capsys):
    """A complementary pair interleaved on one GPU under the paper preset (every merge):
    with the interference factor its group runs 1.33x slower than the model says, so both
    jobs end later than without it; a lone job is the same either way."""
    run = _two_jobs(tmp_path, "80,10,10", "10,10,80") + ["--policy", "muri-s",
                                                        "--preset", "paper"]
    assert main(run) == 0
    charged = _avg(capsys)
    assert main(run + ["--no-interference"]) == 0
    bare = _avg(capsys)
    assert bare < charged
    assert main(run + ["--max-group", "1"]) == 0
    alone = _avg(capsys)
    assert main(run + ["--max-group", "1", "--no-interference"]) == 0
    assert _avg(capsys) == alone


def _t4_run(tmp_path, capsys, *extra: str) -> float:
    """One gpt2 job of 100 iterations (data 30, gpu 40, net 30 ms) on a cluster of one T4."""
    spec = tmp_path / "t4.csv"
    spec.write_text("pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node\n"
                    "t4,1,1,T4,16,64,256\n")
    trace = tmp_path / "one.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
        "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
        "0,1,0,100,gpt2,32,10000,0,100,30,40,30,0\n")
    assert main(["--trace", str(trace), "--spec", str(spec), "--policy", "fifo", "--json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)["avg_jct"]


def test_gpu_speed_replaces_the_shipped_figure_for_a_type_or_one_model(tmp_path, capsys):
    t4 = min(8.1 / 15.7, 320 / 900)  # the data sheets' bound, worked out here
    shipped = _t4_run(tmp_path, capsys)
    at_v100 = _t4_run(tmp_path, capsys, "--gpu-speed", "T4=1")
    assert shipped - at_v100 == pytest.approx(100 * (0.04 / t4 - 0.04))
    assert _t4_run(tmp_path, capsys, "--gpu-speed", "gpt2:T4=2") \
        == pytest.approx(at_v100 - 100 * 0.02)
    assert _t4_run(tmp_path, capsys, "--gpu-speed", "bert:T4=2") == pytest.approx(shipped)


@pytest.mark.parametrize("value,says", [("T4=0", "SPEED in [0.05, 50]"), ("T4", "TYPE=SPEED"),
                                        ("T4=fast", "got 'T4=fast'")])
def test_a_malformed_gpu_speed_is_one_line(tmp_path, capsys, value, says):
    with pytest.raises(SystemExit):
        _bad(tmp_path, value)
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_gpu_speed_for_a_type_the_spec_lacks_is_one_line(tmp_path, capsys):
    assert _bad(tmp_path, "H100=2") == 1
    err = capsys.readouterr().err
    assert "--gpu-speed: the spec has no GPU type 'H100' (it has: T4)" in err
    assert "Traceback" not in err


def _bad(tmp_path, value: str) -> int:
    spec = tmp_path / "t4.csv"
    spec.write_text("pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node\n"
                    "t4,1,8,T4,16,64,256\n")
    return main(["--spec", str(spec), "--policy", "fifo", "--gpu-speed", value])


@pytest.mark.parametrize("name, closest", [("muri_s", "muri-s"), ("Tiresias", "tiresias"),
                                           ("antmann", "antman")])
def test_a_misspelt_policy_is_a_usage_error_that_suggests_the_closest(name, closest, capsys):
    assert main(["--policy", f"srsf,{name}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"unknown policy {name!r}; did you mean {closest!r}?" in err[0]


def test_a_policy_name_nothing_resembles_gets_no_suggestion(capsys):
    assert main(["--policy", "zzzz"]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'zzzz' (choose from" in err and "did you mean" not in err


def test_the_live_scheduler_refuses_a_misspelt_policy_the_same_way(tmp_path, capsys):
    from scheduler.live.cli import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["--spec", "n2g8", "--endpoints", str(tmp_path / "e.json"), "--run-dir",
                    str(tmp_path), "--policy", "muri_l"])
    assert stop.value.code == 2
    assert "unknown policy 'muri_l'; did you mean 'muri-l'?" in capsys.readouterr().err


@pytest.mark.parametrize("share, shown", [(0.0, "0%"), (0.0004, "0.040%"), (0.0037, "0.37%"),
                                          (0.0123, "1.2%"), (0.0999, "10.0%"), (0.83, "83%"),
                                          (1.0, "100%")])
def test_utilisation_keeps_the_digits_a_small_share_needs(share, shown):
    from scheduler.sim.cli import percent

    assert percent(share) == shown


def test_the_table_never_shows_a_fraction_of_a_percent_as_zero():
    from types import SimpleNamespace

    from scheduler.sim.cli import format_table

    summary = SimpleNamespace(jobs=3, avg_jct=3600.0, p50_jct=3600.0, p99_jct=3600.0,
                              makespan=7200.0, avg_queueing=0.0, gpu_utilisation=0.0021,
                              preemptions=0)
    table = format_table([SimpleNamespace(policy="srsf", summary=summary, wall_s=0.1)])
    util = table.splitlines()[1].split()[7]
    assert util == "0.21%"
