"""--explain's breakdown of where the time goes: each job's JCT split into waiting, its time
alone, running slower in a group and restarting, checked against what the policies must do
(SRSF never shares GPUs, so nothing of its run is slower than alone) and against sums."""
from __future__ import annotations

import pytest

from scheduler.core.metrics import JobOutcome
from scheduler.presets import get_preset
from scheduler.sim.cli import main
from scheduler.sim.explain import GroupLog, job_parts
from scheduler.sim.simulator import simulate
from traces.generate import generate
from tests.helpers import spec


def test_a_jobs_parts_add_up_to_its_jct():
    o = JobOutcome(1, 1, "vgg16", submit=100.0, start=160.0, end=1000.0, preemptions=1,
                   starts=2, running=700.0, alone=500.0, overhead=40.0)
    wait, alone, slower, restart = job_parts(o)
    assert (wait, alone, slower, restart) == (200.0, 500.0, 160.0, 40.0)
    assert wait + alone + slower + restart == o.jct


def test_a_job_that_never_waited_waits_zero_not_a_rounding_error_below():
    # running time summed interval by interval can pass the JCT by a last-bit error
    o = JobOutcome(1, 1, "vgg16", submit=0.1, start=0.1, end=0.7, preemptions=0,
                   starts=1, running=0.6000000000000001, alone=0.6, overhead=0.0)
    assert o.jct < o.running
    assert job_parts(o)[0] == 0.0


def _backlog():
    return generate(40, 3, backlog=True, max_gpus=2, median_duration=1800)


def test_srsf_runs_nothing_slower_than_alone_and_muri_does_when_it_groups():
    records, cluster = _backlog(), spec(nodes=1, gpus=4)
    preset = get_preset("default")
    logs = {p: GroupLog() for p in ("srsf", "muri-s")}
    runs = {p: simulate(records, cluster, p, preset, on_round=logs[p]) for p in logs}
    for o in runs["srsf"].outcomes:
        wait, alone, slower, restart = job_parts(o)
        assert slower == pytest.approx(0.0, abs=1e-6 * alone)
        assert restart == pytest.approx(o.starts * preset.model.overhead(o.model, o.num_gpu))
    assert logs["srsf"].formed == 0
    assert logs["muri-s"].formed > 0  # a backlog on 4 GPUs: interleaving pays
    assert sum(job_parts(o)[2] for o in runs["muri-s"].outcomes) > 0


def test_explain_prints_the_breakdown_by_decile_and_the_groups(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    from traces.muri_csv import write_trace

    write_trace(trace, _backlog())
    spec_file = tmp_path / "s.csv"
    spec_file.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,"
                         "mem_p_node\n1,1,4,92,520\n")
    assert main(["--trace", str(trace), "--spec", str(spec_file), "--policy", "srsf,muri-s",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "where the time goes" in out
    deciles = [line for line in out.splitlines() if line.strip()[:2].strip().isdigit()
               and "|" in line]
    assert len(deciles) == 10
    assert "srsf: per job" in out and " 0 s slower than alone" in out.split("srsf: per job")[1]
    assert "muri-s: " in out and "groups formed" in out and "regroups" in out


# -- the comparison's figures against a case worked by hand ---------------------------------

def _result(policy, summary, outcomes):
    from types import SimpleNamespace

    return SimpleNamespace(policy=policy, outcomes=outcomes,
                           summary=SimpleNamespace(**summary))


def _hours(job, submit, start, end, running, alone, overhead=0.0):
    h = 3600.0
    return JobOutcome(job, 1, "vgg16", submit=submit * h, start=start * h, end=end * h,
                      preemptions=0, starts=1, running=running * h, alone=alone * h,
                      overhead=overhead * h)


def test_the_explained_figures_match_a_case_worked_by_hand():
    from types import SimpleNamespace

    from scheduler.sim.explain import explain

    # three jobs needing 1, 2 and 10 h alone, all submitted at 0 (hours below)
    records = [SimpleNamespace(job_id=j, duration=d * 3600.0) for j, d in ((1, 1), (2, 2),
                                                                             (3, 10))]
    # srsf: job 1 at once; job 2 queued 1 h; job 3 queued 3 h, stopped 4 h, 1 h restarting
    a = _result("srsf", {"p50_jct": 3 * 3600.0, "avg_jct": 22 / 3 * 3600.0,
                         "p99_jct": 18 * 3600.0},
                [_hours(1, 0, 0, 1, 1, 1), _hours(2, 0, 1, 3, 2, 2),
                 _hours(3, 0, 3, 18, 11, 10, overhead=1)])
    # muri-s: every job shares, so runs slower (1.5x, 1.25x, 1.2x its time alone), and
    # waits 0.5 h, 0.5 h and 4 h
    b = _result("muri-s", {"p50_jct": 3 * 3600.0, "avg_jct": 7 * 3600.0,
                           "p99_jct": 16 * 3600.0},
                [_hours(1, 0, 0.5, 2, 1.5, 1), _hours(2, 0, 0.5, 3, 2.5, 2),
                 _hours(3, 0, 1.5, 16, 12, 10)])
    out = explain(a, b, records)
    text = "\n".join(out)
    assert out[0] == "srsf against muri-s, job by job (3 jobs finished under both):"
    # job 1 sooner under srsf (1 h < 2 h), job 3 under muri-s (16 h < 18 h), job 2 equal
    assert "srsf finishes 33% of them sooner, muri-s 33% (1 equal)" in text
    # running = JCT - waiting: srsf 1/1, 2/2, 11/10 -> median 1.00; muri-s 1.5, 1.25, 1.2
    assert "a median 1.00x the job's time alone under srsf, 1.25x under muri-s" in text
    # waiting = JCT - running: srsf 0, 1, 7 -> 2.67 h; muri-s 0.5, 0.5, 4 -> 1.67 h;
    # the longest tenth is job 3: 7 h against 4 h
    assert ("waiting (not holding GPUs: queued, or stopped): 2.67 h per job under srsf, "
            "1.67 h under muri-s; the longest tenth of jobs 7.00 h against 4.00 h") in text
    # job 3 gains 18 - 16 = 2 job-hours, job 1 loses 2 - 1 = 1
    assert "the jobs muri-s finishes sooner gain 2 job-hours, those it finishes later lose 1" \
        in text
    # the breakdown: slower = running - restarts - alone; srsf 0, muri-s (0.5+0.5+2)/3 h
    assert "srsf: per job 0 s slower than alone, 1,200 s restarting" in text
    assert "muri-s: per job 3,600 s slower than alone, 0 s restarting" in text
    # one waiting figure per policy, said once
    assert text.count("waiting") == 1


def test_explain_names_the_pair_it_compares(capsys):
    argv = ["--policy", "srsf,tiresias,muri-s"]
    assert main([*argv, "--explain", "muri-s,tiresias"]) == 0
    out = capsys.readouterr().out
    assert "muri-s against tiresias, job by job" in out and "first and the last" not in out
    assert main([*argv, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "compares the first and the last of --policy" in out
    assert "srsf against muri-s, job by job" in out


@pytest.mark.parametrize("value, says", [
    ("srsf,muri_s", "'muri_s' is not in --policy; did you mean 'muri-s'?"),
    ("srsf", "give two different policies as A,B"),
    ("srsf,srsf", "give two different policies as A,B"),
])
def test_a_bad_explain_pair_is_a_usage_error(value, says, capsys):
    assert main(["--policy", "srsf,muri-s", "--explain", value]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.splitlines()) == 1
