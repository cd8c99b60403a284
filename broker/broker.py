"""The broker process: the one address every Interlace component needs.

Two jobs in one process (DESIGN.md section 3):

* an event bus, XSUB in / XPUB out, forwarded by libzmq's own proxy on a helper thread (it
  runs without the GIL, so the bus keeps raw PUB/SUB speed and subscriptions flow back to
  publishers by themselves);
* a request router (the Majordomo idea): requesters send to a named service, workers of that
  service register by heartbeating, the broker picks a live worker round-robin and carries
  the reply back. Every request payload is validated before it is forwarded; anything
  malformed is logged and answered with an `error`, never allowed to stop the loop.

A restarted broker knows no services until their next heartbeat, so for `startup_grace`
seconds after start a request for an unknown service is held instead of refused.

Hardening (DESIGN.md section 3, "Security"): with `keys` every socket is a CURVE server and a
ZAP handler admits only the authorised client keys, so an outsider can neither send a request
nor read an event, and all traffic is encrypted; without keys only loopback may be bound
unless `insecure` says otherwise (and then every start logs a warning). Each requester
identity has a token bucket (`rate_limit` per second, `rate_burst` at once); the excess is
answered `rate_limited` without reaching the service. Frame sizes and queue lengths are
bounded on every socket (table in broker.wire).

Floods (docs/security.md, "Floods"): a worker is handed at most `window` requests it has
not answered; the rest wait in the broker (broker.queues), the cluster's own liveness and
orders ahead of everyone, then each requester in turn. So a heartbeat never waits behind a
flood in the worker's socket, and a flooding client waits behind itself. Beyond each queue's
bounds, or after `max_wait` seconds waiting (its requester has resent it or left), a request
is answered `overloaded`, never forwarded.

Who sent a request: a message's `sender` is whatever the sender wrote. With keys, the broker
reads the name of the CURVE key each request arrived under (authorized/NAME.key: the ZAP
handler gives the connection the User-Id NAME) and forwards it to the worker in a frame of
its own, the `caller` (broker.wire); the service hands it to its handler as Message.caller.
Without keys that frame is empty. Only a keyed broker reads the frames' metadata.

Who may serve what: with keys, the service `scheduler` is registered only under the key named
`scheduler`, and agent.NODE only under agent-NODE (specs/keyroles.py); any other key's
heartbeat for them is answered `forbidden` and the worker is never handed a request. Other
service names are free to any key. Without keys any peer may register any name.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import structlog
import zmq

from broker.client import RefusalLog, refusal_kind
from broker.curve import (InsecureBind, NamedKeys, check_bind, is_loopback, server_options,
                          start_authenticator)
from broker.endpoints import Endpoints
from broker.keys import KeyFileError, ServerKeys, load_server
from broker.logs import configure_logging
from broker.messages import MAX_MESSAGE_BYTES, IdSource, MessageError, decode
from broker.queues import MAX_WAIT_S, ServiceQueue, Waiting
from broker.ratelimit import TokenBuckets
from broker.wire import (EMPTY, EVENT_HWM, HARD_LIMIT_FACTOR, HB, MAX_SUBSCRIPTION_BYTES, REP,
                         REQ, REQUEST_HWM, SUBSCRIPTION_HWM, error_payload, is_request_type,
                         service_name)
from specs.keyroles import serve_refusal, urgent

__all__ = ["Broker", "InsecureBind", "is_loopback", "main"]

SENDER = "broker"
BATCH = 256                  # router messages handled per wake-up before checking timers
TICK_S = 0.1                 # longest wait between checks of the stop flag
MAX_PARKED = 10_000          # requests held during the start-up grace; beyond, answered at once
RATE_LIMIT = 1000.0          # requests per second per requester identity, sustained...
RATE_BURST = 2000            # ...and at once (far above any honest component's rate)
WINDOW = 16                  # requests a worker holds unanswered before more wait here


@dataclass
class _Worker:
    service: str
    last_seen: float
    inflight: int = 0        # requests handed to it and not yet answered
    replied: float = 0.0     # when it last answered one


@dataclass
class _Parked:
    """A request held during the start-up grace, waiting for its service to heartbeat."""
    deadline: float
    service: str
    item: Waiting
    urgent: bool = False


class Broker:
    """Binds the three sockets at construction (so `endpoints` is known), serves in `run`."""

    def __init__(self, host: str = "127.0.0.1", ports: Sequence[int] = (0, 0, 0), *,
                 service_timeout: float = 10.0, max_message: int = MAX_MESSAGE_BYTES,
                 startup_grace: float | None = None, keys: ServerKeys | None = None,
                 insecure: bool = False, rate_limit: float = RATE_LIMIT,
                 rate_burst: int = RATE_BURST, window: int = WINDOW,
                 max_wait: float = MAX_WAIT_S):
        if len(ports) != 3:
            raise ValueError("ports: need three (events_in, events_out, requests)")
        if service_timeout <= 0:
            raise ValueError("service_timeout must be > 0")
        if window < 1 or max_wait <= 0:
            raise ValueError("window must be >= 1 and max_wait > 0")
        self._log = structlog.get_logger("broker").bind(component="broker")
        warning = check_bind(host, keys is not None, insecure)  # InsecureBind before any socket
        if warning:
            self._log.warning("broker.insecure", host=host, detail=warning)
        self._keys = keys
        self._buckets = TokenBuckets(rate_limit, rate_burst) if rate_limit > 0 else None
        self.rate_limited = 0  # requests answered `rate_limited`
        self.overloaded = 0    # requests answered `overloaded`
        self._window, self._max_wait = int(window), float(max_wait)
        self._queues: dict[str, ServiceQueue] = {}  # by service: what waits for a worker
        self._crowded: set[bytes] = set()  # senders answered `overloaded` since the last sweep
        # malformed requests, answered `error` here: counted by kind, logged once per sender
        self.refusals = RefusalLog(self._log)
        self._limited: set[bytes] = set()  # senders limited since the last sweep (logged once)
        self._timeout = float(service_timeout)
        self._grace = self._timeout if startup_grace is None else float(startup_grace)
        self._max = int(max_message)
        self._ids = IdSource(SENDER)
        self._workers: dict[bytes, _Worker] = {}
        self._services: dict[str, collections.deque[bytes]] = {}
        self._parked: list[_Parked] = []
        self._closing = threading.Event()
        self._done = threading.Event()
        self._done.set()
        self._lock = threading.Lock()
        self._closed = False
        self._ctx = zmq.Context()
        self._sockets: list[zmq.Socket] = []
        self._auth: NamedKeys | None = None
        try:
            # the ZAP handler first: a keyed socket bound without one admits any client key
            if keys is not None:
                self._auth, left_out = start_authenticator(self._ctx, keys)
                self._log_left_out(left_out)
            self._xsub = self._bind(zmq.XSUB, host, ports[0], RCVHWM=EVENT_HWM,
                                    SNDHWM=SUBSCRIPTION_HWM, MAXMSGSIZE=self._max)
            self._xpub = self._bind(zmq.XPUB, host, ports[1], SNDHWM=EVENT_HWM,
                                    RCVHWM=SUBSCRIPTION_HWM, MAXMSGSIZE=MAX_SUBSCRIPTION_BYTES)
            # MANDATORY: a send to a vanished peer fails instead of vanishing, so a worker
            # whose connection closed is skipped at once rather than after service_timeout
            self._router = self._bind(zmq.ROUTER, host, ports[2], ROUTER_MANDATORY=1,
                                      SNDHWM=REQUEST_HWM, RCVHWM=REQUEST_HWM,
                                      MAXMSGSIZE=self._max * HARD_LIMIT_FACTOR)
        except BaseException:
            self._close_sockets()
            raise
        self.endpoints = Endpoints(
            events_in=self._xsub.getsockopt_string(zmq.LAST_ENDPOINT),
            events_out=self._xpub.getsockopt_string(zmq.LAST_ENDPOINT),
            requests=self._router.getsockopt_string(zmq.LAST_ENDPOINT),
            server_key=keys.public.decode("ascii") if keys is not None else None)
        self._started = time.monotonic()

    def _bind(self, kind: int, host: str, port: int, **options: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        self._sockets.append(sock)
        sock.setsockopt(zmq.LINGER, 0)
        if self._keys is not None:
            options = {**server_options(self._keys), **options}
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        if ":" in host.strip("[]"):
            sock.setsockopt(zmq.IPV6, 1)
            host = f"[{host.strip('[]')}]"
        sock.bind(f"tcp://{host}:{int(port) if port else '*'}")
        return sock

    # -- the loop -------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None) -> None:
        """Serve until `stop` is set or `close` is called (from another thread)."""
        stop = stop if stop is not None else threading.Event()
        with self._lock:
            if self._closed:
                raise RuntimeError("broker is closed")
            if not self._done.is_set():
                raise RuntimeError("broker is already running")
            self._done.clear()
        self._started = time.monotonic()  # the grace counts from when requests are served
        control = self._ctx.socket(zmq.PAIR)
        peer = self._ctx.socket(zmq.PAIR)
        address = f"inproc://broker-control-{id(self)}"
        control.bind(address)
        peer.connect(address)
        events = threading.Thread(target=self._forward_events, args=(peer,),
                                  name="broker-events", daemon=True)
        events.start()
        self._log.info("broker.serving", keyed=self._keys is not None,
                       **self.endpoints.addresses())
        try:
            self._route(stop)
        finally:
            control.send(b"TERMINATE")
            events.join(10)
            control.close(0)
            self._done.set()
            self._log.info("broker.stopped")

    def _forward_events(self, control: zmq.Socket) -> None:
        """XSUB -> XPUB and subscriptions back, inside libzmq until TERMINATE."""
        try:
            zmq.proxy_steerable(self._xsub, self._xpub, None, control)
        except zmq.ZMQError as err:
            if err.errno != zmq.ETERM:
                self._log.error("broker.event_proxy_failed", error=str(err))
        finally:
            control.close(0)

    def _route(self, stop: threading.Event) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        next_sweep = time.monotonic() + self._timeout
        while not stop.is_set() and not self._closing.is_set():
            if poller.poll(self._wait_ms()):
                for _ in range(BATCH):
                    try:
                        frames, caller = self._recv()
                    except zmq.Again:
                        break
                    try:
                        self._handle(frames, caller)
                    except Exception:  # a bug here must not take the bus down
                        self._log.exception("broker.internal_error")
            now = time.monotonic()
            if self._parked:
                self._release_parked(now)
            if self._queues:
                self._expire(now)
            if now >= next_sweep:
                self._sweep(now)
                self._limited.clear()
                self._crowded.clear()
                next_sweep = now + self._timeout

    def _wait_ms(self) -> int:
        wait = TICK_S
        if self._parked:
            wait = min(wait, max(0.0, min(p.deadline for p in self._parked) - time.monotonic()))
        return int(wait * 1000) + 1

    # -- frames ---------------------------------------------------------------------------
    def _recv(self) -> tuple[list[bytes], bytes]:
        """One message off the router and the name of the key it came under (b"" without
        keys). Only a keyed broker reads metadata, and only off the first frame (the peer's
        identity; libzmq gives every frame of a message its connection's metadata)."""
        if self._auth is None:
            return self._router.recv_multipart(zmq.NOBLOCK), b""
        head = self._router.recv(zmq.NOBLOCK, copy=False)
        frames = [head.bytes]
        while self._router.getsockopt(zmq.RCVMORE):  # not .rcvmore: that costs ~7 us a call
            frames.append(self._router.recv(zmq.NOBLOCK))
        try:
            return frames, head.get("User-Id").encode("utf-8")
        except zmq.ZMQError:  # no User-Id: no name, refused at a request
            return frames, b""

    def _handle(self, frames: list[bytes], caller: bytes = b"") -> None:
        """One message from the router; `caller` is the name of the sender's key (b"" without
        keys)."""
        ident, body = frames[0], frames[1:]
        if len(body) < 2 or body[0] != EMPTY:
            return self._refuse(ident, "bad_frame", "expected frames [empty, command, ...]")
        if any(len(f) > self._max for f in body):
            size = max(len(f) for f in body)
            return self._refuse(ident, "too_large", f"frame of {size} bytes > {self._max}")
        command, rest = body[1], body[2:]
        if command == REQ:
            return self._on_request(ident, caller, rest)
        if command == HB:
            return self._on_heartbeat(ident, caller, rest)
        if command == REP:
            return self._on_reply(ident, rest)
        return self._refuse(ident, "bad_frame", f"unknown command {command[:16]!r}")

    def _on_request(self, client: bytes, caller: bytes, rest: list[bytes]) -> None:
        # every REQ costs a token, malformed ones too: garbage is no way round the limit
        limited = self._buckets is not None and not self._buckets.allow(client, time.monotonic())
        if len(rest) != 2:
            return self._refuse(client, "bad_frame", "REQ needs [service, payload]")
        name = service_name(rest[0])
        if name is None:
            return self._refuse(client, "bad_frame", f"bad service name {rest[0][:64]!r}")
        payload = rest[1]
        try:
            msg = decode(payload)
        except MessageError as err:
            return self._refuse(client, err.code, err.reason, err.msg_id, err.msg_type,
                                err.sender)
        if not is_request_type(msg.type):
            return self._refuse(client, "not_request",
                                f"{msg.type!r} is not a request type", msg.id)
        if self._auth is not None and not caller:  # keyed, yet no name: never forward as b""
            return self._refuse(client, "unknown_caller",
                                "this connection's key has no name; reconnect", msg.id,
                                msg.type, msg.sender)
        if limited:
            return self._rate_limited(client, name, msg.id)
        now = time.monotonic()
        first = urgent(name, caller.decode("utf-8") if self._auth is not None else None,
                       msg.type)
        item = Waiting(client, caller, payload, msg.id, now)
        if self._admit(name, item, first, now):
            return
        if now < self._started + self._grace and len(self._parked) < MAX_PARKED:
            self._parked.append(_Parked(self._started + self._grace, name, item, first))
        else:
            self._no_service(client, name, msg.id)

    def _admit(self, name: str, item: Waiting, first: bool, now: float) -> bool:
        """Forward `item` to a worker of `name`, or hold it until one has room (answered
        `overloaded` past the queue's bounds); False when `name` has no worker at all."""
        queue = self._queues.get(name)
        sent = self._forward(name, item.client, item.caller, item.payload, now) \
            if not queue else False
        if sent is None:
            return False
        if sent is False:  # its workers are busy, or others wait before it: it waits too
            if queue is None:
                queue = self._queues[name] = ServiceQueue()
            why = queue.push(item.caller or item.client, first, item)
            if why is not None:
                self._overloaded(item.client, name, item.msg_id, why)
            else:
                self._dispatch(name, now)
        return True

    def _forward(self, name: str, client: bytes, caller: bytes, payload: bytes,
                 now: float) -> bool | None:
        """Hand a request to a live worker of `name` with room in its window: True when one
        took it, False when its workers are all busy, None when it has none."""
        busy = False
        for _ in range(len(self._services.get(name, ()))):
            ident = self._pick(name, now)
            if ident is None:
                break
            worker = self._workers[ident]
            if worker.inflight >= self._window:
                busy = True
                continue
            error = self._send([ident, EMPTY, REQ, client, caller, payload])
            if error is None:
                if not worker.inflight:
                    worker.replied = now  # an idle worker's silence counts from here
                worker.inflight += 1
                return True
            if error == zmq.EHOSTUNREACH:  # its connection closed: it is gone
                self._log.info("broker.worker_gone", service=name, worker=ident.hex())
                self._forget(ident)
            else:  # its socket's queue is full: busy, kept
                busy = True
        return False if busy else None

    def _dispatch(self, name: str, now: float) -> None:
        """Forward what waits for `name` while its workers have room."""
        queue = self._queues.get(name)
        while queue:
            item = queue.peek()
            if now - item.since >= self._max_wait:
                queue.pop()
                self._expired(name, item)
                continue
            if not self._forward(name, item.client, item.caller, item.payload, now):
                return  # busy (what waits stays) or gone (the next sweep answers it)
            queue.pop()

    def _expire(self, now: float) -> None:
        """Answer what waited too long, and everything waiting for a service left with no
        worker."""
        for name, queue in list(self._queues.items()):
            if self._services.get(name):
                for item in queue.expired(now, self._max_wait):
                    self._expired(name, item)
            else:
                for item in queue.drain():
                    self._no_service(item.client, name, item.msg_id)
            if not queue:
                del self._queues[name]

    def _expired(self, name: str, item: Waiting) -> None:
        self._overloaded(item.client, name, item.msg_id,
                         f"waited {self._max_wait:g}s in the broker for a free worker")

    def _on_heartbeat(self, ident: bytes, caller: bytes, rest: list[bytes]) -> None:
        name = service_name(rest[0]) if len(rest) == 1 else None
        if name is None:
            return self._refuse(ident, "bad_frame", "HB needs [service] with a plain name")
        now = time.monotonic()
        worker = self._workers.get(ident)
        if worker is None or worker.service != name or now - worker.last_seen > self._timeout:
            if worker is not None:
                self._forget(ident)
            # keyed: `scheduler` and agent.NODE are served only under their own keys
            # (specs/keyroles.py), so no other key is handed their requests; checked at
            # registration only, as a connection's key never changes
            refusal = serve_refusal(caller.decode("utf-8"), name) \
                if self._auth is not None else None
            if refusal is not None:
                return self._refuse(ident, "forbidden", refusal, msg_type="service.register",
                                    sender=f"key:{caller.decode('utf-8')}")
            self._workers[ident] = _Worker(name, now)
            self._services.setdefault(name, collections.deque()).append(ident)
            self._log.info("broker.worker_registered", service=name, worker=ident.hex(),
                           workers=len(self._services[name]))
        else:
            worker.last_seen = now
            if worker.inflight and now - worker.replied > self._timeout:
                # alive, yet no answer for that long: what it holds is lost (a reply it
                # could not send); its requesters resend, and it is given room again
                self._log.warning("broker.window_reset", service=name, worker=ident.hex(),
                                  unanswered=worker.inflight)
                worker.inflight = 0
        self._send([ident, EMPTY, HB])
        if self._parked:
            self._release_parked(now, service=name)
        if self._queues.get(name):
            self._dispatch(name, now)

    def _on_reply(self, ident: bytes, rest: list[bytes]) -> None:
        worker = self._workers.get(ident)
        if worker is None:
            return self._refuse(ident, "not_worker", "REP from a peer that has not heartbeated")
        if len(rest) != 2 or not rest[0]:
            return self._refuse(ident, "bad_frame", "REP needs [client, payload]")
        client, payload = rest
        try:
            msg = decode(payload)
        except MessageError as err:
            return self._refuse(ident, err.code, err.reason, err.msg_id)
        if msg.type not in ("reply", "error"):
            return self._refuse(ident, "not_reply", f"{msg.type!r} is not reply or error", msg.id)
        now = time.monotonic()
        worker.last_seen = worker.replied = now
        if worker.inflight:
            worker.inflight -= 1
        self._send([client, EMPTY, REP, payload])
        if self._queues.get(worker.service):
            self._dispatch(worker.service, now)

    # -- services -------------------------------------------------------------------------
    def _pick(self, name: str, now: float) -> bytes | None:
        """Round-robin over live workers; stale ones are dropped on the way."""
        ring = self._services.get(name)
        while ring:
            ident = ring[0]
            worker = self._workers.get(ident)
            if worker is None or worker.service != name or now - worker.last_seen > self._timeout:
                ring.popleft()
                if worker is not None and worker.service == name:
                    del self._workers[ident]
                    self._log.info("broker.worker_expired", service=name, worker=ident.hex())
                continue
            ring.rotate(-1)
            return ident
        self._services.pop(name, None)
        return None

    def _forget(self, ident: bytes) -> None:
        worker = self._workers.pop(ident, None)
        if worker is None:
            return
        ring = self._services.get(worker.service)
        if ring is not None:
            try:
                ring.remove(ident)
            except ValueError:
                pass
            if not ring:
                del self._services[worker.service]

    def _sweep(self, now: float) -> None:
        for ident, worker in list(self._workers.items()):
            if now - worker.last_seen > self._timeout:
                self._log.info("broker.worker_expired", service=worker.service, worker=ident.hex())
                self._forget(ident)

    def _release_parked(self, now: float, service: str | None = None) -> None:
        keep: list[_Parked] = []
        for parked in self._parked:
            # its wait in a queue counts from its release, not from its arrival
            if service in (None, parked.service) and self._admit(
                    parked.service, dataclasses.replace(parked.item, since=now), parked.urgent,
                    now):
                continue
            if now >= parked.deadline:
                self._no_service(parked.item.client, parked.service, parked.item.msg_id)
            else:
                keep.append(parked)
        self._parked = keep

    # -- answers --------------------------------------------------------------------------
    def _no_service(self, client: bytes, name: str, msg_id: str) -> None:
        self._log.info("broker.no_service", service=name, re=msg_id, client=client.hex())
        self._send([client, EMPTY, REP,
                    error_payload(SENDER, self._ids, "no_service",
                                  f"no live worker for service {name!r}", msg_id)])

    def _rate_limited(self, client: bytes, name: str, msg_id: str) -> None:
        """Answer, never drop: the sender learns to slow down instead of timing out."""
        assert self._buckets is not None
        self.rate_limited += 1
        if client not in self._limited:  # once per sender per sweep, not once per request
            self._limited.add(client)
            self._log.warning("broker.rate_limited", peer=client.hex(), service=name,
                              rate=self._buckets.rate, burst=self._buckets.burst)
        wait = self._buckets.retry_after(client)
        self._send([client, EMPTY, REP, error_payload(
            SENDER, self._ids, "rate_limited",
            f"over {self._buckets.rate:g} requests/s (burst {self._buckets.burst:g}); "
            f"retry in {wait:.3f}s", msg_id)])

    def _overloaded(self, client: bytes, name: str, msg_id: str, why: str) -> None:
        """Answer, never drop: the sender learns to slow down instead of timing out."""
        self.overloaded += 1
        if client not in self._crowded:  # once per sender per sweep, not once per request
            self._crowded.add(client)
            self._log.warning("broker.overloaded", peer=client.hex(), service=name, detail=why)
        self._send([client, EMPTY, REP, error_payload(
            SENDER, self._ids, "overloaded", f"service {name!r} is overloaded: {why}; "
            "retry later", msg_id)])

    def reload_keys(self) -> int:
        """Re-read the authorised client keys (after adding or revoking one); how many admitted.

        Revoking stops new connections with that key; one already open stays until it drops,
        under the name it connected with (likewise a renamed key file names new connections).
        """
        if self._keys is None or self._auth is None:
            raise RuntimeError("the broker runs without keys")
        self._log_left_out(self._auth.load(self._keys.authorized))
        self._log.info("broker.keys_reloaded", authorized=self._auth.admitted)
        return self._auth.admitted

    def _log_left_out(self, problems: list[str]) -> None:
        for problem in problems:
            self._log.warning("broker.key_left_out", detail=problem)

    def _refuse(self, ident: bytes, code: str, reason: str, msg_id: str | None = None,
                msg_type: str | None = None, sender: str | None = None) -> None:
        self.refusals.refuse(refusal_kind(msg_type, code), sender or f"peer:{ident.hex()}",
                             reason, re=msg_id, peer=ident.hex())
        self._send([ident, EMPTY, REP, error_payload(SENDER, self._ids, code, reason, msg_id)])

    def _send(self, frames: list[bytes]) -> int | None:
        """Send without blocking; the errno when the peer is gone (EHOSTUNREACH) or its queue
        is full (EAGAIN), both covered by the requester's retry; None when sent."""
        try:
            self._router.send_multipart(frames, zmq.NOBLOCK)
            return None
        except zmq.ZMQError as err:
            self._log.debug("broker.send_dropped", error=str(err), peer=frames[0].hex())
            return err.errno

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop a running loop (if any), then release the sockets. Safe to call twice."""
        self._closing.set()
        if not self._done.wait(10):
            self._log.error("broker.close_timeout")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close(0)
        self._sockets.clear()
        if self._auth is not None:  # its sockets live in our context: stop it before term
            self._auth.stop()
            self._auth = None
        self._ctx.term()


def _parse_ports(text: str) -> tuple[int, int, int]:
    try:
        ports = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"ports: {text!r} is not three integers") from None
    if len(ports) != 3 or not all(0 <= p <= 65535 for p in ports):
        raise argparse.ArgumentTypeError("ports: need three ports 0..65535 (0 = any free port)")
    return ports  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: bind, publish the endpoints file, serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="start-broker",
        description="Interlace message broker: event bus (XSUB/XPUB) and request router.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to bind (default 127.0.0.1; others need --keys or "
                             "--insecure)")
    parser.add_argument("--ports", type=_parse_ports, default=(0, 0, 0),
                        help="events_in,events_out,requests ports; 0 = any free port "
                             "(default 0,0,0)")
    parser.add_argument("--endpoints-file", type=Path,
                        help="write the bound endpoints here as JSON (atomically) "
                             "(default RUN_DIR/endpoints.json when --run-dir is given)")
    parser.add_argument("--run-dir", type=Path, help="folder for broker.log")
    parser.add_argument("--service-timeout", type=float, default=10.0,
                        help="seconds without a heartbeat before a worker counts as dead")
    parser.add_argument("--startup-grace", type=float, default=None,
                        help="seconds after start during which requests for unknown services "
                             "are held for their first heartbeat (default: service timeout)")
    parser.add_argument("--max-message", type=int, default=MAX_MESSAGE_BYTES,
                        help="largest accepted frame in bytes")
    parser.add_argument("--rate-limit", type=float, default=RATE_LIMIT,
                        help="requests per second per requester beyond the burst; excess "
                             f"is answered rate_limited; 0 = no limit (default {RATE_LIMIT:g})")
    parser.add_argument("--rate-burst", type=int, default=RATE_BURST,
                        help=f"requests a requester may send at once (default {RATE_BURST})")
    parser.add_argument("--window", type=int, default=WINDOW,
                        help="requests a service's worker holds unanswered before more wait "
                             f"in the broker (default {WINDOW})")
    parser.add_argument("--queue-wait", type=float, default=MAX_WAIT_S,
                        help="seconds a request may wait in the broker for a free worker "
                             f"before it is answered `overloaded` (default {MAX_WAIT_S:g})")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--keys", type=Path, metavar="DIR",
                        help="CURVE keys from `interlace-keys generate DIR`: encrypt every "
                             "socket and admit only clients in DIR/authorized (SIGHUP "
                             "re-reads that folder)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow binding a non-loopback interface without CURVE keys")
    args = parser.parse_args(argv)
    if args.rate_burst < 1 or args.rate_limit < 0:
        parser.error("--rate-burst must be >= 1 and --rate-limit >= 0")
    if args.window < 1 or not args.queue_wait > 0:
        parser.error("--window must be >= 1 and --queue-wait > 0")
    log = configure_logging("broker", args.run_dir, args.log_level)
    try:
        keys = load_server(args.keys) if args.keys is not None else None
        broker = Broker(args.host, args.ports, service_timeout=args.service_timeout,
                        max_message=args.max_message, startup_grace=args.startup_grace,
                        keys=keys, insecure=args.insecure, rate_limit=args.rate_limit,
                        rate_burst=args.rate_burst, window=args.window,
                        max_wait=args.queue_wait)
    except InsecureBind as err:
        log.error("broker.refused_bind", host=args.host, detail=str(err))
        return 2
    except KeyFileError as err:
        log.error("broker.bad_keys", keys=str(args.keys), detail=str(err))
        return 2
    except zmq.ZMQError as err:
        log.error("broker.bind_failed", host=args.host, ports=list(args.ports), error=str(err))
        return 1
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    if keys is not None:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: broker.reload_keys())
    try:
        target = args.endpoints_file
        if target is None and args.run_dir is not None:
            target = args.run_dir / "endpoints.json"
        if target is not None:
            broker.endpoints.save(target)
        print(broker.endpoints.to_json(), flush=True)
        log.info("broker.started", endpoints_file=str(target) if target else None,
                 keyed=keys is not None, **broker.endpoints.addresses())
        broker.run(stop)
    finally:
        broker.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
