"""CURVE on the message plane: only holders of an authorised key get a request to a service
or an event off the bus, the bytes on the wire are encrypted, keys are made and revoked with
files, and an unkeyed non-loopback bind is refused unless --insecure says otherwise."""
from __future__ import annotations

import dataclasses
import os
import selectors
import socket
import stat
import threading

import pytest
import structlog
import zmq

from broker.broker import Broker
from broker.client import Publisher, RequestFailed, Requester, RequestTimeout, Subscriber
from broker.curve import InsecureBind, attach_client_key, check_bind
from broker.keys import (KeyFileError, authorized_names, generate, load_client, load_server,
                         main as keys_main)
from broker.testing import (as_client, broker_process, broker_thread, service_thread,
                            sync_events, wait_until)
from broker.wire import EMPTY, REQ
from broker.messages import IdSource, encode, make

T = 10.0
CLIENTS = ["scheduler", "feeder", "trainer"]


@pytest.fixture(scope="module")
def keydir(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    generate(root, CLIENTS)
    return root


@pytest.fixture(scope="module")
def outsider(tmp_path_factory):
    """A well-formed key pair the broker has never been told about."""
    root = tmp_path_factory.mktemp("outsider")
    generate(root, ["intruder"])
    return load_client(root / "clients" / "intruder.key_secret")


@pytest.fixture
def broker(keydir):
    with broker_thread(keys=load_server(keydir), service_timeout=3.0) as b:
        yield b


def counting_handler(calls):
    def handler(msg):
        calls.append(msg.sender)
        return {"echo": msg.get("what")}
    return handler


# -- keys ---------------------------------------------------------------------------------

def test_generate_writes_pairs_authorised_publics_and_private_secrets(tmp_path, capsys):
    assert keys_main(["generate", str(tmp_path), "--clients", "scheduler,agent-n0",
                      "--count", "1"]) == 0
    assert "--keys" in capsys.readouterr().out
    names = {"scheduler", "agent-n0", "client-0"}
    assert {p.stem for p in (tmp_path / "authorized").glob("*.key")} == names
    for name in names:
        assert "secret-key" not in (tmp_path / "authorized" / f"{name}.key").read_text()
        secret = tmp_path / "clients" / f"{name}.key_secret"
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "server.key_secret").st_mode) == 0o600
    server = load_server(tmp_path)
    agent = load_client(tmp_path / "clients" / "agent-n0.key_secret")
    # running it again adds a client and keeps every existing key
    generate(tmp_path, ["agent-n1"])
    assert load_server(tmp_path).public == server.public
    assert load_client(tmp_path / "clients" / "agent-n0.key_secret").public == agent.public
    assert (tmp_path / "authorized" / "agent-n1.key").exists()
    assert agent.secret.decode() not in repr(agent)  # never printed by accident
    with pytest.raises(KeyFileError, match="key_secret"):
        load_client(tmp_path / "clients" / "agent-n0.key")  # the public half is not enough
    assert keys_main(["generate", str(tmp_path), "--clients", "bad name"]) == 2
    # a cluster's role keys by count: the names the broker binds to its services
    assert keys_main(["generate", str(tmp_path / "cluster"), "--nodes", "2",
                      "--clients", "alice"]) == 0
    assert {p.stem for p in (tmp_path / "cluster" / "authorized").glob("*.key")} == \
        {"scheduler", "agent-n0", "agent-n1", "alice"}


# -- who may talk ---------------------------------------------------------------------------

def test_authorised_clients_request_and_read_events(broker, keydir):
    ep = broker.endpoints
    assert ep.server_key == load_server(keydir).public.decode()
    calls = []
    requester = Requester(as_client(ep, keydir, "feeder"), "feeder", timeout=2.0, retries=5)
    pub = Publisher(as_client(ep, keydir, "trainer"), "trainer.1")
    sub = Subscriber(as_client(ep, keydir, "scheduler"))
    try:
        with service_thread(as_client(ep, keydir, "scheduler"), "scheduler",
                            counting_handler(calls)):
            reply = requester.request("scheduler", "status.query", what="jobs")
            assert reply["body"] == {"echo": "jobs"} and calls == ["feeder"]
        assert sync_events(pub, sub).sender == "trainer.1"
    finally:
        for closable in (requester, pub, sub):
            closable.close()


