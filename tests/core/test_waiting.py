"""Why a job waits: each reason of the documented list, in a case small enough to work out
by hand (the expected reason is read off the case, not off the code)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from scheduler.core.engine import Core
from scheduler.core.waiting import REASONS, why_waiting
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from specs.tenants import tenancy_of
from tests.helpers import job, spec

LONG = 100_000  # iterations: nothing finishes within a test


def core_of(policy="fifo", nodes=1, gpus=4, tenancy=None):
    preset = get_preset("default")
    return Core(spec(nodes=nodes, gpus=gpus), make_policy(policy, preset), preset.model,
                None if tenancy is None else tenancy_of(tenancy))


def submit(core, job_id, gpus=1, at=0.0, **fields):
    core.submit(replace(job(job_id, num_gpu=gpus, iterations=LONG), **fields), at)


def test_without_tenants_no_room_arrived_and_unfit():
    core = core_of("fifo", nodes=2, gpus=4)
    submit(core, 1, gpus=4)
    submit(core, 2, gpus=4)
    submit(core, 3, gpus=4)
    core.round(0.0)
    submit(core, 4, gpus=1)
    why = why_waiting(core)
    assert why[3].reason == "no_room" and "needs 4 GPUs; 0 are free" in why[3].text
    assert why[4].reason == "arrived"
    core.set_node_online(1, False)  # its jobs are stopped by the driver; 4 GPUs stay online
    core.stop(2, 0.0)
    core.round(0.0)
    submit(core, 5, gpus=8)
    core.round(0.0)
    why = why_waiting(core)
    assert why[5].reason == "unfit" and "have 4" in why[5].text


def test_unfit_when_no_node_has_the_cpus_it_asks():
    """An 8-GPU job asks 6 CPUs a GPU, 48 on its node; these nodes have 32. The core takes
    it (what takes jobs from users refuses it first); it waits, and says why."""
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=8, cpus=32), make_policy("srsf", preset), preset.model)
    submit(core, 1, gpus=8)
    submit(core, 2, gpus=5)
    core.round(0.0)
    why = why_waiting(core)
    assert why[1].reason == "unfit" and "needs 48 CPUs on each node" in why[1].text
    assert "have 32" in why[1].text and 1 not in {j.id for j in core.running_jobs()}
    assert 2 not in why  # 30 CPUs: it runs


def test_behind_when_free_gpus_wait_for_the_head_of_the_queue():
    """AntMan starts its queue in order: a 1-GPU job behind a 4-GPU job that does not fit
    waits, though 3 GPUs are free (the other policies backfill it)."""
    core = core_of("antman", nodes=1, gpus=4)
    submit(core, 1, gpus=1)
    submit(core, 2, gpus=4)
    submit(core, 3, gpus=1)
    core.round(0.0)
    assert {j.id for j in core.running_jobs()} == {1}
    why = why_waiting(core)
    assert why[2].reason == "no_room" and why[2].ahead == 0
    assert why[3].reason == "behind" and why[3].ahead == 1


TENANTS = {"tenants": {"a": {"quota": 2, "borrow_limit": 1},
                       "b": {"quota": 2, "borrow_limit": 2}}}


def test_over_quota_and_no_idle_to_borrow():
    """4 GPUs, quotas 2 and 2. At 0 a runs 3 jobs (its quota 2 and 1 borrowed, its limit).
    At 1 b asks for 1 GPU and 2 more: b's 1-GPU job is owed; a keeps the last GPU (lent
    one job at a time, a's turn first by name). a's fourth job would take it past 3; b's
    2-GPU job would take b to 3, within its bound 4, but nothing idle is left to lend."""
    core = core_of("fifo", nodes=1, gpus=4, tenancy=TENANTS)
    for i in (1, 2, 3):
        submit(core, i, tenant="a")
    core.round(0.0)
    assert {j.id for j in core.running_jobs()} == {1, 2, 3}
    submit(core, 4, tenant="a", at=1.0)
    submit(core, 5, tenant="b", at=1.0)
    submit(core, 6, gpus=2, tenant="b", at=1.0)
    core.advance(1.0)
    core.round(1.0)
    assert {j.id for j in core.running_jobs()} == {1, 2, 3, 5}
    why = why_waiting(core)
    assert (why[4].reason, why[4].ahead) == ("over_quota", 3)
    assert "tenant a holds 3 GPUs; 1 more would pass 3" in why[4].text
    assert (why[6].reason, why[6].ahead) == ("no_idle_to_borrow", 1)
    assert "tenant b holds 1 GPUs; 2 more would pass its quota 2" in why[6].text
    assert "past its quota" not in why[6].text  # b holds less than its quota


def test_no_cpus_to_borrow():
    """3 nodes of 4 GPUs and 12 CPUs (36), nothing owed: a's 2-GPU jobs ask 12 CPUs, b's
    1-GPU jobs 2. Lent by dominant share: a's first (12 of 36 CPUs: a third), b's first four
    (4 of 12 GPUs: a third), a's second (24 CPUs), b's next two: the CPUs are all taken with
    2 GPUs idle, so a's third and b's seventh wait for CPUs, not GPUs."""
    core = Core(spec(nodes=3, gpus=4, cpus=12), make_policy("fifo", get_preset("default")),
                get_preset("default").model, tenancy_of(
                    {"tenants": {"a": {"quota": 0, "borrow_limit": 12},
                                 "b": {"quota": 0, "borrow_limit": 12}}}))
    for i in (1, 2, 3):
        submit(core, i, gpus=2, tenant="a")
    for i in range(10, 18):
        submit(core, i, tenant="b")
    core.round(0.0)
    admitted = core.tenants.admission.admitted
    assert admitted == {1, 2, 10, 11, 12, 13, 14, 15}
    why = why_waiting(core)
    assert (why[3].reason, why[3].ahead) == ("no_cpus_to_borrow", 2)
    assert "it asks 12 CPUs and 0 of the cluster's 36 are left" in why[3].text
    assert {why[16].reason, why[17].reason} == {"no_cpus_to_borrow"}


GUARDED = {"default_class": "batch",
           "classes": {"prod": {"priority": 10, "preemptible": False},
                       "batch": {"min_run_s": 100}},
           "tenants": {"owner": {"quota": 4}, "b": {"quota": 0, "borrow_limit": 4}}}


def test_waiting_for_reclaim_until_the_borrowers_minimum_run_ends():
    core = core_of("srsf", nodes=1, gpus=4, tenancy=GUARDED)
    for i in range(4):
        submit(core, i, tenant="b")
    core.round(0.0)
    for i in range(10, 12):
        submit(core, i, tenant="owner", at=30.0)
    core.advance(30.0)
    core.round(30.0)
    why = why_waiting(core)
    assert {why[10].reason, why[11].reason} == {"waiting_for_reclaim"}
    assert why[10].until == 100.0
    core.advance(100.0)
    core.round(100.0)
    assert 10 not in why_waiting(core) and 11 not in why_waiting(core)


def test_guarded_by_an_unpreemptible_job_the_policy_would_stop():
    """Quotas past the cluster (4 + 4 on 4 GPUs): each tenant's 4-GPU job is owed. SRSF
    plans the short one; c's prod job holds the GPUs and may not be stopped, so the guard
    keeps it and leaves the short job out."""
    core = core_of("srsf", nodes=1, gpus=4, tenancy={
        "default_class": "batch",
        "classes": {"prod": {"preemptible": False}, "batch": {}},
        "tenants": {"owner": {"quota": 4}, "c": {"quota": 4}}})
    core.submit(replace(job(1, num_gpu=4, iterations=LONG), tenant="c",
                        priority_class="prod"), 0.0)
    core.round(0.0)
    core.submit(replace(job(2, num_gpu=4, iterations=10), tenant="owner"), 1.0)
    core.advance(1.0)
    core.round(1.0)
    assert [j.id for j in core.running_jobs()] == [1]
    why = why_waiting(core)[2]
    assert (why.reason, why.guard, why.until) == ("guarded", "unpreemptible", None)
    assert "held by jobs 1" in why.text


def test_the_documented_list_is_the_code_list():
    text = Path("docs/waiting.md").read_text()
    documented = re.findall(r"^\| `([a-z_]+)` \|", text, re.M)
    assert documented == list(REASONS)
