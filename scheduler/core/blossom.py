"""Pure-Python maximum-weight general matching with the Muri artifact's tie-breaking.

Why a third matcher next to networkx and rustworkx?  When several matchings share the
maximum weight, *which* one a solver returns depends on its traversal order and on how it
compares floats.  The Muri paper's numbers come from the primal-dual weighted blossom
algorithm of Edmonds/Gabow in its O(n^3) "dense" formulation (the one popular in
competitive programming: vertex/blossom duals, one slack vertex per blossom, a BFS queue,
contraction, expansion and augmentation), run on float weights with a relative tolerance of
1e-5 in a few comparisons.  This module is an independent implementation of that
formulation which follows the same traversal order and the same float rules, so that it
picks the same pairs as the published artifact, ties included.

Conventions inside the solver (the public function translates):

* vertices are 1..n; index 0 means "none"; indices n+1.. are blossoms, allocated to the
  lowest free slot (a slot is free once its blossom has been expanded);
* the "extended edge" between two (possibly blossom) indices r and c is stored in three flat
  lists at ``r * stride + c``: the original endpoints (``_end_a``, ``_end_b``) of the
  cheapest real edge between them, and the weight copied along with them (``_ew``).  A
  copied weight of 0 means "no edge" even though the endpoints are kept: this mirrors the
  reference formulation, whose contraction step resets weights but not endpoints;
* the reduced cost (slack) of an extended edge is ``y[a] + y[b] - 2 * w(a, b)`` with
  ``w`` the original weight of its endpoints, so it is always recomputed from current duals;
* weights are directed: ``w(a, b)`` and ``w(b, a)`` are stored separately (they may differ
  in the last bit, see ``blossom_pairs``), and every read uses the orientation at hand.

Float rules (reproduced on purpose, they decide ties):

* an edge is tight when its reduced cost is ``<= 0`` (exactly, no tolerance);
* a search stops (no further improvement) when some even vertex has dual ``y <= delta`` or
  within a relative 1e-5 of ``delta``; this tolerance is what lets nearly-equal weights
  count as equal;
* a blossom is expanded when its dual is ``<= 0``.

scheduler/core/_blossom.c is the same algorithm compiled (built by setup.py where a C compiler
exists): the same steps on the same doubles in the same order, hence the same pairs, some
tens of times faster.  The public functions run it when it is built; this module stays the
readable reference and the fallback, and the tests hold the two against each other.  One
liberty, invisible in the result: in a stage's first search the compiled matcher runs only
the scans that grow, shrink or augment (found on per-vertex lists of tight edges, kept
until the next dual update), and if the stage then needs its best edges it computes what
the left-out scans would have given them (search_tight and settle_quiet there;
tests/core/test_blossom_carry.py holds it to the full scans and to this module).
"""

from __future__ import annotations

from itertools import compress
from math import inf, isclose
from typing import Callable

try:  # the same algorithm compiled (setup.py); optional, this module is the fallback
    from scheduler.core import _blossom as _compiled
except ImportError:  # not built: no compiler where it was installed
    _compiled = None

#: relative tolerance of the stop test (dual of an even vertex versus the step delta)
REL_TOL = 1e-5

_ODD, _EVEN, _FREE = 1, 0, -1  # search labels (outer/inner naming avoided on purpose)

# Implementation notes (speed; none of this changes a result):
#
# * reduced costs are computed inline as ``y[a] + y[b] - w2[a][b]`` where ``w2`` holds the
#   original weights doubled (``w * 2.0`` is exact, so this is bit-for-bit the same float as
#   ``y[a] + y[b] - w * 2.0``), one list per row;
# * two invariants of the extended-edge tables are used: for an original vertex r and any
#   index c, the stored edge at (r, c) starts at r itself (``_end_a[r*stride+c] == r``), and
#   for an original vertex c the stored edge at (r, c) ends at c; both hold because a
#   contraction only rewrites the row and column of the new blossom, copying from its
#   children's row/column;
# * ``bestc[x]`` caches the reduced cost of x's cheapest known edge (the edge stored at
#   ``best[x]*stride + x``).  Vertex duals only change in the dual update, right after which
#   it is recomputed for every outermost index that has a best edge (in the same pass that
#   looks for tight edges); every other write of ``best`` writes ``bestc`` as well, and
#   ``best[x] == 0`` always goes with ``bestc[x] == inf``, so that "no best edge yet or a
#   cheaper one" is the single test ``c < bestc[x]`` (reduced costs are finite).