def test_unauthorised_client_can_neither_submit_nor_read_nor_impersonate(broker, keydir,
                                                                          outsider):
    ep = broker.endpoints
    intruder = ep.with_client(outsider)
    calls, stolen = [], []
    insider_sub = Subscriber(as_client(ep, keydir, "scheduler"))
    intruder_sub = Subscriber(intruder)
    insider_pub = Publisher(as_client(ep, keydir, "trainer"), "trainer.1")
    intruder_pub = Publisher(intruder, "trainer.666")
    intruder_req = Requester(intruder, "feeder", timeout=0.3, retries=1)
    insider_req = Requester(as_client(ep, keydir, "feeder"), "feeder", timeout=2.0, retries=5)
    try:
        with service_thread(as_client(ep, keydir, "scheduler"), "scheduler",
                            counting_handler(calls)):
            with pytest.raises(RequestTimeout):
                intruder_req.request("scheduler", "job.submit", job={"job_id": 1})
            # an intruder registering as the scheduler is never handed a request
            with service_thread(intruder, "scheduler", counting_handler(stolen)):
                for _ in range(4):
                    insider_req.request("scheduler", "status.query")
        assert calls == ["feeder"] * 4 and stolen == []

        sync_events(insider_pub, insider_sub)
        for i in range(20):
            insider_pub.publish("event.progress", job_id=1, iterations=float(i))
            intruder_pub.publish("event.progress", job_id=666, iterations=float(i))
        got = [insider_sub.recv(T) for _ in range(20)]
        assert all(m is not None and m.sender == "trainer.1" for m in got)
        assert insider_sub.recv(0.3) is None  # nothing from the intruder's publisher either
        assert intruder_sub.recv(1.0) is None
    finally:
        for closable in (insider_sub, intruder_sub, insider_pub, intruder_pub, intruder_req,
                         insider_req):
            closable.close()


# -- who may serve what ----------------------------------------------------------------------
# (key, service, whether the broker lets it serve): `scheduler` and agent.NODE are bound to the
# keys of those names (specs/keyroles.py); any other service name is free to any key
SERVES = [
    ("scheduler", "scheduler", True), ("alice", "scheduler", False),
    ("agent-n0", "scheduler", False),
    ("agent-n0", "agent.n0", True), ("agent-n1", "agent.n0", False),
    ("scheduler", "agent.n0", False), ("alice", "agent.n0", False),
    ("alice", "echo", True), ("agent-n0", "echo", True),
]


@pytest.fixture(scope="module")
def role_keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("role-keys")
    generate(root, ["scheduler", "agent-n0", "agent-n1", "alice", "feeder"])
    return root


@pytest.mark.parametrize("key, service, serves", SERVES,
                         ids=[f"{k}-as-{s}" for k, s, _ in SERVES])
def test_only_a_roles_own_key_may_serve_it(role_keys, key, service, serves):
    calls = []
    with broker_thread(keys=load_server(role_keys), service_timeout=3.0, startup_grace=0) as b:
        requester = Requester(as_client(b.endpoints, role_keys, "feeder"), "feeder",
                              timeout=2.0, retries=0)
        try:
            with service_thread(as_client(b.endpoints, role_keys, key), service,
                                counting_handler(calls)) as svc:
                # answered either way: registered (its name in the broker's table) or told no
                wait_until(lambda: service in b._services or svc.broker_error, T)
                if serves:
                    assert requester.request(service, "status.query")["body"] == {"echo": None}
                    assert calls == ["feeder"] and svc.broker_error is None
                else:
                    with pytest.raises(RequestFailed) as err:
                        requester.request(service, "status.query")
                    assert err.value.code == "no_service" and calls == []
                    assert svc.broker_error.startswith(f"forbidden: key {key!r} may not "
                                                       f"serve {service!r}")
        finally:
            requester.close()


