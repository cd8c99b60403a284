"""Muri: multi-resource interleaving. Admit jobs in priority order, group jobs of the same #GPUs
by multi-round maximum-weight matching on interleaving efficiency, place groups consolidated.

Muri-S ranks by remaining GPU-time (durations known), Muri-L by attained GPU-time (unknown).
Ablations: `ordering="worst"` (each group runs in its slowest order) and `matching=False`
(consecutive jobs of a class are grouped without matching).
"""
from __future__ import annotations


from operator import attrgetter
from typing import Sequence

import numpy as np

from scheduler.core import interleave
from scheduler.core.blossom import blossom_pairs_flat, blossom_pairs_indexed
from scheduler.core.matching import max_weight_pairs, max_weight_pairs_dense
from scheduler.core.policies.base import Policy, RoundContext, place_units
from scheduler.core.policies.muri_order import Classes, MuriOrder
from scheduler.core.state import Group, Job, Plan

Packing = list  # the jobs of one prospective group, in matching order


class Muri(Policy):
    interleaves = True

    def __init__(self, preset, name: str, *, know_duration: bool, ordering: str = "best",
                 matching: bool = True, backend: str = "auto"):
        super().__init__(preset)
        if ordering not in ("best", "worst", "none"):
            raise ValueError(f"unknown ordering {ordering!r}")
        self.name = name
        self.know_duration = know_duration
        self.ordering = ordering
        self.matching = matching
        self.backend = backend
        self.k = preset.max_group
        self._tt_cache: dict[tuple, tuple[float, tuple]] = {}
        self._weights: dict[tuple, float] = {}  # cleared when a profile changes
        # the same by kind of candidate, for the "blossom" backend (see _kind_table): a number
        # for each packing's member profiles, and per number {partner's number: weight}
        self._shapes: dict[tuple, int] = {}
        self._rows: dict[int, dict[int, float]] = {}
        self._matchings: dict[tuple, dict[int, int]] = {}  # likewise
        # Whole weight matrices in numpy and the pruned exact matcher; the artifact-compatible
        # "blossom" backend and the ordering ablations keep the pair-by-pair path.
        self._dense = backend in ("auto", "rustworkx", "networkx") and ordering == "best"
        # job id -> its Group alone in the last plan: a job that stays alone on the same GPUs
        # gets that same (immutable) Group back, which drivers recognise as unchanged
        self._alone: dict[int, Group] = {}
        # The carried order (Policy.carried_order's rule): sorted afresh each round while the
        # queue is short, kept between rounds (None: not kept) once it is long against what
        # admission reads of it (see _choose_order).
        self._kept: MuriOrder | None = None

    # Keep the order when the queue is longer than KEEP_AT times the jobs admission read last
    # round plus KEEP_MIN; sort afresh again below half that (see _keeps).
    KEEP_AT, KEEP_MIN = 4, 256

    # -- ranking ---------------------------------------------------------------------------
    def on_submit(self, job: Job, now: float) -> None:
        if self.know_duration and self.preset.fresh_estimate_duration:
            job.remaining_estimate = job.record.duration
        if self._kept is not None:
            self._kept.add(job)

    def on_finish(self, job: Job, now: float) -> None:
        if self._kept is not None:
            self._kept.remove(job)

    def on_change(self, job: Job) -> None:
        if self._kept is not None:
            self._kept.touch(job)

    def on_changes(self, jobs) -> None:
        if self._kept is not None:
            self._kept.touch_all(jobs)

    def key(self, job: Job) -> float:
        return self._rank(job)

    def queue_order(self, pending: Sequence[Job]) -> list[Job]:
        """As the next round's admission walks them: by priority, ties as carried."""
        return sorted(super().queue_order(pending), key=self._rank)

    @property
    def _rank(self):
        """The rank as a plain function: the hot loops sort by it without a method call."""
        return _by_remaining if self.know_duration else _by_attained

    # -- the interleave cost model ---------------------------------------------------------
    def group_timing(self, jobs: list[Job], ordering: str | None = None) -> tuple[float, tuple]:
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
            slowdown = self.preset.slowdown(len(jobs), ablation_nomatch=not self.matching)
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
        return self._efficiency(a, b, key) if hit is None else hit

    def _efficiency(self, a: Packing, b: Packing, key: tuple) -> float:
        value = self._merged_efficiency(a + b)
        if len(self._weights) > 200_000:
            self._weights.clear()
        self._weights[key] = value
        return value

    def _merged_efficiency(self, jobs: Packing) -> float:
        """Busy stage time over slot time of the group `jobs` (in this member order: the
        float sum follows it), 0 when a member has no profile yet."""
        tt, _ = self.group_timing(jobs)
        if tt > 0 and all(map(_profiled, jobs)):
            k = interleave.slots(len(jobs[0].profile))
            return sum(sum(j.profile) for j in jobs) / (tt * k)
        return 0.0

    def on_profile(self, job: Job) -> None:
        self._weights.clear()
        self._matchings.clear()
        self._rows.clear()  # by profiles they would stay valid, but not by ids ("none")
        self._shapes.clear()

    # -- the round -------------------------------------------------------------------------
    def plan(self, ctx: RoundContext) -> Plan:
        kept = self._kept
        if kept is None:  # sorted afresh: Policy.carried_order's rule as written
            queue = self.carried_order(ctx.queue)
            queue.sort(key=self._rank)
            sizes: dict[int, int] = {}
            for job in queue:
                gpus = job.record.num_gpu
                sizes[gpus] = sizes.get(gpus, 0) + 1
        else:
            if len(kept) != len(ctx.queue):  # a caller that did not report every job
                kept.rebuild(self._carried(ctx.queue))
            queue, sizes = kept.sync(), kept.sizes
        admitted, read = self._admit(ctx, queue, sizes)
        required = sum(len(jobs) * gpus for gpus, jobs in admitted.items())
        total = ctx.cluster.spec.total_gpus
        if self.matching:
            packings = self._match(admitted, required, total)
        else:
            packings = self._consecutive(admitted, required, total)
        if self.preset.auto_unpack:
            packings = self._unpack(ctx, packings)
        groups = self._place(ctx, packings, admitted)
        self._choose_order(queue, read)
        return Plan(tuple(groups))

    def _choose_order(self, queue: list[Job], read: int) -> None:
        """End a round: the artifact then sorts its job list by #GPUs (placement order), and
        the next round's ties follow that list. That list is kept or sorted afresh next
        round, as `_keeps` says; switching between the two carries the order over."""
        kept = self._kept
        keep = self._keeps(len(queue), read)
        if kept is None:
            queue.sort(key=_gpus, reverse=True)  # the carried list itself (self._order)
            if keep:
                self._kept = MuriOrder(self._rank)
                self._kept.rebuild(queue)  # the next round sorts it stably by priority
                self._order = []
        elif not keep:
            self._order = kept.placing_order(queue)  # entries as this round sorted them
            self._kept = None
        else:
            kept.settle()  # the round has sorted every job

    def _keeps(self, queued: int, read: int) -> bool:
        """Whether to keep the order between rounds: when the queue is long against the
        jobs admission read of it (with some slack both ways, so as not to switch often);
        sorting a short queue afresh costs less than re-keying its running jobs in the
        kept order every round."""
        if self._kept is None:
            return queued > self.KEEP_AT * read + self.KEEP_MIN
        return 2 * queued >= self.KEEP_AT * read + self.KEEP_MIN

    def _carried(self, queue) -> list[Job]:
        """The order as kept, for the jobs of `queue` (those new to it after, in its order),
        as the list a round would sort."""
        kept = self._kept
        live = {id(j) for j in queue}
        order = [j for j in kept.placing_order(kept.sync()) if id(j) in live]
        known = {id(j) for j in order}
        order.extend(j for j in queue if id(j) not in known)
        return order

    def _admit(self, ctx: RoundContext, queue: list[Job],
               sizes: dict[int, int]) -> tuple[dict[int, list[Job]], int]:
        """Each job that fits an empty cluster reserves room for itself and the next k-1 jobs
        of its #GPU class, since those may share its GPUs. `queue`: the carried order, read
        only as far as needed; `sizes`: its jobs per #GPUs. Returns the admitted jobs by
        class, the classes in the order their first job comes in `queue`, and how many
        jobs of `queue` were read."""
        classes = Classes(queue)
        chosen: dict[int, int] = {}  # classes reached, in queue order -> jobs reserved
        seen = dict.fromkeys(sizes, 0)  # jobs of each class walked so far
        left = dict(sizes)  # not walked yet
        smallest = min(left, default=0)
        cluster = ctx.cluster
        cluster.reset()
        # Room only shrinks here, and a request that did not fit means no bigger one fits
        # (more GPUs, no fewer CPUs each): skip those without searching the nodes again,
        # and stop once no job left could fit (the walk then costs what is admitted).
        monotone = self.preset.cpu_single_gpu <= 2 * self.preset.cpu_per_gpu
        smallest_failed = float("inf")
        k = self.k
        read = 0
        for job in queue:
            if cluster.free_total < smallest or smallest_failed <= smallest:
                break
            read += 1
            gpus = job.record.num_gpu
            count = left[gpus] - 1
            left[gpus] = count
            if not count and gpus == smallest:
                smallest = min((g for g, c in left.items() if c), default=float("inf"))
            index = seen[gpus]
            seen[gpus] = index + 1
            lo = chosen.setdefault(gpus, 0)
            if gpus >= smallest_failed or index < lo:
                continue  # too big, or reserved by a job before it (a class's first jobs)
            if not cluster.can_place(gpus):
                if monotone:
                    smallest_failed = gpus
                continue
            chosen[gpus] = min(lo + k, sizes[gpus])
        return {gpus: classes.first(gpus, n) for gpus, n in chosen.items()}, read

    def _match(self, admitted: dict[int, list[Job]], required: int,
               total: int) -> dict[int, list[Packing]]:
        """Pair groups by maximum-weight matching, round after round, merging pairs (in node
        order) only while the GPUs demanded still exceed the cluster."""
        packings = {gpus: [[j] for j in jobs] for gpus, jobs in admitted.items()}
        if required <= total:
            return packings  # everything fits alone: a matching would be thrown away
        for _ in range(self.k):
            merged: dict[int, list[Packing]] = {gpus: [] for gpus in packings}
            for gpus, nodes in packings.items():
                if required <= total:
                    # merging has stopped and this is the last round: a matching here would
                    # be thrown away, and the order of what stays single no longer matters
                    merged[gpus].extend(nodes)
                    continue
                partner = self._pairs(nodes)
                for u, node in enumerate(nodes):
                    v = partner.get(u)
                    if v is None:
                        merged[gpus].append(node)
                    elif v > u:
                        continue  # the pair is taken where its later node stands
                    elif required <= total:
                        merged[gpus].extend((nodes[v], node))
                    else:
                        merged[gpus].append(nodes[v] + node)
                        required -= gpus
            packings = merged
            if required <= total:
                break
        return packings

    def _pairs(self, nodes: list[Packing]) -> dict[int, int]:
        n = len(nodes)
        if n < 2:
            return {}
        # The same candidates in the same order often meet again in the next round (an event
        # that changed nothing here); the matching is a function of them, so remember it.
        # Keyed by the Job objects themselves (identity, eq=False): one per job, like its
        # id, and map(tuple) builds the key without a Python step per member.
        key = tuple(map(tuple, nodes))
        hysteresis = self.preset.regroup_hysteresis
        bonus = [self._keep_bonus(node) for node in nodes] if hysteresis else [0.0] * n
        if hysteresis:
            key += tuple(j.group_key for node in nodes for j in node)
            key += tuple(round(b, 3) for b, node in zip(bonus, nodes) if node[0].group_key)
        partner = self._matchings.get(key)
        if partner is not None:
            return partner
        if self._dense:
            pairs = []
            for lo, hi in _windows(n, self.preset.matching_window):
                found = max_weight_pairs_dense(self._weight_matrix(nodes[lo:hi], bonus[lo:hi]),
                                               backend=self.backend,
                                               rel_gap=self.preset.matching_rel_gap)
                pairs.extend((lo + i, lo + j) for i, j in found)
            return self._remember(key, pairs)
        if self.backend == "blossom":
            if hysteresis:
                pairs = blossom_pairs_flat(n, self._weight_rows(nodes, bonus))
            else:
                pairs = blossom_pairs_indexed(*self._kind_table(nodes))
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
                value = self._efficiency(nodes[i], nodes[j], pair)
            if hysteresis and _together(nodes[i], nodes[j]):
                value *= 1.0 + max(bonus[i], bonus[j])
            return value

        return self._remember(key, max_weight_pairs(n, weight, backend=self.backend))

    def _kind_table(self, nodes: list[Packing]) -> tuple[list[int], int, list[float]]:
        """(kinds, m, table): candidate i is of kind kinds[i] < m, and the weight of merging
        candidate i with j (i's members first) is table[kinds[i] * m + kinds[j]], what the
        pair-by-pair `weight` gives, bit for bit.

        Why kinds: a merged group's weight depends only on its members' profiles in member
        order (on their ids where ordering "none" sorts by them), and a trace has a few
        dozen distinct profiles.  Each shape of candidate gets a number whose row of
        weights is remembered across rounds, and a round needs only the rows of the kinds
        present, not a Python call per pair.
        """
        numbers, rows, k = self._shapes, self._rows, self.k
        if len(numbers) > 2_000:  # bounded: refilled on demand
            numbers.clear()
            rows.clear()
        shape = attrgetter("id" if self.ordering == "none" else "profile")
        by_id = self.ordering == "none"
        local: dict[int, int] = {}
        kinds = [local.setdefault(numbers.setdefault(tuple(map(shape, node)), len(numbers)),
                                  len(local))
                 for node in nodes]
        present = list(local)
        first = [0] * len(present)  # one candidate of each kind (any: they weigh the same)
        for i in range(len(kinds) - 1, -1, -1):
            first[kinds[i]] = i
        table: list[float] = []
        for x, a in enumerate(present):
            row = rows.get(a)
            if row is None:
                row = rows[a] = {}
            values = list(map(row.get, present))
            if None in values:
                node = nodes[first[x]]
                for y, value in enumerate(values):
                    if value is None:
                        other = nodes[first[y]]
                        if len(node) + len(other) > k or (by_id and x == y):
                            value = 0.0  # too big, or a candidate with itself
                        else:
                            value = self._merged_efficiency(node + other)
                        row[present[y]] = values[y] = value
            table += values
        return kinds, len(present), table

    def _weight_rows(self, nodes: list[Packing], bonus: list[float] | None) -> list[float]:
        """Every ordered pair's weight, row-major n x n, from _kind_table, times the keep
        bonus of pairs that run together now (when `bonus` is given)."""
        kinds, m, table = self._kind_table(nodes)
        flat: list[float] = []
        for i, x in enumerate(kinds):
            values = [table[x * m + y] for y in kinds]
            if bonus is not None:
                for j, value in enumerate(values):
                    if j != i and _together(nodes[i], nodes[j]):
                        values[j] = value * (1.0 + max(bonus[i], bonus[j]))
            flat += values
        return flat

    def _keep_bonus(self, node: Packing) -> float:
        """How much more a running group counts when matching: at least the preset's
        hysteresis, and at least what a restart would cost its members relative to the work
        they have left (a job near its end is not worth a checkpoint and restart to regroup)."""
        cost = max((j.restart_overhead / j.remaining_estimate if j.remaining_estimate > 0
                    else 1.0) for j in node)
        return max(self.preset.regroup_hysteresis, min(1.0, cost))

    def _kept_order(self, members: Packing, tt: float, order: tuple) -> tuple:
        """A group that runs now with the same members keeps its slot order while that order
        is within its keep bonus of the best one: another order is a restart of every member,
        and among equally fast orders the search picks by the order the jobs were matched in,
        which changes from round to round."""
        key = members[0].group_key
        if len(key) != len(members) or len(members) < 2:
            return members, tt, order
        by_id = {j.id: j for j in members}
        now = [by_id[i] for i in key]
        kept_tt, kept_order = self.group_timing(now, ordering="fixed")
        if kept_tt <= tt * (1.0 + self._keep_bonus(now)):
            return now, kept_tt, kept_order
        return members, tt, order

    def _remember(self, key: tuple, pairs: list[tuple[int, int]]) -> dict[int, int]:
        partner = {}
        for i, j in pairs:
            partner[i], partner[j] = j, i
        if len(self._matchings) > 32:  # keys hold every candidate id: keep few
            self._matchings.clear()
        self._matchings[key] = partner
        return partner

    def _weight_matrix(self, nodes: list[Packing], bonus: list[float]) -> np.ndarray:
        """Every pair's weight, as `weight` would give it (bit for bit), computed per shape of
        merged group with interleave.best_tt_batch instead of one kernel call per pair;
        `bonus` is each candidate's _keep_bonus (used where it runs in a group now)."""
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
                slowdown = self.preset.slowdown(sa + sb, ablation_nomatch=not self.matching)
                tt = interleave.best_tt_batch(group) * slowdown
                busy = None  # sum over members of each member's stage sum, in member order
                for member in range(sa + sb):
                    total = group[:, member, 0]
                    for r in range(1, length):
                        total = total + group[:, member, r]
                    busy = total if busy is None else busy + total
                positive = tt > 0
                w[rows, cols] = np.where(positive, busy / np.where(positive, tt * k_slots, 1.0), 0.0)
        unknown = np.array([not all(map(_profiled, node)) for node in nodes])
        w[unknown, :] = 0.0
        w[:, unknown] = 0.0
        hysteresis = self.preset.regroup_hysteresis
        if hysteresis:
            labels: dict[tuple, int] = {}
            label = np.array([labels.setdefault(node[0].group_key, len(labels))
                              if _together(node, node) else -1 for node in nodes])
            together = (label[:, None] == label[None, :]) & (label[:, None] >= 0)
            b = np.asarray(bonus, dtype=float)
            w[together] *= (1.0 + np.maximum(b[:, None], b[None, :]))[together]
        return np.triu(w, 1) + np.triu(w, 1).T

    def _consecutive(self, admitted: dict[int, list[Job]], required: int,
                     total: int) -> dict[int, list[Packing]]:
        """The no-matching ablation: each admitted block of k consecutive jobs is one group
        while the demand exceeds the cluster."""
        packings: dict[int, list[Packing]] = {}
        for gpus, jobs in admitted.items():
            out = packings.setdefault(gpus, [])
            for start in range(0, len(jobs), self.k):
                block = jobs[start:start + self.k]
                head = [block[0]]
                for job in block[1:]:
                    if required > total:
                        head.append(job)
                        required -= gpus
                    else:
                        out.append([job])
                out.append(head)
        return packings

    def _unpack(self, ctx: RoundContext, packings: dict[int, list[Packing]]) -> dict[int, list[Packing]]:
        """Split any group slower than its members run one after another; then admit groups
        again in priority order, since splitting may demand more GPUs than there are."""
        candidates: list[tuple[float, int, Packing]] = []
        key = self._rank
        for gpus, groups in packings.items():
            for group in groups:
                if len(group) == 1:  # a job alone runs at its solo speed: never split
                    candidates.append((key(group[0]), gpus, group))
                    continue
                tt, _ = self.group_timing(group, "best")
                if tt / sum(j.solo_time for j in group) > 1:
                    candidates.extend((key(j), gpus, [j]) for j in group)
                else:
                    candidates.append((min(key(j) for j in group), gpus, group))
        candidates.sort(key=_first)
        cluster = ctx.cluster
        cluster.reset()
        kept: dict[int, list[Packing]] = {}
        for _, gpus, group in candidates:
            if cluster.can_place(gpus):
                kept.setdefault(gpus, []).append(group)
        return kept

    def _place(self, ctx: RoundContext, packings: dict[int, list[Packing]],
               admitted: dict[int, list[Job]]) -> list[Group]:
        """Largest #GPUs first (stable in the carried order); a group is placed where its
        first member in that order lands; a group that does not fit waits. The artifact
        sorts its whole job list so (the next round's ties follow it: see muri_order); the
        jobs of `packings` are among the `admitted` (each class in the carried order), so
        walking those class by class, largest first, visits them in that same order."""
        # keyed by the Job itself (one per id, hashed by identity): no id property per lookup
        home = {j: group for groups in packings.values() for group in groups for j in group}
        queue = [j for gpus in sorted(admitted, reverse=True) for j in admitted[gpus]
                 if j in home]
        if ctx.previous:
            units, seen = [], set()
            for job in queue:
                group = home.get(job)
                if group is None:
                    continue
                if len(group) > 1:  # a lone job's group comes up once anyway
                    if id(group) in seen:
                        continue
                    seen.add(id(group))
                units.append(group)
            placements = place_units(ctx, [(g[0].record.num_gpu, g) for g in units])
            alone, self._alone = self._alone, {}
            return [self._as_group(g, s, alone) for g, s in zip(units, placements)
                    if s is not None]
        cluster = ctx.cluster
        cluster.reset()
        placed: set[int] = set()
        groups = []
        alone, self._alone = self._alone, {}
        for job in queue:
            group = home.get(job)
            if group is None or id(group) in placed:
                continue
            slices = cluster.place(job.num_gpu)
            if slices is None:
                continue
            placed.add(id(group))
            groups.append(self._as_group(group, slices, alone))
        return groups

    def _as_group(self, members: Packing, slices, alone: dict[int, Group]) -> Group:
        """The plan's group of `members` on `slices`; a job alone gets its group of the last
        plan (`alone`, by job id) back where its GPUs (the same tuple) and speed are the same."""
        if len(members) == 1:  # alone: its solo speed, its only order (see group_timing)
            job = members[0]
            job_id = job.record.job_id
            group = alone.get(job_id)
            if group is None or group.placement is not slices or group.tt != job.solo_time:
                group = Group(jobs=(job_id,), num_gpu=job.record.num_gpu, tt=job.solo_time,
                              placement=tuple(slices))
            self._alone[job_id] = group
            return group
        tt, order = self.group_timing(members)
        if self.ordering == "none" and len(members) > 1:
            members = sorted(members, key=lambda j: j.id)
        elif self.preset.regroup_hysteresis and _together(members, members):
            members, tt, order = self._kept_order(members, tt, order)
        slot_jobs = tuple(members[i].id for i in order if i is not None)
        return Group(jobs=slot_jobs, num_gpu=members[0].num_gpu,
                     tt=tt, placement=tuple(slices),
                     empty_slot=None in order)


def _by_remaining(job: Job) -> float:
    """Muri-S's rank: estimated remaining GPU time."""
    return job.remaining_estimate * job.record.num_gpu


def _by_attained(job: Job) -> float:
    """Muri-L's rank (durations unknown): attained GPU time."""
    return job.attained * job.record.num_gpu


def _gpus(job: Job) -> int:
    return job.record.num_gpu


def _first(item: tuple) -> float:
    return item[0]


def _windows(n: int, size: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges splitting n candidates into near-equal consecutive windows of at most
    `size` (one window when size is 0)."""
    if size <= 0 or n <= size:
        return [(0, n)]
    count = -(-n // size)
    bounds = [round(i * n / count) for i in range(count + 1)]
    return list(zip(bounds, bounds[1:]))


def _profiled(job: Job) -> bool:
    """A job with no stage times (all zero) runs alone until its trainer has measured them:
    a guess would group it blind."""
    return any(job.profile)


def _together(a: Packing, b: Packing) -> bool:
    """Whether every member of a and b runs in one group now."""
    key = a[0].group_key
    return bool(key) and all(j.group_key == key for j in a) and all(j.group_key == key for j in b)
