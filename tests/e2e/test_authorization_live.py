"""Every service authorizes by key, tried from outside against a live keyed cluster (a real
broker, scheduler and two agents as processes on loopback, a tenants file with keys): a
tenant's key cannot order an agent, an agent's key cannot report for another node, no key but
the scheduler's may serve as the scheduler, and a tenant learns nothing of another's job ids.
Judged by the replies, the scheduler's status (under an operator's key) and the trainers'
ledgers. docs/security.md says what each key may do."""
from __future__ import annotations

from dataclasses import replace

import pytest

from broker.client import RequestFailed
from broker.curve import attach_client_key
from broker.endpoints import Endpoints
from broker.keys import generate
from broker.testing import service_thread
from scheduler.tools.jobs import submit_main
from tests.helpers import job
from tests.live_system import LiveCluster, log_records, wait_for, write_spec
from traces.feeder import job_map

TENANTS = """
[tenants.a]
quota = 2
[tenants.b]
quota = 2
commands = true

[keys]
ops = "@operator"
alice = "a"
bob = "b"
agent-n0 = "@agent"
agent-n1 = "@agent"
"""
NAMES = ["scheduler", "agent-n0", "agent-n1", "ops", "alice", "bob", "stranger"]
LONG = 5000  # iterations: ~15 s at the test's time scale, long enough to act on it running


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("authz")
    keys = root / "keys"
    generate(keys, NAMES)
    tenants = root / "tenants.toml"
    tenants.write_text(TENANTS)
    key = {n: keys / "clients" / f"{n}.key_secret" for n in NAMES}
    cluster = LiveCluster(root / "run", str(write_spec(root / "n2g2.csv", 2, 2)), 2, 2,
                          policy="srsf", time_scale=100.0, broker_args=["--keys", str(keys)],
                          scheduler_args=["--tenants", str(tenants)],
                          client_keys={**key, "test": key["ops"]})
    try:
        yield cluster.start()
    finally:
        cluster.stop_all()


@pytest.fixture
def clients(live):
    opened = {n: live.requester(n, timeout=5.0, retries=2) for n in NAMES}
    yield opened
    for requester in opened.values():
        requester.close()


def refusal(requester, service: str, type_: str, **fields) -> RequestFailed | None:
    """The error a request is answered with; None when it is answered as asked."""
    try:
        requester.request(service, type_, **fields)
    except RequestFailed as err:
        return err
    return None


def code(requester, service: str, type_: str, **fields) -> str | None:
    err = refusal(requester, service, type_, **fields)
    return err.code if err is not None else None


def record(job_id: int, iterations: int, tenant: str = ""):
    return replace(job(job_id, iterations=iterations), tenant=tenant)


def state_of(live, job_id: int) -> dict:
    return next((j for j in (live.status() or {}).get("jobs", []) if j["job_id"] == job_id),
                {})


def running(live, clients, job_id: int) -> dict:
    """bob's job `job_id`, submitted and running (its line in the operator's status)."""
    reply = clients["bob"].request("scheduler", "job.submit", job=job_map(record(job_id, LONG)))
    assert reply["body"]["accepted"], reply
    return wait_for(lambda: (line := state_of(live, job_id)).get("state") == "running"
                    and line, 60, f"job {job_id} to run")


# -- 1: a tenant's key orders an agent ---------------------------------------------------------

def test_a_tenants_key_cannot_launch_stop_or_list_through_an_agent(live, clients, tmp_path):
    alice = clients["alice"]
    victim = running(live, clients, 101)
    node = victim["nodes"][0]
    proof = tmp_path / "id.txt"
    # alice may not run commands at all; straight to the agent, it would run as its user
    launch = {"job_id": 9001, "gpus": [0], "group": [9001], "slot": 0, "start_iteration": 0.0,
              "workload": {"kind": "command", "iterations": 10,
                           "argv": ["/bin/sh", "-c", f"id > {proof}"]}}
    assert code(alice, f"agent.{node}", "job.launch", **launch) == "forbidden"
    assert code(alice, f"agent.{node}", "job.stop", job_id=101) == "forbidden"
    assert code(alice, f"agent.{node}", "status.query") == "forbidden"
    assert code(alice, f"agent.{node}", "job.regroup", job_id=101, group=[101], slot=0,
                iteration_time=0.1) == "forbidden"
    line = state_of(live, 101)
    assert (line["state"], line["preemptions"]) == ("running", 0), line
    assert not [r for r in log_records(live.run_dir, "job_launched", "agent")
                if r.get("job") == 9001]
    assert not proof.exists()


# -- 2: an agent's key reports for another node ------------------------------------------------

def test_an_agents_key_counts_only_for_its_own_node(live, clients):
    victim = running(live, clients, 201)
    node = victim["nodes"][0]
    other = clients["agent-n1" if node == "n0" else "agent-n0"]
    forged = [
        ("job.finished", {"job_id": 201, "node": node, "iterations": 1.0, "ok": True}),
        ("job.stopped", {"job_id": 201, "node": node, "iterations": 1.0}),
        ("agent.register", {"node": node, "gpus": [0, 1], "cpus": 32, "mem": 128,
                            "running": []}),
        ("agent.heartbeat", {"node": node, "running": []}),
    ]
    for type_, fields in forged:
        err = refusal(other, "scheduler", type_, **fields)
        assert err is not None and err.code == "forbidden", (type_, err)
        assert f"only its agent's key 'agent-{node}'" in err.reason
    line = state_of(live, 201)
    assert (line["state"], line["preemptions"]) == ("running", 0), line
    wait_for(lambda: state_of(live, 201).get("state") == "finished", 120, "job 201 to finish")
    verdict = live.ledger_verdict({201: float(LONG)})
    assert verdict.finishes.get(201) == 1 and verdict.runs[201] == 1, verdict


