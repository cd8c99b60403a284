"""The per-round shortcuts equal the from-scratch computation they replace.

Each shortcut (the carried order kept between rounds, placement walks that stop when nothing
left can fit, the core's running set, the simulator's end grouping) is compared with the
plain definition, on random inputs with many ties; whole simulations are compared with
reference policies that re-sort and walk the whole queue every round.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.core.placement import ClusterState, Demand
from scheduler.plugins import make_policy
from scheduler.core.policies.antman import AntMan
from scheduler.core.policies.base import Policy, RoundContext, place_in_order, place_units, solo_group
from scheduler.core.policies.order import CarriedOrder
from scheduler.core.policies.priority import PriorityPolicy
from scheduler.core.policies.tiresias import Tiresias
from scheduler.presets import get_preset
from scheduler.sim.simulator import Simulator, core_preset
from scheduler.core.state import Job, NodeSlice, Plan, Status
from tests.helpers import job as record, run_outcomes, spec

SLOW = settings(max_examples=40, deadline=None)


def make_job(job_id: int, num_gpu: int = 1, key: float = 0.0) -> Job:
    return Job(record=record(job_id, num_gpu=num_gpu), solo_time=1.0, profile=(1.0,),
               remaining=key, remaining_estimate=key)


def step_queue(kept, queue: list[Job], arrivals, finishing, changes, next_id: int) -> int:
    """One random step on a kept order and the plain queue beside it: jobs arrive ((#GPUs,
    key) each, ids from `next_id`), leave (picked by index) and get new keys (told by touch);
    returns the next free id."""
    for num_gpu, key in arrivals:
        job = make_job(next_id, num_gpu, key)
        next_id += 1
        queue.append(job)
        kept.add(job)
    for pick in finishing:
        if queue:
            kept.remove(queue.pop(pick % len(queue)))
    for pick, key in changes:
        if queue:
            job = queue[pick % len(queue)]
            job.remaining_estimate = key
            kept.touch(job)
    return next_id


# -- the carried order ---------------------------------------------------------------------
class Reference:
    """Policy.carried_order's rule, sorted from scratch each round."""

    def __init__(self, key):
        self.key, self.order = key, []

    def round(self, queue: list[Job]) -> list[Job]:
        live = {id(j) for j in queue}
        order = [j for j in self.order if id(j) in live]
        known = {id(j) for j in order}
        order += [j for j in queue if id(j) not in known]
        order.sort(key=self.key)
        self.order = order
        return list(order)


KEYS = st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0])  # few values: ties everywhere
STEP = st.tuples(
    st.lists(st.tuples(st.sampled_from([1, 2, 4]), KEYS), max_size=4),  # arrivals
    st.lists(st.integers(0, 10_000), max_size=3),  # which jobs finish
    st.lists(st.tuples(st.integers(0, 10_000), KEYS), max_size=6),  # new keys (they ran)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=12))
def test_the_kept_order_is_the_carried_sort(steps):
    key = lambda j: j.remaining_estimate  # noqa: E731
    kept, ref = CarriedOrder(key), Reference(key)
    queue: list[Job] = []
    next_id = 0
    for arrivals, finishing, changes in steps:
        next_id = step_queue(kept, queue, arrivals, finishing, changes, next_id)
        assert kept.sync() == ref.round(queue)
        sizes: dict[int, int] = {}
        for job in queue:
            sizes[job.num_gpu] = sizes.get(job.num_gpu, 0) + 1
        assert kept.sizes == sizes


@settings(max_examples=100, deadline=None)
@given(st.lists(KEYS, max_size=20), st.lists(KEYS, max_size=20), st.integers(0, 20))
def test_rebuild_gives_the_carried_sort_of_a_queue_it_was_not_told_of(first, second, cut):
    key = lambda j: j.remaining_estimate  # noqa: E731
    jobs = [make_job(i, 1, k) for i, k in enumerate(first)]
    kept, ref = CarriedOrder(key), Reference(key)
    for job in jobs:
        kept.add(job)
    assert kept.sync() == ref.round(jobs)
    queue = jobs[cut:] + [make_job(100 + i, 1, k) for i, k in enumerate(second)]
    assert kept.rebuild(queue) == ref.round(queue)


# -- placement walks -----------------------------------------------------------------------
def plain_place_in_order(ctx: RoundContext, order) -> list:
    """Every job tried on an emptied cluster (the definition)."""
    cluster = ctx.cluster
    if ctx.previous:
        cluster.reset()
        order = [job for job in order if cluster.can_place(job.num_gpu)]
    placements = place_units(ctx, [(job.num_gpu, (job,)) for job in order])
    return [solo_group(job, s) for job, s in zip(order, placements) if s is not None]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8, 12, 16]), max_size=30),
       st.integers(1, 4), st.sampled_from([2, 4, 8]), st.sampled_from([8, 16, 40, 1000]),
       st.sampled_from([(6, 2), (2, 6), (4, 20)]), st.sets(st.integers(0, 3), max_size=2),
       st.integers(0, 2**16))
