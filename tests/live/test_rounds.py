"""When the live scheduler's next round is due: arrivals alone wait as long as the last
round's planning took, so that a flood of submissions does not keep the state's lock in
planning (the throughput this buys is measured by bench/bench_scale.py)."""
from __future__ import annotations

from scheduler.live.rounds import Rounds


def rounds_after(planning: float, ended: float) -> Rounds:
    rounds = Rounds()
    rounds.planning, rounds.last = planning, ended
    return rounds


def test_an_arrival_waits_as_long_as_the_last_planning_took():
    rounds = rounds_after(planning=0.4, ended=10.0)
    rounds.wake("arrival")
    assert not rounds.due(10.2, 0.0, round_s=60.0)
    assert not rounds.due(10.39, 0.0, round_s=60.0)
    assert rounds.due(10.4, 0.0, round_s=60.0)


def test_any_other_reason_runs_the_round_at_once():
    for reason in ("completion", "agent", "profile", "cancel"):
        rounds = rounds_after(planning=0.4, ended=10.0)
        rounds.wake("arrival")
        rounds.wake(reason)
        assert rounds.due(10.01, 0.0, round_s=60.0), reason


def test_a_quick_planner_takes_arrivals_at_once_and_the_period_and_wakeup_still_hold():
    rounds = rounds_after(planning=0.002, ended=10.0)
    rounds.wake("arrival")
    assert rounds.due(10.002, 0.0, round_s=60.0)
    idle = rounds_after(planning=0.4, ended=10.0)
    assert not idle.due(10.1, 0.0, round_s=60.0)
    assert idle.due(70.0, 0.0, round_s=60.0)
    idle.wakeup = 5.0
    assert idle.due(10.1, 5.0, round_s=60.0)


def test_with_a_period_an_event_waits_for_the_next_multiple_and_quiet_periods_plan_nothing():
    rounds = Rounds()
    assert not rounds.due(0.0, 10.0, round_s=5.0, period=360.0)  # nothing asked: no round
    assert not rounds.due(100.0, 700.0, round_s=5.0, period=360.0)  # not even after round_s
    rounds.wake("arrival")
    assert not rounds.due(100.1, 700.0, round_s=5.0, period=360.0)  # asked at 700 s
    assert not rounds.due(100.2, 719.9, round_s=5.0, period=360.0)
    assert rounds.due(100.3, 720.0, round_s=5.0, period=360.0)  # the next multiple
    assert rounds.take_reasons() == ["arrival"]
    rounds.wake("finished")  # asked again within the same period: waits for 1,080 s
    assert not rounds.due(100.4, 725.0, round_s=5.0, period=360.0)
    assert rounds.due(100.5, 1080.0, round_s=5.0, period=360.0)
