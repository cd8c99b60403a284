"""The plug-in run by name through Interlace's simulator, against a brute-force replay of its
rule. Needs the package installed (`pip install .`): the name `largest-first` is found through
the entry point, as `interlace-sim --policy largest-first` finds it.

The reference below knows nothing of Interlace's core: on one node, a job fits exactly when
it wants no more GPUs than are free, so the rule is a few lines of arithmetic. Restart
overheads are set to zero, so that a preempted job only pauses.
"""
from __future__ import annotations

import pytest

from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs.spec import ClusterSpec
from traces.generate import generate

GPUS = 8
SPEC = ClusterSpec(num_switch=1, nodes_per_switch=1, gpus_per_node=GPUS, cpus_per_node=64,
                   mem_per_node=256)
PRESET = get_preset("default", overhead_table={}, overhead_default=0.0)


def reference_ends(records, preset) -> dict[int, float]:
    """When each job ends when, at every arrival and completion, the runnable jobs are taken
    by (most GPUs, earliest submitted, lowest id) and each runs if its GPUs are still free."""
    left = {r.job_id: r.iterations * preset.model.solo_time(r.iteration_time) for r in records}
    jobs = sorted(records, key=lambda r: (-r.num_gpu, r.submit_time, r.job_id))
    arrivals = sorted({r.submit_time for r in records})
    ends: dict[int, float] = {}
    now = arrivals[0]
    while len(ends) < len(records):
        free, running = GPUS, []
        for r in jobs:
            if r.job_id not in ends and r.submit_time <= now and r.num_gpu <= free:
                running.append(r.job_id)
                free -= r.num_gpu
        upcoming = [t for t in arrivals if t > now]
        finish = now + min((left[j] for j in running), default=float("inf"))
        step = min(finish, upcoming[0] if upcoming else float("inf"))
        for j in running:
            left[j] -= step - now
            if left[j] <= 1e-9 * max(step, 1.0):
                ends[j] = step
        now = step
    return ends


def simulated_ends(records, policy: str) -> dict[int, float]:
    result = simulate(records, SPEC, policy, PRESET)
    return {o.job_id: o.end for o in result.outcomes}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("backlog", [True, False])
def test_the_simulator_runs_the_jobs_as_the_rule_says(seed, backlog):
    records = generate(30, seed, backlog=backlog, max_gpus=GPUS, mean_interarrival=600.0)
    expected = reference_ends(records, PRESET)
    got = simulated_ends(records, "largest-first")
    assert got.keys() == expected.keys()
    for job_id, end in expected.items():
        assert got[job_id] == pytest.approx(end, rel=1e-6, abs=1e-3), job_id


def test_the_reference_tells_the_rule_from_fifo():
    """The check above has teeth: FIFO, on the same trace, does not end jobs as the rule
    says."""
    records = generate(30, 0, backlog=True, max_gpus=GPUS)
    expected = reference_ends(records, PRESET)
    fifo = simulated_ends(records, "fifo")
    assert any(fifo[j] != pytest.approx(end, rel=1e-6, abs=1e-3) for j, end in expected.items())


def test_a_big_job_never_waits_while_a_smaller_one_starts_with_its_gpus():
    """The rule's promise, stated on the simulator's output: when all jobs are there from the
    start, every 8-GPU job (the whole node) starts before any smaller job does."""
    records = generate(30, 1, backlog=True, max_gpus=GPUS)
    result = simulate(records, SPEC, "largest-first", PRESET)
    big = [o for o in result.outcomes if o.num_gpu == GPUS]
    small = [o for o in result.outcomes if o.num_gpu < GPUS]
    assert big and small
    assert max(o.start for o in big) <= min(o.start for o in small)
