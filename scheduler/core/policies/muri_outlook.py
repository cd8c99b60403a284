"""Whether a merge pays: by the throughput it adds (the gain rule, `default`'s), or by the
expected completions of the jobs it touches and of the queue's (the completion rule).

The gain rule takes a merge whose group does at least a set share more work per second than
its two packings on GPUs of their own, (tt_A + tt_B - tt_AB) / tt_AB >= gain, while demand
exceeds the cluster (as the paper's rule, which takes any). Its share, 10% under `default`,
was chosen against the paper's real testbed and the load sweep (EXPERIMENTS.md#calibration):
the merges that paid there passed it; the small-gain merges the paper's rule also took cost
the members more than they freed on heavy-tailed traces.

The completion rule:

Interleaving is a trade. Two packings merged run on one set of GPUs, each member slower than
before (the merged group's iteration time against its own), but the later one starts now
instead of waiting, and the GPUs it would have taken are left to the jobs queued behind.
Under light load nobody waits behind and the slowdown is pure loss; under a backlog the
GPU time saved shortens every wait behind. The completion rule admits a merge only when
the expected completions, touched jobs and the queue behind together, go down, over the
merged group's life L = tt_AB min n (until its first member ends, when the planner
regroups what is left):

    delta = |A| L (1 - tt_A / tt_AB) + |B| L (1 - tt_B / tt_AB) - |B| (W_B - W_A)
            - behind * g / G * L (tt_A + tt_B - tt_AB) / tt_AB

where n is a member's remaining iterations (estimated remaining time over its solo time),
tt a packing's iteration time (a job alone: its solo time), W a packing's expected start
were nothing merged (A the earlier), `behind` how many queued jobs wait behind the later
one, g the packings' GPUs and G the cluster's. Over L each member does L / tt_AB iterations,
which alone would have taken L tt / tt_AB: the first two terms are what the members lose,
the third what the later one gains by starting now; the GPU time the merge saves over L,
g L (tt_A + tt_B - tt_AB) / tt_AB, shortens each wait behind by its share of the cluster.
A merge pays when delta < 0. Why over L and not each member's whole remaining life: the
pair ends with its shortest member and the long one is regrouped then; charging its
slowdown to the end of its life would count every later partner's cost against this one
merge and decline the merges that paid on the paper's testbed.

The expected starts come from a list schedule of the queue in priority order, GPUs as one
pool, each job holding its GPUs for its estimated remaining time: what would happen if
nothing merged.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from scheduler.core.state import JobView


@dataclass(frozen=True)
class Outlook:
    """One round's view of the queue for the completion rule: per job id, its expected start
    (seconds from now) were nothing merged, its remaining iterations, and how many waiting
    jobs rank behind it; and the cluster's GPUs."""

    start: dict[int, float]
    iterations: dict[int, float]
    behind: dict[int, int]
    gpus: int

    @classmethod
    def unknown(cls, gpus: int) -> "Outlook":
        """No schedule looked at: what the gain rule, which reads only the packings'
        iteration times, is handed."""
        return cls({}, {}, {}, gpus)


def outlook(queue: Sequence[JobView], admitted: set[int], total_gpus: int,
            remaining: Callable[[JobView], float]) -> Outlook:
    """The list schedule of `queue` (priority order) on `total_gpus` GPUs, each job holding
    its GPUs for `remaining(job)` seconds, as far as the last job whose id is in `admitted`
    (the jobs the matching may merge); every job past it counts as waiting."""
    start: dict[int, float] = {}
    iterations: dict[int, float] = {}
    free, now = total_gpus, 0.0
    ends: list[tuple[float, int]] = []
    seen = []  # (job id, waiting jobs among those scheduled so far, itself included)
    waiting = 0
    left = len(admitted)
    for job in queue:
        if not left:
            break
        job_id, gpus = job.id, job.num_gpu
        left_s = max(remaining(job), 0.0)
        if job_id in admitted:
            left -= 1
        if gpus > total_gpus:
            at = float("inf")
        else:
            while free < gpus:
                now, back = heapq.heappop(ends)
                free += back
            at = now
            heapq.heappush(ends, (now + left_s, gpus))
            free -= gpus
        start[job_id] = at
        iterations[job_id] = left_s / job.solo_time if job.solo_time > 0 else 0.0
        if at > 0:
            waiting += 1
        seen.append((job_id, waiting))
    waiting_total = waiting + len(queue) - len(seen)
    behind = {job_id: waiting_total - upto for job_id, upto in seen}
    return Outlook(start, iterations, behind, total_gpus)


def packing_stats(packings: Sequence[Sequence[JobView]], tts: Sequence[float],
                  look: Outlook) -> np.ndarray:
    """Per packing: (tt, start, members, sum n, max n, behind, min n) as rows of an array."""
    rows = []
    start, iterations, behind = look.start, look.iterations, look.behind
    for members, tt in zip(packings, tts):
        if len(members) == 1:  # most candidates
            job_id = members[0].id
            n = iterations.get(job_id, 0.0)
            rows.append((tt, start.get(job_id, 0.0), 1, n, n, behind.get(job_id, 0), n))
            continue
        n = [iterations.get(j.id, 0.0) for j in members]
        rows.append((tt, min(start.get(j.id, 0.0) for j in members), len(members), sum(n),
                     max(n), min(behind.get(j.id, 0) for j in members), min(n)))
    return np.array(rows, dtype=float).reshape(-1, 7)


def gain_pays(stats: np.ndarray, rows: np.ndarray, cols: np.ndarray, tt_ab: np.ndarray,
              gpus: int, total_gpus: int, gain: float) -> np.ndarray:
    """Whether merging packing rows[k] with cols[k] into a group of iteration time tt_ab[k]
    adds at least `gain` of their work per second (the gain rule; only the packings'
    iteration times, column 0 of packing_stats, are read)."""
    tt = stats[:, 0]
    return (tt[rows] + tt[cols] - tt_ab) / tt_ab >= gain


def merge_pays(stats: np.ndarray, rows: np.ndarray, cols: np.ndarray, tt_ab: np.ndarray,
               gpus: int, total_gpus: int) -> np.ndarray:
    """Whether merging packing rows[k] with cols[k] (rows of packing_stats' `stats`) into a
    group of iteration time tt_ab[k] shortens the expected completions (the module's
    delta < 0). Each column is gathered on its own: a window weighs thousands of merges
    every round, and gathering whole rows, then reading their columns, cost three times
    as much."""
    tt, start, count, _, _, behind, least = np.ascontiguousarray(stats.T)
    tt_a, tt_b = tt[rows], tt[cols]
    w_a, w_b = start[rows], start[cols]
    life = tt_ab * np.minimum(least[rows], least[cols])  # until the first member ends
    later = np.where(w_b >= w_a, count[cols], count[rows])
    waited = np.abs(w_b - w_a)
    waited = np.where(np.isfinite(waited), waited, 0.0)
    lost = life * (count[rows] * (1.0 - tt_a / tt_ab) + count[cols] * (1.0 - tt_b / tt_ab))
    saved = life * (tt_a + tt_b - tt_ab) / tt_ab
    queue = np.minimum(behind[rows], behind[cols]) * gpus / total_gpus
    delta = lost - later * waited - queue * saved
    return delta < 0
