"""Muri: multi-resource interleaving. Admit jobs in priority order, group jobs of the same #GPUs
by multi-round maximum-weight matching on interleaving efficiency, place groups consolidated.

Muri-S ranks by remaining GPU-time (durations known), Muri-L by attained GPU-time (unknown).
Ablations: `ordering="worst"` (each group runs in its slowest order) and `matching=False`
(consecutive jobs of a class are grouped without matching). Which candidates merge, and how
fast a group runs, is muri_pairs.Pairing's business; this module admits, runs the matching
rounds and places.
"""
from __future__ import annotations

from typing import Sequence

from scheduler.core.policies.admission import AdmissionWalk
from scheduler.core.policies.base import ArtifactLoop, Policy, RoundContext, place_units
from scheduler.core.policies.muri_order import Classes, MuriOrder
from scheduler.core.policies.muri_outlook import Outlook, outlook
from scheduler.core.policies.muri_pairs import Packing, Pairing, _together
from scheduler.core.policies.order import fits_monotone
from scheduler.core.policies.settings import MuriSettings
from scheduler.core.state import Group, JobView, Plan


class Muri(Policy):
    interleaves = True
    plans_partial = True  # a partial queue is planned from the order as kept (among)
    artifact_loop = ArtifactLoop(groups_ends=True)  # events folded, close ends together

    def __init__(self, model, name: str, *, know_duration: bool, ordering: str = "best",
                 matching: bool = True, settings: MuriSettings = MuriSettings()):
        super().__init__(model)
        if ordering not in ("best", "worst", "none"):
            raise ValueError(f"unknown ordering {ordering!r}")
        if settings.merge_rule not in ("gain", "completion", "efficiency"):
            raise ValueError(f"unknown merge rule {settings.merge_rule!r}")
        self.name = name
        self.know_duration = know_duration
        self.ordering = ordering
        self.matching = matching
        self.settings = settings
        self.backend = settings.matching_backend
        self.k = self.max_group = settings.max_group
        # the core takes a new job's estimate from the trace's duration (see Policy)
        self.estimate_from_duration = know_duration and settings.fresh_estimate_duration
        self.pairing = Pairing(model, settings, ordering=ordering, matching=matching)
        # the last plan's groups by their members' ids in slot order: a group whose
        # members stay together on the same GPUs, in the same slots at the same speed, is
        # handed back rather than made again
        self._last: dict[tuple[int, ...], Group] = {}
        # The carried order (Policy.carried_order's rule): sorted afresh each round while the
        # queue is short, kept between rounds (None: not kept) once it is long against what
        # admission reads of it (see _choose_order).
        self._kept: MuriOrder | None = None

    # Keep the order when the queue is longer than KEEP_AT times the jobs admission read last
    # round plus KEEP_MIN; sort afresh again below half that (see _keeps).
    KEEP_AT, KEEP_MIN = 4, 256

    # -- ranking ---------------------------------------------------------------------------
    def on_submit(self, job: JobView, now: float) -> None:
        if self._kept is not None:
            self._kept.add(job)

    def on_finish(self, job: JobView, now: float) -> None:
        if self._kept is not None:
            self._kept.remove(job)

    def on_change(self, job: JobView) -> None:
        if self._kept is not None:
            self._kept.touch(job)

    def on_changes(self, jobs) -> None:
        if self._kept is not None:
            self._kept.touch_all(jobs)

    def key(self, job: JobView) -> float:
        return self._rank(job)

    def queue_order(self, pending: Sequence[JobView]) -> list[JobView]:
        """As the next round's admission walks them: by priority, ties as carried."""
        return sorted(super().queue_order(pending), key=self._rank)

    @property
    def _rank(self):
        """The rank as a plain function: the hot loops sort by it without a method call."""
        return _by_remaining if self.know_duration else _by_attained

    def on_profile(self, job: JobView) -> None:
        self.pairing.lonely = self.pairing.lonely or job.alone
        self.pairing.forget()

    def set_model(self, model) -> None:
        super().set_model(model)
        self.pairing.set_model(model)

    # -- the round -------------------------------------------------------------------------
    def plan(self, ctx: RoundContext) -> Plan:
        kept = self._kept
        if kept is None or ctx.partial:
            if kept is None:  # sorted afresh: Policy.carried_order's rule as written
                queue = self.carried_order(ctx.queue)
                queue.sort(key=self._rank)
            else:
                queue = kept.among(ctx.queue)
            sizes: dict[int, int] = {}
            for job in queue:
                gpus = job.record.num_gpu
                sizes[gpus] = sizes.get(gpus, 0) + 1
        else:
            if len(kept) != len(ctx.queue):  # a caller that did not report every job
                kept.rebuild(self._carried(ctx.queue))
            queue, sizes = kept.sync(), kept.sizes
        self.pairing.set_room(ctx.cluster.room)
        admitted, read = self._admit(ctx, queue, sizes)
        required = sum(len(jobs) * gpus for gpus, jobs in admitted.items())
        total = ctx.cluster.spec.total_gpus
        if self.matching:
            look = None
            rule = self.settings.merge_rule
            if rule == "completion" and required > total:
                ids = {j.id for jobs in admitted.values() for j in jobs}
                look = outlook(queue, ids, total, self._remaining_guess)
            elif rule == "gain":
                look = Outlook.unknown(total)
            packings = self._match(admitted, required, total, look)
        else:
            packings = self._consecutive(admitted, required, total)
        if self.settings.auto_unpack:
            packings = self._unpack(ctx, packings)
        groups = self._place(ctx, packings, admitted)
        self._choose_order(queue, read)
        return Plan(tuple(groups))

    def _choose_order(self, queue: list[JobView], read: int) -> None:
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

    def _carried(self, queue) -> list[JobView]:
        """The order as kept, for the jobs of `queue` (those new to it after, in its order),
        as the list a round would sort."""
        kept = self._kept
        live = {id(j) for j in queue}
        order = [j for j in kept.placing_order(kept.sync()) if id(j) in live]
        known = {id(j) for j in order}
        order.extend(j for j in queue if id(j) not in known)
        return order

    def _admit(self, ctx: RoundContext, queue: list[JobView],
               sizes: dict[int, int]) -> tuple[dict[int, list[JobView]], int]:
        """Each job that fits an empty cluster reserves room for itself and the next k-1 jobs
        of its #GPU class, since those may share its GPUs (the admission walk,
        admission.AdmissionWalk). `queue`: the carried order, read only as far as needed;
        `sizes`: its jobs per #GPUs. Returns the admitted jobs by class, the classes in the
        order their first job comes in `queue`, and how many jobs of `queue` were read."""
        chosen: dict[int, int] = {}  # classes reached, in queue order -> jobs reserved
        seen: dict[int, int] = {}  # jobs of each class offered so far
        cluster = ctx.cluster
        cluster.reset()
        need, can_place, k = cluster.need, cluster.can_place, self.k

        def take(job: JobView, position: int) -> int | None:
            gpus = job.record.num_gpu
            index = seen.get(gpus, 0)
            seen[gpus] = index + 1
            lo = chosen.setdefault(gpus, 0)
            if index >= lo:  # else reserved by a job before it (a class's first jobs)
                if not can_place(gpus, need((job,))):
                    return None
                chosen[gpus] = min(lo + k, sizes[gpus])
            return cluster.free_total

        # on a cluster of pools a job asks for its pools only: a failed request says nothing
        # of another job's
        walk = AdmissionWalk(sizes, cluster.free_total,
                             fits_monotone(self.model) and not cluster.pooled)
        walk.over(queue, take)
        classes = Classes(queue)
        return {gpus: classes.first(gpus, n) for gpus, n in chosen.items()}, walk.read

    def _remaining_guess(self, job: JobView) -> float:
        """Remaining seconds alone, as this policy may know them: Muri-S its estimate;
        Muri-L, which knows no durations, what the job has run so far (in a heavy-tailed
        workload a job's expected remaining time grows with its age), at least a minute."""
        if self.know_duration:
            return job.remaining_estimate
        return max(job.attained, 60.0)

    def _match(self, admitted: dict[int, list[JobView]], required: int,
               total: int, look: Outlook | None = None) -> dict[int, list[Packing]]:
        """Pair groups by maximum-weight matching, round after round, merging pairs (in node
        order) only while the GPUs demanded still exceed the cluster."""
        packings = {gpus: [[j] for j in jobs] for gpus, jobs in admitted.items()}
        if required <= total:
            return packings  # everything fits alone: a matching would be thrown away
        settled: set[int] = set()  # classes whose last matching merged nothing
        for _ in range(self.k):
            merged: dict[int, list[Packing]] = {gpus: [] for gpus in packings}
            for gpus, nodes in packings.items():
                if required <= total or gpus in settled:
                    # merging has stopped and this is the last round: a matching here would
                    # be thrown away, and the order of what stays single no longer matters;
                    # or the same candidates merged nothing last round, nor would they now
                    merged[gpus].extend(nodes)
                    continue
                partner = self.pairing.pairs(nodes, look)
                if not partner:
                    settled.add(gpus)
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

    def _consecutive(self, admitted: dict[int, list[JobView]], required: int,
                     total: int) -> dict[int, list[Packing]]:
        """The no-matching ablation: each admitted block of k consecutive jobs is one group
        while the demand exceeds the cluster (a job whose GPU memory does not fit beside the
        block's first ones stays alone)."""
        room = self.pairing.room
        packings: dict[int, list[Packing]] = {}
        for gpus, jobs in admitted.items():
            out = packings.setdefault(gpus, [])
            for start in range(0, len(jobs), self.k):
                block = jobs[start:start + self.k]
                head = [block[0]]
                for job in block[1:]:
                    if required > total and room.fits(head + [job]):
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
                tt, _ = self.pairing.group_timing(group, "best")
                if tt / sum(j.solo_time for j in group) > 1:
                    candidates.extend((key(j), gpus, [j]) for j in group)
                else:
                    candidates.append((min(key(j) for j in group), gpus, group))
        candidates.sort(key=_first)
        cluster = ctx.cluster
        cluster.reset()
        kept: dict[int, list[Packing]] = {}
        for _, gpus, group in candidates:
            if cluster.can_place(gpus, cluster.need(group)):
                kept.setdefault(gpus, []).append(group)
        return kept

    def _place(self, ctx: RoundContext, packings: dict[int, list[Packing]],
               admitted: dict[int, list[JobView]]) -> list[Group]:
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
            last, self._last = self._last, {}
            return [self._as_group(g, s, last) for g, s in zip(units, placements)
                    if s is not None]
        cluster = ctx.cluster
        cluster.reset()
        placed: set[int] = set()
        groups = []
        last, self._last = self._last, {}
        for job in queue:
            group = home.get(job)
            if group is None or id(group) in placed:
                continue
            slices = cluster.place(job.num_gpu, cluster.need(group))
            if slices is None:
                continue
            placed.add(id(group))
            groups.append(self._as_group(group, slices, last))
        return groups

    def _as_group(self, members: Packing, slices,
                  last: dict[tuple[int, ...], Group]) -> Group:
        """The plan's group of `members` on `slices`: the last plan's (`last`, by slot ids)
        where it had these members, in these slots, on the same GPUs at the same speed."""
        if len(members) == 1:  # alone: its solo speed, its only order (see group_timing)
            slot_jobs, tt, empty = (members[0].record.job_id,), members[0].solo_time, False
        else:
            tt, order = self.pairing.group_timing(members)
            if self.ordering == "none":
                members = sorted(members, key=lambda j: j.id)
            elif self.settings.regroup_hysteresis and _together(members, members):
                members, tt, order = self.pairing.kept_order(members, tt, order)
            slot_jobs = tuple(members[i].id for i in order if i is not None)
            empty = None in order
        group = last.get(slot_jobs)
        if group is None or group.placement != slices or group.tt != tt \
                or group.empty_slot != empty:
            group = Group(jobs=slot_jobs, num_gpu=members[0].record.num_gpu, tt=tt,
                          placement=tuple(slices), empty_slot=empty)
        self._last[slot_jobs] = group
        return group


def _by_remaining(job: JobView) -> float:
    """Muri-S's rank: estimated remaining GPU time."""
    return job.remaining_estimate * job.record.num_gpu


def _by_attained(job: JobView) -> float:
    """Muri-L's rank (durations unknown): attained GPU time."""
    return job.attained * job.record.num_gpu


def _gpus(job: JobView) -> int:
    return job.record.num_gpu


def _first(item: tuple) -> float:
    return item[0]