def test_without_keys_any_peer_may_serve_any_name():
    """The insecure local default is unchanged: no key, no name to bind."""
    with broker_thread(service_timeout=3.0) as b:
        requester = Requester(b.endpoints, "feeder", timeout=2.0, retries=5)
        try:
            for service in ("scheduler", "agent.n0"):
                with service_thread(b.endpoints, service, counting_handler([])):
                    assert requester.request(service, "status.query")["body"] == {"echo": None}
        finally:
            requester.close()


def test_sockets_run_curve_and_a_plain_null_client_gets_nothing_through(broker, keydir):
    for sock in broker._sockets:  # every socket the broker bound
        assert sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
        assert sock.getsockopt(zmq.CURVE_SERVER) == 1
    requester = Requester(as_client(broker.endpoints, keydir, "feeder"), "feeder")
    assert requester._sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
    requester.close()

    calls = []
    plain = zmq.Context.instance().socket(zmq.DEALER)  # NULL mechanism, no keys at all
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(broker.endpoints.requests)
    try:
        with service_thread(as_client(broker.endpoints, keydir, "scheduler"), "scheduler",
                            counting_handler(calls)):
            payload = encode(make("status.query", "plain", IdSource("plain")()))
            plain.send_multipart([EMPTY, REQ, b"scheduler", payload])
            assert not plain.poll(1000)
        assert calls == []
    finally:
        plain.close(0)
    # and the library refuses to build an unkeyed socket for a keyed broker
    with pytest.raises(ValueError, match="--client-key"):
        Requester(broker.endpoints, "forgetful")


class Relay:
    """A TCP pass-through that records every byte crossing it, to look at the wire."""

    def __init__(self, target: int):
        self.target = target
        self.seen = bytearray()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        while not self._stop.is_set():
            for key, _ in sel.select(0.05):
                if key.data is None:
                    conn, _ = self._listener.accept()
                    up = socket.create_connection(("127.0.0.1", self.target))
                    sel.register(conn, selectors.EVENT_READ, up)
                    sel.register(up, selectors.EVENT_READ, conn)
                    continue
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if data:
                    self.seen += data
                    key.data.sendall(data)
                    continue
                for end in (key.fileobj, key.data):  # one side hung up: drop the pair
                    try:
                        sel.unregister(end)
                    except (KeyError, ValueError):  # already gone with its partner
                        pass
                    end.close()
        for key in list(sel.get_map().values()):
            key.fileobj.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(T)


def request_through_relay(endpoints, service_endpoints, marker):
    port = int(endpoints.requests.rsplit(":", 1)[1])
    relay = Relay(port)
    via = dataclasses.replace(endpoints, requests=f"tcp://127.0.0.1:{relay.port}")
    requester = Requester(via, "feeder", timeout=2.0, retries=5)
    try:
        with service_thread(service_endpoints, "scheduler", counting_handler([])):
            assert requester.request("scheduler", "status.query",
                                     what=marker)["body"] == {"echo": marker}
    finally:
        requester.close()
        relay.close()
    return bytes(relay.seen)


def test_bytes_on_the_wire_are_encrypted_with_keys_and_plain_without(broker, keydir):
    marker = "SECRET-JOB-PAYLOAD-7f3a"
    wire = request_through_relay(as_client(broker.endpoints, keydir, "feeder"),
                                 as_client(broker.endpoints, keydir, "scheduler"), marker)
    assert len(wire) > 200 and marker.encode() not in wire
    with broker_thread(service_timeout=3.0) as plain:  # the control: the capture does work
        wire = request_through_relay(plain.endpoints, plain.endpoints, marker)
    assert marker.encode() in wire


def test_revoked_key_is_refused_after_reload(tmp_path):
    generate(tmp_path, ["scheduler", "feeder"])
    with broker_thread(keys=load_server(tmp_path), service_timeout=3.0) as b:
        with service_thread(as_client(b.endpoints, tmp_path, "scheduler"), "scheduler",
                            counting_handler([])):
            (tmp_path / "authorized" / "feeder.key").unlink()
            assert b.reload_keys() == 1
            late = Requester(as_client(b.endpoints, tmp_path, "feeder"), "feeder", timeout=0.3,
                             retries=1)
            try:
                with pytest.raises(RequestTimeout):
                    late.request("scheduler", "status.query")
            finally:
                late.close()


