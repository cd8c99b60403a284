"""Who sent a request: the broker stamps the name of the CURVE key each request came under,
and a service's handler sees it as Message.caller, whatever the message itself says. Real
brokers, real keys, loopback."""
from __future__ import annotations

import concurrent.futures
import dataclasses

import msgpack
import pytest
import zmq

from broker.broker import Broker
from broker.client import Requester, RequestTimeout, _open
from broker.keys import generate, load_server
from broker.messages import IdSource, MessageError, decode, encode, make
from broker.testing import as_client, broker_thread, service_thread, wait_until
from broker.wire import EMPTY, REP, REQ, REQUEST_HWM

T = 10.0


@pytest.fixture(scope="module")
def keydir(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    generate(root, ["scheduler", "alice", "bob"])
    return root


def recording(seen):
    """A handler that records (caller, sender) and answers with the caller and a count."""
    def handler(msg):
        seen.append((msg.caller, msg.sender))
        return {"caller": msg.caller, "n": len(seen)}
    return handler


def raw_dealer(endpoints):
    """A requester socket with no Requester around it, to send hand-made frames."""
    return _open(endpoints, zmq.DEALER, endpoints.requests, sndhwm=REQUEST_HWM,
                 rcvhwm=REQUEST_HWM)


def exchange(sock, frames):
    """Send `frames`, return the answer's encoded payload."""
    sock.send_multipart(frames)
    assert sock.poll(int(T * 1000)), "no answer"
    answer = sock.recv_multipart()
    assert answer[:2] == [EMPTY, REP]
    return answer[2]


def test_handler_sees_the_name_of_the_key_not_the_claimed_sender(keydir):
    seen = []
    with broker_thread(keys=load_server(keydir), service_timeout=3.0) as b:
        ep = b.endpoints
        # each requester claims to be the other: only the key says who it is
        alice = Requester(as_client(ep, keydir, "alice"), "bob", timeout=2.0, retries=5)
        bob = Requester(as_client(ep, keydir, "bob"), "alice", timeout=2.0, retries=5)
        try:
            with service_thread(as_client(ep, keydir, "scheduler"), "scheduler",
                                recording(seen)):
                assert alice.request("scheduler", "status.query")["body"]["caller"] == "alice"
                assert bob.request("scheduler", "status.query")["body"]["caller"] == "bob"
                assert alice.request("scheduler", "status.query")["body"]["caller"] == "alice"
        finally:
            alice.close()
            bob.close()
    assert seen == [("alice", "bob"), ("bob", "alice"), ("alice", "bob")]


def test_unkeyed_broker_gives_caller_none():
    seen = []
    with broker_thread(service_timeout=3.0) as b:
        requester = Requester(b.endpoints, "alice", timeout=2.0, retries=5)
        try:
            with service_thread(b.endpoints, "scheduler", recording(seen)):
                assert requester.request("scheduler", "status.query")["body"]["caller"] is None
        finally:
            requester.close()
    assert seen == [(None, "alice")]


def spoofing_map(ids, **extra):
    """A request map built by hand, as a client that skips the library would."""
    return {"type": "status.query", "v": 1, "id": ids(), "sender": "bob", "ts": 1.0, **extra}


def test_a_request_held_for_its_service_keeps_its_caller(keydir):
    """Sent in the start-up grace before any worker registered: held, then forwarded with
    the caller it came under."""
    seen = []
    with broker_thread(keys=load_server(keydir), service_timeout=3.0, startup_grace=T) as b:
        alice = Requester(as_client(b.endpoints, keydir, "alice"), "alice", timeout=T, retries=0)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                reply = pool.submit(alice.request, "scheduler", "status.query")
                wait_until(lambda: b._parked, T)
                with service_thread(as_client(b.endpoints, keydir, "scheduler"), "scheduler",
                                    recording(seen)):
                    assert reply.result(T)["body"]["caller"] == "alice"
        finally:
            alice.close()  # the pool's thread is done with it: the pool has shut down
    assert seen == [("alice", "alice")]


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "unkeyed"])
def test_a_client_cannot_set_the_caller(keydir, keys):
    seen = []
    kwargs = {"keys": load_server(keydir)} if keys else {}
    expected = "alice" if keys else None
    with broker_thread(service_timeout=3.0, **kwargs) as b:
        ep = as_client(b.endpoints, keydir, "alice") if keys else b.endpoints
        svc_ep = as_client(b.endpoints, keydir, "scheduler") if keys else b.endpoints
        requester = Requester(ep, "alice", timeout=2.0, retries=5)
        raw = raw_dealer(ep)
        ids = IdSource("spoof")
        try:
            with service_thread(svc_ep, "scheduler", recording(seen)):
                # inside the fields: it is the job's business, not the message's caller
                reply = requester.request("scheduler", "job.submit", job={"caller": "bob"})
                assert reply["body"]["caller"] == expected
                # the library will not build it...
                with pytest.raises(MessageError, match="caller"):
                    requester.request("scheduler", "status.query", caller="bob")
                # ...and the broker refuses it built by hand, at the top of the map
                answer = decode(exchange(raw, [EMPTY, REQ, b"scheduler", msgpack.packb(
                    spoofing_map(ids, caller="bob"))]))
                assert answer["code"] == "unknown_field", answer
                # a caller frame of one's own is no frame the broker takes
                payload = msgpack.packb(spoofing_map(ids))
                answer = decode(exchange(raw, [EMPTY, REQ, b"scheduler", b"bob", payload]))
                assert answer["code"] == "bad_frame", answer
                # the same request without the tricks goes through, stamped by the broker
                answer = decode(exchange(raw, [EMPTY, REQ, b"scheduler", payload]))
                assert answer["body"]["caller"] == expected
        finally:
            requester.close()
            raw.close(0)
    assert seen == [(expected, "alice"), (expected, "bob")]


