"""The tenant layer: its file, its admission rule, and the core planning only what it admits."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.engine import Core, SchedulingError
from scheduler.core.plan_check import PlanError
from scheduler.core.policies import Policy
from scheduler.core.policies.base import place_in_order
from scheduler.core.state import Plan
from scheduler.core.tenants import Ask, admit
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from specs.tenants import Tenancy, Tenant, TenantsError, load_tenants, tenancy_of
from tests.helpers import job, spec

POLICIES = ["fifo", "srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]


# -- the file ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, says", [
    ("[tenants.a]\nborrow_limit = 2\n", "tenant 'a': quota is missing"),
    ("[tenants.a]\nquota = -1\n", "tenant 'a': quota must be a whole number of GPUs in [0, "),
    ("[tenants.a]\nquota = 2.5\n", "quota must be a whole number"),
    ("[tenants.a]\nquota = true\n", "quota must be a whole number"),
    ("[tenants.a]\nquota = 2\nweight = 0\n", "weight must be a number in (0, "),
    ("[tenants.a]\nquota = 2\nweight = nan\n", "weight must be a number"),
    ("[tenants.a]\nquota = 2\nqouta = 3\n", "tenant 'a': unknown key 'qouta'"),
    ("[tenants.a]\nquota = 2\ncohort = 'a b'\n", "cohort must be a name"),
    ("[tenants.'a b']\nquota = 2\n", "tenant 'a b': a name is 1-64"),
    ("default = 'b'\n[tenants.a]\nquota = 2\n", "default 'b' is not a tenant of the file"),
    ("[tenant.a]\nquota = 2\n", "unknown key 'tenant'"),
    ("x = 1\n", "unknown key 'x'"),
    ("", "no [tenants.NAME] table"),
    ("[tenants.a]\nquota = 2\n[tenants.a]\n", "not TOML: "),
    ("[tenants]\na = 3\n", "tenant 'a': must be a table"),
    ("[classes.p]\npreemptible = 1\n[tenants.a]\nquota = 2\n",
     "class 'p': preemptible must be true or false"),
    ("[classes.p]\nmin_run_s = -5\n[tenants.a]\nquota = 2\n",
     "class 'p': min_run_s must be a number of seconds in [0, 604800]"),
    ("[classes.p]\nrestart_budget = 1.5\n[tenants.a]\nquota = 2\n",
     "class 'p': restart_budget must be a whole number of stops an hour"),
    ("[classes.p]\npriorty = 1\n[tenants.a]\nquota = 2\n", "class 'p': unknown key 'priorty'"),
    ("[classes.p]\n[tenants.a]\nquota = 2\nclasses = ['q']\n",
     "tenant 'a': class 'q' is not a class of the file"),
    ("default_class = 'q'\n[classes.p]\n[tenants.a]\nquota = 2\n",
     "default_class 'q' is not a class of the file"),
    ("[tenants.a]\nquota = 2\n[keys]\nbob = 'z'\n",
     "key 'bob': 'z' is neither a tenant of the file nor '@operator' or '@agent'"),
    ("[tenants.a]\nquota = 2\n[keys]\n'b b' = 'a'\n", "key 'b b': a key name is 1-64"),
    ("[tenants.a]\nquota = 2\n[keys]\nagent = '@agent'\n",
     "key 'agent': an agent's key is named agent-NODE"),
    ("[tenants.a]\nquota = 2\n[keys]\nagent-n0 = 'a'\n",
     "key 'agent-n0': an agent's key is named agent-NODE"),
    ("[tenants.a]\nquota = 2\nkeys = 3\n", "tenant 'a': unknown key 'keys'"),
    ("keys = 3\n[tenants.a]\nquota = 2\n", "keys must be a table of KEY"),
    ("[tenants.a]\nquota = 2\ncommands = 1\n", "tenant 'a': commands must be true or false"),
])
def test_a_bad_tenants_file_is_one_line_naming_the_file_and_the_fault(tmp_path, text, says):
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(TenantsError) as err:
        load_tenants(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and says in message and "\n" not in message


def test_the_example_file_loads_as_documented():
    tenancy = load_tenants("examples/tenants.toml")
    assert tenancy.default == "research"
    assert {n: (t.quota, t.borrow_limit, t.weight, t.cohort)
            for n, t in tenancy.tenants.items()} == {
        "prod": (32, 0, 1.0, "main"), "research": (24, 40, 2.0, "main"),
        "interns": (8, 16, 1.0, "main")}


def test_a_missing_file_and_a_directory_are_refused_in_one_line(tmp_path):
    for path, says in ((tmp_path / "none.toml", "no such file"), (tmp_path, "directory")):
        with pytest.raises(TenantsError, match=says):
            load_tenants(path)


# -- admission, alone ---------------------------------------------------------------------------
tenant_names = ["a", "b", "c", "d"]


@st.composite
def cases(draw):
    count = draw(st.integers(1, 4))
    tenants = {}
    for name in tenant_names[:count]:
        tenants[name] = Tenant(name, draw(st.integers(0, 8)), draw(st.integers(0, 8)),
                               draw(st.sampled_from([0.5, 1.0, 3.0])),
                               draw(st.sampled_from(["", "x"])))
    jobs, next_id = {}, 0
    for name in tenants:
        queue = []
        for _ in range(draw(st.integers(0, 8))):
            since = draw(st.one_of(st.none(), st.integers(0, 5).map(float)))
            gpus = draw(st.integers(1, 4))
            queue.append(Ask(next_id, gpus, since, cpus=2 if gpus == 1 else 6 * gpus))
            next_id += 1
        jobs[name] = queue
    # CPUs counted or not (0); where counted, from scarce (2 a GPU) to ample
    return Tenancy(tenants), jobs, draw(st.integers(0, 24)), draw(st.sampled_from(
        [0, 1, 2, 4, 6, 8]))


@given(cases())
@settings(max_examples=400, deadline=None)
def test_admission_keeps_every_bound_and_lends_what_it_may(case):
    """Each bound of the rule, checked from the admitted set alone: owed within quota and
    first-fit (a job left out would not fit what its tenant's quota leaves); borrowed within
    the borrowing limit, the cohort's idle quota, the cluster's free GPUs and, where counted,
    its CPUs; and nothing left out that every one of those bounds would still take."""
    tenancy, jobs, total, cpus_per_gpu = case
    total_cpus = cpus_per_gpu * total
    got = admit(tenancy, jobs, total, total_cpus)
    tenants = tenancy.tenants
    first, holds = {}, {}
    for name, queue in jobs.items():
        quota = tenants[name].quota
        # the owed part is the first-fit walk of the tenant's order under its quota
        o = 0
        for job_id, gpus, *_ in queue:
            if o + gpus <= quota:
                o += gpus
                assert job_id in got.admitted
        first[name] = o
        holds[name] = sum(g for j, g, *_ in queue if j in got.admitted)
        assert got.held[name].owed == min(holds[name], quota)
        assert got.held[name].borrowed == max(0, holds[name] - quota)
        assert holds[name] <= quota + tenants[name].borrow_limit
    free = total - sum(holds.values())
    assert free >= 0 or holds == first  # past the cluster only by quotas beyond it
    asks = {a.job_id: a for queue in jobs.values() for a in queue}
    owed_cpus = sum(asks[j].cpus for name, queue in jobs.items() for j in _first_fit(
        queue, tenants[name].quota))
    cpus_used = sum(asks[j].cpus for j in got.admitted)
    if total_cpus and cpus_used > owed_cpus:  # lending never passes the cluster's CPUs
        assert cpus_used <= total_cpus
    cpus_left = total_cpus - cpus_used
    unquoted = max(0, total - sum(t.quota for t in tenants.values()))
    for cohort in {t.cohort for t in tenants.values()}:
        members = [n for n, t in tenants.items() if t.cohort == cohort]
        idle = sum(tenants[n].quota - first[n] for n in members) + (unquoted if not cohort
                                                                   else 0)
        lent = sum(holds[n] - first[n] for n in members)
        assert lent <= idle
        for name in members:
            limit = tenants[name].quota + tenants[name].borrow_limit
            for job_id, gpus, *_ in jobs[name]:
                if job_id not in got.admitted:
                    assert (holds[name] + gpus > limit or gpus > idle - lent
                            or gpus > free or (total_cpus and asks[job_id].cpus > cpus_left)
                            ), (name, job_id)


def _first_fit(queue, quota):
    """The ids the owed walk admits: first fit of the tenant's order under its quota."""
    out, held = [], 0
    for ask in queue:
        if held + ask.gpus <= quota:
            held += ask.gpus
            out.append(ask.job_id)
    return out


def test_idle_gpus_are_lent_by_weight():
    tenancy = Tenancy({"owner": Tenant("owner", 9), "a": Tenant("a", 0, 9, 2.0),
                       "b": Tenant("b", 0, 9, 1.0)})
    jobs = {"owner": [], "a": [Ask(i, 1) for i in range(9)],
            "b": [Ask(10 + i, 1) for i in range(9)]}
    held = admit(tenancy, jobs, 9).held
    assert (held["a"].borrowed, held["b"].borrowed) == (6, 3)


@pytest.mark.parametrize("cpus, want", [
    (0, (8, 8)),  # GPUs alone: turns by borrowed GPUs, a 2-GPU job against two 1-GPU ones
    (96, (8, 8)),  # 6 CPUs a GPU, the largest ask: the CPU share never leads
    (48, (4, 12)),  # 3 a GPU: a's jobs ask 6 a GPU, b's 2 a job; the CPUs bind
])
def test_where_cpus_bind_the_turns_follow_the_dominant_share(cpus, want):
    """16 GPUs lent to a (2-GPU jobs, 12 CPUs each) and b (1-GPU jobs, 2 CPUs each), equal
    weights, nothing owed. Worked by hand with 48 CPUs: a's first job holds a quarter of the
    CPUs (share 0.25), so b takes four GPUs (0.25) before a's second (share 0.5: 24 CPUs),
    four more (0.5), and then a's third finds 8 CPUs left of 48: b takes the last four GPUs.
    a 4 GPUs (24 CPUs), b 12 GPUs (24 CPUs): every GPU lent within the CPUs. Turns by GPUs
    alone would give a its third job and stop at 12 GPUs when the CPUs run out."""
    tenancy = Tenancy({"a": Tenant("a", 0, 16), "b": Tenant("b", 0, 16)})
    jobs = {"a": [Ask(i, 2, cpus=12) for i in range(8)],
            "b": [Ask(100 + i, 1, cpus=2) for i in range(16)]}
    got = admit(tenancy, jobs, 16, cpus)
    assert (got.held["a"].gpus, got.held["b"].gpus) == want
    if cpus:
        assert got.held["a"].cpus + got.held["b"].cpus <= cpus


@pytest.mark.parametrize("owed, gpus, cpus, taker", [
    # a's four 1-GPU jobs hold 8 CPUs of the 12 its quota is worth (3 a GPU): it has
    # borrowed nothing, and takes the tie by name
    ([Ask(1, 1, cpus=2), Ask(2, 1, cpus=2), Ask(3, 1, cpus=2), Ask(4, 1, cpus=2)], 8, 24, "a"),
    # its two 2-GPU jobs hold 24 CPUs, 15 past the 9 its quota is worth (2.25 a GPU): b first
    ([Ask(1, 2, cpus=12), Ask(2, 2, cpus=12)], 16, 36, "b"),
])
def test_the_dominant_share_counts_cpus_past_the_quota_s_worth(owed, gpus, cpus, taker):
    """One 12-CPU job still fits the CPUs owed jobs leave; a and b each ask for one, on
    equal weights. Turns by GPUs alone would give it to a both times (nothing borrowed,
    a first by name); by all the CPUs it holds, to b both times."""
    tenancy = Tenancy({"a": Tenant("a", 4, 8), "b": Tenant("b", 0, 8)})
    jobs = {"a": owed + [Ask(10, 2, cpus=12)], "b": [Ask(20, 2, cpus=12)]}
    got = admit(tenancy, jobs, gpus, cpus)
    assert got.admitted - {a.job_id for a in owed} == {10 if taker == "a" else 20}
    assert got.cpus_short == {20 if taker == "a" else 10}


def test_borrowed_gpus_come_back_from_the_most_recently_started_jobs_first():
    """Stopping the job whose checkpoint is newest (it started last) loses least work."""
    tenancy = Tenancy({"owner": Tenant("owner", 4), "b": Tenant("b", 0, 8)})
    running = [Ask(1, 1, 5.0), Ask(2, 1, 1.0), Ask(3, 1, 9.0), Ask(4, 1, 3.0)]
    before = admit(tenancy, {"owner": [], "b": running}, 4).admitted
    after = admit(tenancy, {"owner": [Ask(9, 2)], "b": running}, 4).admitted
    assert before == {1, 2, 3, 4} and after == {9, 2, 4}


def test_a_cohort_lends_only_among_its_members():
    tenancy = Tenancy({"a": Tenant("a", 4, 8, cohort="x"), "b": Tenant("b", 4, 8, cohort="y"),
                       "c": Tenant("c", 4, 8, cohort="x")})
    jobs = {"a": [Ask(i, 1) for i in range(8)], "b": [], "c": []}
    assert admit(tenancy, jobs, 12).held["a"] .borrowed == 4  # c's idle 4, never b's


# -- the core -----------------------------------------------------------------------------------
def test_a_job_of_no_tenant_or_too_large_for_its_tenant_is_refused_at_submit():
    tenancy = tenancy_of({"tenants": {"a": {"quota": 2, "borrow_limit": 1}}})
    preset = get_preset("default")
    core = Core(spec(nodes=1, gpus=4), make_policy("srsf", preset), preset.model, tenancy)
    with pytest.raises(SchedulingError, match="names no tenant and the tenants file has no"):
        core.submit(job(1), 0.0)
    with pytest.raises(SchedulingError, match="tenant 'z' is not in the tenants file"):
        core.submit(replace(job(1), tenant="z"), 0.0)
    with pytest.raises(SchedulingError, match=r"needs 4 GPUs; tenant 'a' may hold at most 3 "
                                              r"\(quota 2 \+ borrow_limit 1\)"):
        core.submit(replace(job(1, num_gpu=4), tenant="a"), 0.0)
    assert not core.jobs


CLASSES = {"default_class": "batch",
           "classes": {"prod": {"priority": 10, "preemptible": False},
                       "batch": {"min_run_s": 100, "restart_budget": 2}},
           "tenants": {"owner": {"quota": 6, "borrow_limit": 2},
                       "b": {"quota": 2, "borrow_limit": 6, "classes": ["batch"]}}}


def test_a_class_the_tenant_may_not_use_or_an_unpreemptible_job_past_quota_is_refused():
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=4), make_policy("srsf", preset), preset.model,
                tenancy_of(CLASSES))
    with pytest.raises(SchedulingError, match="tenant 'b' may not use priority class 'prod' "
                                              r"\(it may use batch\)"):
        core.submit(replace(job(1), tenant="b", priority_class="prod"), 0.0)
    with pytest.raises(SchedulingError, match="priority class 'gold' is not in the tenants"):
        core.submit(replace(job(1), tenant="b", priority_class="gold"), 0.0)
    with pytest.raises(SchedulingError, match="a job of the unpreemptible class 'prod' runs "
                                              "within its tenant's quota, and tenant 'owner' "
                                              "has 6"):
        core.submit(replace(job(1, num_gpu=8), tenant="owner", priority_class="prod"), 0.0)


