/* Compiled twin of scheduler/blossom.py: the same dense primal-dual blossom algorithm,
 * step for step.
 *
 * Why a second implementation?  The paper preset matches with scheduler.core.blossom because
 * only that traversal order and those float rules reproduce the Muri artifact's choice
 * among tied matchings; in pure Python it is most of a simulation's time.  This file
 * performs the same operations on the same doubles in the same order (every reduced cost
 * is y[a] + y[b] - w2[a][b], left to right; math.isclose is reproduced as CPython
 * computes it), so it returns the same pairs, ties included.  IEEE doubles give the same
 * results as Python floats for + - * / and comparisons as long as the compiler neither
 * reassociates nor fuses (no -ffast-math; FP_CONTRACT off, see setup.py).
 *
 * Read blossom.py for the algorithm and its conventions; the comments here only say
 * where C differs in form (fixed-size arrays instead of lists, in-place rotations, the
 * extended edges packed into one table with a flag for "weight > 0") and where it skips
 * work whose outcome is known (a comparison repeated within one scan, a pass whose
 * writes are all overwritten), each with why the result cannot change.  The largest such
 * liberty is search_tight: a stage's first search runs only the scans that change more
 * than best[], and settle_quiet gives best[] the others' share afterwards if it is read.
 * tests/test_blossom_compiled.py, tests/test_blossom_kinds.py and tests/test_blossom_carry.py
 * hold the two together.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define ODD 1
#define EVEN 0
#define FREE (-1)
#define REL_TOL 1e-5

typedef struct {
    int *data;
    Py_ssize_t len, cap;
} IntVec;

static int vec_push(IntVec *v, int x)
{
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 64;
        int *grown = (int *)realloc(v->data, (size_t)cap * sizeof(int));
        if (grown == NULL)
            return -1;
        v->data = grown;
        v->cap = cap;
    }
    v->data[v->len++] = x;
    return 0;
}

/* One stored extended edge: its original endpoints and whether it counts as an edge.
 * blossom.py keeps a copied weight whose only use is the test "> 0", so a flag carries the
 * same information; it lives in the sign of `a` (live: ~endpoint, negative; not live: the
 * endpoint itself, so that zeroed memory is "no edge, endpoints 0" as in blossom.py).  One
 * 8-byte entry instead of three arrays: contraction walks columns of this s x s table, and a
 * strided step now touches one cache line, not three. */
typedef struct {
    int a, b;
} Edge;

static inline int edge_live(Edge e)
{
    return e.a < 0;
}

static inline int edge_a(Edge e)
{
    return e.a < 0 ? ~e.a : e.a;
}

typedef struct {
    int n, n1, s, top;
    double *w2;     /* n1 x n1: doubled original weights */
    Edge *e;        /* s x s: the stored extended edges */
    double *rc;     /* contract's scratch: reduced cost of the edge at (nb, x) */
    char *known;    /* contract's scratch: whether rc[x] is set */
    int *mate, *root, *parent, *label, *best, *seen;
    double *bestc, *y;
    int stamp;
    int scan, *met;  /* met[b] == scan: blossom b's edge from the vertex being scanned was seen */
    int *children;  /* slot b's cycle at b * n1, length in nchild[b] */
    int *nchild;
    int *sub;       /* s x n1 */
    int *nbr_start, *nbr;      /* CSR of nbrs (row r: c with weight > 0, increasing) */
    int *innbr_start, *innbr;  /* CSR of innbrs (column c: r with weight > 0, increasing) */
    IntVec queue;
    IntVec scratch;  /* push's pending list, set_root's stack */
    IntVec work;     /* match_through's stack of (x, other) */
    int failed;      /* 1: out of memory, 2: slots exhausted */
    /* The carried lists (search_tight): tight[nbr_start[u] ..][0 .. tight_len[u]) lists u's
     * neighbours v with !(y[u] + y[v] - w2[u][v] > 0), valid while tight_ver[u] == yver;
     * yver counts the dual updates (vertex duals change nowhere else). */
    int carry;       /* 0: every stage scans in full (the reference order, for tests) */
    int yver;
    int *tight, *tight_len, *tight_ver;
    /* search_tight's bookkeeping: pos numbers the scans of a stage's first search; rpos[x]
     * is the scan during which x's best[] was last reset (0: the stage's start), bpos[x]
     * the scan that gave its current best[]; kind[v] groups vertices with equal weight rows
     * (solve_indexed's kinds; each vertex its own otherwise) */
    int pos, *rpos, *bpos, *kind;
    IntVec quiet, quiet_pos;  /* the scans search_tight left to settle_quiet, in order */
    int *gid, *gkind, *gnext, *gstart, *gmem, *khead;  /* settle_quiet's groups */
    double *gy;
    /* kinds as lists (set_kinds): kverts[kstart[K] ..kstart[K+1]) the vertices of kind K,
     * increasing; kymin[K] their least dual as of yver kymin_ver; finite: every weight
     * finite, so that tight_list may skip a kind by its least dual */
    int nk, *kstart, *kverts, kymin_ver, finite;
    double *kymin;
    int *merge_tmp;  /* tight_list's scratch (n ints) */
    long long stages, quiet_scans, scans;  /* counts for tests */
} Solver;

/* math.isclose(a, b, rel_tol=REL_TOL) as CPython computes it (abs_tol = 0). */
static int is_close(double a, double b)
{
    double diff;
    if (a == b)
        return 1;
    if (isinf(a) || isinf(b))
        return 0;
    diff = fabs(b - a);
    return (diff <= fabs(REL_TOL * b)) || (diff <= fabs(REL_TOL * a)) || (diff <= 0.0);
}

static inline double rcost(const Solver *S, int a, int b)
{
    return S->y[a] + S->y[b] - S->w2[a * S->n1 + b];
}

static void push(Solver *S, int x)
{
    Py_ssize_t i;
    IntVec *p = &S->scratch;
    if (x <= S->n) {
        if (vec_push(&S->queue, x))
            S->failed = 1;
        return;
    }
    /* level by level through sub-blossoms, as blossom.py's pending list */
    p->len = 0;
    if (vec_push(p, x)) {
        S->failed = 1;
        return;
    }
    for (i = 0; i < p->len; i++) {
        int z = p->data[i];
        if (z <= S->n) {
            if (vec_push(&S->queue, z)) {
                S->failed = 1;
                return;
            }
        } else {
            int k, m = S->nchild[z];
            const int *ch = S->children + (Py_ssize_t)z * S->n1;
            for (k = 0; k < m; k++) {
                if (vec_push(p, ch[k])) {
                    S->failed = 1;
                    return;
                }
            }
        }
    }
}

