"""The scheduler's live web view: `--http HOST:PORT` serves a page and its JSON API.

    /              the page (scheduler/live/web/: plain HTML and JavaScript, no build step)
    /api/status    the status.query reply plus groups, occupancy, events and JCTs (webdata.py)
    /api/jobs/ID   one job: state, place, profile, queue position, its journal events

Why the same rule as the broker: the page shows every job, so it may be bound to a
non-loopback interface only with a key (`--http-key FILE`: clients send
`Authorization: Bearer <the file's text>`) or `--http-insecure`; and whatever the bind, a
non-loopback client without the key gets 403 and nothing else unless `--http-insecure`.
`--http-key-always` asks the key of every client, loopback included: behind a reverse
proxy on the same host every client arrives from loopback. Served by a few threads of its own
(broker/http_serving.py), so a slow browser never holds a round and idle or hostile clients
cost a bounded number of threads; a path longer than MAX_PATH, or a job id that is not a
small integer, is answered in one line (404, 400), never with a traceback.
"""
from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from typing import Any

from broker.curve import check_bind, is_loopback
from broker.http_serving import BoundedServerMixIn
from scheduler.live import webdata
from scheduler.live.state import LiveState

_STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/index.html": ("index.html", "text/html; charset=utf-8"),
           "/app.js": ("app.js", "text/javascript; charset=utf-8")}
MAX_PATH = 256  # longer than any page or job's address: answered 404 unread
MAX_JOB_DIGITS = 18  # a job id is a small integer (int("9" * 5000) is slow, and refused)


class _Server(BoundedServerMixIn, HTTPServer):
    pass


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `:PORT` (loopback) -> (host, port); ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def admits(peer: str, authorization: str | None, key: str | None, insecure: bool,
           always: bool = False) -> bool:
    """May a client at `peer` see anything? Loopback always; others with the key (compared in
    constant time) or when the operator said --http-insecure. With `always`
    (--http-key-always), every client needs the key."""
    if not always and (is_loopback(peer) or insecure):
        return True
    if key is None or not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[len("Bearer "):].strip().encode(), key.encode())


def _static(name: str) -> bytes:
    return resources.files("scheduler.live").joinpath("web", name).read_bytes()


class WebView:
    """The HTTP server over one scheduler's state; `start` serves it on a daemon thread."""

    def __init__(self, state: LiveState, host: str = "127.0.0.1", port: int = 0, *,
                 key: str | None = None, insecure: bool = False, key_always: bool = False,
                 ttl: float = 0.5, log: Any = None):
        if key_always and key is None:
            raise ValueError("--http-key-always needs --http-key")
        self.warning = check_bind(host, key is not None, insecure)  # InsecureBind first
        self.state, self.key, self.insecure, self.log = state, key, insecure, log
        self.key_always = key_always
        self.reader = webdata.JournalReader(str(state.opt.journal_path))
        self.snapshot = webdata.Snapshot(lambda: webdata.build(state, self.reader), ttl=ttl)
        self.refused = 0
        self.server = _Server((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.server.server_address[:2]

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    def start(self) -> "WebView":
        if self.warning and self.log is not None:
            self.log.warning("http_insecure", address=list(self.address), detail=self.warning)
        self._thread = threading.Thread(target=self.server.serve_forever, name="webview",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        if self.log is not None:
            self.log.info("http_serving", url=self.url)
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(timeout=5.0)
        self.server.server_close()
        self.reader.close()

    # -- requests ------------------------------------------------------------------------------
    def respond(self, path: str, peer: str, authorization: str | None) -> tuple[int, str, bytes]:
        """(status, content type, body) for one GET; the whole decision, without sockets."""
        if not admits(peer, authorization, self.key, self.insecure, self.key_always):
            self.refused += 1
            return 403, "text/plain; charset=utf-8", b""
        path = path.split("?", 1)[0]
        if len(path) > MAX_PATH:
            return 404, "text/plain; charset=utf-8", b"not found\n"
        if path in _STATIC:
            name, ctype = _STATIC[path]
            return 200, ctype, _static(name)
        if path == "/api/status":
            return 200, "application/json", self.snapshot.get()
        if path.startswith("/api/jobs/"):
            tail = path[len("/api/jobs/"):]
            if not (tail.isascii() and tail.isdigit() and len(tail) <= MAX_JOB_DIGITS):
                return 400, "text/plain; charset=utf-8", b"a job id is a small integer\n"
            doc = webdata.job_detail(self.state, self.reader, int(tail))
            if doc is not None:
                return 200, "application/json", json.dumps(doc).encode()
        return 404, "text/plain; charset=utf-8", b"not found\n"

    def _handler_class(self) -> type:
        view = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "interlace-webview"

            def do_GET(self) -> None:  # noqa: N802  (the http.server name)
                try:
                    code, ctype, body = view.respond(self.path, self.client_address[0],
                                                     self.headers.get("Authorization"))
                except Exception as err:  # the page is advice: a bug costs this request
                    if view.log is not None:
                        view.log.exception("http_failed", path=self.path)
                    code, ctype, body = 500, "text/plain", f"{type(err).__name__}\n".encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # access lines would flood the log
                pass

        return Handler