def test_an_unpreemptible_job_never_borrows_and_a_higher_class_is_admitted_first():
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=4), make_policy("fifo", preset), preset.model,
                tenancy_of(CLASSES))
    for i in range(4):  # batch first in submission order: FIFO alone would run these first
        core.submit(replace(job(i, iterations=10_000), tenant="owner"), 0.0)
    for i in range(4, 12):
        core.submit(replace(job(i, iterations=10_000), tenant="owner",
                            priority_class="prod"), 0.0)
    core.round(0.0)
    # the owner's quota of 6 goes to prod first; prod never borrows; batch borrows 2
    running = {j.id for j in core.running_jobs()}
    assert running == {4, 5, 6, 7, 8, 9, 0, 1}, running


def test_reclaim_waits_out_a_minimum_run_and_the_round_is_due_then():
    """The bound: a borrower's job is stopped for the owner no sooner than its class's
    minimum run time after it started, and the plan asks for a round at that time."""
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=4), make_policy("srsf", preset), preset.model,
                tenancy_of(CLASSES))
    for i in range(8):
        core.submit(replace(job(i, iterations=100_000), tenant="b"), 0.0)
    core.round(0.0)
    assert len(core.running_jobs()) == 8
    for i in range(10, 16):
        core.submit(replace(job(i, iterations=100_000), tenant="owner"), 30.0)
    core.advance(30.0)
    plan = core.round(30.0)
    assert {j.id for j in core.running_jobs()} == set(range(8)) and plan.wakeup == 100.0
    core.advance(100.0)
    core.round(100.0)
    running = {j.id for j in core.running_jobs()}
    assert running >= set(range(10, 16)) and len(running) == 8, running


