"""The message plane over real ZeroMQ sockets: request routing, retries and de-duplication,
malformed input to the broker and to a service, and the event bus with sequence gaps."""
from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq

from broker.client import (HandlerError, Publisher, RequestFailed, Requester, RequestTimeout,
                           Service, Subscriber)
from broker.endpoints import Endpoints
from broker.messages import MAX_MESSAGE_BYTES, IdSource, MessageError, decode, encode, make
from broker.testing import broker_thread, service_thread, sync_events, wait_until
from broker.wire import EMPTY, HB, REP, REQ

T = 10.0  # generous deadline for anything that should take milliseconds (loaded 2-core box)


def echo(msg):
    return {"type": msg.type, "fields": dict(msg.fields)}


@pytest.fixture
def broker():
    with broker_thread(service_timeout=3.0) as b:
        yield b


@pytest.fixture
def requester(broker):
    r = Requester(broker.endpoints, "tester", timeout=2.0, retries=5)
    yield r
    r.close()


def raw_dealer(endpoints: Endpoints) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoints.requests)
    return sock


def recv_error(sock: zmq.Socket, timeout: float = T):
    """The next answer on a raw DEALER, which must be an `error` message."""
    assert sock.poll(int(timeout * 1000)), "no answer"
    frames = sock.recv_multipart()
    assert frames[:2] == [EMPTY, REP] and len(frames) == 3, frames
    msg = decode(frames[2])
    assert msg.type == "error", msg
    return msg


def valid_map(**over):
    raw = {"type": "status.query", "v": 1, "id": "raw-1", "sender": "raw", "ts": 1.0}
    raw.update(over)
    return {k: v for k, v in raw.items() if v is not None}


# -- endpoints ----------------------------------------------------------------------------

def test_endpoints_json_roundtrip_and_atomic_save(tmp_path):
    ep = Endpoints("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3")
    assert Endpoints.from_json(ep.to_json()) == ep
    path = tmp_path / "sub" / "endpoints.json"
    ep.save(path)
    assert Endpoints.load(path) == ep
    assert [p.name for p in path.parent.iterdir()] == ["endpoints.json"]  # no temp left over
    for bad in ("not json", "[]", '{"events_in": "tcp://x:1"}',
                '{"events_in": 1, "events_out": "tcp://a:1", "requests": "tcp://a:2"}'):
        with pytest.raises(ValueError):
            Endpoints.from_json(bad)


def test_broker_binds_loopback_free_ports(broker):
    ep = broker.endpoints
    ports = {a.rsplit(":", 1)[1] for a in (ep.events_in, ep.events_out, ep.requests)}
    assert all(a.startswith("tcp://127.0.0.1:") for a in (ep.events_in, ep.events_out, ep.requests))
    assert len(ports) == 3 and "0" not in ports


# -- requests -----------------------------------------------------------------------------

def test_request_reply_through_broker(broker, requester):
    with service_thread(broker.endpoints, "echo", echo):
        reply = requester.request("echo", "job.stop", job_id=7)
        assert reply.type == "reply" and reply["ok"] is True
        assert reply["body"] == {"type": "job.stop", "fields": {"job_id": 7}}
        assert reply["re"].startswith("tester-")
        again = requester.request("echo", "status.query", what="jobs")
        assert again["body"]["fields"] == {"what": "jobs"} and again["re"] != reply["re"]


def test_handler_errors_become_error_replies_and_service_keeps_serving(broker, requester):
    def handler(msg):
        what = msg.get("what")
        if what == "refuse":
            raise HandlerError("busy", "come back later")
        if what == "crash":
            raise RuntimeError("boom")
        if what == "not-a-dict":
            return [1, 2]
        if what == "unencodable":
            return {"x": object()}
        return None

    with service_thread(broker.endpoints, "svc", handler) as svc:
        with pytest.raises(RequestFailed) as err:
            requester.request("svc", "status.query", what="refuse")
        assert (err.value.code, err.value.reason) == ("busy", "come back later")
        for what in ("crash", "not-a-dict", "unencodable"):
            with pytest.raises(RequestFailed) as err:
                requester.request("svc", "status.query", what=what)
            assert err.value.code == "internal", what
        assert requester.request("svc", "status.query", what="fine")["body"] == {}
        assert svc.handled == 5


