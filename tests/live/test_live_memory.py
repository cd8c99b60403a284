"""Live GPU memory: the scheduler never launches a group whose memory does not fit its GPUs,
and a job whose trainer reports more than fits beside its group is stopped and runs alone
from then on.

The service runs for real against a real broker; fake agents (tests/live/test_service.py,
test doubles that record launches and stops) stand in for nodes, and the test publishes
`event.timing` as job 1's trainer would, over the bus.
"""
from __future__ import annotations

import dataclasses

import pytest

from broker.client import Publisher
from scheduler.core import interleave
from scheduler.live.webdata import JournalReader, groups, job_detail
from tests.helpers import job, spec
from tests.live.test_service import DEADLINE, harness, wait_for  # noqa: F401  (the fixture)

ONE_GPU_80 = dataclasses.replace(spec(nodes=1, gpus=1), gpu_mem_gb=80.0)
SHAPES = {1: (0.3, 0.05, 0.05), 2: (0.05, 0.3, 0.05)}  # complementary: Muri pairs them


def _submit_pair(h, gb: float) -> None:
    for job_id, stages in SHAPES.items():  # both queued before the node comes: one plan
        h.submit(dataclasses.replace(job(job_id, stages=stages, iterations=10**6),
                                     gpu_mem_gb=gb))


def _grouped_pair(harness):
    """A scheduler and node n0 running jobs 1 and 2 (10 GB each) as one group."""
    h = harness(spec=ONE_GPU_80, policy="muri-s", preset="paper", round_s=0.2)
    h.start_scheduler()
    _submit_pair(h, 10.0)
    n0 = h.agent("n0", gpus=(0,))
    assert {tuple(sorted(n0.next_launch()["group"])) for _ in range(2)} == {(1, 2)}
    return h, n0


def test_jobs_that_fit_share_the_gpu_and_launches_carry_their_memory(harness):
    h = harness(spec=ONE_GPU_80, policy="muri-s", preset="paper", round_s=0.2)
    h.start_scheduler()
    _submit_pair(h, 30.0)
    n0 = h.agent("n0", gpus=(0,))
    launches = [n0.next_launch(), n0.next_launch()]
    assert [sorted(l["group"]) for l in launches] == [[1, 2], [1, 2]]
    assert {l["workload"]["gpu_mem_gb"] for l in launches} == {30.0}
    # the web view's groups say what the members hold together on each GPU

    def shown():
        with h.scheduler.state.lock:
            return [(g["members"], g["gpu_mem_gb"]) for g in groups(h.scheduler.state)]

    wait_for(lambda: len(shown()) == 1 and len(shown()[0][0]) == 2)
    assert shown()[0][1] == 60.0


def test_a_group_whose_memory_does_not_fit_is_never_launched(harness):
    h = harness(spec=ONE_GPU_80, policy="muri-s", preset="paper", round_s=0.2)
    h.start_scheduler()
    _submit_pair(h, 41.0)  # 82 GB: past 80 GB less the 2 GB reserve
    n0 = h.agent("n0", gpus=(0,))
    launches = [n0.next_launch()]
    # five rounds on: every launch a group of one, one job on the GPU at a time (a job may
    # take the other's turn; it is stopped first)
    seen = h.scheduler.state.rounds.count
    wait_for(lambda: h.scheduler.state.rounds.count >= seen + 5)
    while not n0.launches.empty():
        launches.append(n0.launches.get())
    assert all(l["group"] == [l["job_id"]] for l in launches)
    assert len(n0.stops.queue) == len(launches) - 1 and len(n0.running) == 1
    assert {h.job(1)["state"], h.job(2)["state"]} == {"running", "pending"}


def test_a_job_that_reports_more_than_fits_beside_its_group_runs_alone(harness):
    h, n0 = _grouped_pair(harness)

    trainer = Publisher(h.endpoints, "trainer.1")  # stands in for job 1's trainer
    try:
        def stopped() -> bool:
            trainer.publish("event.timing", job_id=1, stages={"data": 0.3, "gpu": 0.05,
                                                              "net": 0.05},
                            iteration_time=0.4, iterations=10.0, gpu_mem_gb=75.0)
            return not n0.stops.empty()

        wait_for(stopped, step=0.1)
    finally:
        trainer.close()
    core = h.scheduler.state.core
    assert core.jobs[1].gpu_mem_gb == 75.0 and core.jobs[1].alone
    # /api/jobs/ID says so
    reader = JournalReader(str(h.run_dir / "journal.db"))
    doc = job_detail(h.scheduler.state, reader, 1)
    assert (doc["gpu_mem_gb"], doc["runs_alone"]) == (75.0, True)
    assert any("runs alone" in str(e) for e in doc["events"]), doc["events"]
    # from then on job 1 shares its GPU with no one (even were its memory to shrink back):
    # every later launch is a group of one
    core_later = h.scheduler.state
    with core_later.lock:
        core.note_gpu_memory(1, 10.0)
    later = [n0.next_launch()]
    seen = h.scheduler.state.rounds.count
    wait_for(lambda: h.scheduler.state.rounds.count >= seen + 5)
    while not n0.launches.empty():
        later.append(n0.launches.get())
    assert all(len(l["group"]) == 1 for l in later)