static void rescan(Solver *S, int x)
{
    int bv = 0;
    double bc = INFINITY;
    const int *root = S->root, *label = S->label;
    const double *y = S->y;
    if (x <= S->n) {
        double yx = y[x];
        int k;
        for (k = S->innbr_start[x]; k < S->innbr_start[x + 1]; k++) {
            int v = S->innbr[k];
            int rv = root[v];
            if (rv != x && label[rv] == EVEN) {
                double c = y[v] + yx - S->w2[v * S->n1 + x];
                if (c < bc) {
                    bv = v;
                    bc = c;
                }
            }
        }
    } else {
        int v, s = S->s;
        Py_ssize_t k = x;
        for (v = 1; v <= S->n; v++) {
            int rv = root[v];
            k += s;
            /* the same three tests as blossom.py, the strided one last */
            if (rv != x && label[rv] == EVEN && edge_live(S->e[k])) {
                int b = S->e[k].b;
                double c = y[v] + y[b] - S->w2[v * S->n1 + b];
                if (c < bc) {
                    bv = v;
                    bc = c;
                }
            }
        }
    }
    S->best[x] = bv;
    S->bestc[x] = bc;
}

static void set_root(Solver *S, int x, int b)
{
    IntVec *st = &S->scratch;
    st->len = 0;
    if (vec_push(st, x)) {
        S->failed = 1;
        return;
    }
    while (st->len) {
        int z = st->data[--st->len];
        S->root[z] = b;
        if (z > S->n) {
            int k, m = S->nchild[z];
            const int *ch = S->children + (Py_ssize_t)z * S->n1;
            for (k = 0; k < m; k++) {
                if (vec_push(st, ch[k])) {
                    S->failed = 1;
                    return;
                }
            }
        }
    }
}

static void reverse(int *a, int len)
{
    int i = 0, j = len - 1;
    while (i < j) {
        int t = a[i];
        a[i++] = a[j];
        a[j--] = t;
    }
}

/* blossom.py's rotate_to: position of child in b's cycle, the cycle's tail reversed
 * when that position is odd. */
static int rotate_to(Solver *S, int b, int child)
{
    int *cyc = S->children + (Py_ssize_t)b * S->n1;
    int len = S->nchild[b], pos = 0;
    while (pos < len && cyc[pos] != child)
        pos++;
    if (pos % 2 == 1) {
        reverse(cyc + 1, len - 1);
        return len - pos;
    }
    return pos;
}

/* cyc[pos:] + cyc[:pos], in place */
static void rotate_left(int *cyc, int len, int pos)
{
    if (pos <= 0 || pos >= len)
        return;
    reverse(cyc, pos);
    reverse(cyc + pos, len - pos);
    reverse(cyc, len);
}

static void match_through(Solver *S, int x, int other)
{
    int n = S->n, s = S->s;
    IntVec *w = &S->work;
    w->len = 0;
    if (vec_push(w, x) || vec_push(w, other)) {
        S->failed = 1;
        return;
    }
    while (w->len) {
        Py_ssize_t k;
        int entry, pos, i, *cyc;
        other = w->data[--w->len];
        x = w->data[--w->len];
        k = (Py_ssize_t)x * s + other;
        S->mate[x] = S->e[k].b;
        if (x <= n)
            continue;
        entry = S->sub[(Py_ssize_t)x * S->n1 + edge_a(S->e[k])];
        pos = rotate_to(S, x, entry);
        cyc = S->children + (Py_ssize_t)x * S->n1;
        for (i = 0; i < pos; i++) {
            if (vec_push(w, cyc[i]) || vec_push(w, cyc[i ^ 1])) {
                S->failed = 1;
                return;
            }
        }
        if (vec_push(w, entry) || vec_push(w, other)) {
            S->failed = 1;
            return;
        }
        rotate_left(cyc, S->nchild[x], pos);
    }
}

static void flip_path(Solver *S, int x, int other)
{
    for (;;) {
        int nxt = S->root[S->mate[x]], back;
        match_through(S, x, other);
        if (nxt == 0)
            return;
        back = S->root[S->parent[nxt]];
        match_through(S, nxt, back);
        x = back;
        other = nxt;
    }
}

static int common_ancestor(Solver *S, int a, int b)
{
    int stamp = ++S->stamp;
    while (a || b) {
        int t;
        if (a) {
            if (S->seen[a] == stamp)
                return a;
            S->seen[a] = stamp;
            a = S->root[S->mate[a]];
            if (a)
                a = S->root[S->parent[a]];
        }
        t = a;
        a = b;
        b = t;
    }
    return 0;
}

