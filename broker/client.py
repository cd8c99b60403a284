"""Client side of the message plane: requesters, services, publishers, subscribers.

Each class owns one socket and is meant for one thread. Requests are at-least-once: a
requester resends the same message (same id) until a reply arrives, and a service answers a
repeated id from its reply cache without running the handler again, so together they give
exactly-once effects as long as the cache remembers the id (per caller: one key cannot be
answered another's reply by reusing its id; and a different request under a remembered id is
refused `id_reused`, never answered with the reply of the request first sent under it). Events are lossy by design;
per-sender sequence numbers make losses visible (`Subscriber.gaps`).

Every socket is built by `_open`, which keys it for CURVE when the endpoints carry a server
key (see broker.curve) and bounds its queues (the table in broker.wire). Every wait takes a
timeout: `Requester.request` blocks at most (timeout + backoff) x (1 + retries), a service
polls for at most the time asked, `Subscriber.recv` takes a timeout, publishing never blocks.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import time
from typing import Any, Callable, Sequence

import structlog
import zmq

from broker.curve import client_options
from broker.endpoints import Endpoints
from broker.keys import is_key_name
from broker.messages import SCHEMA, IdSource, Message, MessageError, decode, encode, make
from broker.wire import (EMPTY, EVENT_HWM, HB, REP, REQ, REQUEST_HWM, SUBSCRIPTION_HWM, connect,
                         error_payload, is_request_type, service_name)

RECV_BATCH = 100  # messages a service handles per wake-up before checking its heartbeat
DEDUP_BYTES = 64 << 20  # the bytes of replies a service keeps to answer retries
RATE_BACKOFF_S = 0.05  # first pause after a `rate_limited` answer; doubles per try
# the broker's answers that forwarded nothing and ask the sender to slow down: retried here
SLOW_DOWN = frozenset({"rate_limited", "overloaded"})
# the broker's answers that forwarded nothing: the service never saw the request, so asking
# again later is safe (no worker yet, or one too busy)
TRANSIENT = SLOW_DOWN | {"no_service"}


def _open(endpoints: Endpoints, kind: int, address: str, **options: int) -> zmq.Socket:
    """A client socket of the message plane: keyed like the broker, queues bounded."""
    return connect(zmq.Context.instance(), kind, address, **client_options(endpoints),
                   **options)


class RequestFailed(Exception):
    """The other side answered with an `error` message."""

    def __init__(self, code: str, reason: str, re: str | None = None):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason, self.re = code, reason, re


class RequestTimeout(Exception):
    """No reply after every retry: the broker or the service is down or overloaded."""


class HandlerError(Exception):
    """Raised by a handler to answer with an `error` (code for machines, reason for people)."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason = code, reason


def _caller(frames: list[bytes]) -> str | None:
    """Who sent a request the broker forwarded (["", REQ, client, caller, payload]): the name
    of its key, or None from a broker without keys. ValueError for any other shape."""
    if len(frames) != 5:
        raise ValueError("REQ needs [client, caller, payload] (is the broker of another "
                         "version?)")
    if not frames[3]:
        return None
    name = frames[3].decode("ascii", "replace")
    if not is_key_name(name):
        raise ValueError(f"caller {name[:80]!r} is not a key name")
    return name


def _request_id(payload: bytes) -> str | None:
    """The id of an encoded message, or None when it is not one."""
    try:
        return decode(payload).id
    except MessageError as err:
        return err.msg_id


def _ms(seconds: float) -> int:
    return max(0, int(seconds * 1000 + 0.999))


def refusal_kind(msg_type: str | None, code: str) -> str:
    """`type:code`, e.g. `event.timing:bad_value`; a type not in the schema is `unknown`, so
    a sender cannot grow the table with made-up names (codes are this program's own)."""
    return f"{msg_type if msg_type in SCHEMA else 'unknown'}:{code}"


