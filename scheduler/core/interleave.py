"""Group iteration time (TT) of interleaved jobs: the two models of DESIGN.md section 1.

A *profile* is a tuple of per-stage seconds of one job running alone. Its length picks the
model:

* 3 values ``(data, gpu, net)``: the testbed pipeline, three stages in ``k = 4`` slots, the
  data stage (asynchronous prefetch) may span two slots.  TT comes from unrolling the
  pipeline recurrence until the period is steady.
* any other length ``L`` (normally 4: ``(io, cpu, gpu, net)``): the cyclic model with
  ``k = L`` slots, ``TT(p) = sum_s max_i t[p_i][(s - i) mod k]``.

An *order* is a tuple of member profiles in slot order.  For the pipeline model with two
members there is one more layout, "member 0, empty slot, member 1", written
``(p0, None, p1)``.

Stage times are taken to be finite and non-negative; nothing here checks that, because these
functions sit in the innermost loop of the simulator.

Everything is pure.  The speed comes from straight-line kernels (interleave_kernels.py): the
readable reference loops here (``_cyclic_tt_reference``, ``_pipeline_tt_reference``, over the
step tables) unrolled by hand; the tests hold both to the same bits.  ``best_order`` and
``worst_order`` sit behind bounded LRU caches keyed by the profile values, since a simulation
re-evaluates the same groups round after round.
"""

from __future__ import annotations

import itertools
from functools import lru_cache, partial
from typing import Callable, Optional, Sequence

import numpy as np

import scheduler.core.interleave_kernels as kernels
from scheduler.core.interleave_kernels import STEADY_REL_TOL

Profile = tuple  # tuple[float, ...]
Order = tuple  # tuple[Optional[Profile], ...]

#: Profiles of this length use the pipeline model.
PIPELINE_STAGES = 3
#: Slots of the pipeline model's cycle.
PIPELINE_SLOTS = 4
#: Bound of the best-order cache (entries); a few tens of MB at most.
BEST_CACHE_SIZE = 1 << 16
WORST_CACHE_SIZE = 1 << 12

_DATA, _GPU, _NET = 0, 1, 2


def slots(profile_len: int) -> int:
    """Cycle length k: the pipeline fits 3 stages in 4 slots, the cyclic model one per stage."""
    if profile_len < 1:
        raise ValueError("a profile needs at least one stage")
    return PIPELINE_SLOTS if profile_len == PIPELINE_STAGES else profile_len


# --------------------------------------------------------------------------------------------
# Step tables: the single description of both models, shared by the reference loops and the
# batch computation (the kernels unroll them by hand).


def _cyclic_slot_table(k: int, m: int) -> tuple:
    """For slot s, the (member, stage) pairs that run in it."""
    return tuple(tuple((i, (s - i) % k) for i in range(m)) for s in range(k))


def _pipeline_step_table(m: int) -> tuple:
    """For step i of the unrolling, the candidates (lag, member, stage) of f[i+1] = f[i-lag] + t.

    Step i finishes the net stage of the member in slot i+1, the gpu stage of slot i+2 and the
    data stage of slot i+3, which began a step earlier (hence lag 1).
    """
    steps = []
    for i in range(2 * PIPELINE_SLOTS):
        cands = []
        for lag, shift, stage in ((0, 1, _NET), (0, 2, _GPU), (1, 3, _DATA)):
            member = (i + shift) % PIPELINE_SLOTS
            if member < m and i >= lag:
                cands.append((lag, member, stage))
        steps.append(tuple(cands))
    return tuple(steps)


def _isclose(a: float, b: float) -> bool:
    """math.isclose(a, b, rel_tol=STEADY_REL_TOL) for finite values, spelled out so the kernels
    can inline the very same comparisons."""
    diff = abs(b - a)
    return a == b or diff <= abs(STEADY_REL_TOL * b) or diff <= abs(STEADY_REL_TOL * a)


# --------------------------------------------------------------------------------------------
# Reference loops: the models as DESIGN.md states them, kept for reading and for the tests.


def _cyclic_tt_reference(order: Sequence[Profile]) -> float:
    k = len(order[0])
    tt = 0.0
    for slot in _cyclic_slot_table(k, len(order)):
        longest = 0.0
        for member, stage in slot:
            longest = max(longest, order[member][stage])
        tt += longest
    return tt


