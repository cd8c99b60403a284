"""A job no node has the CPUs for would wait for ever: every door that takes jobs refuses it
in one line naming the job and the CPUs (the simulator, a sweep, a live submission)."""
from __future__ import annotations

from broker.messages import make
from scheduler.live.options import Options
from scheduler.live.service import SchedulerService
from scheduler.sim.cli import main as sim_main
from scheduler.tools.sweep import main as sweep_main
from tests.helpers import job, spec
from traces.muri_csv import write_trace
from traces.record import record_to_map

SHORT_SPEC = ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
              "1,2,8,32,256\n")  # an 8-GPU job asks 48 CPUs of a node (6 a GPU)
SAYS = "job 2: job needs 48 CPUs on each node it runs on (6 a GPU); the nodes that could " \
       "hold it have 32"


def _files(tmp_path):
    (tmp_path / "spec.csv").write_text(SHORT_SPEC)
    write_trace(tmp_path / "t.csv", [job(1, num_gpu=4), job(2, num_gpu=8)])
    return str(tmp_path / "spec.csv"), str(tmp_path / "t.csv")


def test_the_simulator_refuses_it_before_any_run(tmp_path, capsys):
    spec_file, trace = _files(tmp_path)
    assert sim_main(["--trace", trace, "--spec", spec_file, "--policy", "srsf"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(SAYS), err


def test_a_sweep_refuses_it_before_any_run(tmp_path, capsys):
    spec_file, trace = _files(tmp_path)
    assert sweep_main(["--traces", trace, "--spec", spec_file, "--policies", "srsf",
                       "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(SAYS), err
    assert not (tmp_path / "out" / "runs.csv").exists()


def test_a_live_submission_is_refused_and_not_journaled(tmp_path):
    svc = SchedulerService(None, Options(spec=spec(nodes=2, gpus=8, cpus=32), policy="srsf",
                                         run_dir=tmp_path))
    try:
        from broker.refusal import Refusal
        import pytest

        with pytest.raises(Refusal) as err:
            svc.handle(make("job.submit", "test", "a", job=record_to_map(job(2, num_gpu=8))))
        assert err.value.code == "bad_job" and "needs 48 CPUs" in err.value.reason
        assert svc.handle(make("job.submit", "test", "b",
                               job=record_to_map(job(3, num_gpu=4))))["accepted"]
        assert svc.status()["counts"]["pending"] == 1
    finally:
        svc.close()