static void contract(Solver *S, int a, int anc, int b)
{
    int n = S->n, s = S->s, n1 = S->n1;
    int *root = S->root, *mate = S->mate, *parent = S->parent;
    Edge *E = S->e, keep = {0, 0};
    double *y = S->y, *rc = S->rc;
    const double *w2 = S->w2;
    char *known = S->known;
    int nb = n + 1, top, c0, x, i, len, pass;
    int *cyc;
    Py_ssize_t row, srow, crow;

    while (nb <= S->top && root[nb] != 0)
        nb++;
    if (nb > S->top) {
        if (nb >= s) {
            S->failed = 2;
            return;
        }
        S->top = nb;
        parent[nb] = 0;
        S->best[nb] = 0;
        S->bestc[nb] = INFINITY;
        S->seen[nb] = 0;
    }
    y[nb] = 0.0;
    S->label[nb] = EVEN;
    mate[nb] = mate[anc];
    cyc = S->children + (Py_ssize_t)nb * n1;
    len = 0;
    cyc[len++] = anc;
    for (pass = 0; pass < 2; pass++) {
        int x0 = pass == 0 ? a : b;
        x = x0;
        while (x != anc) {
            int z;
            cyc[len++] = x;
            z = root[mate[x]];
            cyc[len++] = z;
            push(S, z);
            x = root[parent[z]];
        }
        if (pass == 0)
            reverse(cyc + 1, len - 1);
    }
    S->nchild[nb] = len;
    set_root(S, nb, nb);
    if (S->failed)
        return;

    top = S->top;
    row = (Py_ssize_t)nb * s;
    srow = (Py_ssize_t)nb * n1;
    for (x = 1; x <= n; x++)
        S->sub[srow + x] = 0;

    /* First child: copy its row, then its column (see blossom.py for the (nb, nb) entry).
     * blossom.py first zeroes the weights of row and column nb; the copies overwrite all
     * of them, so only the endpoints of the old (nb, c0) matter, kept when c0 > nb. */
    c0 = cyc[0];
    crow = (Py_ssize_t)c0 * s;
    if (c0 > nb)
        keep = E[row + c0];
    memcpy(E + row + 1, E + crow + 1, (size_t)top * sizeof(Edge));
    for (x = 1; x <= top; x++)
        E[(Py_ssize_t)x * s + nb] = E[(Py_ssize_t)x * s + c0];
    if (c0 > nb) {
        keep.a = edge_a(keep);  /* endpoints kept, weight 0: not live */
        E[row + nb] = keep;
    }

    /* later children, x = 1..top in order (blossom.py's three runs read nothing that an
     * earlier step of the same run wrote, so one plain loop reads the same values) */
    memset(known, 0, (size_t)top + 1);
    for (i = 0; i < len; i++) {
        int c = cyc[i];
        if (c == c0)
            continue;
        crow = (Py_ssize_t)c * s;
        for (x = 1; x <= top; x++) {
            Edge ce = E[crow + x];
            Edge *cur = E + row + x;
            if (edge_live(*cur)) {
                int ca = edge_a(ce), ga, gb;
                double h = y[ca] + y[ce.b] - w2[ca * n1 + ce.b], g;
                if (known[x]) {
                    g = rc[x];
                } else {
                    ga = edge_a(*cur);
                    gb = cur->b;
                    g = y[ga] + y[gb] - w2[ga * n1 + gb];
                }
                if (!(h < g)) {
                    rc[x] = g;
                    known[x] = 1;
                    continue;
                }
                rc[x] = h;
                known[x] = 1;
            } else {
                known[x] = 0;
            }
            *cur = ce;
            E[(Py_ssize_t)x * s + nb] = E[(Py_ssize_t)x * s + c];
        }
        known[nb] = 0;
    }
    for (i = 0; i < len; i++) {
        int c = cyc[i];
        if (c <= n) {
            S->sub[srow + c] = c;
        } else {
            Py_ssize_t cs = (Py_ssize_t)c * n1;
            int v;
            for (v = 1; v <= n; v++)
                if (S->sub[cs + v])
                    S->sub[srow + v] = c;
        }
    }
    rescan(S, nb);
    S->rpos[nb] = S->bpos[nb] = S->pos;
}

static void expand(Solver *S, int b)
{
    int s = S->s, i, entry, pos, len;
    int *cyc = S->children + (Py_ssize_t)b * S->n1;
    len = S->nchild[b];
    for (i = 0; i < len; i++)
        set_root(S, cyc[i], cyc[i]);
    entry = S->sub[(Py_ssize_t)b * S->n1 + edge_a(S->e[(Py_ssize_t)b * s + S->parent[b]])];
    pos = rotate_to(S, b, entry);
    for (i = 0; i < pos; i += 2) {
        int c = cyc[i], d = cyc[i + 1];
        S->parent[c] = edge_a(S->e[(Py_ssize_t)d * s + c]);
        S->label[c] = ODD;
        S->label[d] = EVEN;
        S->best[c] = 0;
        S->bestc[c] = INFINITY;
        rescan(S, d);
        push(S, d);
    }
    S->label[entry] = ODD;
    S->parent[entry] = S->parent[b];
    if (S->best[entry]) {
        Py_ssize_t k = (Py_ssize_t)S->best[entry] * s + entry;
        S->bestc[entry] = rcost(S, edge_a(S->e[k]), S->e[k].b);
    } else {
        S->bestc[entry] = INFINITY;
    }
    for (i = pos + 1; i < len; i++) {
        int c = cyc[i];
        S->label[c] = FREE;
        rescan(S, c);
    }
    S->root[b] = 0;
}

static int tight_edge(Solver *S, int a0, int b0)
{
    int a = S->root[a0], b = S->root[b0];
    if (S->label[b] == FREE) {
        int m;
        S->parent[b] = a0;
        S->label[b] = ODD;
        m = S->root[S->mate[b]];
        S->best[b] = 0;
        S->best[m] = 0;
        S->rpos[b] = S->bpos[b] = S->pos;
        S->rpos[m] = S->bpos[m] = S->pos;
        S->bestc[b] = INFINITY;
        S->bestc[m] = INFINITY;
        S->label[m] = EVEN;
        push(S, m);
    } else if (S->label[b] == EVEN) {
        int anc = common_ancestor(S, a, b);
        if (anc == 0) {
            flip_path(S, a, b);
            flip_path(S, b, a);
            return 1;
        }
        contract(S, a, anc, b);
    }
    return 0;
}

/* Scan the neighbours of u (queued, its root ru not odd): note the cheapest edge into
 * every other outermost index, and grow, shrink or augment on each tight edge met.
 * 1 augmented, 0 done, -1 failed.  bpos[] records the scan (S->pos) behind each best[]. */
static inline int scan_vertex(Solver *S, int u, int ru)
{
    int s = S->s, n1 = S->n1, k, kend, scan, p = S->pos;
    int *label = S->label, *best = S->best, *root = S->root, *mate = S->mate;
    int *parent = S->parent, *met = S->met, *bpos = S->bpos;
    const int *nbr = S->nbr, *nbr_start = S->nbr_start;
    const Edge *E = S->e;
    double *bestc = S->bestc, *y = S->y;
    double yu;
    const double *wu;
    Py_ssize_t base;

    yu = y[u];
    scan = ++S->scan;
    wu = S->w2 + (Py_ssize_t)u * n1;
    base = (Py_ssize_t)u * s;
    kend = nbr_start[u + 1];
    for (k = nbr_start[u]; k < kend; k++) {
        int v = nbr[k], rv = root[v], lr;
        double c = yu + y[v] - wu[v];  /* pure: computed also where unused */
        if (rv == v) {
            if (c > 0.0) {
                /* the common case, without a branch to mispredict */
                double old = bestc[v];
                int better = c < old;
                best[v] = better ? u : best[v];
                bestc[v] = better ? c : old;
                bpos[v] = better ? p : bpos[v];
                continue;
            }
        } else if (rv == ru) {
            continue;
        } else if (c > 0.0) {
            int bb;
            /* Every vertex of rv has the same stored edge from u, so once its
             * cost has been compared, comparing it again is a no-op: bestc[rv]
             * only went down since.  Until the state changes: a grow, shrink or
             * augment below starts a new stamp (a grow resets bestc[rv]). */
            if (met[rv] == scan)
                continue;
            met[rv] = scan;
            bb = E[base + rv].b;
            double cb = yu + y[bb] - wu[bb];
            if (cb < bestc[rv]) {
                best[rv] = u;
                bestc[rv] = cb;
                bpos[rv] = p;
            }
            continue;
        }
        lr = label[rv];
        if (lr != ODD)
            scan = ++S->scan;
        if (lr == FREE) {
            int m;
            parent[rv] = u;
            label[rv] = ODD;
            m = root[mate[rv]];
            best[rv] = 0;
            best[m] = 0;
            bestc[rv] = INFINITY;
            bestc[m] = INFINITY;
            S->rpos[rv] = bpos[rv] = p;
            S->rpos[m] = bpos[m] = p;
            label[m] = EVEN;
            push(S, m);
            if (S->failed)
                return -1;
        } else if (lr == EVEN) {
            int done = tight_edge(S, u, v);
            if (S->failed)
                return -1;
            if (done)
                return 1;
            ru = root[u];
        }
    }
    return 0;
}