def test_request_rejects_invalid_messages_before_sending(requester):
    with pytest.raises(MessageError):
        requester.request("echo", "job.stop", job_id="seven")
    with pytest.raises(MessageError):
        requester.request("echo", "event.progress", job_id=1, iterations=2)
    with pytest.raises(ValueError):
        requester.request("bad name", "status.query")


class DropFirstReply(Service):
    """A service whose first reply is lost on the way back (as if the network ate it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropped = 0

    def _reply(self, client, payload):
        if self.dropped == 0:
            self.dropped += 1
            return
        super()._reply(client, payload)


def test_retry_with_same_id_is_deduplicated(broker):
    calls = []

    def submit(msg):
        calls.append(msg.id)
        return {"accepted": msg["job"]["job_id"]}

    requester = Requester(broker.endpoints, "feeder", timeout=0.3, retries=20)
    try:
        with service_thread(broker.endpoints, "scheduler", submit,
                            service_cls=DropFirstReply) as svc:
            reply = requester.request("scheduler", "job.submit", job={"job_id": 42})
            assert reply["body"] == {"accepted": 42}
            assert svc.dropped == 1
            assert len(calls) == 1 and calls[0] == reply["re"]  # the handler ran once
            assert svc.duplicates >= 1
    finally:
        requester.close()


def test_slow_first_answer_is_not_run_twice(broker):
    calls = []
    slow = threading.Event()  # never set: waiting on it is just a delay past the timeout

    def handler(msg):
        calls.append(msg.id)
        if len(calls) == 1:
            slow.wait(1.0)
        return {"n": len(calls)}

    requester = Requester(broker.endpoints, "feeder", timeout=0.25, retries=40)
    try:
        with service_thread(broker.endpoints, "scheduler", handler):
            first = requester.request("scheduler", "status.query")
            second = requester.request("scheduler", "status.query")  # skips stale copies
    finally:
        requester.close()
    assert first["body"] == {"n": 1} and second["body"] == {"n": 2}
    assert len(calls) == 2


def test_dedup_cache_is_bounded(broker, requester):
    with service_thread(broker.endpoints, "echo", echo, dedup=3) as svc:
        for _ in range(10):
            requester.request("echo", "status.query")
        assert svc.handled == 10
    assert len(svc._cache) == 3


def test_dedup_cache_is_bounded_in_bytes_too(broker, requester):
    """Ten 10 KB replies with room for 25 KB: two kept (the newest), as their bytes say."""
    def big(msg):
        return {"pad": "x" * 10_000}

    with service_thread(broker.endpoints, "echo", big, dedup_bytes=25_000) as svc:
        for _ in range(10):
            requester.request("echo", "status.query")
        assert svc.handled == 10
    assert len(svc._cache) == 2
    assert svc._cached_bytes == sum(len(reply) for _, reply in svc._cache.values()) <= 25_000


def test_no_service_is_answered_by_broker():
    with broker_thread(startup_grace=0.0) as b:
        requester = Requester(b.endpoints, "tester", timeout=5.0, retries=0)
        try:
            with pytest.raises(RequestFailed) as err:
                requester.request("nobody", "status.query")
            assert err.value.code == "no_service" and err.value.re.startswith("tester-")
        finally:
            requester.close()


def test_request_is_held_during_startup_grace_until_the_service_registers():
    with broker_thread(startup_grace=30.0) as b:
        requester = Requester(b.endpoints, "early", timeout=T, retries=0)
        result: list = []
        thread = threading.Thread(target=lambda: result.append(
            requester.request("late", "status.query", what="x")))
        thread.start()
        wait_until(lambda: b._parked, T)
        with service_thread(b.endpoints, "late", echo):
            thread.join(T)
        requester.close()
        assert result and result[0]["body"]["fields"] == {"what": "x"}


def test_dead_service_expires_and_requests_get_no_service():
    with broker_thread(service_timeout=0.5, startup_grace=0.0) as b:
        requester = Requester(b.endpoints, "tester", timeout=0.5, retries=0)
        try:
            with service_thread(b.endpoints, "gone", echo, heartbeat=0.1):
                wait_until(lambda: _ok(requester, "gone"), T)
            # the service has stopped heartbeating; after service_timeout it is no more (a
            # request routed to it before then is lost, and times out)
            def refused():
                try:
                    requester.request("gone", "status.query")
                except RequestFailed as err:
                    return err.code == "no_service"
                except RequestTimeout:
                    pass
                return False
            wait_until(refused, T, interval=0.1)
        finally:
            requester.close()


def _ok(requester, service):
    try:
        requester.request(service, "status.query")
        return True
    except (RequestFailed, RequestTimeout):
        return False


def test_round_robin_over_workers(broker, requester):
    def named(tag):
        return lambda msg: {"worker": tag}

    with service_thread(broker.endpoints, "pool", named("a")), \
            service_thread(broker.endpoints, "pool", named("b")):
        seen: set = set()
        wait_until(lambda: seen.update([requester.request("pool", "status.query")["body"]
                                        ["worker"]]) or seen == {"a", "b"}, T)
        order = [requester.request("pool", "status.query")["body"]["worker"] for _ in range(10)]
    assert all(x != y for x, y in zip(order, order[1:])), order


def test_request_timeout_when_service_never_answers():
    with broker_thread() as b:
        mute = raw_dealer(b.endpoints)  # registers as a worker, then never replies
        mute.send_multipart([EMPTY, HB, b"mute"])
        assert mute.poll(int(T * 1000)) and mute.recv_multipart() == [EMPTY, HB]
        requester = Requester(b.endpoints, "tester", timeout=0.2, retries=2)
        try:
            with pytest.raises(RequestTimeout):
                requester.request("mute", "status.query")
            copies = 0
            while copies < 3 and mute.poll(int(T * 1000)):
                frames = mute.recv_multipart()
                assert frames[:2] == [EMPTY, REQ]
                copies += 1
            assert copies == 3  # one try and two retries, all the same message
        finally:
            requester.close()
            mute.close(0)


# -- malformed input ----------------------------------------------------------------------

def malformed_cases(max_message: int):
    good = msgpack.packb(valid_map())
    yield "bad_frame", [b"garbage"]
    yield "bad_frame", [EMPTY, b"NOPE"]
    yield "bad_frame", [EMPTY, REQ, b"echo"]
    yield "bad_frame", [EMPTY, REQ, b"bad name!", good]
    yield "bad_frame", [EMPTY, HB]
    yield "bad_encoding", [EMPTY, REQ, b"echo", b"\xc1\xc1 not msgpack"]
    yield "bad_frame", [EMPTY, REQ, b"echo", msgpack.packb([1, 2, 3])]
    yield "missing_field", [EMPTY, REQ, b"echo", msgpack.packb(valid_map(sender=None))]
    yield "bad_field", [EMPTY, REQ, b"echo", msgpack.packb(valid_map(type="job.stop", job_id="x"))]
    yield "bad_field", [EMPTY, REQ, b"echo", msgpack.packb(valid_map(ts="yesterday"))]
    yield "unknown_type", [EMPTY, REQ, b"echo", msgpack.packb(valid_map(type="job.explode"))]
    yield "bad_version", [EMPTY, REQ, b"echo", msgpack.packb(valid_map(v=99))]
    yield "unknown_field", [EMPTY, REQ, b"echo", msgpack.packb(valid_map(extra=1))]
    yield "not_request", [EMPTY, REQ, b"echo", msgpack.packb(
        valid_map(type="reply", re="x", ok=True))]
    yield "too_large", [EMPTY, REQ, b"echo", b"\x00" * (max_message + 1)]
    yield "not_worker", [EMPTY, REP, b"\x00abcd", msgpack.packb(
        valid_map(type="reply", re="x", ok=True))]


def test_malformed_frames_to_broker_are_answered_and_broker_keeps_serving(broker, requester):
    raw = raw_dealer(broker.endpoints)
    try:
        with service_thread(broker.endpoints, "echo", echo):
            for code, frames in malformed_cases(MAX_MESSAGE_BYTES):
                raw.send_multipart(frames)
                err = recv_error(raw)
                assert err["code"] == code, (frames[:3], err)
                if code in ("missing_field", "bad_field", "unknown_type", "bad_version",
                            "unknown_field", "not_request"):
                    assert err["re"] == "raw-1"  # the id was readable: the answer names it
            assert requester.request("echo", "status.query")["ok"] is True
    finally:
        raw.close(0)


def test_malformed_requests_to_service_are_answered_and_service_keeps_serving():
    """The test plays the broker: a raw ROUTER the service connects to."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    ep = Endpoints("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", f"tcp://127.0.0.1:{port}")
    calls = []

    def handler(msg):
        calls.append(msg.id)
        return {"ok": msg.type}

    def next_from_service():
        while True:
            assert router.poll(int(T * 1000)), "service went quiet"
            frames = router.recv_multipart()
            if frames[1:3] == [EMPTY, HB]:
                router.send_multipart([frames[0], EMPTY, HB])
                continue
            return frames

    try:
        with service_thread(ep, "victim", handler, heartbeat=0.2):
            assert router.poll(int(T * 1000))
            ident, *rest = router.recv_multipart()
            assert rest == [EMPTY, HB, b"victim"]
            client = b"\x00client"
            for code, frames in malformed_cases(MAX_MESSAGE_BYTES):
                if len(frames) != 4 or frames[1] != REQ or code == "bad_frame":
                    continue
                router.send_multipart([ident, EMPTY, REQ, client, b"", frames[3]])
                reply = next_from_service()
                assert reply[1:4] == [EMPTY, REP, client]
                msg = decode(reply[4])
                assert msg.type == "error" and msg["code"] == code, msg
            router.send_multipart([ident, EMPTY, REQ, client, b""])  # no payload
            reply = next_from_service()
            assert decode(reply[4])["code"] == "bad_frame"
            router.send_multipart([ident, b"junk"])  # no reply path: logged and dropped
            ids = IdSource("t")
            good = encode(make("status.query", "t", ids()))
            # a broker of the old shape (no caller frame), or a caller that is no key name:
            # refused, naming the request so its requester learns why instead of timing out
            old = encode(make("status.query", "t", ids()))
            for bad in ([client, old], [client, b"bad name!", old], [client, b"\xff", old]):
                router.send_multipart([ident, EMPTY, REQ, *bad])
                answer = decode(next_from_service()[4])
                assert (answer["code"], answer["re"]) == ("bad_frame", decode(old).id), bad
            for _ in range(2):  # the second copy is a retry: answered from the cache
                router.send_multipart([ident, EMPTY, REQ, client, b"", good])
                reply = next_from_service()
                answer = decode(reply[4])
                assert answer.type == "reply" and answer["body"] == {"ok": "status.query"}
            assert len(calls) == 1
    finally:
        router.close(0)


