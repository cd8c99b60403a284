"""The artifact's finish-time-fairness program in ECOS's standard form, built directly.

The artifact states Themis's program in cvxpy and solves it with ECOS (an interior-point
method). The program often has many optima, and ECOS returns one particular optimum; to
replay the artifact the same optimum is needed, hence the same ECOS call on the same data.
cvxpy re-canonicalises an n-term expression tree at every scheduling event, which costs far
more than the solve, so this module writes the matrices cvxpy would produce (same rows,
columns, sparse structure and float arithmetic; tests/core/test_themis_ecos.py checks them and the
solution bit for bit against cvxpy) and calls ECOS itself.

The program, per job i (the artifact's own terms): minimise t subject to
    (age_i + remaining_i * inv_i) / isolated_i <= t,   inv_i >= 1 / (tput_i * x_i),
    0 <= x <= 1,   sum_i gpus_i * x_i <= capacity.
`inv_i >= 1/(tput_i x_i)` is the second-order cone (tput_i x_i + inv_i, tput_i x_i - inv_i, 2).
With one job there is no epigraph variable t: the objective is the job's ratio itself.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse


class EcosFailed(RuntimeError):
    """ECOS ended without a solution (cvxpy raises SolverError in the same cases)."""


# ECOS exit flags for which cvxpy 1.9 hands back x (optimal, optimal to reduced accuracy, and
# the iteration limit: its "user_limit" counts as a solution present). Its other flags make
# cvxpy raise SolverError (numerics) or leave no x (infeasible; the artifact would crash).
SOLVED_FLAGS = (0, 10, -1)


def ecos_form(age, remaining, tput, isolated, gpus, capacity: float):
    """(c, G, h, dims) exactly as cvxpy 1.9's `get_problem_data(cp.ECOS)` states the
    artifact's program; and the column where x starts in the solution vector."""
    age, remaining, tput, isolated, gpus = (np.asarray(v, dtype=float) for v in (
        age, remaining, tput, isolated, gpus))
    n = len(age)
    # cvxpy divides by a constant as a product with its reciprocal (not the same last bit)
    scale = 1.0 / isolated
    weight = remaining * scale  # inv_i's coefficient in job i's ratio
    j = np.arange(n)
    if n == 1:
        # columns: inv, x.  rows: -x <= 0, x <= 1, gpus x <= capacity, the cone (3 rows)
        data = np.array([-1.0, 1.0, -1.0, 1.0, gpus[0], -tput[0], -tput[0]])
        indices = np.array([3, 4, 0, 1, 2, 3, 4], dtype=np.int32)
        indptr = np.array([0, 2, 7], dtype=np.int32)
        G = sparse.csc_matrix((data, indices, indptr), shape=(6, 2))
        c = np.array([weight[0], 0.0])
        h = np.array([0.0, 1.0, float(capacity), 0.0, 0.0, 2.0])
        return c, G, h, {"l": 3, "q": [3], "e": 0}, 1
    # columns: t, x_0..x_{n-1}, inv_0..inv_{n-1}
    # rows: n epigraph rows, n rows -x <= 0, n rows x <= 1, the capacity row, n cones of 3
    cone = 3 * n + 1 + 3 * j
    t_col = (np.full(n, -1.0), j)
    x_data = np.stack([np.full(n, -1.0), np.ones(n), gpus, -tput, -tput], axis=1)
    x_rows = np.stack([n + j, 2 * n + j, np.full(n, 3 * n), cone, cone + 1], axis=1)
    inv_data = np.stack([weight, np.full(n, -1.0), np.ones(n)], axis=1)
    inv_rows = np.stack([j, cone, cone + 1], axis=1)
    data = np.concatenate([t_col[0], x_data.ravel(), inv_data.ravel()])
    indices = np.concatenate([t_col[1], x_rows.ravel(), inv_rows.ravel()]).astype(np.int32)
    indptr = np.concatenate([[0, n], n + 5 * (j + 1), 6 * n + 3 * (j + 1)]).astype(np.int32)
    G = sparse.csc_matrix((data, indices, indptr), shape=(6 * n + 1, 2 * n + 1))
    G.eliminate_zeros()  # a job with no remaining iterations: cvxpy stores no coefficient
    c = np.zeros(2 * n + 1)
    c[0] = 1.0
    h = np.zeros(6 * n + 1)
    h[:n] = 0.0 - age * scale  # +0.0 for a job of age 0, as cvxpy (not -0.0)
    h[2 * n:3 * n] = 1.0
    h[3 * n] = float(capacity)
    h[3 * n + 3::3] = 2.0
    return c, G, h, {"l": 3 * n + 1, "q": [3] * n, "e": 0}, 1


def artifact_problem(age, remaining, tput, isolated, gpus, capacity: float):
    """(problem, x): the program in cvxpy, stated term by term as the artifact states it.

    The tests' oracle for `ecos_form`, and the SCS fallback's program."""
    import cvxpy as cp

    n = len(age)
    x = cp.Variable(n)
    ratios = [(float(age[i]) + (float(remaining[i]) * cp.inv_pos(float(tput[i]) * x[i])))
              / float(isolated[i]) for i in range(n)]
    objective = cp.Minimize(ratios[0] if n == 1 else cp.maximum(*ratios))
    constraints = [x >= 0, x <= 1, cp.sum(cp.multiply(np.asarray(gpus, dtype=float), x),
                                          axis=0) <= capacity]
    return cp.Problem(objective, constraints), x


def ftf_allocation_ecos(age, remaining, tput, isolated, gpus, capacity: float) -> np.ndarray:
    """x as the artifact's `cvxprob.solve(solver='ECOS')` leaves it in `x.value`.

    Raises EcosFailed where cvxpy would raise SolverError (the artifact then tries SCS)."""
    import ecos

    c, G, h, dims, start = ecos_form(age, remaining, tput, isolated, gpus, capacity)
    solution = ecos.solve(c, G, h, dims, verbose=False)
    if solution["info"]["exitFlag"] not in SOLVED_FLAGS:
        raise EcosFailed(f"ECOS exit flag {solution['info']['exitFlag']}")
    return np.array(solution["x"][start:start + len(c) // 2], dtype=float)


def ftf_allocation_artifact(age, remaining, tput, isolated, gpus,
                            capacity: float) -> np.ndarray:
    """The artifact's allocation with its fallbacks: ECOS; if ECOS fails, SCS on the same
    program (rare, so through cvxpy); if SCS fails as well, every job gets x = 1 (the
    artifact's "equal weight"). Where the artifact would crash (a solver leaving no x),
    equal weights too."""
    try:
        return ftf_allocation_ecos(age, remaining, tput, isolated, gpus, capacity)
    except EcosFailed:
        pass
    import cvxpy as cp

    problem, x = artifact_problem(age, remaining, tput, isolated, gpus, capacity)
    try:
        problem.solve(solver="SCS")
    except cp.error.SolverError:
        return np.ones(len(age))
    return np.ones(len(age)) if x.value is None else np.asarray(x.value, dtype=float)
