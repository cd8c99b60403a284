"""The merge rules. The completion rule: the expected starts it reads (against a brute-force
schedule written here) and which merges it admits; the gain rule: which merges add a tenth
to the work done (against sums worked out by hand)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.policies.muri_outlook import (Outlook, gain_pays, merge_pays, outlook,
                                                 packing_stats)


@dataclass(eq=False)
class _Job:  # what outlook reads of a job
    id: int
    num_gpu: int
    solo_time: float
    left: float  # remaining seconds alone


def _by_minute(queue, total):
    """Oracle: walk time in whole seconds; at each second, in queue order, a job that has not
    started starts if every job before it has started and enough GPUs are free."""
    start, end, free = {}, {}, total
    t = 0
    pending = list(queue)
    while pending:
        for job in list(end):
            if end[job] <= t:
                free += job.num_gpu
                del end[job]
        while pending and pending[0].num_gpu <= free:
            job = pending.pop(0)
            start[job.id] = t
            end[job] = t + job.left
            free -= job.num_gpu
        t += 1
    return start


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 30)), min_size=1,
                max_size=12))
def test_expected_starts_are_the_list_schedule_in_priority_order(jobs):
    queue = [_Job(i, g, 2.0, float(left)) for i, (g, left) in enumerate(jobs)]
    look = outlook(queue, {j.id for j in queue}, 8, lambda j: j.left)
    assert look.start == _by_minute(queue, 8)
    assert look.iterations == {j.id: j.left / 2.0 for j in queue}
    waiting = [j.id for j in queue if look.start[j.id] > 0]
    for i, job in enumerate(queue):  # waiting jobs ranked behind it
        assert look.behind[job.id] == sum(1 for w in waiting if w > job.id)


def test_jobs_past_the_last_admitted_all_wait_behind():
    queue = [_Job(i, 1, 1.0, 10.0) for i in range(6)]
    look = outlook(queue, {1, 0}, 2, lambda j: j.left)
    assert look.start == {0: 0.0, 1: 0.0}
    assert look.behind == {0: 4, 1: 4}  # jobs 2-5 are past the last admitted job


def _single(look, job_id, tt):
    return packing_stats([[_Job(job_id, 1, tt, 0.0)]], [tt], look)


def _pays(a, b, tt_ab, gpus, total_gpus):
    """merge_pays of one merge: packing row a with row b."""
    return merge_pays(np.vstack([a, b]), np.array([0]), np.array([1]), tt_ab, gpus,
                      total_gpus)


def test_under_light_load_a_merge_that_slows_its_members_does_not_pay():
    # both could run now (start 0), nobody waits behind: merging only slows them down
    look = Outlook(start={0: 0.0, 1: 0.0}, iterations={0: 100.0, 1: 100.0},
                   behind={0: 0, 1: 0}, gpus=16)
    a, b = _single(look, 0, 1.0), _single(look, 1, 1.0)
    assert not _pays(a, b, np.array([1.2]), 1, 16)[0]
    assert _pays(a, b, np.array([0.999]), 1, 16)[0]  # a group faster than alone pays


def test_a_job_that_would_wait_long_is_worth_a_small_slowdown():
    # job 1 waits 1,000 s for GPUs; merged, both run 1.2x slower from now:
    # delta = 100 (1.2 - 1) + 100 (1.2 - 1) - 1,000 = -960 < 0
    look = Outlook(start={0: 0.0, 1: 1000.0}, iterations={0: 100.0, 1: 100.0},
                   behind={0: 1, 1: 0}, gpus=16)
    assert _pays(_single(look, 0, 1.0), _single(look, 1, 1.0), np.array([1.2]), 1, 16)[0]
    # ... but not a 20x slowdown: 100 x 19 x 2 = 3,800 > 1,000
    assert not _pays(_single(look, 0, 1.0), _single(look, 1, 1.0), np.array([20.0]), 1,
                          16)[0]


def test_a_queue_behind_makes_the_gpu_time_saved_count():
    # Both start now, so the touched jobs only lose: 2 x 100 x (1.5 - 1) = 100 s. Merged they
    # hold 1 GPU for 150 s instead of 2 GPUs for 100 s each: 50 GPU-s saved, which each of
    # the jobs behind gets back over 16 GPUs: behind x 50 / 16 > 100 from behind = 33.
    def pays(behind):
        look = Outlook(start={0: 0.0, 1: 0.0}, iterations={0: 100.0, 1: 100.0},
                       behind={0: behind, 1: behind}, gpus=16)
        return _pays(_single(look, 0, 1.0), _single(look, 1, 1.0), np.array([1.5]), 1,
                          16)[0]

    assert not pays(32)
    assert pays(33)


def test_a_merge_is_weighed_over_the_pair_s_life_not_the_long_member_s():
    # a long job runs (10,000 iterations of 1 s), a short one waits 500 s (100 of 1 s);
    # merged at 1.3 s an iteration the pair lasts 130 s: the long one loses
    # 130 (1 - 1/1.3) = 30 s, the short one 30 s too but starts 500 s sooner: -440 < 0.
    # Charged over the long job's whole life (10,000 x 0.3 = 3,000 s) it would not pay.
    look = Outlook(start={0: 0.0, 1: 500.0}, iterations={0: 10_000.0, 1: 100.0},
                   behind={0: 0, 1: 0}, gpus=16)
    assert _pays(_single(look, 0, 1.0), _single(look, 1, 1.0), np.array([1.3]), 1, 16)[0]
    # ... while a wait of 50 s is less than the 60 s the pair loses
    look = Outlook(start={0: 0.0, 1: 50.0}, iterations={0: 10_000.0, 1: 100.0},
                   behind={0: 0, 1: 0}, gpus=16)
    assert not _pays(_single(look, 0, 1.0), _single(look, 1, 1.0), np.array([1.3]), 1, 16)[0]


def test_the_gain_rule_takes_a_merge_that_adds_a_tenth_to_the_work_done():
    # two packings of 1.0 s and 0.8 s an iteration: merged at 1.6 s they do
    # (1.0 + 0.8) / 1.6 = 1.125x the work a second (+12.5%); at 1.65 s, +9.1%
    stats = np.array([[1.0, 0, 1, 0, 0, 0, 0], [0.8, 0, 1, 0, 0, 0, 0]], dtype=float)
    rows, cols = np.array([0, 0]), np.array([1, 1])
    assert gain_pays(stats, rows, cols, np.array([1.6, 1.65]), 1, 16, 0.1).tolist() \
        == [True, False]
    assert gain_pays(stats, rows, cols, np.array([1.65, 1.7]), 1, 16, 0.05).tolist() \
        == [True, True]
