"""The agent's link to the scheduler (main thread): register, heartbeat, deliver the outbox.

Every call blocks at most the Requester's timeout x tries; after a failure the next try
waits one heartbeat interval, so a missing scheduler costs a trickle of requests, not a storm.
"""
from __future__ import annotations

import time
from typing import Any

from broker.client import TRANSIENT
from broker.messages import MessageError
from node_agent.config import AgentConfig
from node_agent.jobs import JobTable
from node_agent.lease import Lease



def gpus_told(cfg: AgentConfig) -> dict[str, Any]:
    """What a registration says of the GPUs besides their ids: memory and type, each only
    where known (the scheduler reads an absent field as not stated, and checks nothing)."""
    return {**({"gpu_mem_gb": cfg.gpu_mem_gb} if cfg.gpu_mem_gb else {}),
            **({"gpu_type": cfg.gpu_type} if cfg.gpu_type else {})}


class Link:
    """The main thread's conversation with the scheduler about `table`'s jobs."""

    def __init__(self, cfg: AgentConfig, endpoints: Any, table: JobTable, log: Any):
        from broker.client import RequestFailed, Requester, RequestTimeout

        self.cfg, self.table, self.log = cfg, table, log
        self._failed, self._timeout = RequestFailed, RequestTimeout
        self.req = Requester(endpoints, cfg.name, timeout=cfg.request_timeout,
                             retries=cfg.request_retries)
        self.registered = False
        self.next_heartbeat = 0.0
        self.retry_at = 0.0
        self._complaint: str | None = None  # last failure logged, so a long outage logs once
        # renewed at every answer: the scheduler heard this agent then
        self.lease = Lease(cfg.lease_file, cfg.lease)
        self.reply: dict[str, Any] = {}  # the last answer's body

    def _send(self, type_: str, **fields: Any) -> str:
        """One request: "ok", "retry" (not heard, or we must register first) or "refused"."""
        try:
            reply = self.req.request("scheduler", type_, **fields)
            self.lease.renew()
            body = reply.get("body")
            self.reply = body if isinstance(body, dict) else {}
            if self._complaint is not None:
                self.log.info("scheduler_reachable", after=self._complaint)
                self._complaint = None
            return "ok"
        except self._timeout:
            self._complain(type_, "timeout", "no reply")
            return "retry"
        except MessageError as err:  # our own message breaks the schema: a bug, never retried
            self.log.error("request_invalid", type=type_, code=err.code, reason=err.reason)
            return "refused"
        except self._failed as err:
            if err.code == "unknown_agent":
                self.registered = False
                self.log.warning("scheduler_forgot_agent", type=type_)
                return "retry"
            if err.code in TRANSIENT:
                self._complain(type_, err.code, err.reason)
                return "retry"
            self.log.error("request_refused", type=type_, code=err.code, reason=err.reason)
            return "refused"

    def _complain(self, type_: str, code: str, reason: str) -> None:
        if self._complaint != code:
            self.log.warning("scheduler_unreachable", type=type_, code=code, reason=reason)
            self._complaint = code

    def step(self) -> None:
        now = time.monotonic()
        if now < self.retry_at:
            return
        if not self.registered and not self._register():
            self.retry_at = time.monotonic() + self.cfg.heartbeat
            return
        if not self.deliver():  # before the heartbeat: a job gone from `running` is reported
            self.retry_at = time.monotonic() + self.cfg.heartbeat
            return
        if self.registered and now >= self.next_heartbeat:
            beat = self.table.snapshot()
            if beat is None:  # a trainer ended meanwhile: its report goes first, next tick
                return
            self.next_heartbeat = now + self.cfg.heartbeat
            spans = self.table.gates.spans.recent()  # ages before this send (web view)
            if spans:
                beat["gate_spans"] = spans
            self._send("agent.heartbeat", node=self.cfg.node, **beat)

    def _register(self) -> bool:
        # reports queued are delivered once registered; a job they concern that the scheduler
        # thinks runs here is requeued at registration, and the report then settles it
        beat = self.table.snapshot(reported=False)
        told = gpus_told(self.cfg)
        outcome = self._send("agent.register", node=self.cfg.node, gpus=list(self.cfg.gpus),
                             cpus=self.cfg.cpus, mem=self.cfg.mem, **told, **beat)
        if outcome == "ok":
            told_lease = self.reply.get("lease_s")
            if isinstance(told_lease, (int, float)) and 0 < told_lease < self.lease.seconds:
                self.lease.seconds = float(told_lease)
                self.lease.renew()
            self.registered = True
            self.next_heartbeat = time.monotonic() + self.cfg.heartbeat
            self.log.info("registered", gpus=list(self.cfg.gpus), lease=self.lease.seconds,
                          **told)
        return self.registered

    def deliver(self, once: bool = False) -> bool:
        """Send queued messages in order; True when the outbox is empty.

        A message the scheduler did not hear stays queued for the next try; with `once`
        (shutdown) each message gets one try and is dropped either way.
        """
        while self.table.outbox and (self.registered or once):
            type_, fields = self.table.outbox[0]
            outcome = self._send(type_, **fields)
            if outcome == "retry" and not once:
                return False
            self.table.outbox.popleft()
            self.log.info("delivered" if outcome == "ok" else "undelivered", type=type_,
                          job=fields["job_id"], outcome=outcome, **{k: v for k, v in fields.items()
                                                                     if k in ("ok", "iterations")})
        return not self.table.outbox
