"""Limits on the message plane: per-sender rate limits answered `rate_limited` (never a silent
drop) while other senders are served, oversized frames refused at every door, and bounded
queues on every socket."""
from __future__ import annotations

import pytest
import zmq

from broker.client import Publisher, RequestFailed, Requester, Subscriber
from broker.messages import IdSource, MessageError, decode, encode, make
from broker.ratelimit import TokenBuckets
from broker.testing import broker_thread, service_thread, sync_events
from broker.wire import (EMPTY, EVENT_HWM, HARD_LIMIT_FACTOR, REP, REQ, REQUEST_HWM,
                         SUBSCRIPTION_HWM)

T = 10.0


def counting(calls):
    def handler(msg):
        calls.append(msg.id)
        return {}
    return handler


def raw_dealer(endpoints) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoints.requests)
    return sock


def answers(sock: zmq.Socket, count: int) -> list:
    out = []
    for _ in range(count):
        assert sock.poll(int(T * 1000)), f"only {len(out)} of {count} answers"
        frames = sock.recv_multipart()
        assert frames[:2] == [EMPTY, REP]
        out.append(decode(frames[2]))
    return out


# -- rate limits ----------------------------------------------------------------------------

def test_token_buckets_allow_a_burst_then_the_rate_and_stay_bounded():
    buckets = TokenBuckets(rate=2.0, burst=3, max_senders=2)
    assert [buckets.allow(b"a", 0.0) for _ in range(4)] == [True, True, True, False]
    assert buckets.retry_after(b"a") == pytest.approx(0.5)
    assert buckets.allow(b"a", 0.5) and not buckets.allow(b"a", 0.6)
    assert buckets.allow(b"b", 0.6)  # another sender has its own bucket
    assert not buckets.allow(b"a", 0.6)
    assert buckets.allow(b"c", 0.7) and len(buckets) == 2  # least recently seen evicted
    assert buckets.allow(b"a", 10.0)  # refilled, and never above the burst
    assert [buckets.allow(b"a", 10.0) for _ in range(3)] == [True, True, False]


def test_sender_over_its_limit_gets_rate_limited_answers_while_others_are_served():
    calls = []
    with broker_thread(service_timeout=3.0, rate_limit=0.5, rate_burst=5) as broker:
        flood = raw_dealer(broker.endpoints)
        polite = Requester(broker.endpoints, "polite", timeout=2.0, retries=5)
        try:
            with service_thread(broker.endpoints, "scheduler", counting(calls)):
                ids = IdSource("flood")
                sent = [make("status.query", "flood", ids()) for _ in range(20)]
                for msg in sent:
                    flood.send_multipart([EMPTY, REQ, b"scheduler", encode(msg)])
                got = answers(flood, 20)  # every request is answered, none dropped
                for _ in range(3):
                    assert polite.request("scheduler", "status.query")["ok"] is True
        finally:
            flood.close(0)
            polite.close()
    served = [a for a in got if a.type == "reply"]
    limited = [a for a in got if a.type == "error"]
    assert 5 <= len(served) <= 6  # the burst (and at most one token refilled meanwhile)
    assert all(a["code"] == "rate_limited" for a in limited)
    assert len(limited) == 20 - len(served)
    assert {a["re"] for a in got} == {m.id for m in sent}  # each answer names its request
    assert len(calls) == len(served) + 3  # limited requests never reached the service
    assert broker.rate_limited == len(limited)


def test_requester_gives_up_with_rate_limited_or_backs_off_and_gets_through():
    with broker_thread(service_timeout=3.0, rate_limit=2.0, rate_burst=1) as broker:
        impatient = Requester(broker.endpoints, "impatient", timeout=2.0, retries=0)
        patient = Requester(broker.endpoints, "patient", timeout=2.0, retries=6)
        try:
            with service_thread(broker.endpoints, "scheduler", counting([])):
                impatient.request("scheduler", "status.query")
                with pytest.raises(RequestFailed) as err:
                    impatient.request("scheduler", "status.query")
                assert err.value.code == "rate_limited"
                for _ in range(2):  # the second waits out the bucket by backing off
                    assert patient.request("scheduler", "status.query")["ok"] is True
        finally:
            impatient.close()
            patient.close()


