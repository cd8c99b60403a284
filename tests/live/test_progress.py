"""ProgressGuard, the rule every progress claim passes before the scheduler believes it."""
from __future__ import annotations

import math

from scheduler.live.progress import FACTOR, SLACK_S, ProgressGuard


class Log:
    def __init__(self):
        self.said = []

    def warning(self, event, **fields):
        self.said.append((event, fields))


def _guard(pace=0.5):
    now = [100.0]
    log = Log()
    return ProgressGuard(log, lambda: now[0], lambda job: pace), now, log


def test_a_claim_must_be_finite_within_the_total_and_not_behind():
    guard, now, log = _guard()
    guard.good(1, 706.0)
    for bad in (math.inf, math.nan, -1.0, 5001.0, 700.0, "706", True):
        assert guard.judge(1, bad, 5000.0, "test") == 706.0
    assert [f["claimed"] for _, f in log.said] == \
        ["inf", "nan", "-1.0", "5001.0", "700.0", "'706'", "True"]
    assert guard.judge(1, 706.0, 5000.0, "test") == 706.0 and len(log.said) == 7


def test_a_jump_is_bounded_by_the_time_since_the_last_good_count():
    guard, now, log = _guard(pace=0.5)
    guard.good(1, 706.0)
    now[0] += 100.0  # trace seconds: 200 iterations at the pace
    most = 706.0 + FACTOR * (100.0 + SLACK_S) / 0.5 + 1
    assert guard.judge(1, most - 1, 5000.0, "test") == most - 1
    guard.good(1, 706.0)  # the same count again: its first time stands
    assert guard.judge(1, 4990.0, 5000.0, "stop") == 706.0
    assert "ahead of the last good count 706" in log.said[-1][1]["reason"]
    guard.judge(1, 4990.0, 5000.0, "stop")  # logged once per claim
    assert len(log.said) == 1


def test_an_unpaced_claim_ahead_needs_evidence():
    guard, now, log = _guard(pace=None)
    guard.good(1, 10.0)
    seen = {(1, 20.0)}
    has = lambda job, its: (job, its) in seen  # noqa: E731
    assert guard.judge(1, 20.0, 100.0, "test", has) == 20.0
    assert guard.judge(1, 90.0, 100.0, "test", has) == 10.0
    assert log.said[-1][1]["reason"] == \
        "no trainer of the job logged that checkpoint in its ledger"
