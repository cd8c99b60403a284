"""Who may ask the live scheduler what, by the key a request came under (`Message.caller`,
which the broker stamps; tests/broker/test_caller.py shows that part with a real broker).
Every request kind against every kind of key, on the handlers directly; the live system's
side of it is tests/e2e/test_authorization_live.py."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from broker.refusal import Refusal
from broker.messages import make
from scheduler.live.options import Options
from scheduler.live.service import SchedulerService
from specs.tenants import tenancy_of
from tests.helpers import job, spec
from traces.record import record_to_map

TENANCY = {"tenants": {"a": {"quota": 2, "borrow_limit": 2},
                       "b": {"quota": 2, "commands": True}},
           "keys": {"alice": "a", "bob": "b", "ops": "@operator", "agent-n0": "@agent",
                    "agent-n1": "@agent"}}


@pytest.fixture
def svc(tmp_path):
    service = SchedulerService(None, Options(spec=spec(nodes=1, gpus=4), policy="srsf",
                                             run_dir=tmp_path,
                                             tenancy=tenancy_of(TENANCY)))
    yield service
    service.close()


def ask(svc, caller, type_, **fields):
    msg = replace(make(type_, "someone", f"{caller}-{type_}-{len(fields)}", **fields),
                  caller=caller)
    return svc.handle(msg)


def refused(svc, caller, type_, **fields) -> str:
    with pytest.raises(Refusal) as err:
        ask(svc, caller, type_, **fields)
    return err.value.code


def submit(svc, caller, job_id, tenant="", **fields):
    record = replace(job(job_id), tenant=tenant, **fields)
    return ask(svc, caller, "job.submit", job=record_to_map(record))


def test_a_tenant_submits_for_itself_only_and_a_job_naming_none_is_its(svc):
    assert submit(svc, "alice", 1)["accepted"]
    assert submit(svc, "alice", 2, tenant="a")["accepted"]
    assert refused(svc, "alice", "job.submit",
                   job=record_to_map(replace(job(3), tenant="b"))) == "forbidden"
    assert submit(svc, "ops", 4, tenant="b")["accepted"]  # an operator submits for anyone
    body = ask(svc, "ops", "status.query")
    assert {j["job_id"]: j["tenant"] for j in body["jobs"]} == {1: "a", 2: "a", 4: "b"}


def test_a_tenant_sees_and_cancels_only_its_own_jobs(svc):
    submit(svc, "alice", 1)
    submit(svc, "bob", 2)
    mine = ask(svc, "alice", "status.query")
    assert [j["job_id"] for j in mine["jobs"]] == [1]
    assert mine["counts"] == {"pending": 1, "running": 0, "finished": 0, "cancelled": 0,
                              "failed": 0}
    assert ask(svc, "alice", "status.query", what="summary")["counts"]["pending"] == 1
    assert refused(svc, "alice", "job.cancel", job_id=2) == "forbidden"
    assert refused(svc, "alice", "job.cancel", job_id=77) == "forbidden"  # unknown: alike
    assert ask(svc, "alice", "job.cancel", job_id=1)["cancelled"]
    assert ask(svc, "ops", "job.cancel", job_id=2)["cancelled"]
    assert refused(svc, "ops", "job.cancel", job_id=77) == "unknown_job"


def test_commands_only_for_a_tenant_allowed_them(svc, tmp_path):
    fields = {"command": ("true",), "workdir": str(tmp_path)}
    assert refused(svc, "alice", "job.submit",
                   job=record_to_map(replace(job(1), **fields))) == "forbidden"
    assert submit(svc, "bob", 2, **fields)["accepted"]


AGENT_REPORTS = [
    ("agent.register", {"node": "n0", "gpus": [0], "cpus": 1, "mem": 1}),
    ("agent.heartbeat", {"node": "n0"}),
    ("job.finished", {"job_id": 1, "node": "n0", "iterations": 1.0, "ok": True}),
    ("job.stopped", {"job_id": 1, "node": "n0", "iterations": 1.0}),
]
# every request kind the scheduler serves, and the keys that may send it (None: no key);
# past the key a request may still be refused, for what it says, never `forbidden`
MAY_SEND = [
    ("job.submit", {"job": record_to_map(job(0)), "new_id": True}, {"alice", "bob", "ops"}),
    ("status.query", {}, {"alice", "bob", "ops"}),
    ("job.cancel", {"job_id": 77}, {"ops"}),  # unknown: a tenant is told `forbidden` alike
    *((type_, fields, {"agent-n0"}) for type_, fields in AGENT_REPORTS),
]
KEYS = ("alice", "bob", "ops", "agent-n0", "agent-n1", "stranger", None)


@pytest.mark.parametrize("type_, fields, allowed", MAY_SEND, ids=[t for t, _, _ in MAY_SEND])
def test_who_may_send_each_request_kind(svc, type_, fields, allowed):
    for caller in KEYS:
        try:
            ask(svc, caller, type_, **fields)
            code = None
        except Refusal as err:
            code = err.code
        assert (code != "forbidden") == (caller in allowed), (caller, code)


@pytest.mark.parametrize("type_, fields", AGENT_REPORTS, ids=[t for t, _ in AGENT_REPORTS])
def test_a_nodes_reports_count_only_under_its_own_agents_key_with_or_without_a_table(
        tmp_path, type_, fields):
    """An operator's key, another node's agent key, any key of a keyed broker without a
    [keys] table: none reports for n0. Without keys (caller None) anyone may, as before."""
    plain = SchedulerService(None, Options(spec=spec(nodes=2, gpus=4), policy="srsf",
                                           run_dir=tmp_path))
    try:
        for caller in ("agent-n1", "ops", "scheduler"):
            with pytest.raises(Refusal, match="only its agent's key 'agent-n0'"):
                ask(plain, caller, type_, **fields)
        for caller in ("agent-n0", None):
            try:
                ask(plain, caller, type_, **fields)
            except Refusal as err:
                assert err.code != "forbidden", (caller, err.reason)
    finally:
        plain.close()


def test_a_tenant_learns_nothing_of_anothers_job_ids(svc):
    assert submit(svc, "bob", 5)["accepted"]
    # alice names bob's id: refused without saying whose, unlike her own id's retry
    with pytest.raises(Refusal) as err:
        submit(svc, "alice", 5)
    assert err.value.code == "forbidden" and "'b'" not in err.value.reason
    assert submit(svc, "alice", 6)["accepted"]
    assert submit(svc, "alice", 6) == {"accepted": False, "job_id": 6, "reason": "duplicate"}
    assert submit(svc, "ops", 5, tenant="a")["reason"] == "duplicate"  # an operator may take any id
    # her status counts her own ids only; an operator's every id
    assert ask(svc, "alice", "status.query", what="summary")["max_job_id"] == 6
    assert ask(svc, "bob", "status.query", what="summary")["max_job_id"] == 5
    assert ask(svc, "ops", "status.query")["max_job_id"] == 6
    # asked for a new id, she is given one no job holds
    given = ask(svc, "alice", "job.submit", job=record_to_map(job(0)), new_id=True)
    assert given == {"accepted": True, "job_id": 7}


def test_without_a_keys_table_every_key_may_do_anything(tmp_path):
    service = SchedulerService(None, Options(
        spec=spec(nodes=1, gpus=4), policy="srsf", run_dir=tmp_path,
        tenancy=tenancy_of({"tenants": {"a": {"quota": 4}}, "default": "a"})))
    try:
        assert submit(service, None, 1)["accepted"]
        assert submit(service, "anyone", 2, command=("true",),
                      workdir=str(tmp_path))["accepted"]
        assert [j["job_id"] for j in ask(service, "x", "status.query")["jobs"]] == [1, 2]
        assert ask(service, "x", "job.cancel", job_id=1)["cancelled"]
    finally:
        service.close()


def test_the_live_scheduler_takes_antman_with_tenants_and_refuses_a_policy_that_cannot(
        tmp_path, capsys):
    from scheduler.live.cli import parse_args

    base = ["--spec", "n2g8", "--endpoints", "e.json", "--run-dir", str(tmp_path),
            "--tenants", str(Path(__file__).parents[2] / "examples" / "tenants.toml")]
    assert parse_args(base + ["--policy", "antman"])[0].tenants is not None
    with pytest.raises(SystemExit) as stop:
        parse_args(base + ["--policy", "tests.helpers:KeepsItsJobs"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "--tenants: policy 'keeps-its-jobs' cannot plan for tenants: it keeps its own jobs "
        "running whatever the round's queue")
