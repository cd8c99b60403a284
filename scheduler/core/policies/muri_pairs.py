"""Which of Muri's candidates merge: a group's interleaved iteration time and slot order,
the weight of merging two candidates (the merged group's efficiency), and each matching
round's maximum-weight pairs.

The policy (muri.py) decides what is admitted, how many matching rounds run and where groups
go; this holds the cost model's side of it and the caches that let the same candidates,
which meet round after round while profiles stay put, cost a lookup.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from operator import attrgetter
from typing import Sequence

import numpy as np

from scheduler.core import interleave
from scheduler.core.memory import SLACK, Room, held_gb
from specs.fit import accepts, holds
from scheduler.core.blossom import blossom_pairs_flat, blossom_pairs_indexed
from scheduler.core.matching import (max_weight_pairs, max_weight_pairs_dense,
                                     max_weight_pairs_edges)
from scheduler.core.model import CostModel
from scheduler.core.policies.muri_outlook import Outlook, gain_pays, merge_pays, packing_stats
from scheduler.core.policies.settings import MuriSettings
from scheduler.core.state import JobView

Packing = list  # the jobs of one prospective group, in matching order


class Recent(OrderedDict):
    """A bounded map that drops what was used least recently when full."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        value = super().get(key, default)
        if value is not default:
            self.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)


