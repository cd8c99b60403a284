"""Who may ask the scheduler what: a CURVE client key maps to a tenant or a role in the
tenants file's [keys] table (docs/tenants.md, "Keys").

Why the scheduler decides and not the broker: the broker only proves which key sent a request
(it stamps the key's name on it, `Message.caller`); what that key may do depends on jobs and
tenants, which only the scheduler knows. Without a [keys] table every caller may do anything,
as without a tenants file, except one thing any keyed broker's caller is held to: a node's
reports (register, heartbeat, a job's end) count only under that node's agent key
(specs/keyroles.py), as the broker lets only that key serve the node's agent. Every refusal
is `forbidden`, one line, logged and counted like any other refusal by the service that
answers.

What one tenant learns of another's jobs is nothing: its status shows only its own (counts
and `max_job_id` too), a cancel of another's job is refused like one of a job that does not
exist, and a submit naming an id another's job holds is refused without saying whose (only
that the id is not free, which one id space for the cluster cannot hide).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from broker.refusal import Refusal
from scheduler.live.status import tenant_of
from specs.keyroles import report_refusal
from specs.tenants import AGENT, OPERATOR, Tenancy

# the requests only node agents send, each for its own node: they report what trainers did
AGENT_REQUESTS = frozenset({"agent.register", "agent.heartbeat", "job.finished",
                            "job.stopped"})


class Caller(NamedTuple):
    """Who sent a request: a tenant's name, or "" with a role (operator or agent)."""

    tenant: str = ""
    role: str = OPERATOR

    @property
    def operator(self) -> bool:
        return self.role == OPERATOR


ANYONE = Caller()  # no [keys] table: every request as an operator's


def caller_of(tenancy: Tenancy | None, msg: Any) -> Caller:
    """Who sent `msg`, or Refusal("forbidden") when its key may not ask anything here or
    may not ask this kind of request."""
    name = getattr(msg, "caller", None)
    if name is not None and msg.type in AGENT_REQUESTS:  # keyed: a node's reports, its agent's
        refusal = report_refusal(name, msg["node"])
        if refusal is not None:
            raise Refusal("forbidden", refusal)
    keys = tenancy.keys if tenancy is not None else None
    if not keys:
        return ANYONE
    if not name:
        raise Refusal("forbidden", "the tenants file maps keys to tenants, and this request "
                                   "came with no key: run the broker with keys")
    who = keys.get(name)
    if who is None:
        raise Refusal("forbidden", f"key {name!r} is not in the tenants file's [keys]")
    caller = Caller("", who) if who in (OPERATOR, AGENT) else Caller(who, "")
    if msg.type in AGENT_REQUESTS and caller.role != AGENT:
        raise Refusal("forbidden", f"key {name!r} is not a node agent's")
    if caller.role == AGENT and msg.type not in AGENT_REQUESTS:
        raise Refusal("forbidden", f"key {name!r} is a node agent's: it may not send "
                                   f"{msg.type}")
    return caller


def taken_from_other(state: Any, caller: Caller, job_id: int) -> None:
    """Refuse a tenant's key an id another tenant's job holds, saying nothing of that job:
    not `duplicate`, which says that it exists and is someone's. Its own id stays
    `duplicate` (a retry)."""
    jobs = state.jobs
    if not caller.operator and (job_id in jobs.records or job_id in jobs.past) \
            and not owns(caller, tenant_of(state, job_id)):
        raise Refusal("forbidden", f"job id {job_id} is not free to this key; ask for a new "
                                   "one (interlace-submit without --job-id)")


def own_max_job_id(state: Any, caller: Caller) -> int:
    """The highest id among the caller's tenant's jobs (0: none), for its status reply: a
    tenant's count of ids takes in none of another tenant's jobs."""
    jobs = state.jobs
    return max((j for j in (*jobs.records, *jobs.past)
                if tenant_of(state, j) == caller.tenant), default=0)


def owns(caller: Caller, tenant: str) -> bool:
    """Whether `caller` may see and act on a job of `tenant`."""
    return caller.operator or caller.tenant == tenant


def submit_as(caller: Caller, tenancy: Tenancy | None, record: Any) -> Any:
    """The record a caller may submit: a tenant's key submits for its own tenant only (a
    record naming none is its), and a command only where its tenant may run commands."""
    if caller.operator:
        return record
    tenant = record.tenant or caller.tenant
    if tenant != caller.tenant:
        raise Refusal("forbidden", f"this key submits for tenant {caller.tenant!r}, not "
                                   f"{record.tenant!r}")
    if record.command and not tenancy.tenants[tenant].commands:  # type: ignore[union-attr]
        raise Refusal("forbidden", f"tenant {tenant!r} may not run commands (commands = "
                                   f"true in the tenants file)")
    return record if record.tenant else replace(record, tenant=tenant)