class _DenseBlossom:
    """One solve of the dense primal-dual blossom algorithm on a 1-based weight table."""

    def __init__(self, n: int, table: list[float], stride: int, w2: list[list[float]],
                 nbrs: list[list[int]], innbrs: list[list[int]]):
        # table: original weights at r*stride+c for 0 <= r, c <= n (0 on the diagonal/row 0);
        # w2[r][c]: the same doubled; nbrs[r]: the c with table[r*stride+c] > 0, increasing;
        # innbrs[c]: the r with table[r*stride+c] > 0, increasing
        self.n = n
        self.stride = stride
        s = stride
        self.top = n  # highest index in use (vertices + blossom slots ever allocated)
        n1 = n + 1
        # doubled original weights, one row per vertex (rows 0..n, columns 0..n)
        self.w2 = w2
        ea = [0] * (s * s)
        eb = [0] * (s * s)
        cols = list(range(n1))
        for r in range(n1):
            base = r * s
            ea[base:base + n1] = [r] * n1
            eb[base:base + n1] = cols
        self._end_a = ea
        self._end_b = eb
        self._ew = list(table)
        self.mate = [0] * s  # original vertex matched to (the base of) an index
        self.root = list(range(n1)) + [0] * (s - n1)  # outermost blossom
        self.parent = [0] * s  # the vertex an odd index was reached from
        self.label = [_FREE] * s
        self.best = [0] * s  # vertex whose edge to this index is cheapest
        self.bestc = [inf] * s  # reduced cost of that edge (see the notes above)
        self.seen = [0] * s
        self.stamp = 0
        self.y = [0.0] * s
        self.children: list[list[int]] = [[] for _ in range(s)]
        # sub[b*(n+1)+v]: the child of blossom b that contains vertex v (0 if none)
        self.sub = [0] * (s * n1)
        for v in range(1, n1):
            self.sub[v * n1 + v] = v
        self.queue: list[int] = []
        self.nbrs = nbrs
        self.innbrs = innbrs

    # ------------------------------------------------------------------ small helpers
    def cost(self, k: int) -> float:
        """Reduced cost of the extended edge stored at flat index k."""
        a = self._end_a[k]
        b = self._end_b[k]
        y = self.y
        return y[a] + y[b] - self.w2[a][b]

    def push(self, x: int) -> None:
        """Queue the vertices of x (itself if a vertex), level by level through sub-blossoms."""
        n = self.n
        if x <= n:
            self.queue.append(x)
            return
        pending = [x]
        i = 0
        children = self.children
        out = self.queue
        while i < len(pending):
            z = pending[i]
            i += 1
            if z <= n:
                out.append(z)
            else:
                pending.extend(children[z])

    def rescan(self, x: int) -> None:
        """Recompute x's cheapest even neighbour from scratch (first of the cheapest, in
        increasing vertex order, among vertices with a stored edge of weight > 0 into x)."""
        root, label, y, w2 = self.root, self.label, self.y, self.w2
        bv = 0
        bc = inf
        if x <= self.n:
            yx = y[x]
            for v in self.innbrs[x]:
                rv = root[v]
                if rv != x and label[rv] == _EVEN:
                    c = y[v] + yx - w2[v][x]
                    if c < bc:
                        bv = v
                        bc = c
        else:
            s = self.stride
            ew, eb = self._ew, self._end_b
            k = x
            for v in range(1, self.n + 1):
                k += s
                if ew[k] > 0.0:
                    rv = root[v]
                    if rv != x and label[rv] == _EVEN:
                        b = eb[k]
                        c = y[v] + y[b] - w2[v][b]
                        if c < bc:
                            bv = v
                            bc = c
        self.best[x] = bv
        self.bestc[x] = bc

    def set_root(self, x: int, b: int) -> None:
        stack = [x]
        root, children, n = self.root, self.children, self.n
        while stack:
            z = stack.pop()
            root[z] = b
            if z > n:
                stack.extend(children[z])

    def rotate_to(self, b: int, child: int) -> int:
        """Position of child in b's cycle, flipping the cycle's direction if it is odd,
        so that an even-length path from the base reaches it; returns that length."""
        cyc = self.children[b]
        pos = cyc.index(child)
        if pos % 2 == 1:
            cyc[1:] = cyc[:0:-1]
            return len(cyc) - pos
        return pos

    def match_through(self, x: int, other: int) -> None:
        """Match index x along its extended edge to other, fixing the inside of blossoms."""
        n, s = self.n, self.stride
        ea, eb, mate, children, sub = self._end_a, self._end_b, self.mate, self.children, self.sub
        work = [(x, other)]
        while work:
            x, other = work.pop()
            k = x * s + other
            mate[x] = eb[k]
            if x <= n:
                continue
            entry = sub[x * (n + 1) + ea[k]]
            pos = self.rotate_to(x, entry)
            cyc = children[x]
            for i in range(pos):
                work.append((cyc[i], cyc[i ^ 1]))
            work.append((entry, other))
            children[x] = cyc[pos:] + cyc[:pos]

    def flip_path(self, x: int, other: int) -> None:
        """Flip matched/unmatched edges from x back to its tree's root, x now taking other."""
        root, mate, parent = self.root, self.mate, self.parent
        while True:
            nxt = root[mate[x]]
            self.match_through(x, other)
            if nxt == 0:
                return
            back = root[parent[nxt]]
            self.match_through(nxt, back)
            x, other = back, nxt

    def common_ancestor(self, a: int, b: int) -> int:
        """Nearest common ancestor of two even indices in the search forest, or 0."""
        self.stamp += 1
        stamp, seen, root, mate, parent = self.stamp, self.seen, self.root, self.mate, self.parent
        while a or b:
            if a:
                if seen[a] == stamp:
                    return a
                seen[a] = stamp
                a = root[mate[a]]
                if a:
                    a = root[parent[a]]
            a, b = b, a
        return 0

    # ------------------------------------------------------------------ structural steps
    def contract(self, a: int, anc: int, b: int) -> None:
        """Shrink the odd cycle a .. anc .. b into a new blossom."""
        n, s = self.n, self.stride
        root, mate, parent = self.root, self.mate, self.parent
        nb = n + 1
        while nb <= self.top and root[nb] != 0:
            nb += 1
        if nb > self.top:
            if nb >= s:
                raise RuntimeError("blossom slots exhausted")  # cannot happen: laminar bound
            self.top = nb
            self.parent[nb] = 0
            self.best[nb] = 0
            self.bestc[nb] = inf
            self.seen[nb] = 0
        self.y[nb] = 0.0
        self.label[nb] = _EVEN
        mate[nb] = mate[anc]
        cyc = [anc]
        for start, flip in ((a, True), (b, False)):
            x = start
            while x != anc:
                cyc.append(x)
                z = root[mate[x]]
                cyc.append(z)
                self.push(z)
                x = root[parent[z]]
            if flip:
                cyc[1:] = cyc[:0:-1]
        self.children[nb] = cyc
        self.set_root(nb, nb)

        ea, eb, ew, y, w2 = self._end_a, self._end_b, self._ew, self.y, self.w2
        top = self.top
        row = nb * s
        end = row + top + 1
        col_nb = slice(s + nb, top * s + nb + 1, s)  # entries (x, nb), x = 1..top
        ew[row + 1:end] = [0.0] * top
        ew[col_nb] = [0.0] * top
        n1 = n + 1
        sub = self.sub
        srow = nb * n1
        sub[srow + 1:srow + n1] = [0] * n
        # Row nb and column nb take, for each x, the cheapest of the children's stored
        # edges, children in cycle order, x = 1..top within a child; a child's edge replaces
        # the current one when that has weight <= 0 or the child's is strictly cheaper.
        # For x != nb the pass of a child reads (c, x), (x, c) and (nb, x) and writes
        # (nb, x) and (x, nb) only; x == nb reads (c, nb) and (nb, c), which the same
        # pass wrote at x == c when c < nb, and writes (nb, nb) twice (row, then column).
        #
        # First child: row nb is all weight 0, so every entry is copied; as slices, the
        # row first and then the column, which leaves (nb, nb) = the new (nb, c0) as the
        # one-by-one order does when c0 < nb.  When c0 > nb, the one-by-one order copies
        # (nb, c0) into (nb, nb) before (nb, c0) itself is overwritten: restore that.
        c0 = cyc[0]
        crow = c0 * s
        if c0 > nb:
            keep_a, keep_b = ea[row + c0], eb[row + c0]
        ea[row + 1:end] = ea[crow + 1:crow + top + 1]
        eb[row + 1:end] = eb[crow + 1:crow + top + 1]
        ew[row + 1:end] = ew[crow + 1:crow + top + 1]
        col_c = slice(s + c0, top * s + c0 + 1, s)
        ea[col_nb] = ea[col_c]
        eb[col_nb] = eb[col_c]
        ew[col_nb] = ew[col_c]
        if c0 > nb:
            ea[row + nb] = keep_a
            eb[row + nb] = keep_b
            ew[row + nb] = 0.0
        # rc[x]: reduced cost of the edge now stored at (nb, x), None when not computed yet
        # (costs are pure here: no dual changes during a contraction)
        rc = [None] * (top + 1)
        # later children: x < nb, x == nb, x > nb as three runs, each reading the current
        # entries when it starts (within a run no entry it reads is written before)
        runs = ((1, nb), (nb, nb + 1), (nb + 1, top + 1))
        for c in cyc:
            if c == c0:
                continue
            crow = c * s
            for lo, hi in runs:
                for x, wb, ca, cb, cw in zip(range(lo, hi), ew[row + lo:row + hi],
                                             ea[crow + lo:crow + hi], eb[crow + lo:crow + hi],
                                             ew[crow + lo:crow + hi]):
                    if wb > 0.0:
                        h = y[ca] + y[cb] - w2[ca][cb]
                        g = rc[x]
                        if g is None:
                            ga = ea[row + x]
                            gb = eb[row + x]
                            g = y[ga] + y[gb] - w2[ga][gb]
                        if not h < g:
                            rc[x] = g
                            continue
                        rc[x] = h
                    else:
                        rc[x] = None
                    kb = row + x
                    ea[kb] = ca
                    eb[kb] = cb
                    ew[kb] = cw
                    kb2 = x * s + nb
                    kc2 = x * s + c
                    ea[kb2] = ea[kc2]
                    eb[kb2] = eb[kc2]
                    ew[kb2] = ew[kc2]
            rc[nb] = None  # (nb, nb) is also written as a column entry: re-read it
        for c in cyc:
            if c <= n:
                sub[srow + c] = c  # a vertex contains only itself
            else:
                cs = c * n1
                for v in compress(range(1, n1), sub[cs + 1:cs + n1]):
                    sub[srow + v] = c
        self.rescan(nb)

    def expand(self, b: int) -> None:
        """Dissolve an odd blossom whose dual reached zero, relabelling its children."""
        s = self.stride
        for c in self.children[b]:
            self.set_root(c, c)
        entry = self.sub[b * (self.n + 1) + self._end_a[b * s + self.parent[b]]]
        pos = self.rotate_to(b, entry)
        cyc = self.children[b]
        label, parent, best, bestc = self.label, self.parent, self.best, self.bestc
        for i in range(0, pos, 2):
            c, d = cyc[i], cyc[i + 1]
            parent[c] = self._end_a[d * s + c]
            label[c] = _ODD
            label[d] = _EVEN
            best[c] = 0
            bestc[c] = inf
            self.rescan(d)
            self.push(d)
        label[entry] = _ODD
        parent[entry] = parent[b]
        bestc[entry] = self.cost(best[entry] * s + entry) if best[entry] else inf
        for i in range(pos + 1, len(cyc)):
            c = cyc[i]
            label[c] = _FREE
            self.rescan(c)
        self.root[b] = 0

    def tight_edge(self, a0: int, b0: int) -> bool:
        """Grow, shrink or augment along a tight extended edge whose original endpoints are
        a0 (the even side) and b0; True if augmented."""
        root = self.root
        a = root[a0]
        b = root[b0]
        label = self.label
        if label[b] == _FREE:
            self.parent[b] = a0
            label[b] = _ODD
            m = root[self.mate[b]]
            self.best[b] = 0
            self.best[m] = 0
            self.bestc[b] = inf
            self.bestc[m] = inf
            label[m] = _EVEN
            self.push(m)
        elif label[b] == _EVEN:
            anc = self.common_ancestor(a, b)
            if anc == 0:
                self.flip_path(a, b)
                self.flip_path(b, a)
                return True
            self.contract(a, anc, b)
        return False

    # ------------------------------------------------------------------ one stage
    def stage(self) -> bool:
        """Search for one augmenting path, adjusting duals; False when none helps any more."""
        n, s = self.n, self.stride
        label, best, bestc, root, mate, parent, y = (
            self.label, self.best, self.bestc, self.root, self.mate, self.parent, self.y)
        w2 = self.w2
        top = self.top
        label[:top + 1] = [_FREE] * (top + 1)
        best[:top + 1] = [0] * (top + 1)
        bestc[:top + 1] = [inf] * (top + 1)
        q = self.queue
        q.clear()
        push = self.push
        for x in range(1, top + 1):
            if root[x] == x and mate[x] <= 0:
                parent[x] = 0
                label[x] = _EVEN
                push(x)
        if not q:
            return False
        nbrs = self.nbrs
        eb = self._end_b
        tight_edge = self.tight_edge
        while True:
            i = 0
            while i < len(q):
                u = q[i]
                i += 1
                ru = root[u]
                if label[ru] == _ODD:
                    continue
                yu = y[u]
                nb = nbrs[u]
                wu = w2[u]
                base = u * s
                for v in nb:
                    rv = root[v]
                    if rv == v:
                        # a plain vertex (never u's own root: u is not its own neighbour)
                        c = yu + y[v] - wu[v]
                        if c > 0.0:
                            if c < bestc[v]:
                                best[v] = u
                                bestc[v] = c
                            continue
                    elif rv == ru:
                        continue
                    elif yu + y[v] - wu[v] > 0.0:
                        # keep the cheapest known edge into the blossom rv: its stored
                        # extended edge, which starts at u
                        b = eb[base + rv]
                        c = yu + y[b] - wu[b]
                        if c < bestc[rv]:
                            best[rv] = u
                            bestc[rv] = c
                        continue
                    # tight: grow (inlined), shrink or augment
                    lr = label[rv]
                    if lr == _FREE:
                        parent[rv] = u
                        label[rv] = _ODD
                        m = root[mate[rv]]
                        best[rv] = 0
                        best[m] = 0
                        bestc[rv] = inf
                        bestc[m] = inf
                        label[m] = _EVEN
                        if m <= n:
                            q.append(m)
                        else:
                            push(m)
                    elif lr == _EVEN:
                        if tight_edge(u, v):
                            return True
                        ru = root[u]
            q.clear()

            top = self.top
            delta = inf
            x = 0
            for rx, lx, bx in zip(root[1:top + 1], label[1:top + 1], best[1:top + 1]):
                x += 1
                if rx == x:
                    if lx == _ODD:
                        if x > n:
                            h = y[x] / 2.0
                            if h < delta:
                                delta = h
                    elif bx:
                        h = bestc[x]
                        if lx == _EVEN:
                            h = h / 2.0
                        if h < delta:
                            delta = h
            lim = delta * 1.001 if delta > 0.0 else inf
            for u in range(1, n + 1):
                lu = label[root[u]]
                if lu == _EVEN:
                    yu = y[u]
                    if yu <= lim and (yu <= delta or isclose(yu, delta, rel_tol=REL_TOL)):
                        return False
                    y[u] = yu - delta
                elif lu == _ODD:
                    y[u] += delta
            d2 = delta * 2
            for b in range(n + 1, top + 1):
                if root[b] == b:
                    if label[b] == _EVEN:
                        y[b] += d2
                    elif label[b] == _ODD:
                        y[b] -= d2
            for x in range(1, top + 1):
                bx = best[x]
                if bx != 0 and root[x] == x:
                    wb = w2[bx]
                    if x <= n:
                        c = y[bx] + y[x] - wb[x]
                        b0 = x
                    else:
                        b0 = eb[bx * s + x]
                        c = y[bx] + y[b0] - wb[b0]
                    bestc[x] = c
                    if c <= 0.0 and root[bx] != x:
                        if tight_edge(bx, b0):
                            return True
            for b in range(n + 1, self.top + 1):
                if root[b] == b and label[b] == _ODD and y[b] <= 0.0:
                    self.expand(b)