class RefusalLog:
    """Refused input, counted by kind and logged once per (sender, kind).

    Why: a sender that repeats a bad message (a trainer whose clock broke, a fuzzer) must be
    seen, but must not flood the log, one line per message. The first refusal of a kind from
    a sender is logged with its reason; later ones are only counted (`counts`, which the
    scheduler's status reply shows). The memory of who was logged is bounded: past
    `max_logged` pairs, new ones are counted only, and that is said once. Thread-safe: a
    scheduler's service thread and main thread share one.
    """

    def __init__(self, log: Any, max_logged: int = 1024):
        self.log = log
        self.max_logged = int(max_logged)
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._logged: set[tuple[str, str]] = set()
        self._full_said = False

    def refuse(self, kind: str, sender: str | None, reason: str, **detail: Any) -> None:
        sender = (sender if isinstance(sender, str) else "?")[:128]
        key = (sender, kind)
        with self._lock:
            self._counts[kind] += 1
            count = self._counts[kind]
            first = key not in self._logged and len(self._logged) < self.max_logged
            if first:
                self._logged.add(key)
            say_full = not first and key not in self._logged and not self._full_said
            self._full_said = self._full_said or say_full
        if first:
            self.log.warning("input_refused", kind=kind, sender=sender, reason=str(reason)[:500],
                             count=count, later="counted, not logged", **detail)
        elif say_full:
            self.log.warning("input_refused_unlogged", senders=self.max_logged,
                             detail="too many senders refused: new ones are counted only")

    def counts(self) -> dict[str, int]:
        """Refusals so far, by kind."""
        with self._lock:
            return dict(sorted(self._counts.items()))

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


class Requester:
    """Sends requests to named services through the broker and waits for the answer.

    A DEALER keeps reconnecting by itself, so a restarted broker is picked up; a reply lost
    on the way is recovered by resending the same id. Not thread-safe: one per thread.
    """

    def __init__(self, endpoints: Endpoints, sender: str, *, timeout: float = 2.0,
                 retries: int = 5):
        if timeout <= 0 or retries < 0:
            raise ValueError("timeout must be > 0 and retries >= 0")
        self.sender, self.timeout, self.retries = sender, float(timeout), int(retries)
        self._ids = IdSource(sender)
        self._log = structlog.get_logger("broker.client").bind(sender=sender)
        self._sock: zmq.Socket | None = _open(endpoints, zmq.DEALER, endpoints.requests,
                                              sndhwm=REQUEST_HWM, rcvhwm=REQUEST_HWM)

    def request(self, service: str, type_: str, **fields) -> Message:
        """Send and wait; the reply `Message` (fields re, ok, body) or RequestFailed/Timeout.

        A message that is not a valid request (bad fields, too large) raises MessageError
        here, before anything is sent. A `rate_limited` or `overloaded` answer (the broker
        did not forward the request) is retried after a pause that doubles each time, within
        `retries`.
        """
        sock = self._socket()
        if service_name(service.encode("utf-8")) is None:
            raise ValueError(f"bad service name {service!r}")
        if not is_request_type(type_):
            raise MessageError("not_request", f"{type_!r} is not a request type")
        msg = make(type_, self.sender, self._ids(), **fields)
        frames = [EMPTY, REQ, service.encode("ascii"), encode(msg)]
        for attempt in range(1 + self.retries):
            if attempt:
                self._log.info("request.retry", service=service, type=type_, id=msg.id,
                               attempt=attempt)
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:  # queue full while the broker is away; the next try resends
                self._log.warning("request.send_blocked", service=service, id=msg.id)
            answer = self._await(sock, msg.id, time.monotonic() + self.timeout)
            if answer is None:
                continue
            if answer.type == "error":
                if answer["code"] in SLOW_DOWN and attempt < self.retries:
                    pause = min(self.timeout, RATE_BACKOFF_S * 2 ** attempt)
                    self._log.info("request.slow_down", service=service, id=msg.id,
                                   code=answer["code"], pause=pause)
                    time.sleep(pause)  # a pause asked for by the broker; nothing to await
                    continue
                raise RequestFailed(answer["code"], answer["reason"], msg.id)
            return answer
        raise RequestTimeout(f"{service}: no answer to {type_} {msg.id} after "
                             f"{1 + self.retries} tries of {self.timeout:g}s")

    def _await(self, sock: zmq.Socket, msg_id: str, deadline: float) -> Message | None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(_ms(left)):
                if time.monotonic() >= deadline:
                    return None
                continue
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                continue
            if len(frames) != 3 or frames[0] != EMPTY or frames[1] != REP:
                self._log.warning("request.bad_frames", frames=len(frames))
                continue
            try:
                answer = decode(frames[2])
            except MessageError as err:
                self._log.warning("request.bad_reply", code=err.code, reason=err.reason)
                continue
            if answer.type not in ("reply", "error"):
                self._log.warning("request.bad_reply", code="not_reply", type=answer.type)
                continue
            if answer.get("re") != msg_id:  # a late answer to an earlier try or request
                self._log.debug("request.stale_reply", re=answer.get("re"), want=msg_id)
                continue
            return answer

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            raise RuntimeError("requester is closed")
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None