def _pipeline_tt_reference(order: Sequence[Optional[Profile]]) -> float:
    if len(order) == 3 and order[1] is None:
        return _two_member_gap_tt(order[0], order[2])
    m = len(order)
    if m == 1:
        return sum(order[0])
    f = [0.0] * (2 * PIPELINE_SLOTS + 1)
    for i, cands in enumerate(_pipeline_step_table(m)):
        best = 0.0
        for lag, member, stage in cands:
            best = max(best, f[i - lag] + order[member][stage])
        f[i + 1] = best
        if i >= PIPELINE_SLOTS:
            period = f[i + 1] - f[i - 3]
            if period > 0.0 and _isclose(period, f[i] - f[i - 4]):
                return period
    return f[2 * PIPELINE_SLOTS] - f[PIPELINE_SLOTS]


def _two_member_gap_tt(p0: Profile, p1: Profile) -> float:
    """'member 0, empty slot, member 1': each data stage hides behind the other's gpu+net."""
    return max(p0[_DATA], p1[_GPU] + p1[_NET]) + max(p1[_DATA], p0[_GPU] + p0[_NET])


# --------------------------------------------------------------------------------------------
# The kernels (interleave_kernels.py) by shape.

_CYCLIC, _PIPELINE = "cyclic", "pipeline"


@lru_cache(maxsize=64)
def _kernel(model: str, profile_len: int, m: int) -> Callable[..., float]:
    """TT of one order of m members: kernel(p0, ..., p_{m-1})."""
    if model == _PIPELINE:
        return kernels.PIPELINE[m - 1]
    if profile_len == 4:
        return kernels.CYCLIC4[m - 1]
    return kernels.cyclic_loop(_cyclic_slot_table(profile_len, m), profile_len)


@lru_cache(maxsize=64)
def _orders(profile_len: int, m: int) -> Callable[..., list]:
    """orders(p0, ..., p_{m-1}) -> the TT of every order of the m members, in
    itertools.permutations order."""
    kernel = _kernel(_model(profile_len), profile_len, m)
    if m <= len(kernels.ORDERS):
        return partial(kernels.ORDERS[m - 1], kernel)
    return partial(kernels.orders_loop, _permutations(m), kernel)


@lru_cache(maxsize=8)
def _permutations(m: int) -> tuple:
    return tuple(itertools.permutations(range(m)))


def _model(profile_len: int) -> str:
    return _PIPELINE if profile_len == PIPELINE_STAGES else _CYCLIC


# --------------------------------------------------------------------------------------------
# Public API


def _check_group(profiles: Sequence[Profile]) -> int:
    """Profile length of a group, raising the message a caller's mistake deserves."""
    if not profiles:
        raise ValueError("a group needs at least one member")
    if any(p is None for p in profiles):
        raise ValueError(f"an empty slot is only valid as (p0, None, p1): {profiles!r}")
    length = len(profiles[0])
    if length < 1 or any(len(p) != length for p in profiles):
        raise ValueError(f"members need non-empty profiles of one length: {profiles!r}")
    if len(profiles) > slots(length):
        raise ValueError(f"{len(profiles)} members do not fit in {slots(length)} slots")
    return length


def cyclic_tt(order: Sequence[Profile]) -> float:
    """Cyclic-model TT with k = profile length (3-stage profiles too, if asked for directly)."""
    try:
        k, m = len(order[0]), len(order)
        if m <= k:
            return _kernel(_CYCLIC, k, m)(*order)
    except (ValueError, TypeError, IndexError):
        _check_group(order)  # names the malformed group, if that is what went wrong
        raise
    raise ValueError(f"{m} members do not fit in {k} cyclic slots")