def test_placement_that_stops_early_places_what_trying_every_job_does(
        sizes, nodes, gpus, cpus, demand, offline, seed):
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    preset = get_preset("default", cpu_per_gpu=demand[0], cpu_single_gpu=demand[1])
    order = [make_job(i, n) for i, n in enumerate(sizes)]
    # where some of them ran last round (sticky placement): a plain placement of a shuffle
    rng = random.Random(seed)
    previous: dict[int, tuple] = {}
    if seed % 2:
        c = ClusterState(cluster_spec, Demand(*demand))
        for job in rng.sample(order, len(order)):
            where = c.place(job.num_gpu)
            if where is not None and rng.random() < 0.7:
                previous[job.id] = where
    results = []
    for fast in (True, False):
        c = ClusterState(cluster_spec, Demand(*demand))
        c.offline.update(n for n in offline if n < nodes)
        ctx = RoundContext(0.0, order, c, preset.model, previous)
        results.append(place_in_order(ctx, order) if fast else plain_place_in_order(ctx, order))
    assert results[0] == results[1]


# -- whole simulations against policies that redo everything every round ------------------
class PlainPriority(PriorityPolicy):
    def on_submit(self, job, now):
        pass

    def on_finish(self, job, now):
        pass

    def on_change(self, job):
        pass

    def plan(self, ctx):
        order = self.carried_order(ctx.queue)
        order.sort(key=self.key)
        return Plan(tuple(plain_place_in_order(ctx, order)))


class PlainTiresias(Tiresias):
    def plan(self, ctx):
        if self.promote > 0:
            self._promote_starved(ctx.now)
        cluster = ctx.cluster
        cluster.reset()
        free = cluster.spec.total_gpus
        chosen, where = [], []
        for queue in self.queues:
            for job in queue:
                if self.admit_by_gpu_count:
                    if free >= job.num_gpu:
                        chosen.append(job)
                        free -= job.num_gpu
                else:
                    slices = cluster.place(job.num_gpu)
                    if slices is not None:
                        chosen.append(job)
                        where.append(slices)
        if self._promoted:
            self._resume_promoted(chosen, ctx.now)
        running = set(map(id, chosen))
        for queue in self.queues:
            queue[:] = ([j for j in queue if id(j) in running]
                        + [j for j in queue if id(j) not in running])
        order = sorted(range(len(chosen)), key=lambda i: -chosen[i].num_gpu)
        chosen = [chosen[i] for i in order]
        placements = place_units(ctx, [(job.num_gpu, (job,)) for job in chosen])
        if where and any(s is None for s in placements):
            placements = [where[i] for i in order]
        groups = [solo_group(job, s if s is not None else ()) for job, s in zip(chosen, placements)]
        times = [self._demotion_time(job, self.queue_of[job.id], ctx.now) for job in chosen
                 if self.queue_of[job.id] < len(self.limits)]
        return Plan(tuple(groups), wakeup=max(min(times), ctx.now) if times else None)


class PlainAntMan(AntMan):
    def plan(self, ctx):
        if self.gpus is None:
            self._init(ctx)
        queue = self.carried_order(ctx.queue)
        queue.sort(key=lambda j: (j.priority, j.submit_time))
        running = {j.id for j in queue if j.status is Status.RUNNING}
        if not running:  # no end can complete a hold: incomplete ones start afresh
            for job_id in [j for j, hold in self.holds.items() if hold.missing]:
                self._release(job_id)
        for job in queue:
            if job.status is not Status.PENDING:
                continue
            placed = (self._place_guaranteed(job) if job.priority == 0
                      else self._place_opportunistic(job))
            if placed:
                running.add(job.id)
        by_id = {j.id: j for j in queue}
        groups = [self._make_group(job, by_id) for job in queue if job.id in running]
        return Plan(tuple(groups), shared_gpus=True)


