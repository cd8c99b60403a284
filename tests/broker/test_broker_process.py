"""The broker as a real process (`python -m broker.broker`): endpoints file, clean exit on
SIGTERM, refusing insecure binds, and a crash-restart on the same ports that requesters,
services, publishers and subscribers ride through without being rebuilt."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from broker.client import Publisher, Requester, Subscriber
from broker.endpoints import Endpoints
from broker.testing import REPO_ROOT, broker_process, service_thread, sync_events, wait_until

T = 20.0


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_cli_writes_endpoints_logs_json_and_exits_cleanly_on_sigterm(tmp_path):
    with broker_process(tmp_path) as (proc, ep):
        assert ep.requests.startswith("tcp://127.0.0.1:")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(T) == 0
    lines = [json.loads(line) for line in (tmp_path / "broker.log").read_text().splitlines()]
    events = [line["event"] for line in lines]
    assert "broker.started" in events and events[-1] == "broker.stopped"
    assert all(line["component"] == "broker" and "ts" in line and "level" in line
               for line in lines)


def test_cli_refuses_non_loopback_without_insecure(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "broker.broker", "--host", "0.0.0.0",
                           "--run-dir", str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=T)
    assert proc.returncode == 2
    assert "refused_bind" in proc.stderr and not (tmp_path / "endpoints.json").exists()


def test_start_broker_script_help():
    # the script uses the `python` on PATH when it has the dependencies: make that ours
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    proc = subprocess.run([str(REPO_ROOT / "scripts" / "start-broker"), "--help"],
                          capture_output=True, text=True, timeout=T,
                          env=dict(os.environ, PATH=path))
    assert proc.returncode == 0 and "--endpoints-file" in proc.stdout


def test_clients_survive_broker_crash_and_restart_on_same_ports(tmp_path):
    with broker_process(tmp_path / "first") as (proc, ep):
        ports = [port(ep.events_in), port(ep.events_out), port(ep.requests)]
        requester = Requester(ep, "survivor", timeout=1.0, retries=15)
        pub = Publisher(ep, "trainer.1")
        sub = Subscriber(ep)
        calls = []
        try:
            with service_thread(ep, "scheduler",
                                lambda m: calls.append(m.id) or {"n": len(calls)}):
                assert requester.request("scheduler", "status.query")["body"] == {"n": 1}
                sync_events(pub, sub)

                proc.kill()  # a crash: no goodbye to anyone
                proc.wait(T)
                with broker_process(tmp_path / "second", ports) as (proc2, ep2):
                    assert ep2 == ep
                    # same objects as before the crash: they reconnect by themselves
                    assert requester.request("scheduler", "status.query")["body"] == {"n": 2}
                    got = sync_events(pub, sub)
                    assert got.sender == "trainer.1"
                    log = (tmp_path / "second" / "broker.log").read_text()
                    assert "broker.worker_registered" in log
        finally:
            requester.close()
            pub.close()
            sub.close()
    assert len(calls) == 2


def test_endpoints_file_is_valid_json_for_other_components(tmp_path):
    with broker_process(tmp_path, (0, 0, 0), "--startup-grace", "0") as (_proc, ep):
        raw = json.loads((tmp_path / "endpoints.json").read_text())
        assert Endpoints(**raw) == ep
        requester = Requester(ep, "probe", timeout=1.0, retries=0)
        try:
            # nothing registered: the broker answers itself
            wait_until(lambda: _no_service(requester), T, interval=0.05)
        finally:
            requester.close()


def _no_service(requester) -> bool:
    from broker.client import RequestFailed, RequestTimeout
    try:
        requester.request("nobody", "status.query")
    except RequestFailed as err:
        return err.code == "no_service"
    except RequestTimeout:
        return False
    return False
