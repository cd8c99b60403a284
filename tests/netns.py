"""A client that is not on loopback, made in a network namespace of its own.

Why: the HTTP servers refuse non-loopback clients without the key, and only a real peer
address shows the refusal; adding an address to the machine's own interfaces (as CI once
did) touches what other processes on the machine use. Here a test gets a namespace joined to
this one by a veth pair, on a /30 of 198.18.0.0/15 (the benchmarking range) picked at random:
the server binds `host` (this side), the client runs inside the namespace as `peer`, and both
go when the test ends. Where `ip netns` is not permitted the test skips saying so; tests
using it are marked `real`, so INTERLACE_REQUIRE_REAL=1 turns that skip into a failure."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import pytest

from tests.live_system import ROOT, trainer_env


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@dataclass(frozen=True)
class Peer:
    name: str  # the namespace
    host: str  # this side's address: bind the server here
    peer: str  # the client's address, inside the namespace

    def python(self, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run `code` (its sys.argv[1:] being `args`) with this checkout's python inside the
        namespace."""
        return subprocess.run(["ip", "netns", "exec", self.name, sys.executable, "-c", code,
                               *args], cwd=ROOT, env=trainer_env(), capture_output=True,
                              text=True, timeout=timeout)

    def get(self, url: str, headers: dict | None = None) -> tuple[int, bytes]:
        """(status, body) of one GET from inside the namespace."""
        done = self.python(_GET, url, json.dumps(headers or {}))
        assert done.returncode == 0, done.stderr
        code, body = json.loads(done.stdout)
        return code, body.encode("latin-1")


_GET = """
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        code, body = answer.status, answer.read()
except urllib.error.HTTPError as err:
    code, body = err.code, err.read()
print(json.dumps([code, body.decode("latin-1")]))
"""


@contextmanager
def namespace_peer() -> Iterator[Peer]:
    """A Peer for the duration; skips the test where namespaces cannot be made."""
    tag = f"{random.randrange(16 ** 6):06x}"
    name, here, there = f"interlace-{tag}", f"ilh{tag}", f"iln{tag}"
    block = random.randrange(2 ** 17 // 4) * 4  # a /30 within 198.18.0.0/15
    base = (198 << 24) + (18 << 16) + block
    host, peer = (".".join(str((base + i) >> s & 255) for s in (24, 16, 8, 0)) for i in (1, 2))
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace (`ip netns add`: "
                    f"{made.stderr.strip() or made.returncode}); run as root where it is allowed")
    try:
        steps = [("link", "add", here, "type", "veth", "peer", "name", there),
                 ("link", "set", there, "netns", name),
                 ("addr", "add", f"{host}/30", "dev", here),
                 ("link", "set", here, "up"),
                 ("-n", name, "addr", "add", f"{peer}/30", "dev", there),
                 ("-n", name, "link", "set", there, "up"),
                 ("-n", name, "link", "set", "lo", "up")]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.fail(f"ip {' '.join(step)}: {done.stderr.strip()}")
        yield Peer(name, host, peer)
    finally:
        _ip("link", "del", here)  # both ends of the pair
        _ip("netns", "del", name)

