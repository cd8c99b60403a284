"""Helpers for tests that need a live message plane (used by this package's tests and free
for the scheduler's, agent's and trainer's): a broker or a service on a thread, a broker as
a real process, and waiting on conditions with a deadline instead of sleeping.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from broker.broker import Broker
from broker.client import Publisher, Service, Subscriber
from broker.curve import attach_client_key
from broker.endpoints import Endpoints
from broker.messages import Message

REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.01) -> Any:
    """Poll `predicate` until it returns something truthy (returned) or `timeout` passes
    (AssertionError). The interval only paces the polling; correctness never depends on it."""
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        event.wait(interval)


def as_client(endpoints: Endpoints, keydir: Path, name: str) -> Endpoints:
    """`endpoints` carrying client NAME's key from a folder made by broker.keys.generate."""
    return attach_client_key(endpoints, str(keydir / "clients" / f"{name}.key_secret"))


@contextlib.contextmanager
def broker_thread(**kwargs: Any) -> Iterator[Broker]:
    """A Broker on loopback with free ports, served by a daemon thread for the block."""
    broker = Broker(**kwargs)
    stop = threading.Event()
    thread = threading.Thread(target=broker.run, args=(stop,), name="test-broker", daemon=True)
    thread.start()
    try:
        yield broker
    finally:
        stop.set()
        thread.join(10)
        broker.close()


@contextlib.contextmanager
def service_thread(endpoints: Endpoints, name: str, handler: Callable[[Message], dict | None],
                   service_cls: type[Service] = Service, **kwargs: Any) -> Iterator[Service]:
    """A Service serving on a daemon thread for the block (created on that thread too)."""
    stop = threading.Event()
    ready: list[Service] = []
    failed: list[BaseException] = []
    started = threading.Event()

    def serve() -> None:
        try:
            svc = service_cls(endpoints, name, handler, **kwargs)
        except BaseException as err:  # surfaced to the caller below
            failed.append(err)
            started.set()
            return
        ready.append(svc)
        started.set()
        try:
            svc.serve(stop)
        finally:
            svc.close()

    thread = threading.Thread(target=serve, name=f"test-service-{name}", daemon=True)
    thread.start()
    if not started.wait(10):
        raise AssertionError(f"service {name!r} did not start within 10s")
    if failed:
        raise failed[0]
    try:
        yield ready[0]
    finally:
        stop.set()
        thread.join(10)


def sync_events(publisher: Publisher, subscriber: Subscriber, timeout: float = 10.0) -> Message:
    """Publish probe events until the subscriber sees one: the subscription has then reached
    the publisher through the broker, and nothing after it is lost to the slow-joiner effect."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        publisher.publish("event.log", record={"probe": True})
        msg = subscriber.recv(0.05)
        while msg is not None:
            if msg.sender == publisher.sender:
                while subscriber.recv(0.05) is not None:  # drain the probes in flight
                    pass
                return msg
            msg = subscriber.recv(0.0)
    raise AssertionError(f"no event through the bus within {timeout}s")


@contextlib.contextmanager
def broker_process(run_dir: Path, ports: Sequence[int] = (0, 0, 0), *extra: str,
                   timeout: float = 20.0) -> Iterator[tuple[subprocess.Popen, Endpoints]]:
    """`python -m broker.broker` as a child process; yields it with its endpoints once bound."""
    run_dir.mkdir(parents=True, exist_ok=True)
    endpoints_file = run_dir / "endpoints.json"
    if endpoints_file.exists():
        endpoints_file.unlink()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "broker.broker", "--ports", ",".join(map(str, ports)),
           "--endpoints-file", str(endpoints_file), "--run-dir", str(run_dir), *extra]
    with open(run_dir / "broker.stderr", "ab") as err:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        def bound() -> Endpoints | None:
            if proc.poll() is not None:
                raise AssertionError(f"broker exited with {proc.returncode}: "
                                     f"{(run_dir / 'broker.stderr').read_text()[-2000:]}")
            return Endpoints.load(endpoints_file) if endpoints_file.exists() else None

        yield proc, wait_until(bound, timeout, interval=0.02)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