class Service:
    """A named worker behind the broker: heartbeats, answers requests, de-duplicates retries.

    The heartbeat doubles as registration, so a restarted broker learns the service again
    within one interval. If the broker stays silent for several intervals the socket is
    rebuilt, which drops anything queued for a broker that is gone.
    """

    def __init__(self, endpoints: Endpoints, name: str, handler: Callable[[Message], dict | None],
                 *, heartbeat: float = 0.5, dedup: int = 10_000,
                 dedup_bytes: int = DEDUP_BYTES,
                 refusals: RefusalLog | None = None,
                 before_replies: Callable[[], None] | None = None,
                 on_caught_up: Callable[[], None] | None = None):
        if service_name(name.encode("utf-8")) is None:
            raise ValueError(f"bad service name {name!r} (letters, digits, _.:- up to 128)")
        if heartbeat <= 0 or dedup < 0:
            raise ValueError("heartbeat must be > 0 and dedup >= 0")
        self.name, self.handler = name, handler
        # Called once after a batch of requests is handled and before any of its replies is
        # sent (e.g. one durable commit for every change the batch made); if it raises, the
        # batch's requests are answered `internal` and their replies forgotten, so a retry
        # runs the handler again.
        self.before_replies = before_replies
        # Called whenever no request is waiting (all that reached the socket is handled): a
        # caller judging its peers' silence counts it up to then, not to the wall clock
        self.on_caught_up = on_caught_up
        self.heartbeat, self.dedup = float(heartbeat), int(dedup)
        # the cache's replies' bytes, bounded too: 10,000 status replies of every job would
        # otherwise hold gigabytes
        self.dedup_bytes, self._cached_bytes = int(dedup_bytes), 0
        self.handled = 0      # requests answered by running the handler
        self.duplicates = 0   # requests answered from the reply cache
        self._endpoints = endpoints
        self._ids = IdSource(name)
        # (digest of the request, reply) by (caller, request id): a retry, the same bytes
        # again, is answered from here, to its own key only
        self._cache: collections.OrderedDict[tuple[str | None, str], tuple[bytes, bytes]] = \
            collections.OrderedDict()
        self._liveness = max(5 * self.heartbeat, 1.0)  # silent this long: broker gone
        self._log = structlog.get_logger("broker.service").bind(service=name)
        # malformed requests and handler refusals: counted, logged once per sender and kind
        self.refusals = refusals if refusals is not None else RefusalLog(self._log)
        self._sock: zmq.Socket | None = None
        self._broker_lost = False
        # what the broker last answered this service's heartbeat with instead of taking it
        # (e.g. `forbidden`: this key may not serve this name); None once registered
        self.broker_error: str | None = None
        self._connect()

    def _connect(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
        # IMMEDIATE: nothing queues for a broker that is not there (no stale replays)
        self._sock = _open(self._endpoints, zmq.DEALER, self._endpoints.requests,
                           sndhwm=REQUEST_HWM, rcvhwm=REQUEST_HWM, immediate=1)
        self._next_hb = 0.0
        self._last_heard = time.monotonic()

    def poll(self, timeout: float) -> int:
        """Handle requests arriving within `timeout` seconds; heartbeat when due."""
        if self._sock is None:
            raise RuntimeError("service is closed")
        deadline = time.monotonic() + max(0.0, timeout)
        handled = 0
        while True:
            now = time.monotonic()
            if now >= self._next_hb:
                sent = self._send([EMPTY, HB, self.name.encode("ascii")])
                # not connected yet: try again soon, so registration follows the connection
                self._next_hb = now + (self.heartbeat if sent else min(self.heartbeat, 0.02))
            wait = min(deadline, self._next_hb) - now
            if self._sock.poll(_ms(wait)):
                handled += self._drain()
            else:
                if self.on_caught_up is not None:
                    self.on_caught_up()
                if time.monotonic() - self._last_heard > self._liveness:
                    if not self._broker_lost:
                        self._log.warning("service.broker_silent",
                                          seconds=round(self._liveness, 2))
                    self._broker_lost = True
                    self._connect()
            if time.monotonic() >= deadline:
                return handled

    def serve(self, stop, every: float = 0.1) -> None:
        """Poll until `stop` (a threading.Event) is set, looking at it every `every` seconds
        (or heartbeat, if shorter)."""
        while not stop.is_set():
            self.poll(min(every, self.heartbeat))

    def _drain(self) -> int:
        if self.before_replies is None:
            return self._drain_batch(None)
        replies: list[tuple[bytes, str | None, bytes]] = []
        handled = self._drain_batch(replies)
        if replies:
            try:
                self.before_replies()
            except Exception as err:
                self._log.exception("service.before_replies_failed")
                replies = [(client, caller, self._unsent(caller, payload, err))
                           for client, caller, payload in replies]
            for client, _, payload in replies:
                self._reply(client, payload)
        return handled

    def _unsent(self, caller: str | None, payload: bytes, err: Exception) -> bytes:
        """The answer instead of `payload` when the batch could not be made good: an error
        for its request, whose cached reply is forgotten."""
        try:
            msg = decode(payload)
        except MessageError:
            return payload
        if msg.type != "reply":
            return payload  # an error already: nothing was promised
        dropped = self._cache.pop((caller, msg["re"]), None)
        if dropped is not None:
            self._cached_bytes -= len(dropped[1])
        return error_payload(self.name, self._ids, "internal",
                             f"not committed: {type(err).__name__}: {err}", msg["re"])

    def _drain_batch(self, replies: list[tuple[bytes, str | None, bytes]] | None) -> int:
        """Handle what has arrived (up to RECV_BATCH messages); each reply is sent at once, or
        kept in `replies` (client, caller, payload) where given."""
        handled = 0
        assert self._sock is not None
        for _ in range(RECV_BATCH):
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                if self.on_caught_up is not None:
                    self.on_caught_up()
                break
            self._last_heard = time.monotonic()
            if self._broker_lost:
                self._log.info("service.broker_back")
                self._broker_lost = False
            if len(frames) >= 2 and frames[0] == EMPTY and frames[1] == HB:
                self.broker_error = None  # registered
                continue
            if len(frames) >= 3 and frames[0] == EMPTY and frames[1] == REQ:
                client = frames[2]
                try:
                    caller = _caller(frames)
                except ValueError as err:
                    self._log.warning("service.malformed", code="bad_frame", frames=len(frames),
                                      detail=str(err))
                    # naming the request's id, where readable, lets its requester see why
                    self._reply(client, error_payload(self.name, self._ids, "bad_frame",
                                                      str(err), _request_id(frames[-1])))
                    continue
                if replies is None:
                    self._reply(client, self._answer(frames[4], caller))
                else:
                    replies.append((client, caller, self._answer(frames[4], caller)))
                handled += 1
                continue
            if len(frames) == 3 and frames[0] == EMPTY and frames[1] == REP:
                said = self._describe(frames[2])
                if said != self.broker_error:  # a refused registration: every heartbeat
                    self._log.error("service.broker_error", detail=said)
                self.broker_error = said
                continue
            self._log.warning("service.malformed", code="bad_frame", frames=len(frames),
                              detail="no reply path; dropped")
        return handled

    def _answer(self, payload: bytes, caller: str | None = None) -> bytes:
        """The encoded reply for one request payload from the key named `caller`; never
        raises."""
        try:
            req = decode(payload)
        except MessageError as err:
            self.refusals.refuse(refusal_kind(err.msg_type, err.code), err.sender, err.reason,
                                 re=err.msg_id)
            return error_payload(self.name, self._ids, err.code, err.reason, err.msg_id)
        if not is_request_type(req.type):
            self.refusals.refuse(refusal_kind(req.type, "not_request"), req.sender,
                                 f"{req.type!r} is not a request type", re=req.id)
            return error_payload(self.name, self._ids, "not_request",
                                 f"{req.type!r} is not a request type", req.id)
        key = (caller, req.id)
        digest = hashlib.blake2b(payload, digest_size=16).digest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            if cached[0] != digest:  # another request under a used id: never its reply
                reason = (f"message id {req.id[:80]!r} was used for another request; "
                          "send this one under a new id")
                self.refusals.refuse(refusal_kind(req.type, "id_reused"), req.sender, reason,
                                     re=req.id)
                return error_payload(self.name, self._ids, "id_reused", reason, req.id)
            self.duplicates += 1
            self._log.info("service.duplicate", type=req.type, re=req.id, sender=req.sender,
                           caller=caller)
            return cached[1]
        if caller is not None:
            req = dataclasses.replace(req, caller=caller)
        out = self._run_handler(req)
        self.handled += 1
        if self.dedup:
            self._cache[key] = (digest, out)
            self._cached_bytes += len(out)
            while len(self._cache) > self.dedup or self._cached_bytes > self.dedup_bytes:
                self._cached_bytes -= len(self._cache.popitem(last=False)[1][1])
        return out

    def _run_handler(self, req: Message) -> bytes:
        try:
            body = self.handler(req)
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise TypeError(f"handler returned {type(body).__name__}, not dict or None")
            out = encode(make("reply", self.name, self._ids(), re=req.id, ok=True, body=body))
            decode(out)  # what the requester cannot read must not leave as a success
            return out
        except HandlerError as err:
            self.refusals.refuse(refusal_kind(req.type, str(err.code)), req.sender,
                                 str(err.reason), re=req.id)
            try:
                return error_payload(self.name, self._ids, str(err.code), str(err.reason), req.id)
            except MessageError:
                return error_payload(self.name, self._ids, "internal", "bad HandlerError", req.id)
        except Exception as err:
            self._log.exception("service.handler_failed", type=req.type, re=req.id)
            return error_payload(self.name, self._ids, "internal",
                                 f"{type(err).__name__}: {err}", req.id)

    def _reply(self, client: bytes, payload: bytes) -> None:
        self._send([EMPTY, REP, client, payload])

    def _send(self, frames: list[bytes]) -> bool:
        try:
            self._sock.send_multipart(frames, zmq.NOBLOCK)  # type: ignore[union-attr]
            return True
        except zmq.Again:  # no broker connected right now; requesters retry, HB repeats
            self._log.debug("service.send_dropped", command=frames[1].decode())
            return False

    @staticmethod
    def _describe(payload: bytes) -> str:
        try:
            msg = decode(payload)
            return f"{msg.get('code')}: {msg.get('reason')}"
        except MessageError as err:
            return str(err)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None


class Publisher:
    """Puts events on the bus with a per-sender sequence number (1, 2, 3, ...)."""

    def __init__(self, endpoints: Endpoints, sender: str, join_wait: float = 0.0):
        """`join_wait` > 0: the first publish within that many seconds of connecting waits
        for the bus's subscriptions (an XPUB sees them arrive), so that a short-lived
        process's first events are not lost to the slow-joiner effect."""
        self.sender = sender
        self._ids = IdSource(sender)
        self._seq = 0
        self._join_by = time.monotonic() + join_wait if join_wait > 0 else None
        # the subscriptions come in on this socket: with room for only one, the next topic's
        # waited for a later call and a first burst of events on it was dropped
        self._sock: zmq.Socket | None = _open(
            endpoints, zmq.XPUB if self._join_by else zmq.PUB, endpoints.events_in,
            linger=500, sndhwm=EVENT_HWM, rcvhwm=SUBSCRIPTION_HWM)

    @property
    def seq(self) -> int:
        """The sequence number of the last event published."""
        return self._seq

    def publish(self, type_: str, **fields) -> None:
        """Validate and send an `event.*`; dropped silently if the bus is away (lossy)."""
        if self._sock is None:
            raise RuntimeError("publisher is closed")
        if not type_.startswith("event."):
            raise MessageError("not_event", f"{type_!r} is not an event type")
        seq = self._seq + 1
        msg = make(type_, self.sender, self._ids(), seq=seq, **fields)
        payload = encode(msg)
        self._seq = seq  # only a sent-worthy event consumes a number, so gaps mean loss
        if self._join_by is not None:
            self._join()
        try:
            self._sock.send_multipart([type_.encode("ascii"), payload], zmq.NOBLOCK)
        except zmq.Again:
            pass

    def _join(self) -> None:
        left, self._join_by = self._join_by - time.monotonic(), None
        if left > 0:
            self._sock.poll(_ms(left))
        while self._sock.poll(0):  # the subscriptions seen; they are not needed as messages
            self._sock.recv(zmq.NOBLOCK)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class Subscriber:
    """Receives valid events whose type starts with one of `prefixes`; counts seq gaps.

    Gaps are exact only when the prefixes cover all of a sender's event types (the sequence
    runs over every event of that sender). A sequence that goes back means the sender
    restarted; counting starts again from there.
    """

    def __init__(self, endpoints: Endpoints, prefixes: Sequence[str] = ("event.",), *,
                 refusals: RefusalLog | None = None):
        if isinstance(prefixes, str):
            prefixes = (prefixes,)
        self.gaps: dict[str, int] = {}
        self.invalid = 0  # events skipped as malformed
        self._last: dict[str, int] = {}
        self._log = structlog.get_logger("broker.subscriber")
        # malformed events: counted, logged once per sender and kind (no flood)
        self.refusals = refusals if refusals is not None else RefusalLog(self._log)
        self._sock: zmq.Socket | None = _open(endpoints, zmq.SUB, endpoints.events_out,
                                              sndhwm=SUBSCRIPTION_HWM, rcvhwm=EVENT_HWM)
        for prefix in prefixes:
            self._sock.setsockopt(zmq.SUBSCRIBE, prefix.encode("utf-8"))

    def recv(self, timeout: float) -> Message | None:
        """The next valid event within `timeout` seconds, or None."""
        if self._sock is None:
            raise RuntimeError("subscriber is closed")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                left = deadline - time.monotonic()
                if left <= 0 or not self._sock.poll(_ms(left)):
                    return None
                continue
            msg = self._check(frames)
            if msg is not None:
                self._track(msg)
                return msg

    def _check(self, frames: list[bytes]) -> Message | None:
        if len(frames) != 2:
            return self._skip("bad_frame", f"{len(frames)} frames, want [topic, payload]")
        try:
            msg = decode(frames[1])
        except MessageError as err:
            return self._skip(err.code, err.reason, err.msg_type, err.sender)
        if not msg.is_event:
            return self._skip("not_event", f"{msg.type!r} on the event bus", msg.type, msg.sender)
        if frames[0] != msg.type.encode("utf-8"):
            return self._skip("bad_topic", f"topic {frames[0][:64]!r} != type {msg.type!r}",
                              msg.type, msg.sender)
        return msg

    def _skip(self, code: str, reason: str, msg_type: str | None = None,
              sender: str | None = None) -> None:
        self.invalid += 1
        self.refusals.refuse(refusal_kind(msg_type, code), sender, reason)
        return None

    def _track(self, msg: Message) -> None:
        assert msg.seq is not None  # decode guarantees it for events
        last = self._last.get(msg.sender)
        self.gaps.setdefault(msg.sender, 0)
        if last is not None and msg.seq > last + 1:
            missing = msg.seq - last - 1
            self.gaps[msg.sender] += missing
            self._log.warning("subscriber.gap", sender=msg.sender, missing=missing,
                              after=last, seq=msg.seq)
        elif last is not None and msg.seq <= last:
            self._log.info("subscriber.seq_reset", sender=msg.sender, seq=msg.seq, last=last)
        self._last[msg.sender] = msg.seq

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
