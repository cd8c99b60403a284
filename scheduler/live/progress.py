"""Claims of a job's progress, judged before they are believed.

Why: a job's checkpoint record is a file on disk, and the iterations an agent reports are
read from it; edited, it moved a job from 706 iterations to 4990 of 5000 (and it finished
without training the rest), or to `Infinity`, journaled as finished at inf. So every count
that would become where a job resumes from (a checkpoint read at recovery or at a resume,
the iterations of a stop, a requeue or a failure report) is checked here against the last
count the scheduler settled itself: finite, not behind it, not past the job's total, and no
further ahead than the job could have run since, at the fastest pace it was launched with
in this run (an emulated trainer runs at the pace it is given) with a generous factor and
some slack. Where no pace bounds it (a restart, before any launch; a torch workload or a
user's command, which run at their own pace), a claim ahead of the last good count needs
evidence: a checkpoint record at that count in the trainers' ledgers (trainer/ledger.py:
appended before the progress record is written), where the run dir holds them. A refused
claim is logged once per job and claim, and the job resumes from the last good count: work
is done again rather than skipped. The trainer checks its own record the same way
(trainer/api.py).
"""
from __future__ import annotations

import math
from typing import Any, Callable

FACTOR = 2.0  # times the iterations the elapsed time allows at the profiled pace
SLACK_S = 60.0  # trace seconds of work allowed on top (clock steps, a round's lag)
TOLERANCE = 1e-6  # relative: float noise at the total


class ProgressGuard:
    """The last good count of each job, with the trace time it was good at, and the rule a
    new claim must pass. `now`: the trace clock; `pace_of(job)`: the job's trace seconds
    per iteration, or None when the scheduler does not know its pace."""

    def __init__(self, log: Any, now: Callable[[], float],
                 pace_of: Callable[[int], float | None]):
        self.log, self.now, self.pace_of = log, now, pace_of
        self._good: dict[int, tuple[float, float]] = {}  # job -> (iterations, trace time)
        self._said: set[tuple[int, str]] = set()  # (job, claim) already logged

    def good(self, job_id: int, iterations: float, at: float | None = None) -> None:
        """A count the scheduler settled (journaled) at trace time `at` (default now). The
        same count again keeps its first time: the job may have run on since then (a
        requeue at a restart settles the count its trainers had long ago)."""
        at = self.now() if at is None else float(at)
        before = self._good.get(job_id)
        if before is not None and before[0] == float(iterations):
            at = min(at, before[1])
        self._good[job_id] = (float(iterations), at)

    def forget(self, job_id: int) -> None:
        self._good.pop(job_id, None)
        self._said = {s for s in self._said if s[0] != job_id}

    def last_good(self, job_id: int) -> float:
        return self._good.get(job_id, (0.0, 0.0))[0]

    def problem(self, job_id: int, claimed: Any, total: float) -> str | None:
        """Why `claimed` cannot be where the job stands, or None."""
        if isinstance(claimed, bool) or not isinstance(claimed, (int, float)) \
                or not math.isfinite(claimed):
            return f"not a finite number ({claimed!r})"
        good, at = self._good.get(job_id, (0.0, None))
        if claimed < 0:
            return "negative"
        if claimed > total * (1 + TOLERANCE):
            return f"past the job's total of {total:g}"
        if claimed < good * (1 - TOLERANCE):
            return f"behind the last good count {good:g}"
        pace = self.pace_of(job_id)
        if at is None or pace is None or not pace > 0:
            return None
        elapsed = max(0.0, self.now() - at)
        most = good + FACTOR * (elapsed + SLACK_S) / pace + 1
        if claimed > most:
            return (f"{claimed - good:g} iterations ahead of the last good count {good:g} in "
                    f"{elapsed:.0f} trace s; at most {most - good:.0f} could be done")
        return None

    def judge(self, job_id: int, claimed: Any, total: float, source: str,
              evidence: Callable[[int, float], bool] | None = None) -> float:
        """`claimed` where it passes, else the last good count (logged once per claim).
        `evidence(job, claim)`: whether a trainer's ledger shows that checkpoint, asked of
        a claim ahead of the last good count where the pace cannot bound it."""
        why = self.problem(job_id, claimed, total)
        if why is None and evidence is not None and claimed > self.last_good(job_id) \
                and not evidence(job_id, float(claimed)):
            why = "no trainer of the job logged that checkpoint in its ledger"
        if why is None:
            return float(claimed)
        good = self.last_good(job_id)
        key = (job_id, repr(claimed))
        if key not in self._said:
            self._said.add(key)
            self.log.warning("checkpoint_refused", job_id=job_id, claimed=repr(claimed),
                             source=source, reason=why, resumes_from=good)
        return good