# -- events -------------------------------------------------------------------------------

def test_events_flow_with_sequence_numbers(broker):
    pub = Publisher(broker.endpoints, "trainer.7")
    sub = Subscriber(broker.endpoints)
    try:
        first = sync_events(pub, sub)
        assert first.sender == "trainer.7"
        start = pub.seq
        for i in range(200):
            pub.publish("event.progress", job_id=7, iterations=i)
        got = [sub.recv(T) for _ in range(200)]
        assert all(m is not None for m in got)
        assert [m.seq for m in got] == list(range(start + 1, start + 201))
        assert [m["iterations"] for m in got] == list(range(200))
        assert got[0].type == "event.progress" and got[0].sender == "trainer.7"
        assert sub.gaps == {"trainer.7": 0}
        assert sub.recv(0.05) is None
    finally:
        pub.close()
        sub.close()


def test_gap_is_detected_when_seq_jumps(broker):
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(broker.endpoints.events_in)
    sub = Subscriber(broker.endpoints)
    ids = IdSource("gappy")

    def send(seq, sender="gappy"):
        msg = make("event.agent", sender, ids(), seq=seq, node="n1", state="up")
        pub.send_multipart([b"event.agent", encode(msg)])

    try:
        wait_until(lambda: send(1, "sync") or sub.recv(0.05), T, interval=0)
        for seq in (1, 2, 6, 7, 9):
            send(seq)
        got = []
        while len(got) < 5:
            msg = sub.recv(T)
            assert msg is not None
            if msg.sender == "gappy":
                got.append(msg.seq)
        assert got == [1, 2, 6, 7, 9]
        assert sub.gaps["gappy"] == 4
        send(1)  # the sender restarted: numbering starts over, not a gap
        wait_until(lambda: (m := sub.recv(0.05)) is not None and m.sender == "gappy", T,
                   interval=0)
        assert sub.gaps["gappy"] == 4
    finally:
        pub.close(0)
        sub.close()