def pipeline_tt(order: Sequence[Optional[Profile]]) -> float:
    """Testbed-pipeline TT: the steady period of the unrolled recurrence (DESIGN.md 1).

    The period is the first f[i+1] - f[i-3] (i >= 4) within STEADY_REL_TOL of the one before,
    else f[8] - f[4].  ``(p0, None, p1)`` is the two-member layout with an empty slot.  A job
    alone takes the sum of its stages.  A zero period never counts as steady, so an all-zero
    group gets 0.0 (the published artifact fails an assertion there); otherwise the numbers are
    the artifact's, bit for bit.
    """
    m = len(order)
    if m == 3 and order[1] is None and order[0] is not None and order[2] is not None:
        return _two_member_gap_tt(order[0], order[2])
    if not 0 < m <= PIPELINE_SLOTS:
        raise ValueError(f"{m} members do not fit in {PIPELINE_SLOTS} slots")
    try:
        return _kernel(_PIPELINE, PIPELINE_STAGES, m)(*order)
    except (ValueError, TypeError):
        if _check_group(order) != PIPELINE_STAGES:
            raise ValueError(f"the pipeline model takes 3-stage profiles: {order!r}") from None
        raise


def group_tt(order: Sequence[Optional[Profile]]) -> float:
    """TT of an order under the model its profiles call for."""
    for p in order:
        if p is not None:
            return pipeline_tt(order) if len(p) == PIPELINE_STAGES else cyclic_tt(order)
    raise ValueError("an order needs at least one member")


@lru_cache(maxsize=BEST_CACHE_SIZE)
def best_order_indices(profiles: tuple) -> tuple:
    """(min TT, member indices in slot order, None for the empty slot), cached by value.

    Ties keep the first order in itertools.permutations order; the two-member empty-slot
    layout wins only when strictly faster.
    """
    return _extreme(profiles, worst=False)


@lru_cache(maxsize=WORST_CACHE_SIZE)
def worst_order_indices(profiles: tuple) -> tuple:
    """(max TT, member indices in slot order), cached by value; the 'worst ordering' ablation."""
    return _extreme(profiles, worst=True)


def _extreme(profiles: tuple, worst: bool) -> tuple:
    length = _check_group(profiles)
    m = len(profiles)
    tts = _orders(length, m)(*profiles)
    tt = max(tts) if worst else min(tts)  # the first extreme, as index finds it
    indices = _permutations(m)[tts.index(tt)]
    if m == 2 and length == PIPELINE_STAGES:
        gap = _two_member_gap_tt(profiles[0], profiles[1])
        if (gap > tt) if worst else (gap < tt):
            tt, indices = gap, (0, None, 1)
    return tt, indices


def best_tt_batch(profiles: np.ndarray, exact: bool = False) -> np.ndarray:
    """Smallest TT of many groups of one shape at once: ``profiles[group, member, stage]``.

    The very float operations of the scalar kernels, in the same order, on arrays: each value
    equals ``best_tt`` of that group bit for bit, except for full groups of the cyclic model
    (as many members as slots), whose rotations are one order: only orders starting with
    member 0 are tried, a quarter of the work, and the result may differ from ``best_tt`` in
    the last bit. (The pipeline model's transient makes rotations differ; all are tried.) A big
    round weighs tens of thousands of candidate pairs; one call here replaces as many
    interpreted kernel calls. With `exact`, full groups try every rotation too (four times
    their work), and every value equals ``best_tt`` bit for bit.
    """
    profiles = np.asarray(profiles, dtype=float)
    if profiles.ndim != 3 or profiles.shape[1] < 1:
        raise ValueError(f"profiles must be shaped (groups, members, stages), got {profiles.shape}")
    m, length = profiles.shape[1], profiles.shape[2]
    if m > slots(length):
        raise ValueError(f"{m} members do not fit in {slots(length)} slots")
    members = [profiles[:, i, :] for i in range(m)]
    pipeline = _model(length) == _PIPELINE
    if m == 1:
        p = members[0]
        total = p[:, 0]
        for r in range(1, length):
            total = total + p[:, r]
        return total
    tt = None
    full = m == slots(length) and not pipeline and not exact
    for perm in _permutations(m):
        if full and perm[0] != 0:
            continue  # a rotation of an order already tried
        order = [members[i] for i in perm]
        value = _pipeline_batch(order) if pipeline else _cyclic_batch(order)
        tt = value if tt is None else np.minimum(tt, value)
    if m == 2 and pipeline:
        p0, p1 = members
        gap = (np.maximum(p0[:, _DATA], p1[:, _GPU] + p1[:, _NET])
               + np.maximum(p1[:, _DATA], p0[:, _GPU] + p0[:, _NET]))
        tt = np.minimum(tt, gap)
    return tt


