"""Frame-level protocol shared by the broker and its clients (see DESIGN.md section 3).

Over the broker's ROUTER (every frame list starts with an empty delimiter after the peer's
identity, so DEALER and REQ-style peers look the same):

    requester -> broker:   ["", "REQ", service, payload]
    broker -> worker:      ["", "REQ", client_identity, payload]
    worker -> broker:      ["", "REP", client_identity, payload]
    broker -> requester:   ["", "REP", payload]
    worker -> broker:      ["", "HB", service]      (heartbeat; also registration)
    broker -> worker:      ["", "HB"]               (answer, so workers notice a dead broker)

Payloads are `broker.messages`-encoded; only the frames around them live here.
"""
from __future__ import annotations

import re
from typing import Callable

import zmq

from broker.messages import IdSource, encode, make

REQ, REP, HB = b"REQ", b"REP", b"HB"
EMPTY = b""
EVENT_HWM = 100_000          # events queued per peer before the bus starts dropping (it is lossy)
RECONNECT_IVL_MS = 100       # how soon a client retries a lost broker connection...
RECONNECT_IVL_MAX_MS = 1000  # ...backing off to at most this
_SERVICE_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")


def is_request_type(type_: str) -> bool:
    """Requests are everything that is neither an answer nor an event."""
    return type_ not in ("reply", "error") and not type_.startswith("event.")


def service_name(raw: bytes) -> str | None:
    """The service name in a frame, or None when it is not a plain short name."""
    try:
        name = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return name if _SERVICE_NAME.fullmatch(name) else None


def error_payload(sender: str, ids: IdSource | Callable[[], str], code: str, reason: str,
                  re_: str | None = None) -> bytes:
    """An encoded `error` message; reasons are cut short so an answer never outgrows a frame."""
    fields = {"code": code, "reason": reason[:1000]}
    if re_ is not None:
        fields["re"] = re_
    return encode(make("error", sender, ids(), **fields))


def connect(ctx: zmq.Context, kind: int, address: str, **options: int) -> zmq.Socket:
    """A client socket with short linger and quick reconnects (brokers restart)."""
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, options.pop("linger", 0))
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name.upper()), value)
        sock.connect(address)
    except BaseException:
        sock.close(0)
        raise
    return sock