def test_a_policy_that_keeps_its_own_jobs_running_is_refused_with_tenants():
    tenancy = tenancy_of({"tenants": {"a": {"quota": 2}}})
    preset = get_preset("default")
    with pytest.raises(SchedulingError, match="policy 'keeps-its-jobs' cannot plan for "):
        Core(spec(), make_policy("tests.helpers:KeepsItsJobs", preset), preset.model, tenancy)


class _PlansEveryJob(Policy):
    """Declares it plans only the round's queue, and does not: runs every job it was told of."""

    name = "plans-every-job"
    plans_partial = True

    def __init__(self, model):
        super().__init__(model)
        self.told: list = []

    def on_submit(self, job, now):
        self.told.append(job)

    def plan(self, ctx):
        return Plan(tuple(place_in_order(ctx, self.told)))


def test_a_plan_that_runs_a_job_held_back_is_refused_and_changes_nothing():
    """The guard stage holds a policy to its declaration: its plan names a job the tenant
    layer held back (b's third job, past its quota and bound), so the round is refused,
    naming the policy and the job, and nothing starts."""
    tenancy = tenancy_of({"tenants": {"b": {"quota": 2}}})
    preset = get_preset("default")
    core = Core(spec(), _PlansEveryJob(preset.model), preset.model, tenancy)
    for i in range(3):
        core.submit(replace(job(i), tenant="b"), 0.0)
    with pytest.raises(PlanError, match="policy 'plans-every-job' planned job 2, which the "
                                        "tenant layer held back"):
        core.round(0.0)
    assert core.running_jobs() == [] and core.placed == {}


