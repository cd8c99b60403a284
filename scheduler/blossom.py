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
"""

from __future__ import annotations

from math import inf, isclose
from typing import Callable

#: relative tolerance of the stop test (dual of an even vertex versus the step delta)
REL_TOL = 1e-5

_ODD, _EVEN, _FREE = 1, 0, -1  # search labels (outer/inner naming avoided on purpose)


class _DenseBlossom:
    """One solve of the dense primal-dual blossom algorithm on a 1-based weight table."""

    def __init__(self, n: int, table: list[float], stride: int):
        # table: original weights at r*stride+c for 0 <= r, c <= n (0 on the diagonal/row 0)
        self.n = n
        self.stride = stride
        self.top = n  # highest index in use (vertices + blossom slots ever allocated)
        self.w0 = table
        self._end_a = [0] * (stride * stride)
        self._end_b = [0] * (stride * stride)
        self._ew = list(table)
        ea, eb = self._end_a, self._end_b
        for r in range(n + 1):
            base = r * stride
            for c in range(n + 1):
                ea[base + c] = r
                eb[base + c] = c
        self.mate = [0] * stride  # original vertex matched to (the base of) an index
        self.root = list(range(n + 1)) + [0] * (stride - n - 1)  # outermost blossom
        self.parent = [0] * stride  # the vertex an odd index was reached from
        self.label = [_FREE] * stride
        self.best = [0] * stride  # vertex whose edge to this index is cheapest
        self.seen = [0] * stride
        self.stamp = 0
        self.y = [0.0] * stride
        self.children: list[list[int]] = [[] for _ in range(stride)]
        # sub[b*(n+1)+v]: the child of blossom b that contains vertex v (0 if none)
        self.sub = [0] * (stride * (n + 1))
        for v in range(1, n + 1):
            self.sub[v * (n + 1) + v] = v
        self.queue: list[int] = []
        self.head = 0
        self.nbrs = [
            [c for c in range(1, n + 1) if table[r * stride + c] > 0] for r in range(n + 1)
        ]

    # ------------------------------------------------------------------ small helpers
    def cost(self, k: int) -> float:
        """Reduced cost of the extended edge stored at flat index k."""
        a = self._end_a[k]
        b = self._end_b[k]
        y = self.y
        return y[a] + y[b] - self.w0[a * self.stride + b] * 2.0

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

    def relax(self, v: int, x: int) -> None:
        """Remember v as x's cheapest neighbour if it beats the current one."""
        cur = self.best[x]
        s = self.stride
        if cur == 0 or self.cost(v * s + x) < self.cost(cur * s + x):
            self.best[x] = v

    def rescan(self, x: int) -> None:
        """Recompute x's cheapest even neighbour from scratch."""
        self.best[x] = 0
        ew, root, label, s = self._ew, self.root, self.label, self.stride
        for v in range(1, self.n + 1):
            if ew[v * s + x] > 0 and root[v] != x and label[root[v]] == _EVEN:
                self.relax(v, x)

    def set_root(self, x: int, b: int) -> None:
        stack = [x]
        root, children = self.root, self.children
        while stack:
            z = stack.pop()
            root[z] = b
            if z > self.n:
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

        ea, eb, ew = self._end_a, self._end_b, self._ew
        top = self.top
        row = nb * s
        for x in range(1, top + 1):
            ew[row + x] = 0
            ew[x * s + nb] = 0
        n1 = n + 1
        sub = self.sub
        srow = nb * n1
        for v in range(1, n1):
            sub[srow + v] = 0
        cost = self.cost
        for c in cyc:
            crow = c * s
            for x in range(1, top + 1):
                kb = row + x
                kc = crow + x
                if ew[kb] <= 0 or cost(kc) < cost(kb):
                    ea[kb] = ea[kc]
                    eb[kb] = eb[kc]
                    ew[kb] = ew[kc]
                    kb2 = x * s + nb
                    kc2 = x * s + c
                    ea[kb2] = ea[kc2]
                    eb[kb2] = eb[kc2]
                    ew[kb2] = ew[kc2]
            cs = c * n1
            for v in range(1, n1):
                if sub[cs + v]:
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
        label, parent, best = self.label, self.parent, self.best
        for i in range(0, pos, 2):
            c, d = cyc[i], cyc[i + 1]
            parent[c] = self._end_a[d * s + c]
            label[c] = _ODD
            label[d] = _EVEN
            best[c] = 0
            self.rescan(d)
            self.push(d)
        label[entry] = _ODD
        parent[entry] = parent[b]
        for i in range(pos + 1, len(cyc)):
            c = cyc[i]
            label[c] = _FREE
            self.rescan(c)
        self.root[b] = 0

    def tight_edge(self, k: int) -> bool:
        """Grow, shrink or augment along the tight extended edge at k; True if augmented."""
        a0 = self._end_a[k]
        root = self.root
        a = root[a0]
        b = root[self._end_b[k]]
        label = self.label
        if label[b] == _FREE:
            self.parent[b] = a0
            label[b] = _ODD
            m = root[self.mate[b]]
            self.best[b] = 0
            self.best[m] = 0
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
        label, best, root, mate, parent, y = (
            self.label, self.best, self.root, self.mate, self.parent, self.y)
        w0 = self.w0
        for x in range(self.top + 1):
            label[x] = _FREE
            best[x] = 0
        q = self.queue
        q.clear()
        for x in range(1, self.top + 1):
            if root[x] == x and mate[x] <= 0:
                parent[x] = 0
                label[x] = _EVEN
                self.push(x)
        if not q:
            return False
        nbrs = self.nbrs
        cost = self.cost
        ea, eb = self._end_a, self._end_b
        while True:
            i = 0
            while i < len(q):
                u = q[i]
                i += 1
                if label[root[u]] == _ODD:
                    continue
                yu = y[u]
                base = u * s
                for v in nbrs[u]:
                    rv = root[v]
                    if root[u] != rv:
                        c = yu + y[v] - w0[base + v] * 2.0
                        if c <= 0:
                            if self.tight_edge(base + v):
                                return True
                            continue
                        # keep the cheapest known edge into rv's outermost blossom (its
                        # stored extended edge, which for a plain vertex is (u, v) itself)
                        cur = best[rv]
                        if cur == 0:
                            best[rv] = u
                            continue
                        if rv > n:
                            k = base + rv
                            a = ea[k]
                            b = eb[k]
                            c = y[a] + y[b] - w0[a * s + b] * 2.0
                        k = cur * s + rv
                        a = ea[k]
                        b = eb[k]
                        if c < y[a] + y[b] - w0[a * s + b] * 2.0:
                            best[rv] = u
            q.clear()

            top = self.top
            delta = inf
            for b in range(n + 1, top + 1):
                if root[b] == b and label[b] == _ODD:
                    h = y[b] / 2.0
                    if h < delta:
                        delta = h
            for x in range(1, top + 1):
                if root[x] == x and best[x] != 0:
                    if label[x] == _FREE:
                        h = cost(best[x] * s + x)
                        if h < delta:
                            delta = h
                    elif label[x] == _EVEN:
                        h = cost(best[x] * s + x) / 2.0
                        if h < delta:
                            delta = h
            for u in range(1, n + 1):
                lu = label[root[u]]
                if lu == _EVEN:
                    if y[u] <= delta or isclose(y[u], delta, rel_tol=REL_TOL):
                        return False
                    y[u] -= delta
                elif lu == _ODD:
                    y[u] += delta
            for b in range(n + 1, top + 1):
                if root[b] == b:
                    if label[b] == _EVEN:
                        y[b] += delta * 2
                    elif label[b] == _ODD:
                        y[b] -= delta * 2
            q.clear()
            for x in range(1, top + 1):
                bx = best[x]
                if root[x] == x and bx != 0 and root[bx] != x and cost(bx * s + x) <= 0:
                    if self.tight_edge(bx * s + x):
                        return True
            for b in range(n + 1, self.top + 1):
                if root[b] == b and label[b] == _ODD and y[b] <= 0:
                    self.expand(b)


def blossom_pairs(n: int, weight: Callable[[int, int], float]) -> list[tuple[int, int]]:
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
    """
    if n < 0:
        raise ValueError(f"node count must be >= 0, got {n}")
    stride = n + n // 2 + 2
    table = [0.0] * (stride * stride)
    w_max = 0.0
    for i in range(n):
        ri = (i + 1) * stride + 1
        for j in range(n):
            if j == i:
                continue
            w = weight(i, j)
            if w > 0:
                w = float(w)
                table[ri + j] = w
                if w > w_max:
                    w_max = w
    if w_max <= 0:
        return []
    solver = _DenseBlossom(n, table, stride)
    y = solver.y
    for v in range(n + 1):
        y[v] = w_max
    while solver.stage():
        pass
    mate = solver.mate
    return [(u - 1, mate[u] - 1) for u in range(1, n + 1) if mate[u] > u and mate[mate[u]] == u]