def test_invalid_events_are_skipped(broker):
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(broker.endpoints.events_in)
    sub = Subscriber(broker.endpoints, prefixes=("",))
    ids = IdSource("p")
    good = encode(make("event.progress", "p", ids(), seq=1, job_id=1, iterations=1))
    try:
        wait_until(lambda: pub.send_multipart([b"event.progress", good]) or sub.recv(0.05),
                   T, interval=0)
        skipped = sub.invalid
        pub.send_multipart([b"event.progress", b"\xc1garbage"])
        pub.send_multipart([b"event.progress"])
        pub.send_multipart([b"event.job", good])  # topic does not match the type
        pub.send_multipart([b"status.query", encode(make("status.query", "p", ids()))])
        pub.send_multipart([b"event.progress", msgpack.packb(valid_map(
            type="event.progress", job_id=1, iterations=1))])  # no seq
        last = encode(make("event.progress", "p", ids(), seq=2, job_id=1, iterations=2))
        pub.send_multipart([b"event.progress", last])
        msg = sub.recv(T)
        while msg is not None and msg.seq == 1:  # probes still in flight
            msg = sub.recv(T)
        assert msg is not None and msg.seq == 2
        assert sub.invalid - skipped == 5
    finally:
        pub.close(0)
        sub.close()


