"""Stopping a job on its agents and waiting for the stop to end.

A stop ends when the agent reports its trainer gone (`job.stopped`, after the trainer wrote
its checkpoint), not when the agent answers the request: only then are the job's GPUs free
and its checkpoint the truth. So each stop is watched (stopwaits.py) before the request goes
out, asked again after a timeout while the agent lives, and awaited until the report comes
or the agent's heartbeats are overdue.
"""
from __future__ import annotations

from typing import Any, Callable

from scheduler.live.agents import declare_dead
from scheduler.live.gateway import AgentGateway
from scheduler.live.state import LiveState
from scheduler.live.stopwaits import StopWait

STOP_RETRY_S = 0.5  # a job.stop that timed out is sent again after this (or on its report)
STOP_RECHECK_S = 5.0  # a stop not reported this long is asked about again (stops are idempotent)


class Stopper:
    def __init__(self, state: LiveState, gateway: AgentGateway):
        self.state, self.gateway = state, gateway

    def stop_everywhere(self, requester: Any, job_id: int, names: list[str],
                        current: Callable[[], bool]) -> list[dict[str, Any] | None]:
        """job.stop to each of `names` (all asked before any is awaited, so their trainers
        checkpoint together), then each stop's outcome: the agent's `job.stopped` report, or
        its reply when it had nothing to stop (or stopped before answering); None where the
        agent died, refused, or `current()` (under the lock) says the stop no longer matters."""
        state = self.state
        with state.lock:  # registered before the request goes out: the report may beat the reply
            waits = [state.stop_waits.watch(job_id, name) for name in names]
        try:
            asked = [self._ask(requester, job_id, name, wait, current)
                     for name, wait in zip(names, waits)]
            return [self._await(requester, job_id, name, wait, reply, current)
                    for name, wait, reply in zip(names, waits, asked)]
        finally:
            with state.lock:
                for name, wait in zip(names, waits):
                    state.stop_waits.forget(job_id, name, wait)

    def _matters(self, name: str, current: Callable[[], bool]) -> float | None:
        """Seconds until `name`'s heartbeats are overdue, while the stop still matters; None
        when it does not: the job was settled meanwhile (`current()` false), or the agent is
        dead, declared so here when its heartbeats are overdue (the main loop, which would
        declare it, is waiting on this round)."""
        state = self.state
        with state.lock:
            agent = state.agents.get(name)
            if agent is None or not current():
                return None
            left = state.opt.agent_timeout - state.silent_for(agent.last_seen, state.clock())
            if left >= 0:
                return left
        declare_dead(state, name, f"no heartbeat for {state.opt.agent_timeout:g}s")
        return None

    def _ask(self, requester: Any, job_id: int, name: str, wait: StopWait,
             current: Callable[[], bool]) -> dict[str, Any] | None:
        """The agent's answer to job.stop, asked again after a timeout for as long as the
        agent lives (heartbeats decide that) and the stop matters; a stop is idempotent."""
        while True:
            reply, timed_out = self.gateway.call(requester, name, "job.stop", job_id=job_id)
            if reply is not None or not timed_out:
                return reply
            if wait.done.wait(STOP_RETRY_S):  # reported (or the agent died) meanwhile
                return {"stopping": True}
            if self._matters(name, current) is None:
                return None

    def _await(self, requester: Any, job_id: int, name: str, wait: StopWait,
               reply: dict[str, Any] | None,
               current: Callable[[], bool]) -> dict[str, Any] | None:
        """The outcome of a stop the agent answered: its report when the answer was
        `stopping`, awaited until it comes or the agent's heartbeats are overdue. Unreported
        after STOP_RECHECK_S, the agent is asked again: "stopping" still, or (the trainer
        gone and its report lost, e.g. with an agent restart) the checkpoint."""
        clock = self.state.clock
        recheck = clock() + STOP_RECHECK_S
        while reply is not None and reply.get("stopping"):
            if wait.done.is_set():
                return wait.result
            left = self._matters(name, current)
            if left is None:
                return wait.result if wait.done.is_set() else None
            if wait.done.wait(max(0.0, min(left, recheck - clock()))):
                return wait.result
            if clock() >= recheck:
                self.state.log.info("stop_unreported", job_id=job_id, node=name,
                                    after_s=STOP_RECHECK_S)
                reply = self._ask(requester, job_id, name, wait, current)
                recheck = clock() + STOP_RECHECK_S
        return reply
