"""What a client can cost the HTTP servers of real processes: the scheduler's web view and
/metrics and an agent's /metrics (broker/http_serving.py), and who must send the key.

Real parts: broker, scheduler and agent are processes (tests/live_system.py); the threads a
server runs are read from /proc/PID/status of its process."""
from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.live_system import LiveCluster, wait_for

IDLE = 300  # connections that never finish a request
SLOW = 20  # connections that send part of a head, then nothing
# broker/http_serving.py's bounds, as an operator sees them: a few threads per server, a
# client dropped after a few seconds, a head of 8 KiB at most
THREADS = 8
CLIENT_TIMEOUT = 5.0
MAX_HEAD = 8192


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(run_dir: Path, **always: list[str]) -> tuple[LiveCluster, dict[str, str]]:
    ports = {name: _free_port() for name in ("web", "scheduler", "agent")}
    urls = {"web": f"http://127.0.0.1:{ports['web']}/",
            "scheduler": f"http://127.0.0.1:{ports['scheduler']}/metrics",
            "agent": f"http://127.0.0.1:{ports['agent']}/metrics"}
    live = LiveCluster(run_dir, spec="n2g8", nodes=1, gpus_per_node=8, extra={
        "scheduler": ["--http", f"127.0.0.1:{ports['web']}",
                      "--metrics", f"127.0.0.1:{ports['scheduler']}",
                      *always.get("scheduler", [])],
        "agent-n0": ["--metrics", f"127.0.0.1:{ports['agent']}", *always.get("agent", [])]})
    try:
        live.start()
        for url in urls.values():
            wait_for(lambda: _get(url, quiet=True)[0] != 0, 30, f"{url} to answer")
    except BaseException:
        live.stop_all()
        raise
    return live, urls


def _get(url: str, headers: dict | None = None, quiet: bool = False) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        if quiet:
            return 0, b""
        raise


def _raw(url: str, request: bytes) -> bytes:
    """The whole answer to bytes sent as they are (no client would send them)."""
    host, port = url.split("/")[2].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads line for {pid}")


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    live, urls = _start(tmp_path_factory.mktemp("served") / "run")
    try:
        yield live, urls
    finally:
        live.stop_all()


@pytest.mark.parametrize("server", ["web", "scheduler", "agent"])
def test_idle_and_slow_connections_cost_no_thread_and_are_closed(served, server):
    """300 connections that never send a request, and 20 that send half a head: the process
    runs no more threads than it did, answers a normal request at once, and closes every one
    of them after the client timeout."""
    live, urls = served
    proc = live.procs["agent-n0" if server == "agent" else "scheduler"]
    host, port = urls[server].split("/")[2].split(":")
    before = _threads(proc.pid)
    socks = []
    try:
        for i in range(IDLE + SLOW):
            sock = socket.create_connection((host, int(port)), timeout=10)
            if i >= IDLE:
                sock.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n")
            socks.append(sock)
        code, _ = _get(urls[server])  # accepted after every connection above
        assert code == 200
        assert _threads(proc.pid) <= before + THREADS, \
            f"{_threads(proc.pid)} threads, {before} before {IDLE + SLOW} connections"
        for sock in socks:
            sock.setblocking(False)
        wait_for(lambda: all(_closed_by_server(s) for s in socks), CLIENT_TIMEOUT + 15,
                 f"the server to close {IDLE + SLOW} connections after {CLIENT_TIMEOUT} s")
        assert _get(urls[server])[0] == 200
    finally:
        for sock in socks:
            sock.close()


def test_a_long_path_or_a_bad_job_id_is_one_line_and_no_traceback(served):
    live, urls = served
    web = urls["web"]
    assert _get(web + "api/jobs/" + "9" * 5000) == (404, b"not found\n")
    for bad in ("9" * 40, "%C2%B2", "-1", "1.5", ""):
        code, body = _get(web + "api/jobs/" + bad)
        assert code == 400 and body.count(b"\n") == 1, (bad, code, body)
    superscript_two = _raw(web, b"GET /api/jobs/\xb2 HTTP/1.0\r\n\r\n")  # isdigit(), not int
    assert superscript_two.startswith(b"HTTP/1.0 400 "), superscript_two
    assert _get(web + "api/jobs/424242")[0] == 404
    head = b"GET / HTTP/1.0\r\nX-Padding: "
    head += b"x" * (MAX_HEAD + 1 - len(head))  # and never its blank line
    for url in urls.values():
        answer = _raw(url, head)
        assert answer.startswith(b"HTTP/1.0 431 "), answer
        assert answer.split(b"\r\n\r\n", 1)[1].count(b"\n") == 1, answer  # one line
    assert _get(web + "api/status")[0] == 200
    for name in ("scheduler", "agent-n0"):
        for path in live.run_dir.glob(f"{name}*"):
            text = path.read_text(errors="replace")
            assert "Traceback" not in text and "http_failed" not in text, path


def test_with_the_key_always_a_loopback_client_must_send_it(tmp_path):
    """Behind a reverse proxy on the same host every client is loopback: --http-key-always
    and --metrics-key-always ask every one of them for the key."""
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    always = {"scheduler": ["--http-key", str(key), "--http-key-always",
                            "--metrics-key", str(key), "--metrics-key-always"],
              "agent": ["--metrics-key", str(key), "--metrics-key-always"]}
    live, urls = _start(tmp_path / "run", **always)
    try:
        assert _get(urls["web"] + "api/status") == (403, b"")
        for name in ("scheduler", "agent"):
            assert _get(urls[name])[0] == 401
            assert _get(urls[name], {"Authorization": "Bearer wrong"})[0] == 401
        for url in urls.values():
            assert _get(url, {"Authorization": "Bearer s3cret"})[0] == 200, url
    finally:
        live.stop_all()
