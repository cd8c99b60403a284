"""An agent declared dead: what that changes. Only heartbeats decide it (gateway.overdue), or
the broker saying it no longer knows the agent, or a stop that waited past its heartbeats."""
from __future__ import annotations

from typing import Any

from scheduler.events import NodeOnline


def declare_dead(state: Any, name: str, reason: str) -> None:
    """`name`'s node takes no work, its jobs are requeued, and rounds waiting for its stops to
    end stop waiting. Takes the state's lock; a second call for the same agent does nothing."""
    with state.lock:
        if state.agents.pop(name, None) is None:
            return
        index = int(name[1:])
        state.inbox.put(NodeOnline(index, False))
        now = state.now()
        requeued = list(state.ledger.on(index))
        for job_id in requeued:
            state.jobs.requeue(job_id, now, f"agent {name} lost: {reason}", skip=name)
        state.stop_waits.node_gone(name)
        state.log.warning("agent_dead", node=name, reason=reason, requeued=requeued)
        state.journal.log_event("agent_dead", now, node=name,
                                detail={"reason": reason, "requeued": requeued})
        state.outbox.append(("event.agent", {"node": name, "state": "dead"}))
        state.rounds.wake("agent")