def blossom_pairs(n: int, weight: Callable[[int, int], float], *,
                  compiled: bool | None = None) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, sorted by i, of a maximum-weight matching on nodes 0..n-1.

    weight is asked once for every ordered pair (i, j), i != j: weight(i, j) is the edge
    as seen from i, and an edge exists in that direction iff it is > 0.  The two
    directions are kept apart on purpose.  A pair weight computed from "i's jobs then j's"
    (a sum over a concatenated list, say) can differ from the reverse order in its last
    bit, and the artifact stores both and reads whichever direction it is scanning.  Where
    tied sums are compared exactly, that last bit picks the winner, so mirroring one
    triangle would change the pairs it chooses.
    Equal-weight alternatives, and weights within a relative 1e-5 of each other, are
    resolved exactly as the Muri artifact's blossom implementation resolves them.
    ``compiled`` as in blossom_pairs_flat.
    """
    if n < 0:
        raise ValueError(f"node count must be >= 0, got {n}")
    flat = [0.0] * (n * n)
    for i in range(n):
        row = i * n
        for j in range(n):
            if j != i:
                flat[row + j] = weight(i, j)
    return blossom_pairs_flat(n, flat, compiled=compiled)


def blossom_pairs_flat(n: int, weights: list[float], *,
                       compiled: bool | None = None) -> list[tuple[int, int]]:
    """blossom_pairs given every weight at once: weights[i * n + j] is weight(i, j) (the
    diagonal is ignored), for callers that can compute the table faster than one call per
    pair.

    ``compiled``: None runs scheduler.core._blossom (the same algorithm in C, same pairs) when it
    was built and this module otherwise; False always runs this module, the reference; True
    insists on the compiled one (ImportError when it was not built).
    """
    if n < 0:
        raise ValueError(f"node count must be >= 0, got {n}")
    if len(weights) != n * n:
        raise ValueError(f"weights must hold n*n = {n * n} values, got {len(weights)}")
    solver = _compiled_solver(compiled)
    if solver is not None:
        return solver.solve(n, weights)
    return _pure_pairs(n, weights)


def blossom_pairs_indexed(kinds: list[int], m: int, table: list[float], *,
                          compiled: bool | None = None) -> list[tuple[int, int]]:
    """blossom_pairs_flat on n = len(kinds) nodes where the weight of (i, j) depends only on
    their kinds: table[kinds[i] * m + kinds[j]], each kind in 0..m-1.  The same pairs as on
    the expanded table; the compiled matcher expands it in C, saving the n*n list."""
    if not all(0 <= x < m for x in kinds) or len(table) != m * m:
        raise ValueError(f"kinds must be in 0..{m - 1} and the table hold {m * m} values")
    solver = _compiled_solver(compiled)
    if solver is not None:
        return solver.solve_indexed(kinds, m, table)
    n = len(kinds)
    flat = [table[x * m + y] for x in kinds for y in kinds]
    return blossom_pairs_flat(n, flat, compiled=False)


def _compiled_solver(compiled: bool | None):
    """The compiled module to run for a call's ``compiled`` argument, or None for this
    module's reference path (one rule for every public entry point)."""
    if compiled is None:
        return _compiled
    if not compiled:
        return None
    if _compiled is None:
        raise ImportError("scheduler.core._blossom was not built (pip install -e . with a C compiler)")
    return _compiled


def _pure_pairs(n: int, weights: list[float]) -> list[tuple[int, int]]:
    stride = n + n // 2 + 2
    table = [0.0] * (stride * stride)
    n1 = n + 1
    w2 = [[0.0] * n1 for _ in range(n1)]
    nbrs: list[list[int]] = [[] for _ in range(n1)]
    innbrs: list[list[int]] = [[] for _ in range(n1)]
    w_max = 0.0
    for i in range(n):
        r = i + 1
        ri = r * stride
        w2r = w2[r]
        out = nbrs[r]
        for j in range(n):
            if j == i:
                continue
            w = weights[i * n + j]
            if w > 0:
                w = float(w)
                c = j + 1
                table[ri + c] = w
                w2r[c] = w * 2.0
                out.append(c)
                innbrs[c].append(r)
                if w > w_max:
                    w_max = w
    if w_max <= 0:
        return []
    solver = _DenseBlossom(n, table, stride, w2, nbrs, innbrs)
    y = solver.y
    for v in range(n + 1):
        y[v] = w_max
    while solver.stage():
        pass
    mate = solver.mate
    return [(u - 1, mate[u] - 1) for u in range(1, n + 1) if mate[u] > u and mate[mate[u]] == u]
