"""The hand-built ECOS form of Themis's program is cvxpy's, bit for bit, and so is its answer.

cvxpy (with the artifact's formulation, `artifact_problem`) is the oracle: its
`get_problem_data(cp.ECOS)` must equal `ecos_form` in every float, row, column and sparse
index, and `x.value` after `solve(solver='ECOS')` must equal `ftf_allocation_ecos` bit for bit.
"""
from __future__ import annotations

import math
import warnings

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scheduler.core.policies.themis_ecos import (
    EcosFailed, artifact_problem, ecos_form, ftf_allocation_artifact, ftf_allocation_ecos)


def _bits(v) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(v, dtype=np.float64)).view(np.uint64)


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


@st.composite
def instances(draw, max_jobs=60):
    """Programs as the artifact states them at an event: ages (0 for a job that just
    arrived), remaining iterations, throughputs 1 / ((ms * 1.015) / 1000), isolated times
    from a 1/n share (often a full share), GPU counts; values drawn from small pools too, so
    that jobs tie."""
    n = draw(st.integers(1, max_jobs))
    capacity = draw(st.sampled_from([8, 16, 64]))
    share = math.ceil(capacity / n)
    pool = st.integers(0, 3)
    ages, remaining, tput, isolated, gpus = [], [], [], [], []
    for _ in range(n):
        tied = draw(st.booleans())
        age = 1000.0 * draw(pool) if tied else draw(st.one_of(
            st.just(0.0), st.floats(0, 1e7, allow_nan=False)))
        rem = (100.0 + draw(pool)) if tied else draw(st.floats(1, 1e7))
        ms = 50 if tied else draw(st.integers(1, 3000))
        g = draw(st.sampled_from([1, 2, 4, 8]))
        alloc = min(share / g, 1.0)
        done = 0.0 if tied else draw(st.floats(0, 1e7))
        ages.append(age)
        remaining.append(rem)
        tput.append(1 / ((ms * 1.015) / 1000))
        isolated.append(done + rem / alloc)
        gpus.append(g)
    return ages, remaining, tput, isolated, gpus, capacity


@settings(max_examples=60, deadline=None)
@given(instances())
def test_hand_built_form_equals_cvxpys_problem_data(inst):
    problem, _ = artifact_problem(*inst)
    data, _, _ = problem.get_problem_data(cp.ECOS)
    c, G, h, dims, _ = ecos_form(*inst)
    assert _same_bits(c, data["c"]) and _same_bits(h, data["h"])
    theirs = data["G"]
    assert G.shape == theirs.shape
    assert _same_bits(G.data, theirs.data)
    assert np.array_equal(G.indices, theirs.indices) and np.array_equal(G.indptr, theirs.indptr)
    assert data["A"] is None and data["b"] is None
    assert dims == {"l": data["dims"].nonneg, "q": list(data["dims"].soc),
                    "e": data["dims"].exp}


@settings(max_examples=60, deadline=None)
@given(instances())
def test_allocation_equals_cvxpy_with_ecos_bit_for_bit(inst):
    problem, x = artifact_problem(*inst)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "solution may be inaccurate": still the answer
            problem.solve(solver="ECOS")
    except cp.error.SolverError:
        with pytest.raises(EcosFailed):
            ftf_allocation_ecos(*inst)
        return
    assert _same_bits(ftf_allocation_ecos(*inst), x.value)


def test_a_job_with_nothing_left_has_no_stored_coefficient():
    """cvxpy stores no entry for a zero coefficient; the ECOS ordering sees the pattern."""
    inst = ([0.0, 5.0, 0.0], [0.0, 200.0, 90.0], [20.0, 10.0, 5.0], [80.0, 200.0, 50.0],
            [1, 2, 4], 8)
    problem, x = artifact_problem(*inst)
    data, _, _ = problem.get_problem_data(cp.ECOS)
    _, G, _, _, _ = ecos_form(*inst)
    assert G.nnz == data["G"].nnz == 6 * 3 + 3 - 1 + 2 * 3
    problem.solve(solver="ECOS")
    assert _same_bits(ftf_allocation_ecos(*inst), x.value)


# Found by sampling scales: ECOS stops on numerical trouble (exit flag -2), cvxpy raises;
# SCS then solves the first, and finds the second infeasible (it leaves no x).
ECOS_FAILS = ([17957952250.374413, 105847238272.9109, 27100584501.572292, 56631285083.71904],
              [0.0010105781275500565, 0.0036659208936867227, 0.0016998750189887342,
               0.004247536671046164],
              [8.07164890485145e-06, 8.82098262739505e-06, 6.93455675870228e-06,
               4.604642710252141e-06],
              [97034568.67715606, 201482738.31432053, 59812959.419916995, 210538482.94741568],
              [1, 1, 1, 1], 4)
BOTH_FAIL = ([27403378884.30436, 53580039321.97594], [1.1796832518602703e-09,
             1.584427754244142e-09], [7308234243.862095, 45567650593.6333],
             [1.7807882256244448e-05, 1.2091526639481871e-05], [1, 1], 4)
# ECOS reaches its iteration limit (exit flag -1): cvxpy still hands back x, as do we.
ECOS_ITERATION_LIMIT = ([2.1027116349304737], [0.0893833256930312], [2.1050305314413445e-06],
                        [3.0795722997462403e-07], [1], 4)


def test_where_ecos_fails_the_artifact_falls_back_to_scs():
    problem, x = artifact_problem(*ECOS_FAILS)
    with pytest.raises(cp.error.SolverError):
        problem.solve(solver="ECOS")
    with pytest.raises(EcosFailed):
        ftf_allocation_ecos(*ECOS_FAILS)
    problem.solve(solver="SCS")
    assert problem.status == cp.OPTIMAL
    assert _same_bits(ftf_allocation_artifact(*ECOS_FAILS), x.value)


def test_where_scs_fails_too_every_job_gets_an_equal_weight():
    """The artifact gives x = 1 to all when SCS raises; where SCS leaves no x (infeasible
    by its numerics) the artifact would crash on `x.value[i]`; we take equal weights too."""
    problem, x = artifact_problem(*BOTH_FAIL)
    with pytest.raises(EcosFailed):
        ftf_allocation_ecos(*BOTH_FAIL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem.solve(solver="SCS")
    assert x.value is None
    assert _same_bits(ftf_allocation_artifact(*BOTH_FAIL), [1.0, 1.0])


def test_an_iteration_limit_still_yields_ecos_answer():
    problem, x = artifact_problem(*ECOS_ITERATION_LIMIT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem.solve(solver="ECOS")
    assert problem.status == cp.USER_LIMIT
    assert _same_bits(ftf_allocation_ecos(*ECOS_ITERATION_LIMIT), x.value)
    assert _same_bits(ftf_allocation_artifact(*ECOS_ITERATION_LIMIT), x.value)
