"""Tenants on a live system of real processes over a keyed broker: a borrower fills the idle
cluster, the owner's jobs arrive and take their quota back (the borrowed jobs checkpointed and
stopped, nothing lost or run twice by the trainers' own ledgers), and each tenant's key sees,
cancels and submits only for its own tenant."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from broker.client import RequestFailed
from broker.keys import generate
from tests.helpers import job
from scheduler.core.waiting import REASONS
from tests.live_system import LiveCluster, trainer_env, wait_for
from traces.feeder import job_map

TENANTS = """
[tenants.owner]
quota = 3
[tenants.b]
quota = 1
borrow_limit = 3
[tenants.c]
quota = 0
borrow_limit = 2
cohort = "elsewhere"

[keys]
scheduler = "@operator"
agent-n0 = "@agent"
ops = "@operator"
alice = "owner"
bob = "b"
carol = "c"
"""
B_JOBS, OWNER_JOBS = (1, 2, 3, 4), (11, 12, 13)


def _record(job_id: int, tenant: str, iterations: int, **fields):
    return replace(job(job_id, iterations=iterations), tenant=tenant, **fields)


def _refused(requester, type_: str, **fields) -> str:
    with pytest.raises(RequestFailed) as err:
        requester.request("scheduler", type_, **fields)
    return err.value.code


def _trained(live) -> set[int]:
    """The jobs whose trainers have checkpointed at least once, by their own ledgers."""
    return {r["job"] for r in live.ledger_records() if r["kind"] == "checkpoint"}


def _running(status: dict) -> set[int]:
    return {j["job_id"] for j in status.get("jobs", []) if j["state"] == "running"}


def test_the_owner_takes_its_quota_back_and_keys_see_only_their_tenants_jobs(tmp_path):
    keys = tmp_path / "keys"
    names = ["scheduler", "agent-n0", "ops", "alice", "bob", "carol", "stranger"]
    generate(keys, names)
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    key = {n: keys / "clients" / f"{n}.key_secret" for n in names}
    live = LiveCluster(tmp_path / "run", "n1g4", 1, 4, policy="srsf", time_scale=100.0,
                       broker_args=["--keys", str(keys)],
                       scheduler_args=["--tenants", str(tenants)],
                       client_keys={"scheduler": key["scheduler"], "agent-n0": key["agent-n0"],
                                    "test": key["ops"], "ops": key["ops"],
                                    "alice": key["alice"], "bob": key["bob"],
                                    "carol": key["carol"], "stranger": key["stranger"]})
    live.spec = str(_spec(tmp_path))
    clients = {}
    try:
        live.start()
        clients = {n: live.requester(n, timeout=5.0, retries=2)
                   for n in ("alice", "bob", "carol", "stranger", "agent-n0")}
        bob, alice = clients["bob"], clients["alice"]
        # the borrower fills the idle cluster: 1 GPU owed, 3 borrowed
        for j in B_JOBS:
            bob.request("scheduler", "job.submit", job=job_map(_record(j, "", 5000)))
        wait_for(lambda: _running(live.status() or {}) == set(B_JOBS) and _trained(live)
                 >= set(B_JOBS), 60, "the borrower's 4 jobs to train (their ledgers)")
        # the owner's jobs arrive: its quota comes back at once (no class guards here)
        for j in OWNER_JOBS:
            alice.request("scheduler", "job.submit", job=job_map(_record(j, "owner", 3000)))
        wait_for(lambda: set(OWNER_JOBS) <= _running(live.status() or {}), 60,
                 "the owner's jobs to run")
        running_b = _running(live.status()) & set(B_JOBS)
        assert len(running_b) == 1, running_b
        # why the borrower's other jobs wait, as `interlace-status --json` says (the owner
        # holds its whole quota: nothing idle is left to lend)
        listed = _status_cli(live, "ops")["jobs"]
        waiting = {j["job_id"]: j["reason"] for j in listed if j["state"] == "pending"}
        assert waiting == {j: "no_idle_to_borrow" for j in set(B_JOBS) - running_b}, waiting
        assert set(waiting.values()) <= set(REASONS)

        # -- what each key may do, each request kind --------------------------------------
        mine = alice.request("scheduler", "status.query", what="all").get("body")
        assert {j["job_id"] for j in mine["jobs"]} == set(OWNER_JOBS)
        assert {j["tenant"] for j in mine["jobs"]} == {"owner"}
        assert sum(mine["counts"].values()) == len(OWNER_JOBS)
        assert _refused(alice, "job.cancel", job_id=B_JOBS[0]) == "forbidden"
        assert _refused(alice, "job.cancel", job_id=999) == "forbidden"  # unknown: the same
        assert _refused(alice, "job.submit", job=job_map(_record(21, "b", 10))) == "forbidden"
        command = _record(22, "", 10, command=("true",), workdir=str(tmp_path))
        assert _refused(clients["carol"], "job.submit", job=job_map(command)) == "forbidden"
        assert _refused(alice, "agent.heartbeat", node="n0") == "forbidden"
        assert _refused(clients["agent-n0"], "job.submit",
                        job=job_map(_record(23, "owner", 10))) == "forbidden"
        assert _refused(clients["stranger"], "status.query", what="all") == "forbidden"
        seen = clients["carol"].request("scheduler", "status.query", what="all").get("body")
        assert seen["jobs"] == []
        everything = live.status()  # the operator's key sees every job
        assert {j["job_id"] for j in everything["jobs"]} == set(B_JOBS) | set(OWNER_JOBS)

        # -- nothing lost or run twice, by the trainers' ledgers ---------------------------
        done = live.wait_finished(len(B_JOBS) + len(OWNER_JOBS), 180)
        totals = {j: 5000.0 for j in B_JOBS} | {j: 3000.0 for j in OWNER_JOBS}
        verdict = live.ledger_verdict(totals)
        assert verdict.ok, verdict.problems
        assert all(verdict.finishes.get(j) == 1 for j in totals), verdict.finishes
        reclaimed = set(B_JOBS) - running_b
        assert all(verdict.runs[j] >= 2 for j in reclaimed), verdict.runs  # stopped, resumed
        assert all(verdict.runs[j] == 1 for j in OWNER_JOBS), verdict.runs
        stops = {j["job_id"]: j["preemptions"] for j in done["jobs"]}
        assert all(stops[j] >= 1 for j in reclaimed), stops
        assert any(kind.endswith("forbidden") for kind in done["refused"]), done["refused"]
    finally:
        for requester in clients.values():
            requester.close()
        live.stop_all()


def _status_cli(live, key: str) -> dict:
    """`interlace-status --json`, run as a user runs it, with `key`'s certificate."""
    out = subprocess.run([sys.executable, "-c", "import sys; from scheduler.tools.jobs import "
                          "status_main; sys.exit(status_main())", "--json", "--endpoints",
                          str(live.endpoints_file), "--client-key", str(live.key_of(key))],
                         capture_output=True, text=True, timeout=60, env=trainer_env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _spec(tmp_path):
    from tests.live_system import write_spec

    return write_spec(tmp_path / "n1g4.csv", 1, 4)