def _cyclic_batch(order: list) -> np.ndarray:
    total = None
    for slot in _cyclic_slot_table(order[0].shape[1], len(order)):
        longest = None
        for member, stage in slot:
            t = order[member][:, stage]
            longest = t if longest is None else np.maximum(longest, t)
        total = longest if total is None else total + longest
    return total


def _pipeline_batch(order: list) -> np.ndarray:
    f = [np.zeros(len(order[0]))]
    period = np.zeros(len(order[0]))
    steady = np.zeros(len(order[0]), dtype=bool)
    for i, cands in enumerate(_pipeline_step_table(len(order))):
        best = None
        for lag, member, stage in cands:
            v = f[i - lag] + order[member][:, stage]
            best = v if best is None else np.maximum(best, v)
        f.append(best)
        if i >= PIPELINE_SLOTS:
            a, b = f[i + 1] - f[i - 3], f[i] - f[i - 4]
            diff = np.abs(b - a)
            now = ((a > 0.0) & ((a == b) | (diff <= np.abs(STEADY_REL_TOL * b))
                                | (diff <= np.abs(STEADY_REL_TOL * a))) & ~steady)
            period[now] = a[now]
            steady |= now
    late = ~steady
    period[late] = (f[2 * PIPELINE_SLOTS] - f[PIPELINE_SLOTS])[late]
    return period


def best_tt(profiles: tuple) -> float:
    """Smallest TT of a group given as a hashable tuple of profiles (served from the cache)."""
    return best_order_indices(profiles)[0]


best_tt.cache_info = best_order_indices.cache_info  # type: ignore[attr-defined]
best_tt.cache_clear = best_order_indices.cache_clear  # type: ignore[attr-defined]


def _with_profiles(profiles: Sequence[Profile], indices: tuple) -> Order:
    """The order as the caller's own profile objects (the cache may hold equal copies)."""
    return tuple(None if i is None else profiles[i] for i in indices)


def _hashable(profiles: Sequence[Profile]) -> tuple:
    key = tuple(profiles)
    try:
        hash(key)
    except TypeError:  # lists as profiles: cache by their values
        key = tuple(tuple(p) for p in profiles)
    return key


def best_order(profiles: Sequence[Profile]) -> tuple:
    """(min TT, order) over every slot order of the group (and the empty-slot layout)."""
    tt, indices = best_order_indices(_hashable(profiles))
    return tt, _with_profiles(profiles, indices)


def worst_order(profiles: Sequence[Profile]) -> tuple:
    """(max TT, order) over every slot order (and the empty-slot layout if strictly slower)."""
    tt, indices = worst_order_indices(_hashable(profiles))
    return tt, _with_profiles(profiles, indices)


def fixed_order_indices(profiles: Sequence[Profile]) -> tuple:
    """(TT, member indices in slot order) of the members in the order given, with the
    empty-slot layout where it is strictly faster, as best_order_indices would lay them out."""
    indices: tuple = tuple(range(len(profiles)))
    tt = group_tt(tuple(profiles))
    if len(profiles) == 2 and len(profiles[0]) == PIPELINE_STAGES:
        gap = _two_member_gap_tt(profiles[0], profiles[1])
        if gap < tt:
            tt, indices = gap, (0, None, 1)
    return tt, indices


def identity_order_tt(profiles: Sequence[Profile]) -> float:
    """TT in the order given, for the 'no ordering' ablation (never the empty-slot layout)."""
    return group_tt(tuple(profiles))


def efficiency(profiles: Sequence[Optional[Profile]], tt: float) -> float:
    """Share of the group's resource-time kept busy: sum of all stage times / (tt * k).

    0.0 for a group with tt <= 0 (all-zero profiles), so such a group never earns an edge.
    """
    members = [p for p in profiles if p is not None]
    if not members:
        raise ValueError("a group needs at least one member")
    if not tt > 0.0:
        return 0.0
    return sum(sum(p) for p in members) / (tt * slots(len(members[0])))
