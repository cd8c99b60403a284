"""Frame-level protocol shared by the broker and its clients (see DESIGN.md section 3).

Over the broker's ROUTER (every frame list starts with an empty delimiter after the peer's
identity, so DEALER and REQ-style peers look the same):

    requester -> broker:   ["", "REQ", service, payload]
    broker -> worker:      ["", "REQ", client_identity, caller, payload]
    worker -> broker:      ["", "REP", client_identity, payload]
    broker -> requester:   ["", "REP", payload]
    worker -> broker:      ["", "HB", service]      (heartbeat; also registration)
    broker -> worker:      ["", "HB"]               (answer, so workers notice a dead broker)

Payloads are `broker.messages`-encoded; only the frames around them live here.

`caller` is written by the broker alone: the name of the CURVE key the request came under
(authorized/NAME.key gives NAME, ASCII), or empty when the broker runs without keys. A keyed
broker never forwards an empty one (a request from a connection without a name is answered
`unknown_caller`). A service gives it to its handler as `Message.caller` (None when empty),
and answers a REQ of any other shape (a broker of another version) `bad_frame`.

Queue bounds. Every socket of the message plane sets SNDHWM and RCVHWM explicitly (a queue
that is not bounded on purpose is a memory leak waiting for a slow peer), and each has a
deliberate behaviour when full:

    socket                     bound (messages, per peer)  when full
    broker XSUB (events in)    RCV EVENT_HWM               publishers' PUB drops (lossy bus;
                               SND SUBSCRIPTION_HWM        seq gaps show it); subscriptions
                                                           queue, then wait for TCP
    broker XPUB (events out)   SND EVENT_HWM               drops for that slow subscriber
                               RCV SUBSCRIPTION_HWM        only; others are unaffected
    broker ROUTER (requests)   SND/RCV REQUEST_HWM         send to a full peer fails at once
                                                           (EAGAIN, not blocking the loop):
                                                           the requester's retry covers it;
                                                           full inbound pushes back via TCP
    Requester DEALER           SND/RCV REQUEST_HWM         send fails at once (NOBLOCK):
                                                           logged, the next try resends
    Service DEALER             SND/RCV REQUEST_HWM         reply/heartbeat dropped: the
                                                           requester retries, the heartbeat
                                                           repeats
    Publisher PUB              SND EVENT_HWM               dropped (lossy; seq gap)
                               RCV SUBSCRIPTION_HWM        (subscriptions: all must be
                                                           in before a first burst)
    Subscriber SUB             RCV EVENT_HWM               dropped (lossy; seq gap)

Size bounds: the broker's XSUB drops (disconnects) a publisher sending a frame larger than
the maximum message; its ROUTER answers frames up to 8x the maximum with `too_large` and
drops a peer sending more; client sockets likewise drop a broker whose frames exceed 8x
MAX_MESSAGE_BYTES (a service answers smaller oversized requests `too_large`); the codec
refuses to encode or decode anything over MAX_MESSAGE_BYTES.
"""
from __future__ import annotations

import re
from typing import Callable

import zmq

from broker.messages import MAX_MESSAGE_BYTES, IdSource, encode, make

REQ, REP, HB = b"REQ", b"REP", b"HB"
EMPTY = b""
EVENT_HWM = 100_000          # events queued per peer before the bus starts dropping (it is lossy)
REQUEST_HWM = 10_000         # request-plane messages queued per peer before sends fail
SUBSCRIPTION_HWM = 1_000     # subscribe/unsubscribe messages queued per peer
MAX_SUBSCRIPTION_BYTES = 1024  # longest subscription message the broker's XPUB accepts
HARD_LIMIT_FACTOR = 8        # frames up to max x this are read and answered `too_large`; longer
                             # ones make libzmq drop the peer unread (a cap on memory, not a reply)
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


def connect(ctx: zmq.Context, kind: int, address: str, *, sndhwm: int, rcvhwm: int,
            **options: int | bytes) -> zmq.Socket:
    """A client socket with short linger, quick reconnects (brokers restart), both queue
    bounds given by the caller (see the table above) and no frame over the hard limit
    accepted. Options (e.g. CURVE keys) are set before connecting, as libzmq requires."""
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, options.pop("linger", 0))
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        sock.setsockopt(zmq.SNDHWM, sndhwm)
        sock.setsockopt(zmq.RCVHWM, rcvhwm)
        sock.setsockopt(zmq.MAXMSGSIZE,
                        options.pop("maxmsgsize", MAX_MESSAGE_BYTES * HARD_LIMIT_FACTOR))
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name.upper()), value)
        sock.connect(address)
    except BaseException:
        sock.close(0)
        raise
    return sock