def test_subscriber_prefixes_filter(broker):
    pub = Publisher(broker.endpoints, "agent.n1")
    jobs = Subscriber(broker.endpoints, prefixes=("event.job",))
    everything = Subscriber(broker.endpoints)
    try:
        sync_events(pub, everything)
        wait_until(lambda: pub.publish("event.job", job_id=1, state="sync") or
                   jobs.recv(0.05), T, interval=0)
        while jobs.recv(0.05) is not None:
            pass
        pub.publish("event.agent", node="n1", state="up")
        pub.publish("event.job", job_id=3, state="running")
        msg = jobs.recv(T)
        assert msg.type == "event.job" and msg["job_id"] == 3
    finally:
        pub.close()
        jobs.close()
        everything.close()


def test_publish_rejects_non_events_and_bad_fields(broker):
    pub = Publisher(broker.endpoints, "x")
    try:
        with pytest.raises(MessageError):
            pub.publish("job.stop", job_id=1)
        with pytest.raises(MessageError):
            pub.publish("event.progress", job_id="one", iterations=1)
        assert pub.seq == 0  # refused events do not use up numbers
        pub.publish("event.progress", job_id=1, iterations=1)
        assert pub.seq == 1
    finally:
        pub.close()


def test_service_rebuilds_its_socket_when_the_broker_goes_silent():
    """A broker that stops answering heartbeats (hung, or gone without closing the TCP
    connection) makes the service reconnect from scratch: a new identity, a fresh queue."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    ep = Endpoints("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", f"tcp://127.0.0.1:{port}")
    seen: list[bytes] = []

    def heartbeat_from():
        assert router.poll(int(T * 1000))
        ident, *rest = router.recv_multipart()
        assert rest == [EMPTY, HB, b"lonely"]
        return ident

    try:
        with service_thread(ep, "lonely", echo, heartbeat=0.1):
            seen.append(heartbeat_from())
            wait_until(lambda: heartbeat_from() != seen[0], T, interval=0)
    finally:
        router.close(0)


def test_closed_worker_is_skipped_without_waiting_for_its_timeout():
    with broker_thread(service_timeout=30.0, startup_grace=0.0) as b:
        requester = Requester(b.endpoints, "tester", timeout=0.5, retries=0)
        try:
            with service_thread(b.endpoints, "short", echo):
                wait_until(lambda: _ok(requester, "short"), T)
            # the worker's connection is closed; no need to wait 30 s for the broker to know
            # (a request sent before the broker saw the close is lost and times out)
            wait_until(lambda: _no_service_now(requester, "short"), T)
        finally:
            requester.close()


def _no_service_now(requester, service):
    try:
        requester.request(service, "status.query")
    except RequestFailed as err:
        return err.code == "no_service"
    except RequestTimeout:
        pass
    return False


def test_a_fresh_publishers_back_to_back_events_all_pass_a_topic_subscriber(broker):
    """A trainer connects, then reports progress and timing back to back. The scheduler
    subscribes to those two topics only, so the publisher must hold both subscriptions by its
    first send: with a subscription queue of one message, the second topic's arrived later
    and the first event.timing of nearly every trainer was dropped (profiles never updated
    for short jobs)."""
    sub = Subscriber(broker.endpoints, prefixes=("event.progress", "event.timing"))
    split = []
    try:
        for k in range(24):  # each one races; one lost in a few is enough to show it
            pub = Publisher(broker.endpoints, f"trainer.{k}")
            try:
                got: list = []
                deadline = time.monotonic() + T
                while not got and time.monotonic() < deadline:  # pairs until one gets through
                    pub.publish("event.progress", job_id=k, iterations=1.0)
                    pub.publish("event.timing", job_id=k, stages={"gpu": 0.1},
                                iteration_time=0.1, iterations=1.0)
                    msg = sub.recv(0.02)
                    while msg is not None:
                        got.append(msg)
                        msg = sub.recv(0.02)
                assert got, f"nothing from trainer.{k} within {T}s"
                first = got[0]
                assert first.type == "event.progress"
                if not [m for m in got if m.seq == first.seq + 1 and m.type == "event.timing"]:
                    split.append(k)
            finally:
                pub.close()
    finally:
        sub.close()
    assert split == [], f"the first event.timing was lost for trainers {split}"


def test_a_batch_is_answered_only_after_before_replies_and_not_at_all_when_it_fails(broker):
    """Group commit: `before_replies` runs after a batch is handled and before its replies
    leave. While it fails, each request of the batch is answered `internal` (nothing was
    made good); once it succeeds, requests are answered ok."""
    handled: list[str] = []
    synced: list[int] = []
    failing = threading.Event()
    failing.set()

    def submit(msg):
        handled.append(msg.id)
        return {"accepted": msg["job"]["job_id"]}

    def sync():
        synced.append(len(handled))  # what was handled when it ran
        if failing.is_set():
            raise OSError("disk full")

    requester = Requester(broker.endpoints, "feeder", timeout=2.0, retries=0)
    try:
        with service_thread(broker.endpoints, "scheduler", submit, before_replies=sync):
            with pytest.raises(RequestFailed) as err:
                requester.request("scheduler", "job.submit", job={"job_id": 1})
            assert err.value.code == "internal" and "not committed" in err.value.reason
            assert synced == [1]  # the handler ran, then the sync, then the (error) reply
            failing.clear()
            reply = requester.request("scheduler", "job.submit", job={"job_id": 2})
            assert reply["body"] == {"accepted": 2}
            assert synced == [1, 2]
    finally:
        requester.close()


def test_a_heartbeat_and_another_requester_pass_a_flood_waiting_in_the_broker():
    """Window 1: the worker holds one request; a flood of six from one client waits in the
    broker. A heartbeat sent after it is handled next, and another client's query after at
    most one more of the flood's; past the lane's bound the flood is answered `overloaded`."""
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def handler(msg):
        if not order:
            entered.set()
            release.wait(5)
        order.append(msg.id)
        return {}

    def client(endpoints):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoints.requests)
        return sock

    def send(sock, type_, msg_id, **fields):
        sock.send_multipart([EMPTY, REQ, b"scheduler",
                             encode(make(type_, "t", msg_id, **fields))])

    with broker_thread(window=1, max_wait=10.0) as b, \
            service_thread(b.endpoints, "scheduler", handler):
        flood, operator, agent = client(b.endpoints), client(b.endpoints), client(b.endpoints)
        try:
            send(flood, "status.query", "f0")
            assert entered.wait(5)
            for i in range(1, 6):
                send(flood, "status.query", f"f{i}")
            wait_until(lambda: len(b._queues.get("scheduler", ())) == 5, 5)
            send(operator, "status.query", "op")
            send(agent, "agent.heartbeat", "hb", node="n0")
            wait_until(lambda: len(b._queues["scheduler"]) == 7, 5)
            release.set()
            wait_until(lambda: len(order) == 8, 5)
        finally:
            for sock in (flood, operator, agent):
                sock.close(0)
    assert order[:2] == ["f0", "hb"] and order.index("op") <= 3, order
    assert sorted(order) == sorted(["hb", "op", *(f"f{i}" for i in range(6))])


def test_what_waits_past_the_queue_wait_is_answered_overloaded_and_never_forwarded():
    release = threading.Event()
    seen: list[str] = []

    def handler(msg):
        seen.append(msg.id)
        release.wait(5)
        return {}

    with broker_thread(window=1, max_wait=0.3) as b, \
            service_thread(b.endpoints, "scheduler", handler):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(b.endpoints.requests)
        try:
            for i in range(3):
                sock.send_multipart([EMPTY, REQ, b"scheduler",
                                     encode(make("status.query", "t", f"m{i}"))])
            answers = {}
            while len(answers) < 2:  # m1 and m2 expire while m0 holds the worker
                assert sock.poll(5000)
                answer = decode(sock.recv_multipart()[-1])
                answers[answer["re"]] = answer.get("code")
            release.set()
            assert sock.poll(5000)
            answers[decode(sock.recv_multipart()[-1])["re"]] = "ok"
        finally:
            sock.close(0)
    assert answers == {"m1": "overloaded", "m2": "overloaded", "m0": "ok"}
    assert seen == ["m0"] and b.overloaded == 2


def test_a_worker_whose_reply_was_lost_gets_its_window_back():
    """Window 1 and the one reply lost: the worker holds a request the broker will never see
    answered. Its heartbeats go on, so after the service timeout the broker gives it room
    again, and the requester's resend is answered (it would wait for ever otherwise)."""
    with broker_thread(window=1, service_timeout=1.0) as b, \
            service_thread(b.endpoints, "scheduler", echo, service_cls=DropFirstReply,
                           heartbeat=0.2) as svc:
        requester = Requester(b.endpoints, "t", timeout=0.3, retries=40)
        try:
            reply = requester.request("scheduler", "status.query")
        finally:
            requester.close()
    assert reply["ok"] and svc.dropped == 1