def test_key_and_broker_mismatch_is_a_clear_error(broker, keydir):
    with pytest.raises(ValueError, match="--client-key"):
        attach_client_key(broker.endpoints, None)
    with broker_thread(service_timeout=3.0) as plain:
        with pytest.raises(ValueError, match="without keys"):
            attach_client_key(plain.endpoints, str(keydir / "clients" / "feeder.key_secret"))


def test_authorized_files_that_name_no_one_clearly_are_left_out(tmp_path):
    generate(tmp_path, ["scheduler", "alice", "bob"])
    folder = tmp_path / "authorized"
    (folder / "alice-again.key").write_bytes((folder / "alice.key").read_bytes())
    (folder / "bad name.key").write_bytes((folder / "bob.key").read_bytes())
    (folder / "garbage.key").write_text("not a certificate\n")
    names, problems = authorized_names(folder)
    assert sorted(names.values()) == ["bob", "scheduler"]  # alice's key: two names, neither
    assert len(problems) == 3, problems  # the shared key, the bad name, the garbage
    assert authorized_names(tmp_path / "nowhere")[0] == {}
    with structlog.testing.capture_logs() as logs:
        b = Broker(keys=load_server(tmp_path))
        try:
            assert b.reload_keys() == 2
        finally:
            b.close()
    left_out = [e for e in logs if e["event"] == "broker.key_left_out"]
    assert len(left_out) == 6  # three at start, three at the reload


# -- binding --------------------------------------------------------------------------------

def test_non_loopback_needs_keys_or_insecure(keydir):
    with pytest.raises(InsecureBind, match="--keys.*--insecure"):
        Broker("0.0.0.0")  # refused before any socket exists
    with pytest.raises(InsecureBind):
        check_bind("10.1.2.3", keyed=False, insecure=False)
    assert check_bind("10.1.2.3", keyed=True, insecure=False) is None
    assert "INSECURE" in check_bind("10.1.2.3", keyed=False, insecure=True)
    assert check_bind("127.0.0.1", keyed=False, insecure=False) is None
    with structlog.testing.capture_logs() as logs:
        b = Broker("127.0.0.1", insecure=True)
        b.close()
    assert [e for e in logs if e["event"] == "broker.insecure" and e["log_level"] == "warning"]


def test_cli_insecure_warns_at_start_and_keys_put_the_server_key_in_the_endpoints_file(
        tmp_path, keydir):
    with broker_process(tmp_path / "insecure", (0, 0, 0), "--insecure"):
        pass
    log = (tmp_path / "insecure" / "broker.log").read_text()
    assert '"broker.insecure"' in log and '"warning"' in log
    with broker_process(tmp_path / "keyed", (0, 0, 0), "--keys", str(keydir)) as (_, ep):
        assert ep.server_key == load_server(keydir).public.decode()
        requester = Requester(as_client(ep, keydir, "feeder"), "feeder", timeout=2.0,
                              retries=5)
        try:
            with service_thread(as_client(ep, keydir, "scheduler"), "scheduler",
                                counting_handler([])):
                assert requester.request("scheduler", "status.query", what="x")["ok"]
        finally:
            requester.close()


def test_only_the_clusters_own_traffic_goes_ahead_of_a_flood():
    from specs.keyroles import urgent

    # keyed: the key decides, whatever the type says
    assert urgent("scheduler", "agent-n3", "job.finished")
    assert urgent("scheduler", "agent-n3", "agent.heartbeat")
    assert not urgent("scheduler", "alice", "agent.heartbeat")
    assert not urgent("scheduler", "scheduler", "status.query")
    assert urgent("agent.n3", "scheduler", "job.launch")
    assert not urgent("agent.n3", "agent-n3", "job.launch")
    assert not urgent("agent.n3", "alice", "job.launch")
    assert not urgent("echo", "scheduler", "status.query")
    # without keys: an agent's registration and heartbeats to the scheduler, by their type
    assert urgent("scheduler", None, "agent.heartbeat")
    assert urgent("scheduler", None, "agent.register")
    assert not urgent("scheduler", None, "job.submit")
    assert not urgent("scheduler", None, "job.finished")
    assert not urgent("agent.n0", None, "job.launch")
