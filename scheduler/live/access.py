"""Who may ask the scheduler what: a CURVE client key maps to a tenant or a role in the
tenants file's [keys] table (docs/tenants.md, "Keys").

Why the scheduler decides and not the broker: the broker only proves which key sent a request
(it stamps the key's name on it, `Message.caller`); what that key may do depends on jobs and
tenants, which only the scheduler knows. Without a [keys] table every caller may do anything,
as without a tenants file. Every refusal is `forbidden`, one line, logged and counted like
any other refusal by the service that answers.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from broker.refusal import Refusal
from specs.tenants import AGENT, OPERATOR, Tenancy

# the requests only node agents (and operators) send: they report what trainers did
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
    keys = tenancy.keys if tenancy is not None else None
    if not keys:
        return ANYONE
    name = getattr(msg, "caller", None)
    if not name:
        raise Refusal("forbidden", "the tenants file maps keys to tenants, and this request "
                                   "came with no key: run the broker with keys")
    who = keys.get(name)
    if who is None:
        raise Refusal("forbidden", f"key {name!r} is not in the tenants file's [keys]")
    caller = Caller("", who) if who in (OPERATOR, AGENT) else Caller(who, "")
    if msg.type in AGENT_REQUESTS and caller.role not in (AGENT, OPERATOR):
        raise Refusal("forbidden", f"key {name!r} is not a node agent's")
    if caller.role == AGENT and msg.type not in AGENT_REQUESTS:
        raise Refusal("forbidden", f"key {name!r} is a node agent's: it may not send "
                                   f"{msg.type}")
    return caller


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
