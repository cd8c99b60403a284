"""Muri's per-round shortcuts (admission that stops once nothing left can fit, lone jobs that
skip the interleave model in unpack and as groups, jobs looked up by identity) plan exactly
what the plain definition plans: whole simulations are compared with a Muri whose round
walks the whole queue and models every group, on random traces with many ties."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduler.core.policies.base import place_units
from scheduler.core.policies.muri import Muri
from scheduler.core.policies.muri_outlook import Outlook, outlook
from scheduler.core.policies.muri_pairs import _together
from scheduler.presets import get_preset
from scheduler.core.state import Group, Plan
from scheduler.sim.simulator import Simulator
from tests.helpers import job as record, spec


class PlainMuri(Muri):
    """Muri's round as written before the shortcuts: every step over every job."""

    def plan(self, ctx):
        queue = self.carried_order(ctx.queue)
        queue.sort(key=self.key)
        admitted = self._admit(ctx, queue)
        required = sum(len(jobs) * gpus for gpus, jobs in admitted.items())
        total = ctx.cluster.spec.total_gpus
        if self.matching:
            look = None
            if self.settings.merge_rule == "completion" and required > total:
                ids = {j.id for jobs in admitted.values() for j in jobs}
                look = outlook(queue, ids, total, self._remaining_guess)
            elif self.settings.merge_rule == "gain":
                look = Outlook.unknown(total)
            packings = self._match(admitted, required, total, look)
        else:
            packings = self._consecutive(admitted, required, total)
        if self.settings.auto_unpack:
            packings = self._unpack(ctx, packings)
        return Plan(tuple(self._place(ctx, packings, queue)))

    def _admit(self, ctx, queue):
        classes = {}
        for job in queue:
            classes.setdefault(job.num_gpu, []).append(job)
        chosen = dict.fromkeys(classes, 0)
        reserved = set()
        cluster = ctx.cluster
        cluster.reset()
        monotone = self.model.cpu_single_gpu <= 2 * self.model.cpu_per_gpu
        smallest_failed = float("inf")
        for job in queue:
            if job.id in reserved or job.num_gpu >= smallest_failed:
                continue
            if cluster.place(job.num_gpu) is None:
                if monotone:
                    smallest_failed = job.num_gpu
                continue
            members = classes[job.num_gpu]
            lo = chosen[job.num_gpu]
            hi = min(lo + self.k, len(members))
            reserved.update(j.id for j in members[lo:hi])
            chosen[job.num_gpu] = hi
        return {gpus: members[:chosen[gpus]] for gpus, members in classes.items()}

    def _unpack(self, ctx, packings):
        candidates = []
        for gpus, groups in packings.items():
            for group in groups:
                tt, _ = self.pairing.group_timing(group, "best")
                if tt / sum(j.solo_time for j in group) > 1:
                    candidates.extend((self.key(j), gpus, [j]) for j in group)
                else:
                    candidates.append((min(self.key(j) for j in group), gpus, group))
        candidates.sort(key=lambda c: c[0])
        cluster = ctx.cluster
        cluster.reset()
        kept = {}
        for _, gpus, group in candidates:
            if cluster.place(gpus) is not None:
                kept.setdefault(gpus, []).append(group)
        return kept

    def _place(self, ctx, packings, queue):
        home = {j.id: group for groups in packings.values() for group in groups for j in group}
        queue.sort(key=lambda j: j.num_gpu, reverse=True)
        if ctx.previous:
            units, seen = [], set()
            for job in queue:
                group = home.get(job.id)
                if group is not None and id(group) not in seen:
                    seen.add(id(group))
                    units.append(group)
            placements = place_units(ctx, [(g[0].num_gpu, g) for g in units])
            return [self._as_group(g, s) for g, s in zip(units, placements) if s is not None]
        cluster = ctx.cluster
        cluster.reset()
        placed, groups = set(), []
        for job in queue:
            group = home.get(job.id)
            if group is None or id(group) in placed:
                continue
            slices = cluster.place(job.num_gpu)
            if slices is None:
                continue
            placed.add(id(group))
            groups.append(self._as_group(group, slices))
        return groups

    def _as_group(self, members, slices):
        tt, order = self.pairing.group_timing(members)
        if self.ordering == "none" and len(members) > 1:
            members = sorted(members, key=lambda j: j.id)
        elif self.settings.regroup_hysteresis and _together(members, members):
            members, tt, order = self.pairing.kept_order(members, tt, order)
        return Group(jobs=tuple(members[i].id for i in order if i is not None),
                     num_gpu=members[0].num_gpu, tt=tt, placement=tuple(slices),
                     empty_slot=None in order)


@st.composite
def traces(draw):
    out = []
    for i in range(draw(st.integers(1, 30))):
        out.append(record(
            i, num_gpu=draw(st.sampled_from([1, 1, 2, 4, 8, 12])),
            submit=draw(st.sampled_from([0.0, 0.0, 5.0, 60.0, 600.0])) + i * draw(
                st.sampled_from([0.0, 1.0])),
            iterations=draw(st.sampled_from([10, 100, 500, 2000])),
            stages=draw(st.sampled_from([(0.1, 0.2, 0.1, 0.1), (0.3, 0.1, 0.2, 0.05),
                                         (0.05, 0.4, 0.05, 0.3), (0.2, 0.2, 0.2, 0.2)]))))
    return out


def outcomes(records, cluster_spec, policy, preset, kind=None):
    """A whole run's outcomes, by the built-in Muri or by `kind` (a Muri subclass) made
    with the same options."""
    sim = Simulator(records, cluster_spec, policy, preset)
    if kind is not None:
        made = sim.core.policy
        sim.core.policy = kind(made.model, made.name, know_duration=made.know_duration,
                               ordering=made.ordering, matching=made.matching,
                               settings=made.settings)
    try:
        result = sim.run()
    except RuntimeError as error:  # a job no node can hold (too few CPUs): all must say so
        return str(error)
    return ([(o.job_id, o.start, o.end, o.preemptions, o.starts) for o in result.outcomes],
            result.rounds)


@settings(max_examples=40, deadline=None)
@given(traces(), st.sampled_from(["muri-s", "muri-l", "muri-l-worst", "muri-l-nomatch"]), st.sampled_from(["paper", "default"]),
       st.sampled_from([(2, 4, 64, 1), (4, 4, 24, 2), (3, 8, 40, 1)]))
def test_muri_plans_what_its_plain_round_plans(records, policy, preset, shape):
    nodes, gpus, cpus, switches = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus, switches=switches)
    records = [r for r in records if r.num_gpu <= cluster_spec.total_gpus]
    p = get_preset(preset)
    assert (outcomes(records, cluster_spec, policy, p)
            == outcomes(records, cluster_spec, policy, p, PlainMuri))
