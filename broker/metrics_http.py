"""Serving a Prometheus registry over HTTP, for the scheduler and the agents alike.

Why here: both take `--metrics HOST:PORT` and both apply the broker's rule for interfaces
other than loopback (broker/curve.py `check_bind`), as the web view does for `--http`: a
non-loopback host needs a key (`--metrics-key FILE`: non-loopback clients must send
`Authorization: Bearer SECRET`, which Prometheus does with `authorization: credentials_file`)
or an explicit `--metrics-insecure`, and a start with the latter logs a warning.
`--metrics-key-always` asks every scraper for the key, loopback ones too (a reverse proxy on
the same host forwards everyone from loopback). Served by a few threads of its own, with every
client's time and size bounded (broker/http_serving.py).
"""
from __future__ import annotations

import hmac
import threading
from pathlib import Path
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from broker.curve import check_bind, is_loopback
from broker.http_serving import BoundedServerMixIn

DEFAULT_HOST = "127.0.0.1"


class MetricsUnavailable(OSError):
    """The /metrics server could not listen where --metrics asked; the message is one line."""


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `PORT` (loopback); ValueError naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = DEFAULT_HOST, text
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r}: expected HOST:PORT or PORT") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{text!r}: port must be 0..65535")
    return host, number


def add_arguments(parser: Any) -> None:
    """--metrics, --metrics-key, --metrics-key-always and --metrics-insecure, the same for
    every component."""
    parser.add_argument("--metrics", default=None, metavar="HOST:PORT",
                        help="serve Prometheus metrics on HOST:PORT (or PORT, on loopback); "
                             "a non-loopback HOST needs --metrics-key or --metrics-insecure")
    parser.add_argument("--metrics-key", default=None, metavar="FILE",
                        help="a secret (the file's text) non-loopback scrapers must send as "
                             "'Authorization: Bearer SECRET'")
    parser.add_argument("--metrics-key-always", action="store_true",
                        help="ask every scraper for --metrics-key, loopback ones too (behind "
                             "a reverse proxy on this host, every client comes from loopback)")
    parser.add_argument("--metrics-insecure", action="store_true",
                        help="let anyone who can reach --metrics read it, keyless")


def check_arguments(parser: Any, args: Any) -> None:
    """At parse time (exit 2, one line): args.metrics becomes (host, port) or None and
    args.metrics_key the secret's text or None; a non-loopback host without key or
    --metrics-insecure is refused."""
    if args.metrics is None:
        if args.metrics_key or args.metrics_insecure or args.metrics_key_always:
            parser.error("--metrics-key, --metrics-key-always and --metrics-insecure need "
                         "--metrics HOST:PORT")
        return
    if args.metrics_key_always and args.metrics_key is None:
        parser.error("--metrics-key-always needs --metrics-key FILE")
    from broker.curve import InsecureBind

    try:
        args.metrics = parse_address(args.metrics)
        if args.metrics_key is not None:
            args.metrics_key = Path(args.metrics_key).read_text().strip()
            if not args.metrics_key:
                raise ValueError("the --metrics-key file is empty")
        check_bind(args.metrics[0], args.metrics_key is not None, args.metrics_insecure)
    except (ValueError, OSError, InsecureBind) as err:
        parser.error(f"--metrics: {err}")


def guarded(app: Callable, key: str | None, always: bool = False) -> Callable:
    """The WSGI app, answering 401 to a non-loopback client without the key (if any), and
    with `always` to any client without it."""
    if key is None:
        return app
    expected = f"Bearer {key}".encode()

    def guard(environ: dict, start_response: Callable) -> Any:
        sent = environ.get("HTTP_AUTHORIZATION", "").encode()
        if (always or not is_loopback(environ.get("REMOTE_ADDR", ""))) \
                and not hmac.compare_digest(sent, expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                                ("WWW-Authenticate", "Bearer")])
            return [b"a key is needed: Authorization: Bearer SECRET\n"]
        return app(environ, start_response)

    return guard


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:  # scrapes every second: no line each
        pass


class _Server(BoundedServerMixIn, WSGIServer):
    pass


class MetricsServer:
    """The registry's /metrics on (host, port); port 0 takes a free one (`address` says
    which). Raises broker.curve.InsecureBind for a non-loopback host with neither key nor
    `insecure`; `key_always` asks every client for the key."""

    def __init__(self, registry: Any, host: str, port: int, key: str | None = None,
                 insecure: bool = False, log: Any = None, key_always: bool = False):
        from prometheus_client import make_wsgi_app

        if key_always and key is None:
            raise ValueError("--metrics-key-always needs --metrics-key")
        warning = check_bind(host, key is not None, insecure)
        if warning and log is not None:
            log.warning("metrics.insecure", host=host, detail=warning)
        server_class = type("MetricsWSGIServer", (_Server,), {})
        if ":" in host:
            import socket
            server_class.address_family = socket.AF_INET6
        try:
            self._httpd = make_server(host, port, guarded(make_wsgi_app(registry), key, key_always),
                                      server_class, handler_class=_Quiet)
        except OSError as err:  # e.g. the port is taken: one line for the operator
            raise MetricsUnavailable(
                f"--metrics {host}:{port}: cannot listen ({err.strerror or err})") from None
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="metrics-http", daemon=True)
        self._thread.start()
        self.address = self._httpd.server_address[:2]
        if log is not None:
            log.info("metrics_serving", host=self.address[0], port=self.address[1],
                     keyed=key is not None, key_always=key_always)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5.0)
