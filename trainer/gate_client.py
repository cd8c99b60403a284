"""A trainer's side of the stage gate: `with gate.turn("gpu"): ...` around every stage.

Why: the stage loop should not care whether its job is interleaved. `GateClient` talks to the
group's `node_agent.gate.StageGate`; `NullGate` has the same interface and does nothing, for a
job running alone. Every wait has a timeout, so a gate that vanished surfaces as
`GateUnavailable` instead of a hung trainer. A member the gate dropped for stalling (a long
pause, say) joins again on its next turn, with a warning, rather than failing the job.

One client per trainer thread: a zmq socket belongs to the thread that uses it.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any, Hashable, Iterator, Optional

import msgpack
import structlog
import zmq

DEFAULT_TIMEOUT_S = 60.0
#: Replies that mean "you are no longer in the rotation": join again, then retry.
_OUT_OF_ROTATION = ("dropped", "not_member")


class GateError(RuntimeError):
    """The gate could not be used."""


class GateUnavailable(GateError):
    """No reply within the timeout: the gate is gone, or not serving."""


class GateRefused(GateError):
    """The gate answered with an error; `code` says which (see node_agent.gate)."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"stage gate refused: {code}: {reason}")
        self.code = code
        self.reason = reason


class GateClient:
    """One member of a group talking to its stage gate over a DEALER socket."""

    def __init__(self, endpoint: str, job_id: Hashable, timeout_s: float = DEFAULT_TIMEOUT_S,
                 context: Optional[zmq.Context] = None, log: Any = None):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.endpoint = endpoint
        self.job_id = job_id
        self.timeout_s = float(timeout_s)
        self.log = log if log is not None else structlog.get_logger("gate_client").bind(job=job_id)
        self._seq = itertools.count(1)
        self._sock = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._closed = False
        self.rejoins = 0

    # -- the stage loop's interface --------------------------------------------------------

    @contextlib.contextmanager
    def turn(self, stage: str) -> Iterator[dict]:
        """Hold `stage` for the body: acquire (waiting for this member's turn), then release."""
        grant = self.acquire(stage)
        try:
            yield grant
        except BaseException:
            try:
                self.release(stage)
            except GateError as exc:  # keep the body's exception, not the release's
                self.log.warning("gate_release_failed", stage=stage, error=str(exc))
            raise
        self.release(stage)

    def close(self) -> None:
        """Leave the group (so the others stop waiting for this member) and close the socket."""
        if self._closed:
            return
        try:
            self._call({"op": "leave"}, timeout=min(self.timeout_s, 2.0))
        except GateError as exc:  # the gate is gone already: nobody is left to wait for us
            self.log.info("gate_leave_unanswered", error=str(exc))
        finally:
            self._closed = True
            self._sock.close(0)

    def __enter__(self) -> "GateClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- single requests -------------------------------------------------------------------

    def join(self) -> dict:
        return self._call({"op": "join"})

    def ping(self) -> dict:
        return self._call({"op": "ping"})

    def acquire(self, stage: str) -> dict:
        try:
            return self._call({"op": "acquire", "stage": stage})
        except GateRefused as exc:
            if exc.code not in _OUT_OF_ROTATION:
                raise
            self.rejoins += 1
            self.log.warning("gate_rejoin", stage=stage, reason=exc.reason)
            self.join()
            return self._call({"op": "acquire", "stage": stage})

    def release(self, stage: str) -> Optional[dict]:
        try:
            return self._call({"op": "release", "stage": stage})
        except GateRefused as exc:
            if exc.code not in ("not_holder", *_OUT_OF_ROTATION):
                raise
            # dropped while holding: the stage was passed on already; the next turn rejoins
            self.log.warning("gate_release_refused", stage=stage, reason=exc.reason)
            return None

    def _call(self, request: dict, timeout: Optional[float] = None) -> dict:
        if self._closed:
            raise GateError("gate client is closed")
        seq = next(self._seq)
        request = {**request, "job": self.job_id, "seq": seq}
        wait = self.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + wait
        try:
            self._sock.send(msgpack.packb(request), zmq.NOBLOCK)
        except zmq.Again:
            raise GateUnavailable(self._silent(request, wait)) from None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(left * 1000):
                raise GateUnavailable(self._silent(request, wait))
            reply = msgpack.unpackb(self._sock.recv(), raw=False)
            if not isinstance(reply, dict) or reply.get("seq") != seq:
                continue  # a late answer to a request that timed out earlier
            if not reply.get("ok"):
                raise GateRefused(str(reply.get("error")), str(reply.get("reason", "")))
            return reply

    def _silent(self, request: dict, wait: float) -> str:
        what = request["op"] + (f" {request['stage']!r}" if "stage" in request else "")
        return (f"no reply from the stage gate at {self.endpoint} to {what} (job "
                f"{self.job_id}) within {wait}s: the gate is gone or not serving")


def connect(endpoint: Optional[str], job_id: Hashable) -> "GateClient | NullGate":
    """A job's gate: its group's (GateClient) at `endpoint`, or a NullGate without one."""
    return GateClient(endpoint, job_id) if endpoint else NullGate()


class NullGate:
    """The gate of a job running alone: every turn is granted at once, nothing is sent."""

    rejoins = 0

    @contextlib.contextmanager
    def turn(self, stage: str) -> Iterator[None]:
        yield None

    def join(self) -> dict:
        return {"ok": True}

    def close(self) -> None:
        pass

    def __enter__(self) -> "NullGate":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