/* A stage's start: every label free, no best edges, the free outermost indices queued as
 * even roots.  1 when there is something to search, 0 when not, -1 failed. */
static int begin_stage(Solver *S)
{
    int top = S->top, x;
    for (x = 0; x <= top; x++) {
        S->label[x] = FREE;
        S->best[x] = 0;
        S->bestc[x] = INFINITY;
    }
    S->queue.len = 0;
    for (x = 1; x <= top; x++) {
        if (S->root[x] == x && S->mate[x] <= 0) {
            S->parent[x] = 0;
            S->label[x] = EVEN;
            push(S, x);
        }
    }
    if (S->failed)
        return -1;
    return S->queue.len ? 1 : 0;
}

/* One stage as blossom.py runs it; 1 augmented, 0 done, -1 failed (S->failed says why).
 * searched: search_tight has begun the stage and run its first search (the queue is
 * empty, best[] as the first search leaves it): go on from the dual update. */
static int stage_full(Solver *S, int searched)
{
    int n = S->n, s = S->s, n1 = S->n1, top = S->top, x, u, b;
    int *label = S->label, *best = S->best, *root = S->root;
    const Edge *E = S->e;
    double *bestc = S->bestc, *y = S->y;
    IntVec *q = &S->queue;
    double delta, lim, d2;

    if (!searched) {
        int go = begin_stage(S);
        if (go <= 0)
            return go;
    }
    for (;;) {
        Py_ssize_t i = 0;
        while (i < q->len) {
            int ru;
            u = q->data[i++];
            ru = root[u];
            if (label[ru] == ODD)
                continue;
            if (scan_vertex(S, u, ru))
                return S->failed ? -1 : 1;
        }
        q->len = 0;

        top = S->top;
        delta = INFINITY;
        for (x = 1; x <= top; x++) {
            if (root[x] == x) {
                int lx = label[x];
                if (lx == ODD) {
                    if (x > n) {
                        double h = y[x] / 2.0;
                        if (h < delta)
                            delta = h;
                    }
                } else if (best[x]) {
                    double h = bestc[x];
                    if (lx == EVEN)
                        h = h / 2.0;
                    if (h < delta)
                        delta = h;
                }
            }
        }
        lim = delta > 0.0 ? delta * 1.001 : INFINITY;
        S->yver++;  /* the vertex duals change now: every carried list is stale */
        for (u = 1; u <= n; u++) {
            int lu = label[root[u]];
            if (lu == EVEN) {
                double yu = y[u];
                if (yu <= lim && (yu <= delta || is_close(yu, delta)))
                    return 0;
                y[u] = yu - delta;
            } else if (lu == ODD) {
                y[u] += delta;
            }
        }
        d2 = delta * 2;
        for (b = n + 1; b <= top; b++) {
            if (root[b] == b) {
                if (label[b] == EVEN)
                    y[b] += d2;
                else if (label[b] == ODD)
                    y[b] -= d2;
            }
        }
        for (x = 1; x <= top; x++) {
            int bx = best[x];
            if (bx != 0 && root[x] == x) {
                const double *wb = S->w2 + (Py_ssize_t)bx * n1;
                int b0;
                double c;
                if (x <= n) {
                    c = y[bx] + y[x] - wb[x];
                    b0 = x;
                } else {
                    b0 = E[(Py_ssize_t)bx * s + x].b;
                    c = y[bx] + y[b0] - wb[b0];
                }
                bestc[x] = c;
                if (c <= 0.0 && root[bx] != x) {
                    int done = tight_edge(S, bx, b0);
                    if (S->failed)
                        return -1;
                    if (done)
                        return 1;
                }
            }
        }
        for (b = n + 1; b <= S->top; b++) {
            if (root[b] == b && label[b] == ODD && y[b] <= 0.0) {
                expand(S, b);
                if (S->failed)
                    return -1;
            }
        }
    }
}

/* u's neighbours v with !(y[u] + y[v] - w2[u][v] > 0), increasing: the edges on which
 * scan_vertex would grow, shrink or augment.  Kept until the next dual update. */
/* list[0..mid) and list[mid..end), each increasing, into one increasing list (tmp: scratch
 * of mid ints). */
static void merge_runs(int *list, int mid, int end, int *tmp)
{
    int i = 0, j = mid, k = 0;
    memcpy(tmp, list, (size_t)mid * sizeof(int));
    while (i < mid && j < end)
        list[k++] = tmp[i] <= list[j] ? tmp[i++] : list[j++];
    while (i < mid)
        list[k++] = tmp[i++];
}

