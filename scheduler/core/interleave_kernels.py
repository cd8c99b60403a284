"""The TT kernels: interleave.py's two models unrolled by hand for the groups a simulation
weighs, so that one TT costs a few dozen float operations and no interpreter bookkeeping.

* `pipeline_1` .. `pipeline_4`: the testbed pipeline (3-stage profiles ``(d, g, n)``) of 1 to
  4 members. Alone, a job runs its stages back to back; otherwise f[i+1] is the largest
  candidate f[i - lag] + stage time of interleave's `_pipeline_step_table`, in that table's
  order, and from step 4 on the period f[i+1] - f[i-3] is returned once it is steady
  (interleave's `_isclose`, spelled out).
* `cyclic4_1` .. `cyclic4_4`: the cyclic model with 4 stages (4 slots) of 1 to 4 members:
  slot s holds member i's stage (s - i) mod 4 (interleave's `_cyclic_slot_table`).
* `cyclic_loop`: the cyclic model of any other shape, as a loop over the slot table (slower;
  profiles have 3 stages, the pipeline, or 4, unless a caller asks for another shape).
* `orders_1` .. `orders_4`: every order's TT, for the search over a group's orders.

Each kernel keeps the first of equal candidates (a later one replaces it only when strictly
larger) and adds left to right, as the reference loops do; tests/core/test_interleave.py holds
every kernel to their bits. A profile of the wrong length raises ValueError (it fails to
unpack), which interleave turns into the message a caller's mistake deserves.
"""
from __future__ import annotations

from typing import Callable, Sequence

#: Relative tolerance at which two successive pipeline periods count as steady.
STEADY_REL_TOL = 1e-3
REL = STEADY_REL_TOL


def pipeline_1(p0):
    d0, g0, n0 = p0
    return d0 + g0 + n0


def pipeline_2(p0, p1):
    d0, g0, n0 = p0
    d1, g1, n1 = p1
    f0 = 0.0
    f1 = f0 + n1
    f2 = f0 + d0
    f3 = f2 + g0
    v = f1 + d1
    if v > f3:
        f3 = v
    f4 = f3 + n0
    v = f3 + g1
    if v > f4:
        f4 = v
    f5 = f4 + n1
    a = f5 - f1
    b = f4 - f0
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f6 = f4 + d0
    a = f6 - f2
    b = f5 - f1
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f7 = f6 + g0
    v = f5 + d1
    if v > f7:
        f7 = v
    a = f7 - f3
    b = f6 - f2
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f8 = f7 + n0
    v = f7 + g1
    if v > f8:
        f8 = v
    a = f8 - f4
    b = f7 - f3
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    return f8 - f4


def pipeline_3(p0, p1, p2):
    d0, g0, n0 = p0
    d1, g1, n1 = p1
    d2, g2, n2 = p2
    f0 = 0.0
    f1 = f0 + n1
    v = f0 + g2
    if v > f1:
        f1 = v
    f2 = f1 + n2
    v = f0 + d0
    if v > f2:
        f2 = v
    f3 = f2 + g0
    v = f1 + d1
    if v > f3:
        f3 = v
    f4 = f3 + n0
    v = f3 + g1
    if v > f4:
        f4 = v
    v = f2 + d2
    if v > f4:
        f4 = v
    f5 = f4 + n1
    v = f4 + g2
    if v > f5:
        f5 = v
    a = f5 - f1
    b = f4 - f0
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f6 = f5 + n2
    v = f4 + d0
    if v > f6:
        f6 = v
    a = f6 - f2
    b = f5 - f1
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f7 = f6 + g0
    v = f5 + d1
    if v > f7:
        f7 = v
    a = f7 - f3
    b = f6 - f2
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f8 = f7 + n0
    v = f7 + g1
    if v > f8:
        f8 = v
    v = f6 + d2
    if v > f8:
        f8 = v
    a = f8 - f4
    b = f7 - f3
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    return f8 - f4


def pipeline_4(p0, p1, p2, p3):
    d0, g0, n0 = p0
    d1, g1, n1 = p1
    d2, g2, n2 = p2
    d3, g3, n3 = p3
    f0 = 0.0
    f1 = f0 + n1
    v = f0 + g2
    if v > f1:
        f1 = v
    f2 = f1 + n2
    v = f1 + g3
    if v > f2:
        f2 = v
    v = f0 + d0
    if v > f2:
        f2 = v
    f3 = f2 + n3
    v = f2 + g0
    if v > f3:
        f3 = v
    v = f1 + d1
    if v > f3:
        f3 = v
    f4 = f3 + n0
    v = f3 + g1
    if v > f4:
        f4 = v
    v = f2 + d2
    if v > f4:
        f4 = v
    f5 = f4 + n1
    v = f4 + g2
    if v > f5:
        f5 = v
    v = f3 + d3
    if v > f5:
        f5 = v
    a = f5 - f1
    b = f4 - f0
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f6 = f5 + n2
    v = f5 + g3
    if v > f6:
        f6 = v
    v = f4 + d0
    if v > f6:
        f6 = v
    a = f6 - f2
    b = f5 - f1
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f7 = f6 + n3
    v = f6 + g0
    if v > f7:
        f7 = v
    v = f5 + d1
    if v > f7:
        f7 = v
    a = f7 - f3
    b = f6 - f2
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    f8 = f7 + n0
    v = f7 + g1
    if v > f8:
        f8 = v
    v = f6 + d2
    if v > f8:
        f8 = v
    a = f8 - f4
    b = f7 - f3
    if a > 0.0 and (a == b or abs(b - a) <= abs(REL * b) or abs(b - a) <= abs(REL * a)):
        return a
    return f8 - f4


