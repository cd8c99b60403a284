"""StageGate: one per interleaved group on a node, serving the group's turns over local ZeroMQ.

Why: members of a group share GPUs and take turns on every resource (DESIGN.md 4.4). Before
each stage a trainer asks the gate (`trainer.gate_client.GateClient.turn(stage)`); the gate
grants each stage exclusively, in the group's cyclic order, so the pipeline of DESIGN.md 1
forms by itself. The rules live in `node_agent.gate_turns`; this module is the server: a
ROUTER socket on tcp://127.0.0.1 (random port) or ipc:// in a given directory, served by one
thread with a poll loop that also drops stalled members on time.

Wire format: one msgpack map per message (DEALER clients send just the map; REQ clients' empty
delimiter frame is kept and echoed). Requests carry `op`, `job`, `seq` (echoed), and `stage`
for acquire/release:

    {"op": "acquire", "job": 7, "stage": "gpu", "seq": 3} -> {"ok": true, "grant": "gpu", ...}
    {"op": "release", ...} -> {"ok": true, "released": "gpu"}
    {"op": "join" | "leave" | "ping", "job": 7}
    {"op": "regroup", "members": [9, 7]}  (the agent's: new members and slot order, in place)
    anything malformed -> {"ok": false, "error": "<code>", "reason": "..."}

An acquire is answered when the turn comes (a deferred reply). Nothing a client sends can stop
the thread: bad input gets an error reply and a log line.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Hashable, Optional, Sequence

import msgpack
import structlog
import zmq

from node_agent.gate_turns import TurnTable, error

#: Longest poll wait, so close() is noticed promptly and stall deadlines are checked.
POLL_CAP_S = 0.05
DEFAULT_STALL_TIMEOUT_S = 30.0
_OPS = ("acquire", "release", "join", "leave", "ping", "regroup")


class StageGate:
    """The stage gate of one group: `start()` binds and serves in a thread, `close()` stops."""

    def __init__(self, members: Sequence[Hashable], stages: Sequence[str], *,
                 ipc_dir: str | os.PathLike[str] | None = None,
                 stall_timeout: float = DEFAULT_STALL_TIMEOUT_S, name: str = "gate",
                 log: Any = None, on_event: Optional[Callable[[dict], None]] = None,
                 context: Optional[zmq.Context] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.log = log if log is not None else structlog.get_logger("gate").bind(gate=name)
        self._on_event = on_event
        self._clock = clock
        self._table = TurnTable(members, stages, stall_timeout, emit=self._event)
        self._ctx = context or zmq.Context.instance()
        self._ipc_path = (Path(ipc_dir) / f"{name}-{uuid.uuid4().hex[:8]}.sock"
                          if ipc_dir is not None else None)
        self._sock: Optional[zmq.Socket] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.endpoint: Optional[str] = None
        self.errors = 0  # malformed or refused requests answered (read by tests and benches)

    @property
    def members(self) -> tuple:
        return self._table.slots

    @property
    def stages(self) -> tuple:
        return self._table.stages

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "StageGate":
        if self._thread is not None:
            raise RuntimeError("gate already started")
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        if self._ipc_path is not None:
            sock.bind(f"ipc://{self._ipc_path}")
        else:
            sock.bind("tcp://127.0.0.1:*")
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name=f"stage-gate-{self.name}",
                                        daemon=True)
        self._thread.start()
        self.log.info("gate_started", endpoint=self.endpoint, members=list(self.members),
                      stages=list(self.stages), stall_timeout=self._table.stall_timeout)
        return self

    def close(self, timeout: float = 2.0) -> None:
        """Stop serving; clients waiting on the gate then time out (GateUnavailable)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.log.warning("gate_thread_stuck", after_s=timeout)
        elif self._sock is not None:
            self._sock.close(0)
        if self._ipc_path is not None:
            try:
                self._ipc_path.unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> "StageGate":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def remove(self, job: Hashable, timeout: float = 2.0) -> bool:
        """Take a member out of the rotation from any thread (e.g. the agent reaped its trainer).

        Sends `leave` on the member's behalf over a short-lived socket; True when acknowledged.
        """
        return self._tell({"op": "leave", "job": job, "seq": 0}, timeout)

    def regroup(self, members: Sequence[Hashable], timeout: float = 2.0) -> bool:
        """The group is now `members`, in this slot order, on the same GPUs: turns go on in
        place (gate_turns.TurnTable.regroup), no member restarts. True when acknowledged."""
        return self._tell({"op": "regroup", "members": list(members), "seq": 0}, timeout)

    def _tell(self, request: dict, timeout: float) -> bool:
        """One request from another thread, over a short-lived socket: the table is the
        serving thread's alone."""
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.endpoint)
            sock.send(msgpack.packb(request))
            if sock.poll(timeout * 1000):
                return bool(msgpack.unpackb(sock.recv(), raw=False).get("ok"))
            return False
        finally:
            sock.close(0)

    # -- the server thread -----------------------------------------------------------------

    def _serve(self) -> None:
        sock, table = self._sock, self._table
        assert sock is not None
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                now = self._clock()
                deadline = table.next_deadline()
                if deadline is not None and deadline <= now:
                    self._send(table.check_stalls(now))
                    deadline = table.next_deadline()
                wait = POLL_CAP_S if deadline is None else min(POLL_CAP_S, max(0.0, deadline - now))
                if not poller.poll(wait * 1000):
                    continue
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(frames)
        except Exception:  # the loop itself failed: say so loudly, clients will time out
            self.log.exception("gate_failed")
        finally:
            sock.close(0)
            self.log.info("gate_closed", grants=dict(table.grants), errors=self.errors)

    def _handle(self, frames: list[bytes]) -> None:
        envelope, payload = frames[:-1], frames[-1]
        seq = None
        try:
            msg = msgpack.unpackb(payload, raw=False)
            if not isinstance(msg, dict):
                raise ValueError(f"expected a map, got {type(msg).__name__}")
            seq = msg.get("seq")
            replies = self._dispatch(msg, (envelope, seq))
        except _Refused as exc:
            replies = [((envelope, seq), error(exc.code, str(exc)))]
        except Exception as exc:  # malformed bytes, bad fields, or a bug: answer, keep serving
            self.log.warning("gate_bad_request", error=repr(exc), size=len(payload))
            replies = [((envelope, seq), error("malformed", str(exc) or repr(exc)))]
        self._send(replies)

    def _dispatch(self, msg: dict, token: tuple) -> list:
        op, job = msg.get("op"), msg.get("job")
        if op not in _OPS:
            raise _Refused("unknown_op", f"op {op!r} is not one of {list(_OPS)}")
        if op == "ping":
            return [(token, {"ok": True, "pong": True})]
        if op == "regroup":
            members = msg.get("members")
            ids = isinstance(members, list) and all(
                isinstance(m, (int, str)) and not isinstance(m, bool) for m in members)
            if not ids or not members or len(set(members)) != len(members):
                raise _Refused("malformed", f"members must be distinct ids, got {members!r}")
            replies = self._table.regroup(members, self._clock())
            return replies + [(token, {"ok": True, "regrouped": list(members)})]
        if isinstance(job, bool) or not isinstance(job, (int, str)):
            raise _Refused("malformed", f"job must be an int or str, got {job!r}")
        now, table = self._clock(), self._table
        if op == "join":
            return table.join(job, token, now)
        if op == "leave":
            return table.leave(job, token, now)
        stage = msg.get("stage")
        if not isinstance(stage, str):
            raise _Refused("malformed", f"stage must be a str, got {stage!r}")
        if op == "acquire":
            return table.acquire(job, stage, token, now)
        return table.release(job, stage, token, now)

    def _send(self, replies: list) -> None:
        for (envelope, seq), reply in replies:
            if not reply.get("ok"):
                self.errors += 1
                if reply.get("error") not in ("dropped", "left", "malformed"):
                    self.log.warning("gate_refused", **reply)
            if seq is not None:
                reply["seq"] = seq
            try:
                self._sock.send_multipart([*envelope, msgpack.packb(reply)], zmq.NOBLOCK)
            except zmq.ZMQError as exc:  # client gone or its queue full: nothing to deliver to
                self.log.warning("gate_reply_lost", error=str(exc))

    def _event(self, event: dict) -> None:
        if event["event"] == "regroup":
            self.log.info("gate_regrouped", members=event["members"])
        elif event["event"] in ("dropped", "left", "join"):
            level = self.log.warning if event["event"] == "dropped" else self.log.info
            level(f"gate_member_{event['event']}", job=event["job"],
                  reason=event.get("reason", ""))
        if self._on_event is not None:
            self._on_event(event)


class _Refused(Exception):
    """A request the gate answers with an error code instead of acting on it."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code