static const int *tight_list(Solver *S, int u, int *len)
{
    int *list = S->tight + S->nbr_start[u];
    if (S->tight_ver[u] != S->yver && S->finite) {
        /* kind by kind: y[u] + y[v] - w rounds monotonically in y[v] (finite doubles), so
         * when the kind's least dual leaves its edges from u slack, all of them are;
         * the others' vertices are tested as below, then put in increasing order */
        const double *wu = S->w2 + (Py_ssize_t)u * S->n1, *y = S->y;
        double yu = y[u];
        int K, count = 0, runs = 0;
        if (S->kymin_ver != S->yver) {
            for (K = 0; K < S->nk; K++) {
                double m = INFINITY;
                int j;
                for (j = S->kstart[K]; j < S->kstart[K + 1]; j++)
                    if (y[S->kverts[j]] < m)
                        m = y[S->kverts[j]];
                S->kymin[K] = m;
            }
            S->kymin_ver = S->yver;
        }
        for (K = 0; K < S->nk; K++) {
            int j = S->kstart[K], end = S->kstart[K + 1], before = count;
            double w;
            if (S->kverts[j] == u && ++j == end)
                continue;
            w = wu[S->kverts[j]];  /* the same for every vertex of the kind but u */
            if (!(w > 0.0) || yu + S->kymin[K] - w > 0.0)
                continue;
            for (; j < end; j++) {
                int v = S->kverts[j];
                double c;
                if (v == u)
                    continue;
                c = yu + y[v] - wu[v];  /* scan_vertex's double, its test */
                if (!(c > 0.0))
                    list[count++] = v;
            }
            if (count > before && runs++)
                merge_runs(list, before, count, S->merge_tmp);
        }
        S->tight_len[u] = count;
        S->tight_ver[u] = S->yver;
    } else if (S->tight_ver[u] != S->yver) {
        const double *wu = S->w2 + (Py_ssize_t)u * S->n1, *y = S->y;
        double yu = y[u];
        int k, kend = S->nbr_start[u + 1], count = 0;
        for (k = S->nbr_start[u]; k < kend; k++) {
            int v = S->nbr[k];
            double c = yu + y[v] - wu[v];  /* scan_vertex's double, its test */
            if (!(c > 0.0))
                list[count++] = v;
        }
        S->tight_len[u] = count;
        S->tight_ver[u] = S->yver;
    }
    *len = S->tight_len[u];
    return list;
}

/* Whether scanning u (root ru) now would change nothing but best[]: each of its tight edges
 * stays inside ru or ends at an odd index, where scan_vertex does nothing. */
static int scan_is_quiet(Solver *S, int u, int ru)
{
    int len, k;
    const int *list = tight_list(S, u, &len);
    for (k = 0; k < len; k++) {
        int v = list[k], rv = S->root[v];
        if (!(rv != v && rv == ru) && S->label[rv] != ODD)
            return 0;
    }
    return 1;
}

/* (c, p) before (bestc[x], bpos[x]): cheaper, or as cheap and from an earlier scan; the
 * scans' own rule ("strictly cheaper than what an earlier scan found") across any order. */
static inline void offer(Solver *S, int x, int u, double c, int p)
{
    if (c < S->bestc[x] || (c == S->bestc[x] && p < S->bpos[x])) {
        S->best[x] = u;
        S->bestc[x] = c;
        S->bpos[x] = p;
    }
}

/* Give every outermost free or even index the best[] that the quiet scans left to here
 * would have given it (the others' best[] is never read in this stage: an odd index stays
 * odd, and an index inside a blossom made in this stage stays inside).
 *
 * Such an index x never had a tight edge from a quiet scan (that scan would not have been
 * quiet, or x would have left free/even since), so a quiet scan of u after x's last reset
 * (rpos[x]) offers x: the cost of the edge u -> x for a vertex x that is a neighbour of u,
 * the cost of u's stored edge into x for a blossom x with a neighbour of u inside and u
 * outside.  Vertices of one kind with the same dual offer a vertex x the same cost (their
 * weight rows are equal), so per such group only its first scan after rpos[x] (not x
 * itself) can win: one offer per group instead of one per scan. */