@pytest.mark.parametrize("policy", POLICIES)
def test_the_owner_gets_its_quota_back_at_the_round_it_asks(policy):
    """A borrower fills the idle cluster; the owner's jobs arrive: the next round stops the
    borrower's jobs past its quota, and the owner's run. (Which of its jobs the borrower
    keeps is its policy's order: Themis ranks the ones that ran least first.)"""
    tenancy = tenancy_of({"tenants": {"owner": {"quota": 6}, "b": {"quota": 2,
                                                                    "borrow_limit": 6}}})
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=4), make_policy(policy, preset), preset.model, tenancy)
    for i in range(8):
        core.submit(replace(job(i, iterations=10_000), tenant="b"), float(i))
        core.advance(float(i))
        core.round(float(i))
    assert {j.id for j in core.running_jobs()} == set(range(8))
    for i in range(10, 16):
        core.submit(replace(job(i, iterations=10_000), tenant="owner"), 20.0)
    core.advance(20.0)
    core.round(20.0)
    running = {j.id for j in core.running_jobs()}
    assert running >= set(range(10, 16)) and len(running) == 8, running


def test_a_stop_outside_the_plan_is_not_counted_in_the_restart_budget():
    """A budget of one planner stop an hour: b's borrowing job loses its node (a stop the
    planner did not make) and runs again; the owner's jobs then arrive, and the planner may
    still stop it for them, its budget unspent. A planner stop does count: once reclaimed
    and run again, it is guarded for the hour."""
    tenancy = tenancy_of({"default_class": "batch",
                          "classes": {"batch": {"restart_budget": 1}},
                          "tenants": {"owner": {"quota": 4}, "b": {"quota": 0, "borrow_limit": 4}}})
    preset = get_preset("default")
    core = Core(spec(nodes=1, gpus=4), make_policy("fifo", preset), preset.model, tenancy)
    core.submit(replace(job(1, iterations=100_000), tenant="b"), 0.0)
    core.round(0.0)
    core.advance(10.0)
    core.stop(1, 10.0)  # its node was lost
    core.round(10.0)
    assert [j.id for j in core.running_jobs()] == [1]
    for i in range(10, 14):
        core.submit(replace(job(i, iterations=100_000), tenant="owner"), 20.0)
    core.advance(20.0)
    plan = core.round(20.0)
    assert {j.id for j in core.running_jobs()} == set(range(10, 14))
    assert 1 in plan.changes.stopping
    core.finish(10, 30.0)  # a GPU is idle again: b borrows it
    core.advance(30.0)
    core.round(30.0)
    assert 1 in {j.id for j in core.running_jobs()}
    core.submit(replace(job(14, iterations=100_000), tenant="owner"), 40.0)
    core.advance(40.0)
    core.round(40.0)
    assert 1 in {j.id for j in core.running_jobs()} and 14 not in {
        j.id for j in core.running_jobs()}  # one planner stop this hour: guarded
