"""Live GPU types' speeds: an emulated trainer on a slower type is told its GPU stage at that
type's pace, its reports are folded into the profile at a V100's pace, and a job measured on
two types moves the planner's speed for the slower one toward what it showed.

The service runs for real against a real broker; fake agents (tests/live/test_service.py,
test doubles that record launches and stops) stand in for nodes, and the test publishes
`event.timing` as the trainers would, over the bus.
"""
from __future__ import annotations

import dataclasses

import pytest

from broker.client import Publisher
from specs.gpu_speed import speed
from specs.spec import load_spec
from tests.helpers import job
from tests.live.test_service import harness, wait_for  # noqa: F401  (the fixture)

POOLS = ("pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node\n"
         "t4,1,1,T4,16,64,256\nv100,1,1,V100M32,32,64,256\n")
T4 = min(8.1 / 15.7, 320 / 900)  # the data sheets' bound, worked out here
STAGES = (0.1, 0.2, 0.1)


def cluster(tmp_path):
    path = tmp_path / "pools.csv"
    path.write_text(POOLS)
    return load_spec(path)


def test_a_trainer_on_a_t4_runs_and_reports_at_a_t4s_pace(harness, tmp_path):
    h = harness(spec=cluster(tmp_path), policy="fifo", preset="default", round_s=0.2)
    h.start_scheduler()
    h.submit(dataclasses.replace(job(1, stages=STAGES, iterations=10**6, model="gpt2"),
                                 gpu_types=("T4",)))
    n0 = h.agent("n0", gpus=(0,))
    launch = n0.next_launch()
    data, gpu, net = launch["workload"]["stages"]
    assert (data, net) == pytest.approx((0.1, 0.1))
    assert gpu == pytest.approx(0.2 / T4)
    assert launch["workload"]["iteration_time"] == pytest.approx(0.2 + 0.2 / T4)
    state = h.scheduler.state
    trainer = Publisher(h.endpoints, "trainer.1")  # job 1's trainer: its GPU stage is 1.5x
    try:                                           # what the trace said, at a T4's pace
        def folded() -> bool:
            trainer.publish("event.timing", job_id=1,
                            stages={"data": 0.1, "gpu": 0.3 / T4, "net": 0.1},
                            iteration_time=0.2 + 0.3 / T4, iterations=10.0)
            with state.lock:
                return state.core.jobs[1].profile[1] > 0.25
        wait_for(folded, step=0.05)
    finally:
        trainer.close()
    with state.lock:  # the profile holds a V100's time (0.3), not the T4's (0.84)
        assert state.core.jobs[1].profile[1] == pytest.approx(0.3, rel=0.05)


def test_a_job_seen_on_two_types_teaches_the_planner_the_slower_ones_speed(harness,
                                                                           tmp_path):
    h = harness(spec=cluster(tmp_path), policy="srtf", preset="default", round_s=0.2)
    h.start_scheduler()
    n0, n1 = h.agent("n0", gpus=(0,)), h.agent("n1", gpus=(0,))
    h.wait_online("n0", "n1")  # both there before the job: it then goes to the faster
    h.submit(job(2, stages=STAGES, iterations=10**6, model="gpt2"))
    assert n1.next_launch()["job_id"] == 2  # the V100: the faster type for it
    state = h.scheduler.state
    trainer = Publisher(h.endpoints, "trainer.2")
    try:
        wait_for(lambda: 2 in state.ledger.placed)

        def seen_on_v100() -> bool:
            trainer.publish("event.timing", job_id=2,
                            stages={"data": 0.1, "gpu": 0.2, "net": 0.1},
                            iteration_time=0.4, iterations=10.0)
            with state.lock:
                return "V100M32" in state.measured.type_paces.seen.get(2, {})
        wait_for(seen_on_v100, step=0.05)
        # a shorter job that only a V100 holds: SRTF gives it the V100, job 2 moves to the T4
        h.submit(dataclasses.replace(job(3, stages=STAGES, iterations=10, model="gpt2"),
                                     gpu_types=("V100M32",)))
        assert n0.next_launch()["job_id"] == 2
        wait_for(lambda: state.ledger.placed.get(2) is not None
                 and state.ledger.placed[2].slices[0].node == 0)

        def learned() -> bool:  # here a T4 runs gpt2's GPU stage at half a V100's speed
            trainer.publish("event.timing", job_id=2,
                            stages={"data": 0.1, "gpu": 0.4, "net": 0.1},
                            iteration_time=0.6, iterations=20.0)
            with state.lock:
                return state.core.speeds.of("gpt2", "T4") > 0.45
        wait_for(learned, step=0.05)
    finally:
        trainer.close()
    with state.lock:
        assert state.core.speeds.of("gpt2", "T4") <= 0.5 + 1e-9
        assert state.core.speeds.of("bert", "T4") == speed("bert", "T4")  # per model


def test_the_live_scheduler_takes_an_operators_gpu_speed(tmp_path, capsys):
    import time

    from scheduler.live.cli import parse_args
    from scheduler.live.options import Options
    from scheduler.live.state import LiveState
    from tests.helpers import Log

    spec = cluster(tmp_path)
    base = ["--spec", str(tmp_path / "pools.csv"), "--endpoints", "e.json", "--run-dir",
            str(tmp_path)]
    args, _ = parse_args(base + ["--gpu-speed", "T4=0.5", "--gpu-speed", "gpt2:T4=0.25"])
    state = LiveState(Options(spec=spec, run_dir=tmp_path, gpu_speed=dict(args.gpu_speed)),
                      Log(), time.monotonic)
    assert (state.core.speeds.of("bert", "T4"), state.core.speeds.of("gpt2", "T4")) \
        == (0.5, 0.25)
    state.journal.close()
    with pytest.raises(SystemExit):
        parse_args(base + ["--gpu-speed", "H100=2"])
    assert "the spec has no GPU type 'H100' (it has: T4, V100M32)" in capsys.readouterr().err