static int settle_quiet(Solver *S)
{
    int n = S->n, s = S->s, n1 = S->n1, top = S->top, nq = (int)S->quiet.len, ng = 0;
    const int *qu = S->quiet.data, *qp = S->quiet_pos.data, *root = S->root;
    int *gid = S->gid, *gkind = S->gkind, *gnext = S->gnext, *gstart = S->gstart;
    int *gmem = S->gmem, *khead = S->khead, *label = S->label;
    const double *y = S->y, *w2 = S->w2;
    double *gy = S->gy;
    int d, g, x;

    if (nq == 0)
        return 0;
    for (d = 0; d < nq; d++) {
        int u = qu[d], k = S->kind[u];
        for (g = khead[k]; g >= 0; g = gnext[g])
            if (memcmp(&gy[g], &y[u], sizeof(double)) == 0)
                break;
        if (g < 0) {
            g = ng++;
            gkind[g] = k;
            gy[g] = y[u];
            gnext[g] = khead[k];
            khead[k] = g;
            gstart[g] = 0;
        }
        gid[d] = g;
        gstart[g]++;
    }
    for (g = 0, d = 0; g < ng; g++) {  /* counts to starts; members in scan order */
        int c = gstart[g];
        gstart[g] = d;
        d += c;
        khead[gkind[g]] = -1;
    }
    gstart[ng] = nq;
    for (d = 0; d < nq; d++)
        gmem[gstart[gid[d]]++] = d;
    for (g = ng; g > 0; g--)
        gstart[g] = gstart[g - 1];
    gstart[0] = 0;

    for (x = 1; x <= top; x++) {
        int lx;
        if (root[x] != x)
            continue;
        lx = label[x];
        if (lx == ODD)
            continue;
        if (x <= n) {
            double yx = y[x];
            int r = S->rpos[x];
            for (g = 0; g < ng; g++) {
                int lo = gstart[g], hi = gstart[g + 1], u;
                if (qp[gmem[lo]] > r)  /* usually: r is the stage's start */
                    hi = lo;
                while (lo < hi) {  /* first member scanned after r */
                    int mid = (lo + hi) / 2;
                    if (qp[gmem[mid]] > r)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                if (lo < gstart[g + 1] && qu[gmem[lo]] == x)
                    lo++;
                if (lo == gstart[g + 1])
                    continue;
                u = qu[gmem[lo]];
                if (w2[(Py_ssize_t)u * n1 + x] > 0.0)
                    offer(S, x, u, y[u] + yx - w2[(Py_ssize_t)u * n1 + x], qp[gmem[lo]]);
            }
        } else {
            int r = S->rpos[x], v;
            /* which groups have a neighbour in x (any member outside x tells: equal rows) */
            for (g = 0; g < ng; g++) {
                int j, rep = 0;
                gkind[g] = 0;  /* reused: 1 when the group reaches into x */
                for (j = gstart[g]; j < gstart[g + 1]; j++)
                    if (root[qu[gmem[j]]] != x) {
                        rep = qu[gmem[j]];
                        break;
                    }
                if (!rep)
                    continue;
                for (v = 1; v <= n; v++)
                    if (root[v] == x && w2[(Py_ssize_t)rep * n1 + v] > 0.0) {
                        gkind[g] = 1;
                        break;
                    }
            }
            for (d = 0; d < nq; d++) {
                int u = qu[d], bb;
                if (qp[d] <= r || !gkind[gid[d]] || root[u] == x)
                    continue;
                bb = S->e[(Py_ssize_t)u * s + x].b;
                offer(S, x, u, y[u] + y[bb] - w2[(Py_ssize_t)u * n1 + bb], qp[d]);
            }
        }
    }
    return 0;
}

/* A stage's first search on the tight-edge lists (1 augmented, 0 searched, 2 nothing to
 * search, -1 failed).
 *
 * Why: the first search of a stage (before its first dual update) is most of the
 * matcher's time, and most of it is scans that only lower best[] entries.  A scan's grows,
 * shrinks and augmentation depend on the roots, the labels and which of its edges are
 * tight, never on best[]; so a scan whose tight edges all stay inside its blossom or end at
 * an odd index ("quiet") changes nothing else, whenever it is done.  Here only the other
 * scans run (scan_vertex, in queue order, so every grow, shrink and augmentation is the
 * full search's); the quiet ones are noted, and if the search ends without augmenting,
 * settle_quiet gives best[] what they would have given it, grouped by kind.  A vertex's
 * tight edges are listed once per dual update (tight_list), not once per stage. */
static int search_tight(Solver *S)
{
    int u, go, top;
    IntVec *q = &S->queue;
    Py_ssize_t i = 0;

    go = begin_stage(S);
    if (go <= 0)
        return go < 0 ? -1 : 2;
    top = S->top;
    memset(S->rpos, 0, (size_t)(top + 1) * sizeof(int));
    memset(S->bpos, 0, (size_t)(top + 1) * sizeof(int));
    S->pos = 0;
    S->quiet.len = 0;
    S->quiet_pos.len = 0;
    while (i < q->len) {
        int ru;
        u = q->data[i++];
        ru = S->root[u];
        if (S->label[ru] == ODD)
            continue;
        S->pos++;
        S->scans++;
        /* (a vertex is queued once per first search, so the groups' n1 * 2 slots do;
         * scanning a quiet vertex in full would be as exact) */
        if (S->quiet.len < 2 * (Py_ssize_t)S->n1 && scan_is_quiet(S, u, ru)) {
            if (vec_push(&S->quiet, u) || vec_push(&S->quiet_pos, S->pos)) {
                S->failed = 1;
                return -1;
            }
            S->quiet_scans++;
            continue;
        }
        if (scan_vertex(S, u, ru))
            return S->failed ? -1 : 1;
    }
    q->len = 0;
    return settle_quiet(S);
}

/* One stage: 1 augmented, 0 done, -1 failed. */
static int stage(Solver *S)
{
    int rc;
    S->stages++;
    if (!S->carry)
        return stage_full(S, 0);
    rc = search_tight(S);
    if (rc != 0)
        return rc == 2 ? 0 : rc;
    return stage_full(S, 1);
}

static void solver_free(Solver *S)
{
    free(S->w2);
    free(S->e);
    free(S->rc);
    free(S->known);
    free(S->mate);
    free(S->root);
    free(S->parent);
    free(S->label);
    free(S->best);
    free(S->seen);
    free(S->met);
    free(S->bestc);
    free(S->y);
    free(S->children);
    free(S->nchild);
    free(S->sub);
    free(S->nbr_start);
    free(S->nbr);
    free(S->innbr_start);
    free(S->innbr);
    free(S->queue.data);
    free(S->scratch.data);
    free(S->work.data);
    free(S->tight);
    free(S->tight_len);
    free(S->tight_ver);
    free(S->rpos);
    free(S->bpos);
    free(S->kind);
    free(S->quiet.data);
    free(S->quiet_pos.data);
    free(S->gid);
    free(S->gkind);
    free(S->gnext);
    free(S->gstart);
    free(S->gmem);
    free(S->khead);
    free(S->gy);
    free(S->kstart);
    free(S->kverts);
    free(S->kymin);
    free(S->merge_tmp);
}

/* Set up the tables of blossom.py's _DenseBlossom from w (n x n, row-major, w[i*n+j] the
 * weight as seen from i, already float; <= 0 or NaN means no edge).  Returns 0 or -1. */
static int solver_init(Solver *S, int n, const double *w, double *w_max)
{
    int s = n + n / 2 + 2, n1 = n + 1, r, c, v, edges = 0;
    size_t ss = (size_t)s * s;
    memset(S, 0, sizeof(*S));
    S->n = n;
    S->n1 = n1;
    S->s = s;
    S->top = n;
    S->w2 = (double *)calloc((size_t)n1 * n1, sizeof(double));
    S->e = (Edge *)calloc(ss, sizeof(Edge));
    S->rc = (double *)malloc((size_t)s * sizeof(double));
    S->known = (char *)malloc((size_t)s);
    S->mate = (int *)calloc(s, sizeof(int));
    S->root = (int *)calloc(s, sizeof(int));
    S->parent = (int *)calloc(s, sizeof(int));
    S->label = (int *)malloc((size_t)s * sizeof(int));
    S->best = (int *)calloc(s, sizeof(int));
    S->seen = (int *)calloc(s, sizeof(int));
    S->met = (int *)calloc(s, sizeof(int));
    S->bestc = (double *)malloc((size_t)s * sizeof(double));
    S->y = (double *)calloc(s, sizeof(double));
    S->children = (int *)calloc((size_t)s * n1, sizeof(int));
    S->nchild = (int *)calloc(s, sizeof(int));
    S->sub = (int *)calloc((size_t)s * n1, sizeof(int));
    S->nbr_start = (int *)calloc((size_t)n1 + 1, sizeof(int));
    S->innbr_start = (int *)calloc((size_t)n1 + 1, sizeof(int));
    if (!S->w2 || !S->e || !S->rc || !S->known || !S->mate || !S->root || !S->parent
        || !S->label || !S->best || !S->seen || !S->met || !S->bestc || !S->y || !S->children
        || !S->nchild || !S->sub || !S->nbr_start || !S->innbr_start)
        return -1;
    *w_max = 0.0;
    for (r = 1; r <= n; r++) {
        for (c = 1; c <= n; c++) {
            double x;
            if (c == r)
                continue;
            x = w[(Py_ssize_t)(r - 1) * n + (c - 1)];
            if (x > 0) {
                S->w2[(Py_ssize_t)r * n1 + c] = x * 2.0;
                S->nbr_start[r + 1]++;
                S->innbr_start[c + 1]++;
                edges++;
                if (x > *w_max)
                    *w_max = x;
            }
        }
    }
    for (r = 1; r <= n1; r++) {
        S->nbr_start[r] += S->nbr_start[r - 1];
        S->innbr_start[r] += S->innbr_start[r - 1];
    }
    S->nbr = (int *)malloc((size_t)(edges ? edges : 1) * sizeof(int));
    S->innbr = (int *)malloc((size_t)(edges ? edges : 1) * sizeof(int));
    S->tight = (int *)malloc((size_t)(edges ? edges : 1) * sizeof(int));
    S->tight_len = (int *)calloc((size_t)n1, sizeof(int));
    S->tight_ver = (int *)malloc((size_t)n1 * sizeof(int));
    S->rpos = (int *)calloc((size_t)s, sizeof(int));
    S->bpos = (int *)calloc((size_t)s, sizeof(int));
    S->kind = (int *)malloc((size_t)n1 * sizeof(int));
    /* settle_quiet's groups: at most one per quiet scan, at most one scan per queue entry */
    S->gid = (int *)malloc((size_t)n1 * 2 * sizeof(int));
    S->gkind = (int *)malloc((size_t)n1 * 2 * sizeof(int));
    S->gnext = (int *)malloc((size_t)n1 * 2 * sizeof(int));
    S->gstart = (int *)malloc(((size_t)n1 * 2 + 1) * sizeof(int));
    S->gmem = (int *)malloc((size_t)n1 * 2 * sizeof(int));
    S->khead = (int *)malloc((size_t)n1 * sizeof(int));
    S->gy = (double *)malloc((size_t)n1 * 2 * sizeof(double));
    if (!S->nbr || !S->innbr || !S->tight || !S->tight_len || !S->tight_ver || !S->rpos
        || !S->bpos || !S->kind || !S->gid || !S->gkind || !S->gnext || !S->gstart
        || !S->gmem || !S->khead || !S->gy)
        return -1;
    for (v = 0; v < n1; v++) {
        S->tight_ver[v] = -1;  /* no list yet (yver starts at 0) */
        S->kind[v] = v;        /* each vertex its own kind unless told (solver_set_kinds) */
        S->khead[v] = -1;
    }
    {
        /* rows in increasing r, columns in increasing c: both lists come out increasing */
        int *fill = (int *)malloc((size_t)(n1 + 1) * sizeof(int));
        int k = 0;
        if (fill == NULL)
            return -1;
        memcpy(fill, S->innbr_start, (size_t)(n1 + 1) * sizeof(int));
        for (r = 1; r <= n; r++) {
            for (c = 1; c <= n; c++) {
                if (c != r && S->w2[(Py_ssize_t)r * n1 + c] != 0.0) {
                    S->nbr[k++] = c;
                    S->innbr[fill[c]++] = r;
                }
            }
        }
        free(fill);
    }
    for (r = 0; r <= n; r++) {
        Py_ssize_t base = (Py_ssize_t)r * s;
        for (c = 0; c <= n; c++) {
            Edge *e = S->e + base + c;
            /* live where the weight is > 0 (w2 holds it doubled, exactly) */
            e->a = r >= 1 && c >= 1 && c != r && S->w2[(Py_ssize_t)r * n1 + c] > 0.0 ? ~r : r;
            e->b = c;
        }
    }
    for (r = 0; r < s; r++) {
        S->root[r] = r <= n ? r : 0;
        S->label[r] = FREE;
        S->bestc[r] = INFINITY;
    }
    for (v = 1; v <= n; v++)
        S->sub[(Py_ssize_t)v * n1 + v] = v;
    return 0;
}

/* seq's floats into out[0..len); -1 with an exception set when seq is not that. */
static int read_doubles(PyObject *seq, Py_ssize_t len, double *out, const char *what)
{
    Py_ssize_t i;
    PyObject *fast = PySequence_Fast(seq, "weights must be a sequence");
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != len) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd values, got %zd", what, len,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    for (i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        double x = PyFloat_CheckExact(item) ? PyFloat_AS_DOUBLE(item) : PyFloat_AsDouble(item);
        if (x == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        out[i] = x;
    }
    Py_DECREF(fast);
    return 0;
}

