"""The scheduler's side of its agents: who is alive, and requests to them.

Heartbeats alone decide that an agent is dead (`overdue`); a request that times out only
means its answer did not come. Requests go out from the main thread and from a small pool of
worker threads (one round may stop and launch many jobs at once, each waiting on a process);
every thread has its own Requester, since a zmq socket is not to be shared between threads.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from scheduler.live.agents import declare_dead
from scheduler.live.ledger import node_name
from scheduler.live.state import LiveState
from scheduler.core.state import NodeSlice

SERVICE = "scheduler"
# How long the broker may say it has no worker for an agent before the agent counts as dead:
# a few of the service's heartbeat intervals (broker.client.Service), so a worker that is just
# (re)connecting is found, while a dead agent is still declared dead within seconds.
NO_SERVICE_GRACE_S = 2.0


@dataclass
class AgentSeen:
    """A registered agent as the scheduler last heard from it."""

    gpus: tuple[int, ...]
    cpus: int
    mem: float
    last_seen: float  # monotonic wall seconds
    incarnation: str | None = None  # the agent process that registered (None: not told)
    gpu_mem_gb: float = 0.0  # each of its GPUs' memory (0: not told)
    gpu_type: str = ""  # its GPUs' type ("": not told)


class AgentGateway:
    def __init__(self, state: LiveState, endpoints: Any):
        self.state, self.endpoints = state, endpoints
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="scheduler-agents")
        self._pool_requesters: list[Any] = []

    def overdue(self, wall: float) -> list[str]:
        """Agents whose heartbeats are overdue at wall time `wall`."""
        state = self.state
        with state.lock:
            return [name for name, a in state.agents.items()
                    if state.silent_for(a.last_seen, wall) > state.opt.agent_timeout]

    def gpu_ids(self, piece: NodeSlice) -> list[int]:
        """The agent's own GPU ids for the spec's GPU indices on that node."""
        agent = self.state.agents.get(node_name(piece.node))
        ids = agent.gpus if agent is not None else ()
        return [ids[g] if g < len(ids) else g for g in piece.gpus]

    def request(self, requester: Any, name: str, type_: str,
                **fields: Any) -> dict[str, Any] | None:
        """A request to an agent; None when it failed."""
        return self.call(requester, name, type_, **fields)[0]

    def call(self, requester: Any, name: str, type_: str,
             **fields: Any) -> tuple[dict[str, Any] | None, bool]:
        """(reply body or None, whether it timed out): `exchange` without the refusal."""
        return self.exchange(requester, name, type_, **fields)[:2]

    def exchange(self, requester: Any, name: str, type_: str,
                 **fields: Any) -> tuple[dict[str, Any] | None, bool, Any]:
        """(reply body or None, whether it timed out, the agent's refusal or None: a
        broker.client.RequestFailed with its code and reason). A timeout only means this
        answer did not come (the caller asks again, or a launch that may have happened unheard is
        stopped as a stray). The broker's `no_service` declares the agent dead only when it
        lasts NO_SERVICE_GRACE_S: an agent's registration and its service worker are two
        connections, so a restarted agent can register before the broker knows its worker
        (declared dead then, the jobs it just launched would be started again elsewhere);
        and only when the agent's heartbeats are late too (`_heard_lately`), else it counts
        as a timeout."""
        from broker.client import TRANSIENT, RequestFailed, RequestTimeout

        state = self.state
        with state.lock:
            if name not in state.agents:  # dead or never came: its re-registration sorts it out
                state.log.info("agent_request_skipped", node=name, type=type_,
                               job_id=fields.get("job_id"))
                return None, False, None
        try:
            reply = self._past_no_service(requester, name, type_, fields)
        except RequestTimeout:
            state.log.warning("agent_request_timeout", node=name, type=type_,
                              job_id=fields.get("job_id"))
            if type_ == "job.launch":
                with state.lock:
                    state.ledger.strays.append((fields["job_id"], name))
            return None, True, None
        except RequestFailed as err:
            state.log.warning("agent_request_refused", node=name, type=type_,
                              job_id=fields.get("job_id"), code=err.code, reason=err.reason)
            if err.code in TRANSIENT:  # the broker forwarded nothing: the agent never saw it
                if err.code == "no_service" and not self._heard_lately(name):
                    # the broker no longer knows the agent's service, nor has it been heard
                    declare_dead(state, name, f"{type_}: {err.reason}")
                    return None, False, None
                # its heartbeats still come (a starved agent late with its service's
                # heartbeats to the broker, not a dead one), or it was busy: as a timeout,
                # asked again
                if type_ == "job.launch":
                    with state.lock:
                        state.ledger.strays.append((fields["job_id"], name))
                return None, True, None
            return None, False, err
        return dict(reply.get("body") or {}), False, None

    def _heard_lately(self, name: str) -> bool:
        """Whether `name`'s heartbeats are under half the agent timeout old: then the
        broker's `no_service` for it says its service's own heartbeats to the broker were
        late (a starved process), not that it died."""
        state = self.state
        with state.lock:
            agent = state.agents.get(name)
            return agent is not None and \
                state.silent_for(agent.last_seen, state.clock()) <= state.opt.agent_timeout / 2

    def _past_no_service(self, requester: Any, name: str, type_: str,
                         fields: dict[str, Any]) -> dict[str, Any]:
        """The request, asked again with backoff while the broker answers `no_service`, for
        up to NO_SERVICE_GRACE_S; then that answer stands."""
        from broker.client import RequestFailed

        deadline = time.monotonic() + NO_SERVICE_GRACE_S
        pause = 0.05
        while True:
            try:
                return requester.request(f"agent.{name}", type_, **fields)
            except RequestFailed as err:
                if err.code != "no_service" or time.monotonic() + pause > deadline:
                    raise
                with self.state.lock:
                    if name not in self.state.agents:  # declared dead meanwhile
                        raise
                self.state.log.info("agent_request_retry", node=name, type=type_,
                                    job_id=fields.get("job_id"), code=err.code)
            time.sleep(pause)
            pause = min(2 * pause, 0.5)

    def concurrently(self, requester: Any, calls: list[tuple[Callable, ...]]) -> None:
        """Run each (fn, *args) as fn(requester, *args): on this thread when there is one,
        else on the pool, each worker with its own requester; returns when all are done."""
        if len(calls) <= 1:
            for fn, *args in calls:
                fn(requester, *args)
            return

        def work(call: tuple) -> None:
            fn, *args = call
            fn(self._thread_requester(), *args)

        for future in [self._pool.submit(work, call) for call in calls]:
            future.result()

    def _thread_requester(self) -> Any:
        """One Requester per worker thread (a socket is not to be shared across threads);
        kept for the thread's life and closed with the scheduler."""
        from broker.client import Requester

        requester = getattr(self._local, "requester", None)
        if requester is None:
            opt = self.state.opt
            requester = Requester(self.endpoints, f"{SERVICE}.{threading.get_ident()}",
                                  timeout=opt.agent_request_timeout,
                                  retries=opt.agent_request_retries)
            self._local.requester = requester
            with self.state.lock:
                self._pool_requesters.append(requester)
        return requester

    def close(self) -> list[Any]:
        """Stop the pool; returns the workers' requesters, for the caller to close."""
        self._pool.shutdown(wait=True)
        return list(self._pool_requesters)
