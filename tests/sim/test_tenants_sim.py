"""The simulator under a tenants file: every policy that may plan for tenants keeps each
tenant within its quota and borrowing limit at every round, and gives an owner its quota
back at the round its jobs ask for it. Judged from outside the core: what runs after each
round, by the trace's tenants."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs.tenants import PriorityClass, Tenancy, Tenant
from tests.helpers import job, spec

POLICIES = ["fifo", "srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]
NODES, GPUS = 2, 4


@st.composite
def runs(draw, max_gpus):
    """Two or three tenants whose quotas sum to at most the cluster, and a trace of their
    jobs arriving over time (a third of them opportunistic, which only AntMan reads)."""
    names = ["a", "b", "c"][:draw(st.integers(2, 3))]
    quotas, left = {}, NODES * GPUS
    for name in names:
        quotas[name] = draw(st.integers(0, left))
        left -= quotas[name]
    tenants = {n: Tenant(n, quotas[n], draw(st.integers(0, 8))) for n in names}
    records, t = [], 0.0
    for i in range(draw(st.integers(1, 24))):
        t += draw(st.sampled_from([0.0, 50.0, 400.0, 3000.0]))
        owner = draw(st.sampled_from(names))
        most = tenants[owner].quota + tenants[owner].borrow_limit
        if most == 0:
            continue
        gpus = draw(st.integers(1, min(max_gpus, most)))
        records.append(replace(job(i, num_gpu=gpus, submit=t,
                                   iterations=draw(st.integers(100, 50_000)),
                                   stages=draw(st.sampled_from([(0.1, 0.1, 0.1),
                                                                (0.05, 0.2, 0.05)])),
                                   priority=draw(st.sampled_from([0, 0, 1]))),
                               tenant=owner))
    return Tenancy(tenants), records


def held(core) -> dict[str, int]:
    out: dict[str, int] = {}
    for j in core.running_jobs():
        out[j.record.tenant] = out.get(j.record.tenant, 0) + j.num_gpu
    return out


@pytest.mark.parametrize("policy", POLICIES)
@given(case=runs(max_gpus=4))
@settings(max_examples=25, deadline=None)
def test_no_tenant_ever_holds_more_than_quota_and_borrowing_limit(policy, case):
    tenancy, records = case
    if not records:
        return
    rounds = []

    def check(now, plan, core):
        for name, gpus in held(core).items():
            t = tenancy.tenants[name]
            assert gpus <= t.quota + t.borrow_limit, (now, name, gpus)
        rounds.append(now)

    result = simulate(records, spec(nodes=NODES, gpus=GPUS), policy, get_preset("default"),
                      on_round=check, tenancy=tenancy)
    assert rounds and all(o.end is not None for o in result.outcomes)


@pytest.mark.parametrize("policy", POLICIES)
@given(case=runs(max_gpus=2), cpus=st.sampled_from([12, 16, 64]))
@settings(max_examples=15, deadline=None)
def test_where_cpus_bind_bounds_hold_and_every_job_ends(policy, case, cpus):
    """Nodes of 4 GPUs and 12 or 16 CPUs (a 2-GPU job asks 12): lending counts CPUs too
    (dominant-resource turns, nothing lent past the CPUs), and that never strands a job or
    lets a tenant past its bound; 64 CPUs is the GPU-only case."""
    tenancy, records = case
    if not records:
        return

    def check(now, plan, core):
        for name, gpus in held(core).items():
            t = tenancy.tenants[name]
            assert gpus <= t.quota + t.borrow_limit, (now, name, gpus)

    result = simulate(records, spec(nodes=NODES, gpus=GPUS, cpus=cpus), policy,
                      get_preset("default"), on_round=check, tenancy=tenancy)
    assert all(o.end is not None for o in result.outcomes)


@pytest.mark.parametrize("policy", POLICIES)
@given(case=runs(max_gpus=1))
@settings(max_examples=25, deadline=None)
def test_an_owner_under_quota_never_waits_while_another_borrows(policy, case):
    """One-GPU jobs (no job is left out for the shape of what is free): after every round,
    a tenant with a job waiting that fits its quota sees nobody past theirs. The bound:
    the round at which its job arrives."""
    tenancy, records = case
    if not records:
        return

    def check(now, plan, core):
        now_held = held(core)
        borrowing = [n for n, g in now_held.items() if g > tenancy.tenants[n].quota]
        for j in core.queue:
            name = j.record.tenant
            if j.status.value == "pending" and now_held.get(name, 0) + j.num_gpu \
                    <= tenancy.tenants[name].quota:
                assert not borrowing, (now, name, j.id, now_held)

    simulate(records, spec(nodes=NODES, gpus=GPUS), policy, get_preset("default"),
             on_round=check, tenancy=tenancy)


@st.composite
def classed_runs(draw):
    """As `runs`, with two priority classes: `prod` (never preempted) and `batch` (a
    minimum run time and a restart budget drawn here), and each job of one of them."""
    tenancy, records = draw(runs(max_gpus=1))
    classes = {"prod": PriorityClass("prod", 10, preemptible=False),
               "batch": PriorityClass("batch", 0, True,
                                      draw(st.sampled_from([0.0, 100.0, 1000.0])),
                                      draw(st.integers(0, 3)))}
    tenancy = Tenancy(tenancy.tenants, classes=classes, default_class="batch")
    out = []
    for r in records:
        quota = tenancy.tenants[r.tenant].quota
        prod = quota >= r.num_gpu and draw(st.booleans())
        out.append(replace(r, priority_class="prod" if prod else ""))
    return tenancy, out


class Watch:
    """What the changes of each round show, kept apart from the core: each job's last start
    and its stops (a restart counts)."""

    def __init__(self):
        self.since: dict[int, float] = {}
        self.stops: dict[int, list[float]] = {}

    def check_stops(self, now, plan, kind, batch):
        """No job this round stops is prod, inside its minimum run time, or past its
        budget."""
        for j in plan.changes.stopping:
            assert kind[j] != "prod", (now, j)
            since = self.since.get(j)
            if since is not None and batch.min_run_s:
                assert now >= since + batch.min_run_s - 1e-9, (now, j, since)
            if batch.restart_budget:
                recent = [t for t in self.stops.get(j, []) if t > now - 3600.0]
                assert len(recent) < batch.restart_budget, (now, j, recent)
        self.note(now, plan)

    def note(self, now, plan):
        changes = plan.changes
        for j in changes.stopping:
            self.stops.setdefault(j, []).append(now)
            self.since.pop(j, None)
        for j in changes.starting:
            self.since[j] = now


@pytest.mark.parametrize("policy", POLICIES)
@given(case=classed_runs())
@settings(max_examples=25, deadline=None)
def test_classes_guard_prod_minimum_runs_and_restart_budgets(policy, case):
    """No prod job is ever stopped once started; no batch job is stopped sooner than its
    minimum run time after it started, nor more often than its budget in any hour; every
    tenant within quota and borrowing limit; and a tenant with a waiting job that fits its
    quota waits only on jobs guarded so (the stated bound: a borrower's minimum run time,
    or the hour its budget is spent for)."""
    tenancy, records = case
    if not records:
        return
    batch = tenancy.classes["batch"]
    kind = {r.job_id: r.priority_class or "batch" for r in records}
    watch = Watch()

    def guarded(j, now):
        since = watch.since.get(j)
        if kind[j] == "prod":
            return True
        if batch.min_run_s and since is not None and now < since + batch.min_run_s:
            return True
        recent = [t for t in watch.stops.get(j, []) if t > now - 3600.0]
        return bool(batch.restart_budget) and len(recent) >= batch.restart_budget

    def check(now, plan, core):
        watch.check_stops(now, plan, kind, batch)
        now_held = held(core)
        for name, gpus in now_held.items():
            t = tenancy.tenants[name]
            assert gpus <= t.quota + t.borrow_limit, (now, name, gpus)
        for j in core.queue:
            name = j.record.tenant
            if j.status.value == "pending" and now_held.get(name, 0) + j.num_gpu \
                    <= tenancy.tenants[name].quota:
                for other in core.running_jobs():
                    owner = other.record.tenant
                    if now_held[owner] > tenancy.tenants[owner].quota:
                        assert guarded(other.id, now), (now, j.id, other.id)

    simulate(records, spec(nodes=NODES, gpus=GPUS), policy, get_preset("default"),
             on_round=check, tenancy=tenancy)


@st.composite
def pressed_runs(draw):
    """Two tenants whose quotas may together exceed the cluster, jobs of 1, 2 and 4 GPUs in
    bursts, a third of them `prod` where their tenant's quota holds them: policies preempt,
    move and regroup here, so every guard is tried."""
    tenants = {n: Tenant(n, draw(st.integers(2, 8)), draw(st.integers(0, 8))) for n in "ab"}
    classes = {"prod": PriorityClass("prod", 10, preemptible=False),
               "batch": PriorityClass("batch", 0, True,
                                      draw(st.sampled_from([0.0, 300.0])),
                                      draw(st.integers(0, 3)))}
    records, t = [], 0.0
    for i in range(draw(st.integers(5, 30))):
        t += draw(st.sampled_from([0.0, 0.0, 50.0, 500.0]))
        owner = draw(st.sampled_from("ab"))
        gpus = draw(st.sampled_from([1, 1, 2, 4]))
        if gpus > tenants[owner].quota + tenants[owner].borrow_limit:
            continue
        prod = gpus <= tenants[owner].quota and draw(st.integers(0, 2)) == 0
        records.append(replace(job(i, num_gpu=gpus, submit=t,
                                   iterations=draw(st.integers(1000, 50_000)),
                                   stages=draw(st.sampled_from([(0.1, 0.1, 0.1),
                                                                (0.05, 0.2, 0.05)])),
                                   priority=draw(st.sampled_from([0, 0, 1]))),
                               tenant=owner, priority_class="prod" if prod else ""))
    return Tenancy(tenants, classes=classes, default_class="batch"), records


@pytest.mark.parametrize("policy", POLICIES)
@given(case=pressed_runs())
@settings(max_examples=30, deadline=None)
def test_under_pressure_no_guard_is_broken(policy, case):
    tenancy, records = case
    batch = tenancy.classes["batch"]
    kind = {r.job_id: r.priority_class or "batch" for r in records}
    watch = Watch()

    def check(now, plan, core):
        watch.check_stops(now, plan, kind, batch)
        for name, gpus in held(core).items():
            t = tenancy.tenants[name]
            assert gpus <= t.quota + t.borrow_limit, (now, name, gpus)

    if records:
        simulate(records, spec(nodes=NODES, gpus=GPUS), policy, get_preset("default"),
                 on_round=check, tenancy=tenancy)


def test_a_run_without_quotas_can_be_watched_tenant_by_tenant():
    """`watch` counts each tenant's figures in a one-queue run and changes nothing of it.
    By hand, on 16 GPUs (FIFO, 26.3 s per start): a's four 8-GPU jobs of 3000 s at 0, b's one of
    300 s at 10. One queue: b starts once a's first two are done, at 2 x 3026.3 s, so it waits
    6042.6 s; a's jobs wait 0, 0, 3026.3, 3026.3. With a owed 8 (borrowing 8) and b owed 8, b's job
    takes back its quota the round it comes: it waits 0."""
    from specs import load_spec, spec_path

    jobs = [replace(job(i, num_gpu=8, iterations=10000), tenant="a") for i in range(4)]
    jobs.append(replace(job(4, num_gpu=8, iterations=1000, submit=10.0), tenant="b"))
    cluster, preset = load_spec(spec_path("n2g8")), get_preset("default")
    watch = Tenancy({"a": Tenant("a", 0), "b": Tenant("b", 0)})
    watched = simulate(jobs, cluster, "fifo", preset, watch=watch)
    plain = simulate(jobs, cluster, "fifo", preset)
    assert plain.tenants is None
    assert [(o.start, o.end) for o in watched.outcomes] == \
        [(o.start, o.end) for o in plain.outcomes]
    by = watched.tenants["by_tenant"]
    assert by["b"]["avg_queueing"] == pytest.approx(6042.6)
    assert by["a"]["avg_queueing"] == pytest.approx(3026.3 / 2)
    assert (by["a"]["jobs"], by["b"]["jobs"], by["a"]["peak_gpus"]) == (4, 1, 16)
    assert by["a"]["gpu_hours"] == pytest.approx(4 * 8 * 3026.3 / 3600)
    quotas = Tenancy({"a": Tenant("a", 8, 8), "b": Tenant("b", 8, 0)})
    owed = simulate(jobs, cluster, "fifo", preset, tenancy=quotas).tenants["by_tenant"]
    assert owed["b"]["avg_queueing"] == 0.0 and owed["b"]["peak_gpus"] == 8


def test_antman_jobs_waiting_on_one_node_for_each_other_give_way():
    """Quotas delay a's 2-GPU job until one GPU is free on the node where b's 4-GPU job
    holds three and waits for the fourth: each then holds part of that node and waits for
    the rest, which the other holds. With nothing running, both give their GPUs back and
    are placed afresh; every job finishes."""
    prod = PriorityClass("prod", 10, preemptible=False)
    tenancy = Tenancy({"a": Tenant("a", 5, 0), "b": Tenant("b", 5, 0)},
                      classes={"prod": prod}, default_class="prod")
    sizes = {2: 2, 15: 2, 16: 4}
    iterations = {0: 4041, 1: 2014}
    records = [replace(job(i, num_gpu=sizes.get(i, 1), iterations=iterations.get(i, 1000)),
                       tenant="b" if i in (14, 16, 17) else "a") for i in range(18)]
    result = simulate(records, spec(nodes=NODES, gpus=GPUS), "antman", get_preset("default"),
                      tenancy=tenancy)
    assert sorted(o.job_id for o in result.outcomes if o.end is not None) == list(range(18))
