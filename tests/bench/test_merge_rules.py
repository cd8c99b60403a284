"""bench/merge_rules.py: each alternative rule decides as its description says (figures
worked by hand), and the runner compares every rule against the base policies."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import merge_rules  # noqa: E402


def stats(tt, start, n, behind):
    """One packing of one job: packing_stats' row (tt, start, members, sum n, max n, behind)."""
    return np.array([[tt, start, 1, n, n, behind]], dtype=float)


def test_the_fairness_guard_caps_the_first_packing_s_slowdown():
    first, later = stats(1.0, 0.0, 100, 5), stats(2.0, 50.0, 100, 5)
    assert merge_rules.fairness_guard(first, later, np.array([1.25]), 1, 8)[0]
    assert not merge_rules.fairness_guard(first, later, np.array([1.3]), 1, 8)[0]
    # the guard is on the earlier start, whichever side it is on
    assert merge_rules.fairness_guard(later, first, np.array([1.25]), 1, 8)[0]


def test_queued_with_long_takes_a_waiting_job_beside_a_longer_running_one():
    running_long = stats(1.0, 0.0, 1000, 3)  # 1,000 s left
    waiting_short = stats(1.0, 30.0, 400, 3)  # 400 s left: 2.5x shorter
    waiting_long = stats(1.0, 30.0, 600, 3)  # 600 s left: under 2x shorter
    assert merge_rules.queued_with_long(running_long, waiting_short, np.array([1.5]), 1, 8)[0]
    assert merge_rules.queued_with_long(waiting_short, running_long, np.array([1.5]), 1, 8)[0]
    assert not merge_rules.queued_with_long(running_long, waiting_long, np.array([1.5]), 1, 8)[0]
    both_run = stats(1.0, 0.0, 10, 3)
    assert not merge_rules.queued_with_long(running_long, both_run, np.array([1.5]), 1, 8)[0]


def test_load_adaptive_merges_only_with_a_cluster_s_worth_waiting_behind():
    a, b = stats(1.0, 0.0, 10, 4), stats(1.0, 5.0, 10, 8)
    assert merge_rules.load_adaptive(a, b, np.array([9.0]), 2, 8)[0]  # 4 jobs x 2 GPUs
    assert not merge_rules.load_adaptive(a, b, np.array([9.0]), 1, 8)[0]  # 4 x 1 < 8


def test_every_rule_runs_against_the_base_policies(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    assert merge_rules.main(["--families", "generated", "--jobs", "40", "--workers", "1",
                             "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 * (2 + 2 * len(merge_rules.RULES))
    assert all(r["avg_jct"] > 0 for r in rows)
    text = capsys.readouterr().out
    assert "worst average, muri-s" in text and "fairness guard" in text