# -- sizes --------------------------------------------------------------------------------

def test_codec_refuses_oversized_messages_before_sending():
    with broker_thread(service_timeout=3.0) as broker:
        requester = Requester(broker.endpoints, "big", timeout=0.5, retries=0)
        try:
            with pytest.raises(MessageError) as err:
                requester.request("scheduler", "job.submit", job={"blob": "x" * 300_000})
            assert err.value.code == "too_large"
        finally:
            requester.close()


def test_broker_answers_too_large_and_drops_a_peer_far_over_the_limit():
    limit = 4096
    calls = []
    with broker_thread(service_timeout=3.0, max_message=limit) as broker:
        raw = raw_dealer(broker.endpoints)
        requester = Requester(broker.endpoints, "ok", timeout=2.0, retries=5)
        try:
            with service_thread(broker.endpoints, "scheduler", counting(calls)):
                big = encode(make("job.submit", "raw", "raw-1", job={"blob": "x" * 5000}))
                raw.send_multipart([EMPTY, REQ, b"scheduler", big])
                [answer] = answers(raw, 1)
                assert answer.type == "error" and answer["code"] == "too_large"
                huge = b"\x00" * (limit * HARD_LIMIT_FACTOR + 1)
                raw.send_multipart([EMPTY, REQ, b"scheduler", huge])  # libzmq drops the peer
                assert not raw.poll(500)
                assert requester.request("scheduler", "status.query")["ok"] is True
        finally:
            raw.close(0)
            requester.close()
    assert len(calls) == 1  # only the well-sized request reached the service


def test_oversized_event_never_reaches_subscribers():
    limit = 4096
    with broker_thread(service_timeout=3.0, max_message=limit) as broker:
        pub = Publisher(broker.endpoints, "trainer.1")
        sub = Subscriber(broker.endpoints)
        try:
            sync_events(pub, sub)
            pub.publish("event.log", record={"blob": "x" * 5000})  # valid, but over the limit
            pub.publish("event.log", record={"after": True})
            # the broker cut the publisher off at the big frame; it reconnects by itself
            after = sync_events(pub, sub)  # the first event it sees from the publisher
            assert after.sender == "trainer.1" and "blob" not in after["record"]
            while (msg := sub.recv(0.2)) is not None:
                assert "blob" not in msg["record"]
        finally:
            pub.close()
            sub.close()


# -- queues ---------------------------------------------------------------------------------

def test_every_socket_has_explicit_queue_and_size_bounds():
    with broker_thread(service_timeout=3.0, max_message=4096) as broker:
        xsub, xpub, router = broker._xsub, broker._xpub, broker._router
        assert (xsub.rcvhwm, xsub.sndhwm, xsub.maxmsgsize) == (EVENT_HWM, SUBSCRIPTION_HWM, 4096)
        assert (xpub.sndhwm, xpub.rcvhwm) == (EVENT_HWM, SUBSCRIPTION_HWM)
        assert 0 < xpub.maxmsgsize <= 4096
        assert (router.sndhwm, router.rcvhwm) == (REQUEST_HWM, REQUEST_HWM)
        assert router.maxmsgsize == 4096 * HARD_LIMIT_FACTOR
        requester = Requester(broker.endpoints, "r")
        pub = Publisher(broker.endpoints, "p")
        sub = Subscriber(broker.endpoints)
        try:
            assert (requester._sock.sndhwm, requester._sock.rcvhwm) == (REQUEST_HWM, REQUEST_HWM)
            assert pub._sock.sndhwm == EVENT_HWM and sub._sock.rcvhwm == EVENT_HWM
            assert all(s._sock.maxmsgsize > 0 for s in (requester, pub, sub))
        finally:
            requester.close()
            pub.close()
            sub.close()
