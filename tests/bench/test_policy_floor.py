"""bench/policy_floor.py: the policy-free run is the same simulation, with none of the
policy's work in it.

Why: the README's claim that no faster policy round can bring SRTF, SRSF or Tiresias to 20x
the artifact on trace1/trace4 rests on that floor; a replay that did other work, or left some
of the policy's in, would make it wrong.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import policy_floor  # noqa: E402

from scheduler.core.policies import priority, tiresias  # noqa: E402
from scheduler.core.policies.base import Policy  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import generate  # noqa: E402


@pytest.fixture(scope="module")
def case():
    spec = load_spec(spec_path("n8g8"))
    records = generate(120, seed=7, max_gpus=8, mean_interarrival=60.0)
    preset = get_preset("paper")
    # a backlog: the policies part ways (else any plans would replay any policy)
    assert simulate(records, spec, "srtf", preset).outcomes != \
        simulate(records, spec, "srsf", preset).outcomes
    return records, spec


@pytest.mark.parametrize("policy", ["srtf", "tiresias"])
def test_the_replay_is_the_same_run_and_calls_no_policy_code(case, policy, monkeypatch):
    records, spec = case
    preset = get_preset("paper")
    plain = simulate(records, spec, policy, preset)
    _, outcomes, plans = policy_floor.timed(records, spec, policy, preset)
    assert outcomes == plain.outcomes and len(plans) == plain.rounds
    calls = []
    for cls in (priority.PriorityPolicy, tiresias.Tiresias):
        for hook in ("plan", "on_submit", "on_finish", "on_changes", "on_change"):
            if hook in vars(cls):
                original = vars(cls)[hook]
                monkeypatch.setattr(cls, hook, lambda *a, _f=original, _h=hook, **k: (
                    calls.append(_h), _f(*a, **k))[1])
    _, replayed, _ = policy_floor.timed(records, spec, policy, preset, plans)
    assert replayed == plain.outcomes
    assert calls == []


def test_the_stand_in_does_nothing_in_its_hooks(monkeypatch):
    # the floor is the run without the policy's work: no hook of the stand-in does any
    calls = []
    monkeypatch.setattr(Policy, "on_change", lambda self, job: calls.append(job))
    for hook in ("on_change", "on_submit", "on_finish"):
        assert getattr(policy_floor.Recorded, hook) is getattr(Policy, hook)
    stand_in = policy_floor.Recorded(priority.fifo(get_preset("paper").model), [])
    stand_in.on_changes([object(), object()])
    assert calls == []


def test_plans_of_another_run_are_refused(case, monkeypatch):
    records, spec = case
    _, _, plans = policy_floor.timed(records, spec, "srtf", get_preset("paper"))
    real = policy_floor.timed
    # the floor of SRSF measured with SRTF's plans: another simulation, refused
    monkeypatch.setattr(policy_floor, "timed", lambda r, s, p, pre, given=None: real(
        r, s, p, pre, plans if given is not None else None))
    with pytest.raises(AssertionError, match="other outcomes"):
        policy_floor.floor(records, spec, "srsf")


def test_floor_reports_the_runs_rounds(case):
    records, spec = case
    row = policy_floor.floor(records, spec, "srsf")
    assert row["rounds"] == simulate(records, spec, "srsf", get_preset("paper")).rounds
    assert row["jobs"] == len(records)
    assert 0 < row["floor_cpu_s"] and 0 < row["full_cpu_s"]
