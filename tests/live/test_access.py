"""Who may ask the live scheduler what, by the key a request came under (`Message.caller`,
which the broker stamps; tests/broker/test_caller.py shows that part with a real broker).
Every request kind against every kind of key, on the handlers directly."""
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
           "keys": {"alice": "a", "bob": "b", "ops": "@operator", "agent": "@agent"}}


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


@pytest.mark.parametrize("type_, fields", [
    ("agent.register", {"node": "n0", "gpus": [0], "cpus": 1, "mem": 1}),
    ("agent.heartbeat", {"node": "n0"}),
    ("job.finished", {"job_id": 1, "node": "n0", "iterations": 1.0, "ok": True}),
    ("job.stopped", {"job_id": 1, "node": "n0", "iterations": 1.0}),
])
def test_only_agents_and_operators_send_what_agents_send(svc, type_, fields):
    assert refused(svc, "alice", type_, **fields) == "forbidden"
    for caller in ("agent", "ops"):  # past the key: refused, if at all, for what it says
        try:
            ask(svc, caller, type_, **fields)
        except Refusal as err:
            assert err.code != "forbidden"


@pytest.mark.parametrize("type_, fields", [
    ("job.submit", {"job": record_to_map(replace(job(1), tenant="a"))}),
    ("job.cancel", {"job_id": 1}), ("status.query", {})])
def test_an_agent_key_an_unknown_key_and_no_key_ask_nothing_else(svc, type_, fields):
    for caller in ("agent", "stranger", None):
        assert refused(svc, caller, type_, **fields) == "forbidden"


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
