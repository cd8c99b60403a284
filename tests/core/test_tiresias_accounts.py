"""Tiresias's own accounts of a promoted job agree with the core's.

Tiresias keeps, for a job promoted back to queue 0, its service and its wait since the
promotion (it never writes the job). Those are the core's `attained` and wait since first run
(`pending_since_run` and `pending_mark`), less what they were at the promotion: checked at
every round of simulations with many promotions, under both presets.
"""
from __future__ import annotations

import random

import pytest

from scheduler.core.state import Status
from scheduler.presets import get_preset
from scheduler.sim.simulator import Simulator
from tests.helpers import job as record, spec


def busy_trace(seed: int, n: int = 30) -> list:
    """Long and short jobs on 8 GPUs, arriving over an hour: demotions, waits, promotions."""
    rng = random.Random(seed)
    return [record(i, num_gpu=rng.choice([1, 2, 4]), submit=rng.uniform(0, 3600),
                   iterations=rng.choice([500, 5000, 20000, 40000]),
                   stages=(0.1, 0.2, 0.1))
            for i in range(n)]


def core_waited(job, now: float) -> float:
    """Seconds the job waited after its first run, by the core's accounts."""
    return job.pending_since_run + (now - (job.pending_mark or now))


@pytest.mark.parametrize("preset", ["default", "paper"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_promoted_jobs_service_and_wait_count_from_its_promotion(preset, seed):
    sim = Simulator(busy_trace(seed), spec(nodes=2, gpus=4), "tiresias",
                    get_preset(preset, tiresias_promote=1.0))
    policy = sim.core.policy
    at_promotion: dict[int, tuple[int, float, float]] = {}  # job id -> (count, attained, wait)
    checked = [0]

    def on_round(now, plan, core):
        for job in core.queue:
            count = policy.promotions.get(job.id, 0)
            if count and at_promotion.get(job.id, (0,))[0] != count:
                # promoted in this round (it waited, so its attained service is as it was)
                at_promotion[job.id] = (count, job.attained, core_waited(job, now))
                continue
            if job.id not in at_promotion:
                assert policy.served(job) == job.attained  # never promoted: the core's own
                continue
            _, attained, waited = at_promotion[job.id]
            assert policy.served(job) == pytest.approx(job.attained - attained, abs=1e-6)
            if job.status is Status.PENDING:
                assert policy._waited(job, now) == pytest.approx(
                    core_waited(job, now) - waited, abs=1e-6)
            checked[0] += 1

    sim.loop.on_round = on_round
    result = sim.run()
    assert all(o.end is not None for o in result.outcomes)
    assert len(at_promotion) >= 3 and checked[0] > 100  # promotions happened, and were seen
