"""Serving a Prometheus registry over HTTP, for the scheduler and the agents alike.

Why here: both take `--metrics HOST:PORT` and both must apply the broker's rule for
interfaces other than loopback (broker/curve.py `check_bind`). Plain HTTP carries no CURVE
authentication, so keys do not admit a non-loopback bind here: only `--insecure` does,
and a start with it logs a warning.
"""
from __future__ import annotations

from typing import Any

from broker.curve import check_bind

DEFAULT_HOST = "127.0.0.1"


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


class MetricsServer:
    """The registry's /metrics on (host, port); port 0 takes a free one (`address` says
    which). Raises broker.curve.InsecureBind for a non-loopback host without `insecure`."""

    def __init__(self, registry: Any, host: str, port: int, insecure: bool = False,
                 log: Any = None):
        from prometheus_client import start_http_server

        warning = check_bind(host, False, insecure)
        if warning and log is not None:
            log.warning("metrics.insecure", host=host, detail=warning)
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.address = self._httpd.server_address[:2]
        if log is not None:
            log.info("metrics_serving", host=self.address[0], port=self.address[1])

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5.0)