static int check_count(Py_ssize_t n)
{
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "node count must be >= 0, got %zd", n);
        return -1;
    }
    if (n > 46000) {
        PyErr_SetString(PyExc_ValueError, "too many nodes for the compiled matcher");
        return -1;
    }
    return 0;
}

/* Kind lists from S->kind (each vertex's first vertex of its kind); -1 out of memory. */
static int set_kinds(Solver *S)
{
    int n = S->n, v, K = 0, *at;
    S->kstart = (int *)calloc((size_t)n + 2, sizeof(int));
    S->kverts = (int *)malloc((size_t)(n ? n : 1) * sizeof(int));
    S->kymin = (double *)malloc((size_t)(n ? n : 1) * sizeof(double));
    S->merge_tmp = (int *)malloc((size_t)(n ? n : 1) * sizeof(int));
    at = (int *)malloc((size_t)(n + 1) * sizeof(int));
    if (!S->kstart || !S->kverts || !S->kymin || !S->merge_tmp || !at) {
        free(at);
        return -1;
    }
    for (v = 1; v <= n; v++)  /* kind number by first vertex; count into kstart[K + 1] */
        if (S->kind[v] == v)
            at[v] = K++;
    S->nk = K;
    for (v = 1; v <= n; v++)
        S->kstart[at[S->kind[v]] + 1]++;
    for (K = 0; K < S->nk; K++)
        S->kstart[K + 1] += S->kstart[K];
    {
        int *fill = (int *)malloc((size_t)(S->nk + 1) * sizeof(int));
        if (fill == NULL) {
            free(at);
            return -1;
        }
        memcpy(fill, S->kstart, (size_t)(S->nk + 1) * sizeof(int));
        for (v = 1; v <= n; v++)
            S->kverts[fill[at[S->kind[v]]]++] = v;
        free(fill);
    }
    free(at);
    S->kymin_ver = -1;
    return 0;
}

/* Solve on w (n x n, row-major; freed here) and return blossom_pairs' list of pairs.
 * first: NULL, or for each node the first node of its kind (equal weight rows), which
 * lets settle_quiet group them.  carry: 0 runs every stage in full (stage()); with
 * counts, (pairs, (stages, scans of first searches, of them quiet)). */
