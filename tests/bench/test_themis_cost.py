"""bench/themis_cost.py: its accounting of a Themis `paper` run (ECOS's solves, the SCS
fallback, the rest) is complete and leaves the run as it was.

Why: the README's claim of where Themis's time goes, and so of what a faster Themis could
gain, rests on these figures.
"""
from __future__ import annotations

import sys
from pathlib import Path

import ecos
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import themis_cost  # noqa: E402

from scheduler.core.policies import themis  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from tests.core.test_themis_ecos import ECOS_FAILS  # noqa: E402
from traces import read_trace  # noqa: E402

DEMO = ROOT / "traces" / "data" / "demo.csv"


@pytest.fixture(scope="module")
def demo_small():
    """The demo trace's first 80 jobs: enough for queues of several jobs, quick under ECOS."""
    spec = load_spec(spec_path("n8g8"))
    return read_trace(str(DEMO), spec=spec)[:80], spec


def test_recording_leaves_the_run_as_it_was_and_counts_every_program(demo_small):
    records, spec = demo_small
    plain = simulate(records, spec, "themis", get_preset("paper"))
    solves, fallbacks, sizes = [], [], []
    solver = themis.SOLVERS["ecos"]

    def sized(age, *rest):
        sizes.append(len(age))
        return solver(age, *rest)

    themis.SOLVERS["ecos"] = sized
    try:
        with themis_cost.timed_solvers(solves, fallbacks):
            recorded = simulate(records, spec, "themis", get_preset("paper"))
    finally:
        themis.SOLVERS["ecos"] = solver
    assert recorded.summary.avg_jct == plain.summary.avg_jct
    assert recorded.summary.makespan == plain.summary.makespan
    # one ECOS program per allocation, of the queue's size
    assert [s[0] for s in solves] == sizes and len(sizes) > 10
    figures = themis_cost.summary(solves, fallbacks, total=100.0)
    assert figures["job_columns"] == sum(sizes)
    assert figures["ecos_cpu"] + figures["fallback_cpu"] + figures["rest_cpu"] == \
        pytest.approx(100.0)


def test_a_program_ecos_fails_on_is_counted_as_a_fallback():
    solves, fallbacks = [], []
    with themis_cost.timed_solvers(solves, fallbacks):
        x = themis.ftf_allocation_artifact(*ECOS_FAILS)
        themis.ftf_allocation_artifact([0.0, 5.0], [10.0, 20.0], [1.0, 2.0], [10.0, 15.0],
                                       [1, 1], 4)
    assert len(solves) == 2 and len(fallbacks) == 1 and fallbacks[0] > 0
    assert np.array_equal(x, themis.ftf_allocation_artifact(*ECOS_FAILS))


def test_the_solvers_are_restored_after_recording():
    solve, allocate = ecos.solve, themis.ftf_allocation_artifact
    with pytest.raises(RuntimeError):
        with themis_cost.timed_solvers([], []):
            assert ecos.solve is not solve
            raise RuntimeError
    assert ecos.solve is solve and themis.ftf_allocation_artifact is allocate