class Pairing:
    """Muri's cost model and matcher for one policy instance (the cost model, its settings:
    group size k, hysteresis, matching backend, gap and window; slot ordering and matching
    ablation)."""

    def __init__(self, model: CostModel, settings: MuriSettings, *, ordering: str,
                 matching: bool):
        self.model = model
        self.k = settings.max_group
        self.ordering = ordering
        self.matching = matching
        self.backend = backend = settings.matching_backend
        self.hysteresis = settings.regroup_hysteresis
        self.window = settings.matching_window
        self.rel_gap = settings.matching_rel_gap
        self.gain = settings.merge_gain if settings.merge_rule == "gain" else None
        self._tt_cache: dict[tuple, tuple[float, tuple]] = {}
        self._weights: dict[tuple, float] = {}  # cleared when a profile changes
        # the same by kind of candidate, for the "blossom" backend (see kind_table): a number
        # for each packing's member profiles, and per number {partner's number: weight}
        self._shapes: dict[tuple, int] = {}
        self._rows: dict[int, dict[int, float]] = {}
        self._tt_rows: dict[int, dict[int, float]] = {}  # likewise, merged iteration times
        # a Job (by identity) -> (its shape, the number of that shape) as a candidate alone:
        # a job's shape is read again each round, and looked up only if it is another object
        self._alone: dict[JobView, tuple[object, int]] = {}
        self._matchings: dict[tuple, dict[int, int]] = {}  # likewise
        # candidates (by Job identity) -> the merges among them that may form (see _merges)
        self._merge_cache: dict[tuple, tuple] = {}
        # likewise for one matching window's candidates, and a window's paying edges -> pairs
        # (the least recently used go first: a deep queue's round meets about a hundred
        # windows, most of them the last round's; emptying the whole cache when full made
        # the round after it weigh every window again)
        self._window_cache: Recent = Recent(256)
        self._window_matchings: Recent = Recent(1024)
        # each job's window in the first matching round of the last plan that weighed it
        # (see _windows_of): the later rounds' windows join those
        self._home: dict[JobView, int] = {}
        # Whole weight matrices in numpy and the pruned exact matcher; the artifact-compatible
        # "blossom" backend and the ordering ablations keep the pair-by-pair path.
        self._dense = backend in ("auto", "rustworkx", "networkx") and ordering == "best"
        # where groups may form (memory.Room: the GB a group's members may hold on each GPU,
        # by pool, and the pools' GPU types): a merge that fits nowhere weighs 0, so no
        # matching proposes it
        self.room = Room((), (math.inf,), True)
        self.lonely = False  # some job must run alone (memory.fits): matrices mask it

    @property
    def mem_budget(self) -> float:
        """A one-shape cluster's group budget (inf on a cluster of pools: see `room`)."""
        return self.room.budget if self.room.simple else math.inf

    def set_room(self, room: Room) -> None:
        """The cluster's room; what was remembered under another is stale."""
        if room != self.room:
            self.room = room
            self.forget()

    def set_model(self, model: CostModel) -> None:
        """Another cost model (a calibrated group slowdown): every group time is stale."""
        self.model = model
        self._tt_cache.clear()
        self.forget()

    def forget(self) -> None:
        """A profile changed: every remembered weight and matching may be stale."""
        self._weights.clear()
        self._matchings.clear()
        self._merge_cache.clear()
        self._window_cache.clear()
        self._window_matchings.clear()
        self._rows.clear()  # by profiles they would stay valid, but not by ids ("none")
        self._tt_rows.clear()
        self._shapes.clear()
        self._alone.clear()

    def group_timing(self, jobs: list[JobView], ordering: str | None = None) -> tuple[float, tuple]:
        """(iteration time of every member, slot order as indices into `jobs`)."""
        if len(jobs) == 1:
            return jobs[0].solo_time, (0,)
        ordering = ordering or self.ordering
        if ordering == "none":
            jobs = sorted(jobs, key=lambda j: j.id)
        profiles = tuple(j.profile for j in jobs)
        cache_key = (ordering, profiles)
        hit = self._tt_cache.get(cache_key)
        if hit is None:
            if ordering == "best":
                tt, order = interleave.best_order_indices(profiles)
            elif ordering == "worst":
                tt, order = interleave.worst_order_indices(profiles)
            elif ordering == "fixed":  # the order given (a running group's), gap layout allowed
                tt, order = interleave.fixed_order_indices(profiles)
            else:
                tt, order = interleave.identity_order_tt(profiles), tuple(range(len(jobs)))
            slowdown = self.model.slowdown(len(jobs), ablation_nomatch=not self.matching)
            hit = (tt * slowdown, order)
            if len(self._tt_cache) > 100_000:
                self._tt_cache.clear()
            self._tt_cache[cache_key] = hit
        return hit

    def weight(self, a: Packing, b: Packing) -> float:
        """Efficiency of the merged group; remembered by member ids, since the same
        candidates meet again round after round while profiles stay put."""
        key = (tuple(j.id for j in a), tuple(j.id for j in b))
        hit = self._weights.get(key)
        return self.efficiency(a, b, key) if hit is None else hit

    def efficiency(self, a: Packing, b: Packing, key: tuple) -> float:
        value = self.merged_efficiency(a + b)
        if len(self._weights) > 200_000:
            self._weights.clear()
        self._weights[key] = value
        return value

    def merged_efficiency(self, jobs: Packing) -> float:
        """Busy stage time over slot time of the group `jobs` (in this member order: the
        float sum follows it), 0 when a member has no profile yet or the members' GPU
        memory does not fit together."""
        if not self.room.fits(jobs):
            return 0.0
        tt, _ = self.group_timing(jobs)
        if tt > 0 and all(map(_profiled, jobs)):
            k = interleave.slots(len(jobs[0].profile))
            return sum(sum(j.profile) for j in jobs) / (tt * k)
        return 0.0

    def pairs(self, nodes: list[Packing], look: Outlook | None = None) -> dict[int, int]:
        """Each candidate's partner in this round's maximum-weight matching, by index (a
        candidate left single has none): merging two candidates of one #GPU class is worth
        the merged group's efficiency. With `look` (the gain or the completion rule), only
        merges that pay (muri_outlook) are edges."""
        n = len(nodes)
        if n < 2:
            return {}
        if look is not None:
            return self._paying_pairs(nodes, look)
        return self._matched(nodes)

    def _matched(self, nodes: list[Packing]) -> dict[int, int]:
        """This round's maximum-weight matching over every merge (see pairs)."""
        n = len(nodes)
        # The same candidates in the same order often meet again in the next round (an event
        # that changed nothing here); the matching is a function of them, so remember it.
        # Keyed by the Job objects themselves (identity, eq=False): one per job, like its
        # id, and map(tuple) builds the key without a Python step per member.
        key = tuple(map(tuple, nodes))
        hysteresis = self.hysteresis
        bonus = [self.keep_bonus(node) for node in nodes] if hysteresis else [0.0] * n
        if hysteresis or self.window:  # who runs with whom: the bonuses, the windows
            key += tuple(j.group_key for node in nodes for j in node)
        if hysteresis:
            key += tuple(round(b, 3) for b, node in zip(bonus, nodes) if node[0].group_key)
        windows = None
        if self._dense and self.window and n > self.window:
            labels = _group_labels(nodes)
            windows, bound = self._windows_of(nodes, labels)
            key += tuple(tuple(idx.tolist()) for idx in windows)  # they follow the first round
        partner = self._matchings.get(key)
        if partner is not None:
            return partner
        if self._dense:
            pairs = []
            for idx in windows or [np.arange(n)]:
                w = self.weight_matrix([nodes[i] for i in idx], [bonus[i] for i in idx])
                if windows and bound[idx].any():
                    w[_strangers(labels, bound, idx[:, None], idx[None, :])] = 0.0
                found = max_weight_pairs_dense(w, backend=self.backend, rel_gap=self.rel_gap)
                pairs.extend((int(idx[i]), int(idx[j])) for i, j in found)
            return self._remember(key, pairs)
        if self.backend == "blossom":
            if hysteresis:
                pairs = blossom_pairs_flat(n, self.weight_rows(nodes, bonus))
            else:
                pairs = blossom_pairs_indexed(*self.kind_table(nodes))
            return self._remember(key, pairs)
        k, cache = self.k, self._weights
        ids = [tuple(j.id for j in node) for node in nodes]
        sizes = [len(node) for node in nodes]

        def weight(i: int, j: int) -> float:  # the hot path of a round: cache first
            if sizes[i] + sizes[j] > k:
                return 0.0
            pair = (ids[i], ids[j])
            value = cache.get(pair)
            if value is None:
                value = self.efficiency(nodes[i], nodes[j], pair)
            if hysteresis and _together(nodes[i], nodes[j]):
                value *= 1.0 + max(bonus[i], bonus[j])
            return value

        return self._remember(key, max_weight_pairs(n, weight, backend=self.backend))

    def _pays(self, stats, rows, cols, tt, gpus, total_gpus):
        """The merge rule's verdict on each merge (muri_outlook): the gain rule's, or the
        completion rule's (looked up when called, so a bench may put another in its place)."""
        if self.gain is not None:
            return gain_pays(stats, rows, cols, tt, gpus, total_gpus, self.gain)
        return merge_pays(stats, rows, cols, tt, gpus, total_gpus)

    def _paying_pairs(self, nodes: list[Packing], look: Outlook) -> dict[int, int]:
        """The matching over the merges that pay. The expected starts change every round, so
        only what the candidates' profiles decide is remembered by candidates (which merges
        are possible, their weights and iteration times); the dense path matches the
        paying merges, the others drop the matched pairs that do not pay."""
        gpus = nodes[0][0].num_gpu
        if not self._dense:
            tts = [self.group_timing(node)[0] for node in nodes]
            stats = packing_stats(nodes, tts, look)
            pairs = [(i, j) for i, j in self._matched(nodes).items() if i < j]
            if pairs:
                rows, cols = np.array(pairs).T
                tt = np.array([self.group_timing(nodes[i] + nodes[j])[0] for i, j in pairs])
                pays = self._pays(stats, rows, cols, tt, gpus, look.gpus)
                pairs = [pair for pair, ok in zip(pairs, pays) if ok]
            return _partners(pairs)
        n = len(nodes)
        windowed = bool(self.window) and n > self.window
        # who runs with whom: the keep bonuses and the windows follow it
        labels = _group_labels(nodes) if self.hysteresis or windowed else None
        if windowed:
            return self._windowed_pairs(nodes, look, labels)
        rows, cols, weight, tt, tts = self._merges(nodes)
        if not len(rows):
            return {}
        stats = packing_stats(nodes, tts, look)
        pays = self._pays(stats, rows, cols, tt, gpus, look.gpus)
        if not pays.any():
            return {}
        rows, cols, weight = rows[pays], cols[pays], weight[pays]
        if self.hysteresis:  # bonuses scale weights, never make one zero or not
            weight = weight * self._keep_factors(nodes, labels, rows, cols)
        # the matching is a function of the edges alone, and the same ones often come back
        # (the outlook moved, but not across any merge's break-even)
        key = (n, rows.tobytes(), cols.tobytes(), weight.tobytes())
        partner = self._matchings.get(key)
        if partner is not None:
            return partner
        pairs = max_weight_pairs_edges(n, rows, cols, weight, backend=self.backend,
                                       rel_gap=self.rel_gap)
        return self._remember(key, pairs)

    def _windowed_pairs(self, nodes: list[Packing], look: Outlook,
                        labels: np.ndarray) -> dict[int, int]:
        """_paying_pairs window by window (`_windows_of`): only merges within a window are
        weighed, each window's remembered by its candidates, and each window's matching by
        its paying edges. Windows stay with their jobs, so an arrival makes one or two
        windows new; weighing those as whole arrays costs little,
        where weighing every pair of a deep queue (or a table of its shapes: live profiles
        are all distinct) costs seconds."""
        gpus = nodes[0][0].num_gpu
        pairs: list[tuple[int, int]] = []
        windows, bound = self._windows_of(nodes, labels)
        for idx in windows:
            members = [nodes[i] for i in idx]
            rows, cols, weight, tt = self._window_merges(members)
            if not len(rows):
                continue  # most windows of a class that cannot share (memory, profiles)
            stats = packing_stats(members, [self.group_timing(m)[0] for m in members], look)
            pays = self._pays(stats, rows, cols, tt, gpus, look.gpus)
            if bound[idx].any():
                pays &= ~_strangers(labels, bound, idx[rows], idx[cols])
            if not pays.any():
                continue
            rows, cols, weight = rows[pays], cols[pays], weight[pays]
            if self.hysteresis:  # bonuses scale weights, never make one zero or not
                weight = weight * self._keep_factors(nodes, labels, idx[rows], idx[cols])
            m = len(idx)
            key = (m, rows.tobytes(), cols.tobytes(), weight.tobytes())
            found = self._window_matchings.get(key)
            if found is None:
                w = np.zeros((m, m))
                w[rows, cols] = weight
                w += w.T
                found = max_weight_pairs_dense(w, backend=self.backend, rel_gap=self.rel_gap)
                self._window_matchings.put(key, found)
            pairs.extend((int(idx[i]), int(idx[j])) for i, j in found)
        return _partners(pairs)

    def _windows_of(self, nodes: list[Packing],
                    labels: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The matching windows of more than `window` candidates of a class, as
        `_window_members` gives them from each candidate's window number.

        The first matching round (single jobs) cuts windows anchored to the jobs (`_windows`
        with their ids), so an arrival changes the window it lands in, not every window
        behind it. A later round's candidates are the earlier rounds' pairs, each of one
        first-round window: its windows join consecutive first-round windows, as many as
        keep about `window` candidates each (a power of two, so the joins stay put while
        the count moves a little). Cut afresh, the later rounds' windows moved with every
        regroup and missed their caches."""
        n, size = len(nodes), self.window
        if all(len(node) == 1 for node in nodes):
            window = _numbered(_windows(n, size, [node[0].id for node in nodes]), n)
            if len(self._home) > 200_000:
                self._home.clear()
            self._home.update(zip((node[0] for node in nodes), window.tolist()))
            return _window_members(labels, window)
        home = self._home
        try:
            first = np.array([home[node[0]] for node in nodes], dtype=np.int64)
        except KeyError:  # not met in a first round (a caller's own candidates): even cuts
            return _window_members(labels, _numbered(_windows(n, size), n))
        spread = int(first.max()) + 1
        join = 1 << max(0, math.floor(math.log2(max(1.0, spread * size / n))))
        return _window_members(labels, first // join)

    def _window_merges(self, nodes: list[Packing]) -> tuple:
        """(rows, cols, weight, tt): every merge i < j of one window's candidates that may
        form (row-major), as `_merges` gives them bit for bit; remembered by the
        candidates."""
        key = tuple(map(tuple, nodes))
        hit = self._window_cache.get(key)
        if hit is None:
            w, times = self._pair_arrays(nodes, exact=True)
            rows, cols = np.nonzero(w > 0)
            hit = (rows.astype(np.int32), cols.astype(np.int32), w[rows, cols],
                   times[rows, cols])
            # each entry holds up to a window's 8,128 merges (190 kB)
            self._window_cache.put(key, hit)
        return hit

    def _merges(self, nodes: list[Packing]) -> tuple:
        """(rows, cols, weight, tt, tts): every merge i < j of the candidates that may form
        (row-major), its weight and the merged group's iteration time, and each candidate's
        own iteration time; remembered by the candidates, since these follow from their
        profiles alone."""
        key = tuple(map(tuple, nodes))
        hit = self._merge_cache.get(key)
        if hit is not None:
            return hit
        kinds, m, table, tts = self.kind_table(nodes, with_tt=True)
        kind = np.array(kinds)
        upper_rows, upper_cols = np.triu_indices(len(nodes), 1)
        index = kind[upper_rows] * m + kind[upper_cols]
        weight = np.array(table)[index]
        possible = weight > 0
        hit = (upper_rows[possible], upper_cols[possible], weight[possible],
               np.array(tts)[index[possible]], [self.group_timing(node)[0] for node in nodes])
        if len(self._merge_cache) > 64:  # keys hold every candidate: keep few
            self._merge_cache.clear()
        self._merge_cache[key] = hit
        return hit

    def _keep_factors(self, nodes: list[Packing], label: np.ndarray, rows: np.ndarray,
                      cols: np.ndarray) -> np.ndarray | float:
        """Per merge (rows[k], cols[k]): 1 + the larger keep bonus where both candidates run
        together now (`label`: _group_labels of `nodes`), else 1 (see _bonus_matrix, its
        matrix form)."""
        together = (label[rows] == label[cols]) & (label[rows] >= 0)
        if not together.any():
            return 1.0
        bonus = np.zeros(len(nodes))
        for i in set(rows[together].tolist()) | set(cols[together].tolist()):
            bonus[i] = self.keep_bonus(nodes[i])
        return np.where(together, 1.0 + np.maximum(bonus[rows], bonus[cols]), 1.0)

    def kind_table(self, nodes: list[Packing],
                   with_tt: bool = False) -> tuple[list[int], int, list[float]] | tuple:
        """(kinds, m, table): candidate i is of kind kinds[i] < m, and the weight of merging
        candidate i with j (i's members first) is table[kinds[i] * m + kinds[j]], what the
        pair-by-pair `weight` gives, bit for bit. With `with_tt`, a fourth item: the merged
        groups' iteration times, laid out alike (0 where a pair cannot merge).

        Why kinds: a merged group's weight depends only on its members' profiles in member
        order (on their ids where ordering "none" sorts by them), and a trace has a few
        dozen distinct profiles.  Each shape of candidate gets a number whose row of
        weights is remembered across rounds, and a round needs only the rows of the kinds
        present, not a Python call per pair.
        """
        numbers, rows, k, alone = self._shapes, self._rows, self.k, self._alone
        tt_rows = self._tt_rows
        if len(numbers) > 2_000 or len(alone) > 200_000:  # bounded: refilled on demand
            numbers.clear()
            rows.clear()
            tt_rows.clear()
            alone.clear()
        shape = attrgetter("id" if self.ordering == "none" else "profile")
        if not self.room.simple and self.ordering != "none":
            shape = _profile_memory_and_types  # merges that fit differ by memory and types
        elif self.mem_budget != math.inf and self.ordering != "none":
            shape = _profile_and_memory  # merges that fit differ by memory too
        by_id = self.ordering == "none"
        local: dict[int, int] = {}
        kinds = []
        for node in nodes:
            if len(node) == 1:  # most candidates: a job alone, its shape hashed once
                job = node[0]
                if job.alone:  # merges with none: a kind of its own
                    kinds.append(local.setdefault(numbers.setdefault(("alone", job.id),
                                                                     len(numbers)), len(local)))
                    continue
                value = shape(job)
                hit = alone.get(job)
                if hit is not None and hit[0] is value:
                    number = hit[1]
                else:
                    number = numbers.setdefault((value,), len(numbers))
                    alone[job] = (value, number)
            else:
                number = numbers.setdefault(tuple(map(shape, node)), len(numbers))
            kinds.append(local.setdefault(number, len(local)))
        present = list(local)
        first = [0] * len(present)  # one candidate of each kind (any: they weigh the same)
        for i in range(len(kinds) - 1, -1, -1):
            first[kinds[i]] = i
        table: list[float] = []
        tts: list[float] = []
        for x, a in enumerate(present):
            row = rows.get(a)
            if row is None:
                row = rows[a] = {}
            values = list(map(row.get, present))
            tt_row = tt_rows.setdefault(a, {})
            times = list(map(tt_row.get, present)) if with_tt else ()
            if None in values or None in times:
                node = nodes[first[x]]
                for y, value in enumerate(values):
                    if value is None or (with_tt and times[y] is None):
                        other = nodes[first[y]]
                        tt = 0.0
                        if len(node) + len(other) > k or (by_id and x == y):
                            value = 0.0  # too big, or a candidate with itself
                        else:
                            value = self.merged_efficiency(node + other)
                            tt = self.group_timing(node + other)[0]
                        row[present[y]] = values[y] = value
                        tt_row[present[y]] = tt
                        if with_tt:
                            times[y] = tt
            table += values
            tts += times
        if with_tt:
            return kinds, len(present), table, tts
        return kinds, len(present), table

    def weight_rows(self, nodes: list[Packing], bonus: list[float] | None) -> list[float]:
        """Every ordered pair's weight, row-major n x n, from _kind_table, times the keep
        bonus of pairs that run together now (when `bonus` is given)."""
        kinds, m, table = self.kind_table(nodes)
        flat: list[float] = []
        for i, x in enumerate(kinds):
            values = [table[x * m + y] for y in kinds]
            if bonus is not None:
                for j, value in enumerate(values):
                    if j != i and _together(nodes[i], nodes[j]):
                        values[j] = value * (1.0 + max(bonus[i], bonus[j]))
            flat += values
        return flat

    def keep_bonus(self, node: Packing) -> float:
        """How much more a running group counts when matching: at least the settings'
        hysteresis, and at least what a restart would cost its members relative to the work
        they have left (a job near its end is not worth a checkpoint and restart to regroup)."""
        cost = max((j.restart_cost / j.remaining_estimate if j.remaining_estimate > 0
                    else 1.0) for j in node)
        return max(self.hysteresis, min(1.0, cost))

    def kept_order(self, members: Packing, tt: float, order: tuple) -> tuple:
        """A group that runs now with the same members keeps its slot order while that order
        is within its keep bonus of the best one: another order restarts every member where
        regroups restart (and re-places them at their gate where they do not), and among
        equally fast orders the search picks by the order the jobs were matched in, which
        changes from round to round."""
        key = members[0].group_key
        if len(key) != len(members) or len(members) < 2:
            return members, tt, order
        by_id = {j.id: j for j in members}
        now = [by_id[i] for i in key]
        kept_tt, kept_order = self.group_timing(now, ordering="fixed")
        if kept_tt <= tt * (1.0 + self.keep_bonus(now)):
            return now, kept_tt, kept_order
        return members, tt, order

    def _remember(self, key: tuple, pairs: list[tuple[int, int]]) -> dict[int, int]:
        partner = _partners(pairs)
        if len(self._matchings) > 32:  # keys hold every candidate id: keep few
            self._matchings.clear()
        self._matchings[key] = partner
        return partner

    def weight_matrix(self, nodes: list[Packing], bonus: list[float]) -> np.ndarray:
        """Every pair's weight, as `weight` would give it (bit for bit), computed per shape of
        merged group with interleave.best_tt_batch instead of one kernel call per pair;
        `bonus` is each candidate's _keep_bonus (used where it runs in a group now)."""
        w, _ = self._pair_arrays(nodes)
        if self.hysteresis:
            w *= self._bonus_matrix(nodes, bonus)
        return np.triu(w, 1) + np.triu(w, 1).T

    def _pair_arrays(self, nodes: list[Packing], exact: bool = False) -> tuple:
        """(w, tt): w[i, j] for i < j the weight of merging candidates i and j (i's members
        first), tt[i, j] the merged group's iteration time where w > 0, both n x n and zero
        elsewhere; from interleave.best_tt_batch, so `exact` as there."""
        n = len(nodes)
        length = len(nodes[0][0].profile)
        if any(len(j.profile) != length for node in nodes for j in node):
            raise ValueError("candidates of one matching need profiles of one length")
        k_slots = interleave.slots(length)
        sizes = np.array([len(node) for node in nodes])
        index = {int(s): np.flatnonzero(sizes == s) for s in np.unique(sizes)}
        stacked = {s: np.array([[j.profile for j in nodes[i]] for i in idx])
                   for s, idx in index.items()}
        position = np.empty(n, dtype=int)
        for idx in index.values():
            position[idx] = np.arange(len(idx))
        w = np.zeros((n, n))
        times = np.zeros((n, n))
        for sa, ia in index.items():
            for sb, ib in index.items():
                if sa + sb > self.k:
                    continue
                rows, cols = np.meshgrid(ia, ib, indexing="ij")
                upper = rows < cols
                rows, cols = rows[upper], cols[upper]
                if len(rows) == 0:
                    continue
                group = np.concatenate([stacked[sa][position[rows]],
                                        stacked[sb][position[cols]]], axis=1)
                slowdown = self.model.slowdown(sa + sb, ablation_nomatch=not self.matching)
                tt = interleave.best_tt_batch(group, exact) * slowdown
                busy = None  # sum over members of each member's stage sum, in member order
                for member in range(sa + sb):
                    total = group[:, member, 0]
                    for r in range(1, length):
                        total = total + group[:, member, r]
                    busy = total if busy is None else busy + total
                positive = tt > 0
                w[rows, cols] = np.where(positive, busy / np.where(positive, tt * k_slots, 1.0), 0.0)
                times[rows, cols] = tt
        unknown = np.array([not all(map(_profiled, node)) for node in nodes])
        w[unknown, :] = 0.0
        w[:, unknown] = 0.0
        if self.mem_budget != math.inf:
            held = np.array([held_gb(node) for node in nodes])
            w[np.add.outer(held, held) > self.mem_budget + SLACK] = 0.0
        if not self.room.simple:
            w[~self._fit_matrix(nodes)] = 0.0
        if self.lonely:
            lone = np.array([any(j.alone for j in node) for node in nodes])
            w[lone, :] = 0.0
            w[:, lone] = 0.0
        times[w <= 0] = 0.0
        return w, times

    def _fit_matrix(self, nodes: list[Packing]) -> np.ndarray:
        """Which merges of two candidates fit some pool (memory.Room.pools_for, for every
        pair at once): a pool whose type every member accepts, with GPUs enough for them
        and memory enough for them together."""
        room = self.room
        held = np.array([held_gb(node) for node in nodes])
        total = np.add.outer(held, held)
        need = nodes[0][0].num_gpu if nodes else 0
        ok = np.zeros((len(nodes), len(nodes)), dtype=bool)
        for pool, budget in zip(room.pools, room.budgets):
            if not holds(pool, need, (), 0.0):
                continue
            allowed = np.array([all(accepts(j.record.gpu_types, pool) for j in node)
                                for node in nodes])
            ok |= np.logical_and.outer(allowed, allowed) & (total <= budget + SLACK)
        return ok

    def _bonus_matrix(self, nodes: list[Packing],
                      bonus: list[float] | None = None) -> np.ndarray:
        """1 + the keep bonus (the larger of the two) for pairs that run together now, 1
        for the rest; `bonus`, each candidate's keep bonus, is found here when not given."""
        label = _group_labels(nodes)
        together = (label[:, None] == label[None, :]) & (label[:, None] >= 0)
        if bonus is None:
            bonus = [self.keep_bonus(node) if x >= 0 else 0.0 for node, x in zip(nodes, label)]
        b = np.asarray(bonus, dtype=float)
        return np.where(together, 1.0 + np.maximum(b[:, None], b[None, :]), 1.0)


def _windows(n: int, size: int, keys: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """[lo, hi) ranges splitting n candidates into consecutive windows of about `size` (one
    window when size is 0 or n <= size).

    With `keys` (a number per candidate: its job id) the boundaries are anchored to the
    candidates: a window ends before a candidate whose key hashes to a cut (one in 3/4 size of
    them) once it holds a quarter of `size`, and after twice `size` at the latest; a last
    window under a quarter joins the one before. An arrival then changes the window it lands
    in and seldom the next, where an even split moves every boundary behind it, and every
    window behind misses its cache. Without keys, near-equal windows of at most `size`."""
    if size <= 0 or n <= size:
        return [(0, n)]
    if keys is None:
        count = -(-n // size)
        bounds = [round(i * n / count) for i in range(count + 1)]
        return list(zip(bounds, bounds[1:]))
    least, most = max(1, size // 4), 2 * size
    mixed = (np.asarray(keys, dtype=np.int64).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             >> np.uint64(40))
    cuts = np.flatnonzero(mixed % np.uint64(max(1, 3 * size // 4)) == 0).tolist()
    bounds = [0]
    for cut in (*cuts, n):
        while cut - bounds[-1] > most:
            bounds.append(bounds[-1] + size)
        if cut - bounds[-1] >= least:
            bounds.append(cut)
    if bounds[-1] != n:
        bounds[-1] = n  # the tail under a quarter joins the window before
    return list(zip(bounds, bounds[1:]))


def _window_members(labels: np.ndarray,
                    window: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """(windows, bound): the candidates of each window number (indices, in priority order;
    windows in number order, a window of one left out, as it matches nothing), and which
    candidates may merge only with their own running group (`_strangers`).

    A candidate running in a group now (`labels`: _group_labels) joins the window of its
    group's first candidate; without this, a boundary that fell between a running pair split
    it, and the pair regrouped. Bound are those pulled out of their own window so (waiting,
    they would not meet this one's jobs), and the members of a group that has more than two
    candidates here: the one left over from its group's pair could pair with an outsider,
    leaving the group, then rejoin it the round after, and so on."""
    home = window
    window = window.copy()
    first: dict[int, int] = {}
    for i, label in enumerate(labels.tolist()):
        if label >= 0:
            window[i] = first.setdefault(label, window[i])
    bound = window != home
    running = labels >= 0
    if running.any():
        counts = np.bincount(labels[running])
        bound |= running & (counts[np.where(running, labels, 0)] > 2)
    order = np.argsort(window, kind="stable")
    cuts = np.flatnonzero(np.diff(window[order])) + 1
    return [idx for idx in np.split(order, cuts) if len(idx) > 1], bound


def _numbered(bounds: list[tuple[int, int]], n: int) -> np.ndarray:
    """Each of n candidates' window number, from `_windows`' ranges."""
    window = np.empty(n, dtype=np.int64)
    for w, (lo, hi) in enumerate(bounds):
        window[lo:hi] = w
    return window


def _strangers(labels: np.ndarray, bound: np.ndarray, rows: np.ndarray,
               cols: np.ndarray) -> np.ndarray:
    """Which merges (rows[k], cols[k]) join a bound candidate (`_window_members`) to one
    outside its running group. Were those merges weighed, a member left over from its
    group's pair could pair with an outsider, be left unplaced or split off, then rejoin its
    group the round after, and so on every round."""
    return (bound[rows] | bound[cols]) & (labels[rows] != labels[cols])


def _group_labels(nodes: list[Packing]) -> np.ndarray:
    """Per candidate, a number shared by the candidates whose members all run in one group
    now (-1 for the rest)."""
    labels: dict[tuple, int] = {}
    return np.array([labels.setdefault(node[0].group_key, len(labels))
                     if node[0].group_key and (len(node) == 1 or _together(node, node))
                     else -1 for node in nodes])


def _partners(pairs: list[tuple[int, int]]) -> dict[int, int]:
    """Each matched candidate's partner, both ways."""
    partner = {}
    for i, j in pairs:
        partner[i], partner[j] = j, i
    return partner


def _profile_and_memory(job: JobView) -> tuple:
    return job.profile, job.gpu_mem_gb


def _profile_memory_and_types(job: JobView) -> tuple:
    return job.profile, job.gpu_mem_gb, job.record.gpu_types


def _profiled(job: JobView) -> bool:
    """A job with no stage times (all zero) runs alone until its trainer has measured them:
    a guess would group it blind."""
    return any(job.profile)


def _together(a: Packing, b: Packing) -> bool:
    """Whether every member of a and b runs in one group now."""
    key = a[0].group_key
    return bool(key) and all(j.group_key == key for j in a) and all(j.group_key == key for j in b)
