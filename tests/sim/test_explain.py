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