def test_caller_never_travels_in_a_message():
    msg = make("status.query", "alice", "id-1")
    stamped = dataclasses.replace(msg, caller="alice")
    assert encode(stamped) == encode(msg)
    assert decode(encode(stamped)).caller is None


def test_reply_cache_is_kept_per_caller(keydir):
    """Bob resending alice's request (same id, same bytes) runs the handler for bob and gets
    bob's answer, never alice's cached reply; alice's own retry is still answered from it."""
    seen = []
    payload = encode(make("status.query", "alice", "alice-1"))
    frames = [EMPTY, REQ, b"scheduler", payload]
    with broker_thread(keys=load_server(keydir), service_timeout=3.0) as b:
        ep = b.endpoints
        alice = raw_dealer(as_client(ep, keydir, "alice"))
        bob = raw_dealer(as_client(ep, keydir, "bob"))
        try:
            with service_thread(as_client(ep, keydir, "scheduler"), "scheduler",
                                recording(seen)) as svc:
                first = exchange(alice, frames)
                assert decode(first)["body"] == {"caller": "alice", "n": 1}
                stolen = exchange(bob, frames)
                assert decode(stolen)["body"] == {"caller": "bob", "n": 2}
                assert exchange(alice, frames) == first  # alice's retry: her cached reply
                assert svc.duplicates == 1 and svc.handled == 2
        finally:
            alice.close(0)
            bob.close(0)
    assert seen == [("alice", "alice"), ("bob", "alice")]


def test_keys_added_and_revoked_after_start_are_named_after_reload(tmp_path):
    generate(tmp_path, ["scheduler", "alice"])
    seen = []
    with broker_thread(keys=load_server(tmp_path), service_timeout=3.0) as b:
        ep = b.endpoints
        with service_thread(as_client(ep, tmp_path, "scheduler"), "scheduler", recording(seen)):
            generate(tmp_path, ["carol"])
            (tmp_path / "authorized" / "alice.key").unlink()
            assert b.reload_keys() == 2
            carol = Requester(as_client(ep, tmp_path, "carol"), "carol", timeout=2.0, retries=5)
            alice = Requester(as_client(ep, tmp_path, "alice"), "alice", timeout=0.3, retries=1)
            try:
                assert carol.request("scheduler", "status.query")["body"]["caller"] == "carol"
                with pytest.raises(RequestTimeout):
                    alice.request("scheduler", "status.query")
            finally:
                carol.close()
                alice.close()
    assert seen == [("carol", "carol")]


def test_keyed_broker_refuses_a_request_that_came_without_a_name(keydir):
    """A key revoked in the middle of its own handshake can leave a connection without a
    name; its requests are answered, never forwarded with the empty caller of an unkeyed
    broker (which a service would take for "no keys, trust everyone")."""
    b = Broker(keys=load_server(keydir), startup_grace=0)
    try:
        payload = encode(make("status.query", "alice", "alice-1"))
        b._handle([b"\x00peer", EMPTY, REQ, b"scheduler", payload], b"")
        assert b.refusals.counts() == {"status.query:unknown_caller": 1}
        b._handle([b"\x00peer", EMPTY, REQ, b"scheduler", payload], b"alice")
        assert b.refusals.counts() == {"status.query:unknown_caller": 1}  # no_service instead
    finally:
        b.close()