static PyObject *run(int n, double *w, const int *first, int carry, int counts)
{
    PyObject *out;
    double w_max;
    Solver S;
    int rc, u;

    if (solver_init(&S, n, w, &w_max) < 0) {
        free(w);
        solver_free(&S);
        return PyErr_NoMemory();
    }
    free(w);
    S.carry = carry;
    if (first)
        for (u = 1; u <= n; u++)
            S.kind[u] = first[u - 1] + 1;
    S.finite = isfinite(w_max) && w_max < 1e300;  /* no sum of two duals overflows */
    if (set_kinds(&S) < 0) {
        solver_free(&S);
        return PyErr_NoMemory();
    }
    if (!(w_max > 0)) {
        solver_free(&S);
        out = PyList_New(0);
        return counts && out ? Py_BuildValue("(N(iii))", out, 0, 0, 0) : out;
    }
    for (u = 0; u <= n; u++)
        S.y[u] = w_max;
    Py_BEGIN_ALLOW_THREADS
    do {
        rc = stage(&S);
    } while (rc == 1);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        if (S.failed == 2)
            PyErr_SetString(PyExc_RuntimeError, "blossom slots exhausted");
        else
            PyErr_NoMemory();
        solver_free(&S);
        return NULL;
    }
    out = PyList_New(0);
    if (out == NULL) {
        solver_free(&S);
        return NULL;
    }
    for (u = 1; u <= n; u++) {
        int m = S.mate[u];
        if (m > u && S.mate[m] == u) {
            PyObject *pair = Py_BuildValue("(ii)", u - 1, m - 1);
            if (pair == NULL || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(out);
                solver_free(&S);
                return NULL;
            }
            Py_DECREF(pair);
        }
    }
    solver_free(&S);
    if (counts)
        return Py_BuildValue("(N(LLL))", out, S.stages, S.scans, S.quiet_scans);
    return out;
}

PyDoc_STRVAR(solve_doc,
"solve(n, weights, carry=True, counts=False) -> list of (i, j)\n\n"
"blossom_pairs on a flat row-major n*n sequence of floats (weights[i*n+j] is the\n"
"weight as seen from i; the diagonal is ignored; an edge exists where > 0).\n"
"carry=False scans every stage in full (the same pairs, slower: for tests);\n"
"counts=True returns (pairs, (stages, scans of first searches, of them quiet)).");

static PyObject *solve(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *seq;
    double *w;
    int carry = 1, counts = 0;

    if (!PyArg_ParseTuple(args, "nO|pp:solve", &n, &seq, &carry, &counts) || check_count(n) < 0)
        return NULL;
    w = (double *)malloc((size_t)(n ? n * n : 1) * sizeof(double));
    if (w == NULL)
        return PyErr_NoMemory();
    if (read_doubles(seq, n * n, w, "weights") < 0) {
        free(w);
        return NULL;
    }
    return run((int)n, w, NULL, carry, counts);
}

PyDoc_STRVAR(solve_indexed_doc,
"solve_indexed(kinds, m, table, carry=True, counts=False) -> list of (i, j)\n\n"
"solve(n, weights) where node i is of kind kinds[i] (0 <= kind < m) and\n"
"weights[i*n+j] = table[kinds[i]*m + kinds[j]]: for callers whose weights depend\n"
"only on the kinds of the two nodes (n = len(kinds)); carry and counts as in solve.");

static PyObject *solve_indexed(PyObject *self, PyObject *args)
{
    Py_ssize_t n, m, i, j;
    PyObject *kinds_obj, *fast, *table_obj;
    double *table, *w;
    Py_ssize_t *kind;
    int carry = 1, counts = 0;

    if (!PyArg_ParseTuple(args, "OnO|pp:solve_indexed", &kinds_obj, &m, &table_obj, &carry,
                          &counts))
        return NULL;
    if (m < 0 || m > 46000) {
        PyErr_Format(PyExc_ValueError, "kind count must be in 0..46000, got %zd", m);
        return NULL;
    }
    fast = PySequence_Fast(kinds_obj, "kinds must be a sequence");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    if (check_count(n) < 0) {
        Py_DECREF(fast);
        return NULL;
    }
    kind = (Py_ssize_t *)malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    table = (double *)malloc((size_t)(m ? m * m : 1) * sizeof(double));
    w = (double *)malloc((size_t)(n ? n * n : 1) * sizeof(double));
    if (kind == NULL || table == NULL || w == NULL) {
        free(kind);
        free(table);
        free(w);
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (i = 0; i < n; i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (k == -1 && PyErr_Occurred())
            goto fail;
        if (k < 0 || k >= m) {
            PyErr_Format(PyExc_ValueError, "kind %zd of node %zd is not in 0..%zd", k, i, m - 1);
            goto fail;
        }
        kind[i] = k;
    }
    if (read_doubles(table_obj, m * m, table, "table") < 0)
        goto fail;
    Py_DECREF(fast);
    for (i = 0; i < n; i++) {
        const double *row = table + kind[i] * m;
        double *out = w + i * n;
        for (j = 0; j < n; j++)
            out[j] = row[kind[j]];
    }
    free(table);
    {
        /* for each node the first node of its kind (kind[] reused for the map) */
        int *first = (int *)malloc((size_t)(n ? n : 1) * sizeof(int));
        int *at = (int *)malloc((size_t)(m ? m : 1) * sizeof(int));
        PyObject *out;
        if (first == NULL || at == NULL) {
            free(first);
            free(at);
            free(kind);
            free(w);
            return PyErr_NoMemory();
        }
        for (i = 0; i < m; i++)
            at[i] = -1;
        for (i = 0; i < n; i++) {
            if (at[kind[i]] < 0)
                at[kind[i]] = (int)i;
            first[i] = at[kind[i]];
        }
        free(at);
        free(kind);
        out = run((int)n, w, first, carry, counts);
        free(first);
        return out;
    }
fail:
    free(kind);
    free(table);
    free(w);
    Py_DECREF(fast);
    return NULL;
}

static PyMethodDef methods[] = {
    {"solve", solve, METH_VARARGS, solve_doc},
    {"solve_indexed", solve_indexed, METH_VARARGS, solve_indexed_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_blossom",
    "Compiled twin of scheduler.core.blossom (same algorithm, same floats, same pairs).",
    -1, methods,
};

/* Each call allocates its tables (up to n*n doubles) and frees them on return. With glibc's
 * defaults the freed heap top was handed back to the kernel on nearly every call and faulted
 * in again on the next (trace4: 780,000 page faults, 1.7 of 18.6 s in the kernel); keeping up
 * to 32 MB of freed heap, and serving requests up to that size from the heap, stops that
 * churn. Only where glibc decides this; results do not depend on it. */
#define KEEP_HEAP_BYTES (32 * 1024 * 1024)

PyMODINIT_FUNC PyInit__blossom(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, KEEP_HEAP_BYTES);
    mallopt(M_TRIM_THRESHOLD, KEEP_HEAP_BYTES);
#endif
    return PyModule_Create(&module);
}
