"""Random bytes and random msgpack maps thrown at the broker's ROUTER through a raw DEALER:
every one is answered with an `error` (or ignored where no answer is possible) and the
broker keeps routing real requests afterwards."""
from __future__ import annotations

import msgpack
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.client import Requester
from broker.messages import SCHEMA, decode
from broker.testing import broker_thread, service_thread
from broker.wire import EMPTY, HB, REP, REQ

T = 10.0

# kept flat and small: drawing deep structures costs more time than the broker spends
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=True), st.text(max_size=10), st.binary(max_size=10))
values = st.one_of(scalars, st.lists(scalars, max_size=3),
                   st.dictionaries(st.text(max_size=4), scalars, max_size=2))
envelope_keys = st.sampled_from(["type", "v", "id", "sender", "ts", "seq", "re", "ok", "job_id",
                                 "job", "node", "what", "code", "reason", "body"])
near_valid = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(sorted(SCHEMA)), st.text(max_size=12)),
     "v": st.one_of(st.just(1), st.integers(-3, 3), values),
     "id": st.one_of(st.text(max_size=12), values),
     "sender": st.one_of(st.text(max_size=12), values),
     "ts": st.one_of(st.floats(allow_nan=False), values)},
    optional={k: values for k in ("job_id", "node", "what", "seq", "x")})
maps = st.one_of(near_valid, st.dictionaries(st.one_of(envelope_keys, st.text(max_size=6)),
                                             values, max_size=5))
payloads = st.one_of(st.binary(max_size=64), maps.map(msgpack.packb),
                     values.map(msgpack.packb))
service_names = st.one_of(st.just(b"echo"), st.binary(max_size=12))
commands = st.one_of(st.sampled_from([REQ, REP, HB]), st.binary(max_size=4))
frame_lists = st.one_of(
    st.lists(st.binary(max_size=64), min_size=1, max_size=5),
    st.tuples(st.just(EMPTY), st.just(REQ), service_names, payloads).map(list),
    st.tuples(st.just(EMPTY), commands, payloads).map(list),
    st.tuples(st.just(EMPTY), st.just(REP), st.binary(max_size=6), payloads).map(list),
)


def test_fuzzed_frames_never_stop_the_broker():
    calls = []

    def echo(msg):
        calls.append(msg.id)
        return {"seen": msg.type}

    with broker_thread() as broker, service_thread(broker.endpoints, "echo", echo):
        raw = zmq.Context.instance().socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(broker.endpoints.requests)
        requester = Requester(broker.endpoints, "after-fuzz", timeout=T, retries=1)
        answers = {"error": 0, "other": 0}

        def drain(wait_ms: int, settle_ms: int = 0) -> None:
            # after the first answer, wait `settle_ms` for each next one: a loaded broker
            # may still be working through the backlog
            while raw.poll(wait_ms):
                frames = raw.recv_multipart()
                wait_ms = settle_ms
                if frames[:2] == [EMPTY, REP] and len(frames) == 3:
                    kind = decode(frames[2]).type
                    answers["error" if kind == "error" else "other"] += 1
                else:
                    answers["other"] += 1

        @settings(max_examples=1000, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(frames=frame_lists)
        def throw(frames):
            raw.send_multipart(frames)
            drain(0)

        try:
            throw()
            # everything thrown was malformed or unroutable; the real request still works
            reply = requester.request("echo", "status.query", what="still there?")
            assert reply["body"] == {"seen": "status.query"}
            drain(200, settle_ms=1000)
        finally:
            requester.close()
            raw.close(0)
    assert answers["error"] >= 500  # most throws are answered (HB-shaped ones get HB back)