PLAIN = {  # name -> the plain policy made with a preset's model and settings
    "srsf": lambda p: PlainPriority(p.model, "srsf", lambda j: j.remaining_estimate * j.num_gpu),
    "srtf": lambda p: PlainPriority(p.model, "srtf", lambda j: j.remaining_estimate),
    "fifo": lambda p: PlainPriority(p.model, "fifo", lambda j: j.submit_time),
    "tiresias": lambda p: PlainTiresias(p.model, p.policies.tiresias),
    "antman": lambda p: PlainAntMan(p.model),
}


@st.composite
def traces(draw):
    n = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        out.append(record(
            i, num_gpu=draw(st.sampled_from([1, 1, 2, 4, 8])),
            submit=draw(st.sampled_from([0.0, 0.0, 5.0, 60.0, 600.0, 3000.0])) + i * draw(
                st.sampled_from([0.0, 0.0, 1.0])),
            iterations=draw(st.sampled_from([10, 100, 500, 2000])),
            stages=draw(st.sampled_from([(0.1, 0.2, 0.1), (0.3, 0.1, 0.2), (0.05, 0.4, 0.05)])),
            priority=draw(st.sampled_from([0, 0, 1]))))
    return out


def outcomes(records, cluster_spec, policy, preset, plain: bool):
    sim = Simulator(records, cluster_spec, policy, preset)
    if plain:
        sim.core.policy = PLAIN[policy](core_preset(preset))
    return run_outcomes(sim)


@SLOW
@given(traces(), st.sampled_from(list(PLAIN)), st.sampled_from(["paper", "default"]),
       st.sampled_from([(2, 4, 64), (2, 8, 40), (3, 4, 24)]))
def test_simulations_equal_those_of_policies_that_redo_everything(records, policy, preset,
                                                                  shape):
    nodes, gpus, cpus = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    records = [r for r in records if r.num_gpu <= cluster_spec.total_gpus]
    p = get_preset(preset)
    assert (outcomes(records, cluster_spec, policy, p, plain=False)
            == outcomes(records, cluster_spec, policy, p, plain=True))


# -- the core's running set ----------------------------------------------------------------
class Scripted(Policy):
    """Runs the jobs a test names each round (a real policy's choice, made up front)."""

    def __init__(self, preset, picks):
        super().__init__(preset)
        self.picks = picks

    def plan(self, ctx):
        ids = self.picks.pop(0) if self.picks else set()
        picked = [j for j in ctx.queue if j.id % 16 in ids]  # at most 16: one GPU each
        return Plan(tuple(solo_group(j, (NodeSlice(k // 4, (k % 4,)),))
                          for k, j in enumerate(picked)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 15), max_size=6),
                          st.sampled_from(["round", "finish", "stop", "submit"]),
                          st.integers(0, 100)), min_size=1, max_size=25))
def test_core_running_jobs_are_the_queue_filtered_by_status(script):
    preset = get_preset("default")
    picks = [ids for ids, _, _ in script]
    core = Core(spec(nodes=4, gpus=4), Scripted(preset.model, picks), preset.model)
    next_id, now = 0, 0.0
    for i in range(4):
        core.submit(record(i), now)
        next_id += 1
    for _, action, pick in script:
        now += 1.0
        if action == "submit":
            core.submit(record(next_id), now)
            next_id += 1
        elif action == "finish" and core.queue:
            core.finish(core.queue[pick % len(core.queue)].id, now)
        elif action == "stop" and core.queue:
            core.stop(core.queue[pick % len(core.queue)].id, now)
        core.advance(now)
        core.round(now)
        expected = [j for j in core.queue if j.status is Status.RUNNING]
        assert core.running_jobs() == expected
        running = core.plan_now.running()
        assert {j.id for j in expected} == set(running)
        for job in core.queue:
            assert job.group_key == (running[job.id].jobs if job.id in running else ())


