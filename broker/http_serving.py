"""HTTP serving whose cost per client is bounded: the web view's and every /metrics server.

Why not socketserver's ThreadingMixIn: it starts a thread per connection and lets it wait
for its request forever, so 500 idle connections were 500 threads and none was ever closed.
Here one thread accepts connections and reads each request's head without blocking; only a
complete head goes to one of a fixed number of worker threads. A connection that has not
sent its whole head within `client_timeout` seconds is closed, a head longer than `max_head`
is answered 431, and a connection past `max_connections` open at once, or a request that
finds every worker busy and `max_waiting` requests queued, is answered 503. Whatever clients
do, the threads, sockets and memory they take are bounded. The servers here answer GET
alone, so a request is its head; the body of anything else is not read.
"""
from __future__ import annotations

import io
import queue
import selectors
import socket
import threading
import time
from typing import Any


class _ReadAlready:
    """A connection whose request head was read already: the handler reads it from memory
    and writes to the socket."""

    def __init__(self, sock: socket.socket, head: bytes):
        self._sock, self._head = sock, head

    def makefile(self, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "r" in mode:
            return io.BytesIO(self._head)
        return self._sock.makefile(mode, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _refuse(conn: socket.socket, code: int, reason: str) -> None:
    """One short plain-text answer, sent without waiting, then the connection closed."""
    body = f"{reason}\n".encode()
    head = (f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        conn.setblocking(False)
        conn.send(head + body)
    except OSError:
        pass
    finally:
        conn.close()


class BoundedServerMixIn:
    """Put before a socketserver.TCPServer subclass (HTTPServer, WSGIServer) in the bases:
    its serve_forever and shutdown are replaced by the loop described above."""

    workers = 4
    client_timeout = 5.0  # seconds a client has to send its request head, and per write
    max_head = 8192
    max_connections = 512
    max_waiting = 64
    request_queue_size = 128  # the listen backlog: a burst of connects is not dropped

    def __init__(self, *args: Any, **kwargs: Any):
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._requests: queue.Queue = queue.Queue(maxsize=self.max_waiting)
        super().__init__(*args, **kwargs)

    # -- the accepting thread ------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        workers = [threading.Thread(target=self._work, daemon=True,
                                    name=f"{threading.current_thread().name}-worker")
                   for _ in range(self.workers)]
        for worker in workers:
            worker.start()
        open_: dict[socket.socket, tuple[float, bytearray, Any]] = {}  # deadline, head, peer
        self.socket.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            try:
                while not self._stop.is_set():
                    for key, _ in selector.select(poll_interval):
                        if key.fileobj is self.socket:
                            self._accept(selector, open_)
                        else:
                            self._read(selector, open_, key.fileobj)
                    now = time.monotonic()
                    for conn in [c for c, (deadline, _, _) in open_.items() if deadline <= now]:
                        selector.unregister(conn)
                        del open_[conn]
                        conn.close()  # idle or too slow: dropped, no answer owed
            finally:
                for conn in open_:
                    conn.close()
                for _ in workers:
                    self._requests.put(None)
                for worker in workers:
                    worker.join(timeout=self.client_timeout + 1.0)
                self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def _accept(self, selector: selectors.BaseSelector, open_: dict) -> None:
        for _ in range(64):  # all that are waiting, within reason
            try:
                conn, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of file descriptors: those waiting wait
                return
            if len(open_) >= self.max_connections:
                _refuse(conn, 503, "Service Unavailable")
                continue
            conn.setblocking(False)
            open_[conn] = (time.monotonic() + self.client_timeout, bytearray(), peer)
            selector.register(conn, selectors.EVENT_READ)

    def _read(self, selector: selectors.BaseSelector, open_: dict, conn: Any) -> None:
        deadline, head, peer = open_[conn]
        try:
            data = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        head.extend(data)
        complete = b"\r\n\r\n" in head or b"\n\n" in head
        if data and not complete and len(head) <= self.max_head:
            return
        selector.unregister(conn)
        del open_[conn]
        if not data:
            conn.close()
        elif not complete:
            _refuse(conn, 431, "Request Header Fields Too Large")
        else:
            try:
                self._requests.put_nowait((conn, bytes(head), peer))
            except queue.Full:
                _refuse(conn, 503, "Service Unavailable")

    # -- the workers ---------------------------------------------------------------------------
    def _work(self) -> None:
        while (item := self._requests.get()) is not None:
            conn, head, peer = item
            try:
                conn.settimeout(self.client_timeout)  # a client that will not read is dropped
                self.finish_request(_ReadAlready(conn, head), peer)
            except OSError:
                pass  # the client went away or was too slow: nothing to say to anyone
            except Exception:
                self.handle_error(conn, peer)
            finally:
                self.shutdown_request(conn)