def cyclic4_1(p0):
    t0_0, t0_1, t0_2, t0_3 = p0
    return t0_0 + t0_1 + t0_2 + t0_3


def cyclic4_2(p0, p1):
    t0_0, t0_1, t0_2, t0_3 = p0
    t1_0, t1_1, t1_2, t1_3 = p1
    x0 = t0_0
    if t1_3 > x0:
        x0 = t1_3
    x1 = t0_1
    if t1_0 > x1:
        x1 = t1_0
    x2 = t0_2
    if t1_1 > x2:
        x2 = t1_1
    x3 = t0_3
    if t1_2 > x3:
        x3 = t1_2
    return x0 + x1 + x2 + x3


def cyclic4_3(p0, p1, p2):
    t0_0, t0_1, t0_2, t0_3 = p0
    t1_0, t1_1, t1_2, t1_3 = p1
    t2_0, t2_1, t2_2, t2_3 = p2
    x0 = t0_0
    if t1_3 > x0:
        x0 = t1_3
    if t2_2 > x0:
        x0 = t2_2
    x1 = t0_1
    if t1_0 > x1:
        x1 = t1_0
    if t2_3 > x1:
        x1 = t2_3
    x2 = t0_2
    if t1_1 > x2:
        x2 = t1_1
    if t2_0 > x2:
        x2 = t2_0
    x3 = t0_3
    if t1_2 > x3:
        x3 = t1_2
    if t2_1 > x3:
        x3 = t2_1
    return x0 + x1 + x2 + x3


def cyclic4_4(p0, p1, p2, p3):
    t0_0, t0_1, t0_2, t0_3 = p0
    t1_0, t1_1, t1_2, t1_3 = p1
    t2_0, t2_1, t2_2, t2_3 = p2
    t3_0, t3_1, t3_2, t3_3 = p3
    x0 = t0_0
    if t1_3 > x0:
        x0 = t1_3
    if t2_2 > x0:
        x0 = t2_2
    if t3_1 > x0:
        x0 = t3_1
    x1 = t0_1
    if t1_0 > x1:
        x1 = t1_0
    if t2_3 > x1:
        x1 = t2_3
    if t3_2 > x1:
        x1 = t3_2
    x2 = t0_2
    if t1_1 > x2:
        x2 = t1_1
    if t2_0 > x2:
        x2 = t2_0
    if t3_3 > x2:
        x2 = t3_3
    x3 = t0_3
    if t1_2 > x3:
        x3 = t1_2
    if t2_1 > x3:
        x3 = t2_1
    if t3_0 > x3:
        x3 = t3_0
    return x0 + x1 + x2 + x3


def cyclic_loop(slots: Sequence[Sequence[tuple[int, int]]], k: int) -> Callable[..., float]:
    """The cyclic kernel of any shape: `slots` lists, for each slot, its (member, stage) pairs
    in member order (interleave's `_cyclic_slot_table`); every profile must hold k stages."""

    def kernel(*order):
        for p in order:
            if len(p) != k:
                raise ValueError(f"a profile of {len(p)} stages in a {k}-stage group")
        tt = None
        for slot in slots:
            (first, stage), rest = slot[0], slot[1:]
            x = order[first][stage]
            for member, stage in rest:
                t = order[member][stage]
                if t > x:
                    x = t
            tt = x if tt is None else tt + x
        return tt

    return kernel


# The TT of every order of a group's members, in itertools.permutations order (the search
# keeps the first of equal TTs); each call is the kernel's, made directly.


def orders_1(kernel, p0):
    return [kernel(p0)]


def orders_2(kernel, p0, p1):
    return [kernel(p0, p1), kernel(p1, p0)]


def orders_3(kernel, p0, p1, p2):
    return [kernel(p0, p1, p2), kernel(p0, p2, p1), kernel(p1, p0, p2), kernel(p1, p2, p0),
            kernel(p2, p0, p1), kernel(p2, p1, p0)]


def orders_4(kernel, p0, p1, p2, p3):
    return [kernel(p0, p1, p2, p3), kernel(p0, p1, p3, p2), kernel(p0, p2, p1, p3),
            kernel(p0, p2, p3, p1), kernel(p0, p3, p1, p2), kernel(p0, p3, p2, p1),
            kernel(p1, p0, p2, p3), kernel(p1, p0, p3, p2), kernel(p1, p2, p0, p3),
            kernel(p1, p2, p3, p0), kernel(p1, p3, p0, p2), kernel(p1, p3, p2, p0),
            kernel(p2, p0, p1, p3), kernel(p2, p0, p3, p1), kernel(p2, p1, p0, p3),
            kernel(p2, p1, p3, p0), kernel(p2, p3, p0, p1), kernel(p2, p3, p1, p0),
            kernel(p3, p0, p1, p2), kernel(p3, p0, p2, p1), kernel(p3, p1, p0, p2),
            kernel(p3, p1, p2, p0), kernel(p3, p2, p0, p1), kernel(p3, p2, p1, p0)]


def orders_loop(permutations, kernel, *profiles):
    """Any number of members: `permutations` lists the orders (as member indices)."""
    return [kernel(*[profiles[i] for i in perm]) for perm in permutations]


#: by #members - 1
PIPELINE = (pipeline_1, pipeline_2, pipeline_3, pipeline_4)
CYCLIC4 = (cyclic4_1, cyclic4_2, cyclic4_3, cyclic4_4)
ORDERS = (orders_1, orders_2, orders_3, orders_4)
