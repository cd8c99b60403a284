"""A real headless chromium for tests, driven over the DevTools protocol on a pipe.

Why a pipe and not `--dump-dom`: a page timed under `--virtual-time-budget` reads virtual
time, which stands still while a fetch is out, so it would understate the load. Over
`--remote-debugging-pipe` (JSON messages ending in NUL on fds 3 and 4, no websocket library
needed) the page runs in real time and the test reads what it measured."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless chromium; `evaluate` runs JavaScript in the page `open` navigated."""

    def __init__(self) -> None:
        if CHROMIUM is None:
            raise RuntimeError("no chromium on PATH")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="interlace-chromium-")

        def fds() -> None:  # in the child: its fd 3 reads commands, fd 4 writes replies
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={self._profile}", "--remote-debugging-pipe", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(3, 4),
            preexec_fn=fds, start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.session: str | None = None

    def call(self, method: str, params: dict | None = None, timeout: float = 30.0,
             session: bool = True) -> dict[str, Any]:
        """Send one command and return its result (events on the way are dropped)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session is not None:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buf:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise TimeoutError(f"chromium did not answer {method}")
                chunk = os.read(self._from_child, 1 << 16)
                if not chunk:
                    raise EOFError("chromium closed its pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True})
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, every: float = 0.05) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(every)  # polling another process's state, not synchronising threads
        raise TimeoutError(f"page never made {expression!r} true")

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False, timeout=5.0)
        except Exception:  # closing is best effort; the kill below is the backstop
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