def test_a_job_that_ran_out_of_gpu_memory_in_a_group_runs_alone_from_then_on(harness):
    h, n0 = _grouped_pair(harness)
    # job 1's agent reports its trainer's end: out of GPU memory (EXIT_OOM)
    reply = h.request("job.finished", job_id=1, node="n0", iterations=5.0, ok=False,
                      detail="out of GPU memory (exit status 4)", oom=True)
    assert reply.get("requeued") is True
    wait_for(lambda: h.scheduler.state.view.jobs[1].alone)  # the loop's next turn
    later: list[dict] = []

    def relaunched() -> bool:
        while not n0.launches.empty():
            later.append(n0.launches.get())
        return any(l["job_id"] == 1 for l in later)

    wait_for(relaunched)
    assert all(len(l["group"]) == 1 for l in later)
    # the journal keeps the fact: a restarted scheduler runs it alone too
    h.stop_scheduler()
    h.start_scheduler()
    assert h.scheduler.state.core.jobs[1].alone and not h.scheduler.state.core.jobs[2].alone


def test_an_agent_whose_gpus_hold_less_than_the_spec_plans_for_is_refused(harness):
    from broker.client import RequestFailed
    import pytest

    h = harness(spec=ONE_GPU_80, policy="muri-s", round_s=0.2)
    h.start_scheduler()
    with pytest.raises(RequestFailed) as err:
        h.request("agent.register", node="n0", gpus=[0], cpus=8, mem=64.0, gpu_mem_gb=40.0)
    assert err.value.code == "short_of_gpu_memory"
    assert "n0's GPUs hold 40 GB; the spec plans groups for 80 GB" in str(err.value)
    assert "n0" not in h.status()["agents"]
    # 79.6 GB, what an "80 GB" card reports usable, is taken, and shown
    h.request("agent.register", node="n0", gpus=[0], cpus=8, mem=64.0, gpu_mem_gb=79.6)
    assert h.status()["agents"]["n0"]["gpu_mem_gb"] == 79.6


def _slowdown(state, members: int) -> float:
    with state.lock:
        return state.core.model.slowdown(members)


def test_measured_group_paces_calibrate_the_interference_term(harness):
    """A grouped trainer that reports iterations 1.5x slower than its group was planned
    moves the slowdown of groups of two toward 1.5x what it was, a step at a time, and the
    next plans time groups with it. A launch's first report (start-up: members start apart
    and wait at the gate for each other), here 4x slow, and reports before every member has
    reported move nothing."""
    h, n0 = _grouped_pair(harness)
    state = h.scheduler.state
    wait_for(lambda: 1 in state.ledger.placed and 2 in state.ledger.placed)
    with state.lock:
        planned, before = state.ledger.placed[1].tt, state.core.model.slowdown(2)
        key = state.ledger.placed[1].key
    stages = {"data": 0.3, "gpu": 0.05, "net": 0.05}
    trainers = Publisher(h.endpoints, "trainer.1")  # stands in for both: one ordered stream

    def report(job: int, pace: float) -> None:
        trainers.publish("event.timing", job_id=job, stages=stages,
                              iteration_time=pace * planned, iterations=10.0)

    def heard(job: int) -> bool:
        with state.lock:
            return state.measured.paced.get(job) == key

    try:
        report(1, 4.0)  # job 1's start-up, while job 2 starts
        wait_for(lambda: heard(1) or report(1, 4.0), step=0.05)
        report(2, 1.0)  # job 2's first report, at the plan's pace
        wait_for(lambda: heard(2) or report(2, 1.0), step=0.05)
        with state.lock:
            assert state.core.model.slowdown(2) == before
        report(1, 1.5)  # steady now: one report moves the factor a fifth of the way
        wait_for(lambda: _slowdown(state, 2) != before, step=0.05)
        assert _slowdown(state, 2) == pytest.approx(before * (1 + 0.2 * 0.5))

        def moved() -> bool:
            report(1, 1.5)
            with state.lock:
                return state.core.model.slowdown(2) > 1.2 * before
        wait_for(moved, step=0.05)
    finally:
        trainers.close()
    with state.lock:
        after = state.core.model.slowdown(2)
    assert 1.2 * before < after <= 1.5 * before + 1e-9
    # the policy plans with it: a pair's group time is the cyclic model's times the new factor
    with state.lock:
        jobs = [state.core.jobs[1], state.core.jobs[2]]
        tt, _ = state.core.policy.pairing.group_timing(jobs)
        cyclic, _ = interleave.best_order_indices(tuple(j.profile for j in jobs))
    assert tt == pytest.approx(cyclic * after)


def test_the_live_scheduler_charges_the_presets_interference_unless_told_not_to(tmp_path):
    import time

    from scheduler.live.cli import parse_args
    from scheduler.live.options import Options
    from scheduler.live.state import LiveState
    from tests.helpers import Log

    for interference, factor in ((True, 1.25), (False, 1.0)):
        (tmp_path / str(interference)).mkdir()
        state = LiveState(Options(spec=ONE_GPU_80, run_dir=tmp_path / str(interference),
                                  interference=interference), Log(), time.monotonic)
        assert state.core.model.slowdown(2) == factor
        state.journal.close()
    base = ["--spec", "n2g8", "--endpoints", "e.json", "--run-dir", str(tmp_path)]
    assert parse_args(base + ["--no-interference"])[0].no_interference
    assert not parse_args(base)[0].no_interference
