"""What a client key's name makes it on a keyed broker: the scheduler's key, one node's agent
key, or any other client's (a tenant's or an operator's, as the tenants file says).

Why names: the broker knows each request's key by the name of its file in authorized/ and
stamps that name on the request (Message.caller). Binding the two roles that act for the
cluster to fixed names lets the broker (who may register which service), the agents (whose
orders they take) and the scheduler (whose reports count for which node) apply one rule from
that name alone, with no table to keep in step across hosts. `interlace-keys generate DIR
--nodes N` makes the keys so named. Without keys (caller None) none of this applies.
"""
from __future__ import annotations

SCHEDULER_KEY = "scheduler"     # the one key that may serve `scheduler` and order agents
SCHEDULER_SERVICE = "scheduler"
AGENT_KEY = "agent-"            # agent-NODE: the one key that may serve agent.NODE...
AGENT_SERVICE = "agent."        # ...and report for NODE


def agent_key(node: str) -> str:
    """The name of the key that alone may act as `node`'s agent."""
    return AGENT_KEY + node


def node_of_key(name: str) -> str | None:
    """The node a key named agent-NODE acts for; None for any other name."""
    return (name[len(AGENT_KEY):] or None) if name.startswith(AGENT_KEY) else None


def serve_refusal(key: str, service: str) -> str | None:
    """Why the key named `key` may not register `service` (None: it may). Only `scheduler`
    and agent.NODE are bound to a key; any other service name is free to any key."""
    if service == SCHEDULER_SERVICE:
        owner = SCHEDULER_KEY
    elif service.startswith(AGENT_SERVICE):
        owner = agent_key(service[len(AGENT_SERVICE):])
    else:
        return None
    if key == owner:
        return None
    return f"key {key!r} may not serve {service!r}: only the key named {owner!r} may"


def report_refusal(key: str, node: str) -> str | None:
    """Why a report for `node` (register, heartbeat, a job's end) sent under the key named
    `key` does not count (None: it does)."""
    if key == agent_key(node):
        return None
    return (f"key {key!r} may not report for node {node!r}: only its agent's key "
            f"{agent_key(node)!r} may")


def orders_refusal(key: str, node: str, type_: str) -> str | None:
    """Why node `node`'s agent refuses `type_` (launch, stop, regroup, listing) sent under the
    key named `key` (None: it takes it)."""
    if key == SCHEDULER_KEY:
        return None
    return (f"key {key!r} may not send {type_} to agent {node}: only the scheduler's key "
            f"{SCHEDULER_KEY!r} may")


LIVENESS_TYPES = frozenset({"agent.register", "agent.heartbeat"})


def urgent(service: str, caller: str | None, type_: str) -> bool:
    """Whether the broker serves this request ahead of every requester's own lane: the
    cluster's own traffic, which a flood must not delay (an agent's registration, heartbeats
    and reports to the scheduler; the scheduler's orders to an agent). Keyed (`caller` a key's
    name), the key decides; without keys (None) only an agent's registration and heartbeats
    to the scheduler are, by their type, as any local peer may send anything."""
    if caller is None:
        return service == SCHEDULER_SERVICE and type_ in LIVENESS_TYPES
    if service == SCHEDULER_SERVICE:
        return node_of_key(caller) is not None
    return service.startswith(AGENT_SERVICE) and caller == SCHEDULER_KEY
