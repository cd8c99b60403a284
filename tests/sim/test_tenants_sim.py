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
from specs.tenants import Tenancy, Tenant
from tests.helpers import job, spec

POLICIES = ["fifo", "srtf", "srsf", "tiresias", "themis", "muri-s", "muri-l"]
NODES, GPUS = 2, 4


@st.composite
def runs(draw, max_gpus):
    """Two or three tenants whose quotas sum to at most the cluster, and a trace of their
    jobs arriving over time."""
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
                                                                (0.05, 0.2, 0.05)]))),
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