# -- 3: a tenant's key serves as the scheduler (or an agent) -----------------------------------

def test_no_key_but_the_schedulers_may_serve_as_the_scheduler(live, clients):
    stolen = []

    def impostor(msg):
        stolen.append(msg.type)
        return {"accepted": True, "job_id": (msg.get("job") or {}).get("job_id")}

    as_alice = attach_client_key(Endpoints.load(live.endpoints_file),
                                 str(live.key_of("alice")))
    with service_thread(as_alice, "scheduler", impostor) as fake_scheduler, \
            service_thread(as_alice, "agent.n0", impostor) as fake_agent:
        # the broker's answer to each: taken (logged as the service's second worker) or
        # refused (what the service was told)
        for svc, service in ((fake_scheduler, "scheduler"), (fake_agent, "agent.n0")):
            wait_for(lambda: getattr(svc, "broker_error", None) or [
                r for r in log_records(live.run_dir, "broker.worker_registered", "broker")
                if r.get("service") == service and r.get("workers", 1) > 1],
                30, f"the broker's answer to a second {service}")
        ids = range(301, 311)
        for job_id in ids:
            reply = clients["bob"].request("scheduler", "job.submit",
                                           job=job_map(record(job_id, 10)))
            assert reply["body"]["accepted"], reply
        wait_for(lambda: all(state_of(live, j).get("state") == "finished" for j in ids), 120,
                 "bob's 10 acknowledged jobs to finish")
        assert "forbidden" in fake_scheduler.broker_error
        assert "forbidden" in fake_agent.broker_error
    assert stolen == []  # not a submit, a heartbeat or a launch


# -- 4: what a tenant learns of another's job ids ----------------------------------------------

def test_a_tenant_learns_nothing_of_anothers_job_ids(live, clients, capsys):
    alice, bob = clients["alice"], clients["bob"]
    assert bob.request("scheduler", "job.submit", job=job_map(record(401, 10)))["body"][
        "accepted"]
    assert alice.request("scheduler", "job.submit", job=job_map(record(400, 10)))["body"][
        "accepted"]
    err = refusal(alice, "scheduler", "job.submit", job=job_map(record(401, 10)))
    assert err is not None and err.code == "forbidden", err  # not `duplicate`
    assert "'b'" not in err.reason and "bob" not in err.reason
    # her status counts her own ids only (400 is her one job so far)
    assert alice.request("scheduler", "status.query", what="summary")["body"][
        "max_job_id"] == 400
    # interlace-submit asks the scheduler for the id: no guessing past others' ids
    assert submit_main(["--endpoints", str(live.endpoints_file), "--client-key",
                        str(live.key_of("alice")), "--gpus", "1", "--iterations", "10"]) == 0
    given = int(capsys.readouterr().out.split("submitted job ")[1].split()[0])
    everything = live.status()
    assert given not in (400, 401) and given == max(j["job_id"] for j in everything["jobs"])


# -- every request kind of every service, by key -----------------------------------------------

# harmless requests: answered without changing a running job, whether taken or refused
AGENT_KINDS = [
    ("job.launch", {"job_id": 999, "gpus": [0], "group": [999], "slot": 0,
                    "start_iteration": 0.0, "workload": {"kind": "none"}}),
    ("job.stop", {"job_id": 999}),
    ("job.regroup", {"job_id": 999, "group": [999], "slot": 0, "iteration_time": 0.1}),
    ("status.query", {}),
]
SCHEDULER_KINDS = [
    ("job.submit", {"job": job_map(record(0, 10)), "new_id": True}, {"alice", "bob", "ops"}),
    ("status.query", {"what": "summary"}, {"alice", "bob", "ops"}),
    ("job.cancel", {"job_id": 999}, {"ops"}),
    ("agent.register", {"node": "n0", "gpus": [0], "cpus": 1, "mem": 1}, {"agent-n0"}),
    ("agent.heartbeat", {"node": "n0"}, {"agent-n0"}),
    ("job.finished", {"job_id": 999, "node": "n0", "iterations": 1.0, "ok": True},
     {"agent-n0"}),
    ("job.stopped", {"job_id": 999, "node": "n0", "iterations": 1.0}, {"agent-n0"}),
]


def test_each_request_kind_of_each_service_by_key(live, clients):
    wrong = []
    for name, requester in clients.items():
        for type_, fields in AGENT_KINDS:  # only the scheduler's key orders an agent
            for node in ("n0", "n1"):
                got = code(requester, f"agent.{node}", type_, **fields)
                if (got == "forbidden") != (name != "scheduler"):
                    wrong.append((name, f"agent.{node}", type_, got))
        for type_, fields, allowed in SCHEDULER_KINDS:
            got = code(requester, "scheduler", type_, **fields)
            if (got == "forbidden") != (name not in allowed):
                wrong.append((name, "scheduler", type_, got))
    assert wrong == []
