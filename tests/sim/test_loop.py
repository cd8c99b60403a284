"""The driver loop (scheduler/loop.py) over the simulated cluster, with what a real cluster
does that no plan foresees: a launch that fails, a stop that takes time, an agent that
vanishes. Each is simulated (scheduler/sim/cluster.py's Faults), and the policy's next round
sees what it left: the job waiting again, what a restart of it costs, a node gone.

Expected times are worked out by hand from the trace and the default preset's accounting
(a job's work is iterations x its solo iteration time; a (re)start costs its model's restart
overhead, charged before it progresses)."""
from __future__ import annotations

import pytest

from scheduler.presets import get_preset
from scheduler.core.state import Status
from scheduler.sim.cluster import Faults
from scheduler.sim.simulator import Simulator
from tests.helpers import job, spec

# default's model with a restart shorter than the faults' times below, so that a job has made
# progress when its stop or its node's loss comes
OVERHEAD = 4.0
PRESET = get_preset("default", overhead_table={}, overhead_default=OVERHEAD)


class Seen:
    """Wraps the policy's plan: what each round showed it (time, and per queued job its
    status, preemptions and stop time) and the nodes offline."""

    def __init__(self, sim: Simulator):
        self.rounds: list[tuple[float, dict, set]] = []
        policy = sim.core.policy
        plan = policy.plan

        def seen_plan(ctx):
            self.rounds.append((ctx.now, {j.id: (j.status, j.preemptions, j.stop_time)
                                          for j in ctx.queue}, set(ctx.cluster.offline)))
            return plan(ctx)

        policy.plan = seen_plan

    def at(self, now: float) -> tuple[dict, set]:
        for when, jobs, offline in self.rounds:
            if when == pytest.approx(now):
                return jobs, offline
        raise AssertionError(f"no round at {now}; rounds at {[r[0] for r in self.rounds]}")


def run(records, policy, faults, nodes=1, gpus=1):
    sim = Simulator(records, spec(nodes=nodes, gpus=gpus), policy, PRESET, faults=faults)
    seen = Seen(sim)
    result = sim.run()
    return {o.job_id: o for o in result.outcomes}, seen, sim


def test_a_failed_launch_puts_the_job_back_and_the_next_round_starts_it_again():
    work = 100 * 0.3  # 100 iterations of 0.3 s
    ends, seen, _ = run([job(0, iterations=100)], "fifo",
                        Faults(failed_launches={0: 1}, retry_s=5.0))
    jobs, _ = seen.at(5.0)  # the retry: the policy sees job 0 waiting again
    assert jobs[0][0] is Status.PENDING and jobs[0][1] == 1
    assert [round(r[0], 6) for r in seen.rounds][:2] == [0.0, 5.0]
    assert ends[0].end == pytest.approx(5.0 + OVERHEAD + work)
    assert ends[0].starts == 2  # the launch that failed, and the one that ran


def test_without_faults_the_same_job_runs_at_once():
    ends, seen, _ = run([job(0, iterations=100)], "fifo", None)
    assert ends[0].end == pytest.approx(OVERHEAD + 100 * 0.3)


def test_a_slow_stop_delays_what_starts_on_its_gpus_and_the_next_round_sees_its_cost():
    # job 0 (long) runs; job 1 (short) arrives at 10 s and SRTF preempts job 0 for it; job
    # 0's stop takes 30 s, so job 1 begins only then, and job 0's stop time is known after
    long, short = job(0, iterations=1000), job(1, submit=10.0, iterations=10)
    ends, seen, sim = run([long, short], "srtf", Faults(slow_stops={0: 30.0}))
    assert ends[1].end == pytest.approx(10.0 + 30.0 + OVERHEAD + 10 * 0.3)
    jobs, _ = seen.at(ends[1].end)  # the round after job 1 ended
    assert jobs[0] == (Status.PENDING, 1, 30.0)
    assert sim.core.jobs[0].restart_cost == 30.0 + OVERHEAD
    # job 0 did (10 - 4) s of work before the stop; it resumes after job 1, paying again
    done = (10.0 - OVERHEAD) / 0.3
    assert ends[0].end == pytest.approx(ends[1].end + OVERHEAD + (1000 - done) * 0.3)


@pytest.mark.parametrize("stops", [(30.0, 10.0), (10.0, 30.0)])
def test_two_slow_stops_in_one_round_delay_what_starts_until_the_slowest_ended(stops):
    # jobs 0 and 1 (long) run on the node's two GPUs; jobs 2 and 3 (short) arrive at 10 s and
    # SRTF stops both long ones for them in one round; the stops take 30 s and 10 s (either
    # way round): the short jobs begin once the slower stop ended, 30 s after the round
    records = [job(0, iterations=1000), job(1, iterations=1000),
               job(2, submit=10.0, iterations=10), job(3, submit=10.0, iterations=10)]
    ends, _, _ = run(records, "srtf", Faults(slow_stops={0: stops[0], 1: stops[1]}), gpus=2)
    for j in (2, 3):
        assert ends[j].end == pytest.approx(10.0 + 30.0 + OVERHEAD + 10 * 0.3)


def test_a_vanished_agent_requeues_its_jobs_and_its_node_takes_no_work_until_back():
    # two nodes of one GPU; jobs 0 and 1 run one on each; node 0's agent vanishes at 20 s and
    # comes back at 50 s. FIFO runs job 0 first: it takes node 1 from job 1, which waits for
    # node 0 to come back
    records = [job(0, iterations=1000), job(1, iterations=1000)]
    ends, seen, sim = run(records, "fifo", Faults(lost_nodes=[(20.0, 0, 50.0)]), nodes=2)
    jobs, offline = seen.at(20.0)
    assert offline == {0} and jobs[0][0] is Status.PENDING and jobs[1][0] is Status.RUNNING
    jobs, offline = seen.at(50.0)
    assert offline == set() and jobs[1] == (Status.PENDING, 1, 0.0)
    # each did 16 s of work before 20 s, and pays a restart when it runs again
    assert ends[0].end == pytest.approx(20.0 + OVERHEAD + (1000 * 0.3 - (20.0 - OVERHEAD)))
    assert ends[1].end == pytest.approx(50.0 + OVERHEAD + (1000 * 0.3 - (20.0 - OVERHEAD)))


def test_faults_need_the_default_accounting():
    with pytest.raises(ValueError, match="faults"):
        Simulator([job(0)], spec(), "fifo", get_preset("paper"), faults=Faults())