def test_a_priority_policy_sees_an_estimate_set_outside_a_round():
    """set_remaining changes a waiting job's key: the kept order must move it."""
    preset = get_preset("default")
    core = Core(spec(nodes=1, gpus=1), make_policy("srtf", preset), preset.model)
    core.submit(record(0, iterations=100), 0.0)
    core.submit(record(1, iterations=200), 0.0)
    assert [g.jobs for g in core.round(0.0).groups] == [(0,)]
    core.set_remaining(1, 1.0)  # job 1 is now the shortest
    core.advance(1.0, {0: 1.0})
    assert [g.jobs for g in core.round(1.0).groups] == [(1,)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 1, 2, 3, 4, 8, 16]), st.integers(0, 2)),
                max_size=30),
       st.integers(1, 4), st.sampled_from([4, 8]), st.sampled_from([16, 40, 1000]),
       st.sampled_from(["paper", "default"]))
def test_tiresias_admission_that_stops_early_admits_what_the_full_walk_does(
        jobs, nodes, gpus, cpus, preset):
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    p = core_preset(get_preset(preset))
    policies = []
    for cls in (Tiresias, PlainTiresias):
        policy = cls(p.model, p.policies.tiresias)
        for i, (num_gpu, q) in enumerate(jobs):
            job = make_job(i, num_gpu)
            policy.on_submit(job, 0.0)
            for level in range(q):
                policy._demote(job, level)
        policies.append(policy)
    plans = []
    for policy in policies:
        c = ClusterState(cluster_spec, Demand(p.model.cpu_per_gpu, p.model.cpu_single_gpu))
        plans.append(policy.plan(RoundContext(0.0, (), c, p.model, {})))
    assert plans[0] == plans[1]
    assert ([[j.id for j in q] for q in policies[0].queues]
            == [[j.id for j in q] for q in policies[1].queues])


@pytest.mark.parametrize("policy", list(PLAIN))  # each its own examples
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["submit", "submit", "round", "stop", "finish"]),
                          st.integers(0, 100), st.sampled_from([1, 2, 4, 8]),
                          st.sampled_from([0, 0, 1])), min_size=1, max_size=40),
       st.sampled_from(["paper", "default"]))
# an 8-GPU job holds one node behind a 1-GPU job that then ends: with nothing running its
# hold starts afresh (both nodes in order), as it must in the plain policy too (for every
# policy: a harmless case for the others)
@example([("submit", 0, 1, 0), ("submit", 0, 8, 0), ("finish", 0, 1, 0)], "paper")
def test_live_events_leave_the_fast_policies_planning_as_the_plain_ones(policy, script, preset):
    """Stops, finishes and arrivals between rounds, as the live driver sends them: the kept
    orders and shortcuts plan what the from-scratch policies plan."""
    p = core_preset(get_preset(preset))
    cores = [Core(spec(nodes=2, gpus=4), make_policy(policy, p), p.model),
             Core(spec(nodes=2, gpus=4), PLAIN[policy](p), p.model)]
    now, next_id = 0.0, 0
    for action, pick, gpus, priority in script:
        now += 7.0
        for core in cores:
            core.advance(now, {j.id: 3.0 for j in core.running_jobs()})
        if action == "submit":
            for core in cores:
                core.submit(record(next_id, num_gpu=gpus, iterations=50 + pick,
                                   priority=priority), now)
            next_id += 1
        elif action in ("stop", "finish") and cores[0].queue:
            job_id = cores[0].queue[pick % len(cores[0].queue)].id
            for core in cores:
                (core.stop if action == "stop" else core.finish)(job_id, now)
        plans = [core.round(now) for core in cores]
        assert plans[0] == plans[1]


def test_antman_runs_again_a_guaranteed_job_stopped_on_a_full_cluster():
    """A stopped guaranteed job keeps its GPUs (AntMan never frees them until it ends), so
    the next round resumes it there, as the plain walk does, even with nothing free."""
    p = get_preset("default")
    cores = [Core(spec(nodes=2, gpus=4), make_policy("antman", p), p.model),
             Core(spec(nodes=2, gpus=4), PLAIN["antman"](p), p.model)]
    for core in cores:
        core.submit(record(0, num_gpu=4), 0.0)
        core.submit(record(1, num_gpu=4), 0.0)
        core.submit(record(2, num_gpu=8, priority=1), 0.0)
        core.round(0.0)
        core.advance(1.0)
        core.stop(1, 1.0)
    plans = [core.round(1.0) for core in cores]
    assert plans[0] == plans[1]
    assert 1 in plans[0].running()
