"""A flooding client, run as a process of its own: `python -m tests.flood KIND ENDPOINTS N
[--rate R]` sends N requests to the scheduler through the broker on one DEALER socket, without
waiting for answers (pipelined; at R per second where given), then collects answers until each
has one or `--patience` seconds pass with none. KIND `submit` sends job.submit (each a new
job, its own submission key), `status` status.query for every job. Prints one JSON line: answers by code
(`ok` for a reply), how many went unanswered, and the job ids of acknowledged submits.

What the flood cases of docs/security.md are tried with: it is an attacker's client, not the
library's Requester, which would wait for each answer and back off when told to.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import zmq

from broker.client import RequestFailed, RequestTimeout
from broker.endpoints import Endpoints
from broker.messages import decode, encode, make
from broker.wire import EMPTY, REQ
from tests.live_system import ROOT, _env

CLIENTS = 4                # flooding processes at once (run_floods)
FLOOD_ITERATIONS = 100     # each flooded job's length (0.3 trace seconds an iteration)


def _payload(kind: str, sender: str, msg_id: str, job_id: int | None) -> bytes:
    if kind == "status":
        return encode(make("status.query", sender, msg_id, what="all"))
    from tests.helpers import job
    from traces.feeder import job_map

    given = {"new_id": True} if job_id is None else {}
    return encode(make("job.submit", sender, msg_id,
                       job=job_map(job(job_id or 0, iterations=FLOOD_ITERATIONS)),
                       submission=uuid.uuid4().hex, **given))


def flood(kind: str, endpoints: Endpoints, n: int, rate: float = 0.0,
          patience: float = 30.0, first_id: int | None = None) -> dict:
    """Send `n` requests of `kind` (submits under ids from `first_id` on, or ids the
    scheduler gives) and collect the answers; what came back, as main prints it."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)  # an attacker's queue: unbounded on its own side
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(endpoints.requests)
    sender = f"flood-{uuid.uuid4().hex[:8]}"
    waiting: set[str] = set()
    codes: collections.Counter[str] = collections.Counter()
    jobs: list[int] = []
    start = time.monotonic()

    def take(timeout_ms: int) -> bool:
        if not sock.poll(timeout_ms):
            return False
        frames = sock.recv_multipart()
        answer = decode(frames[-1])
        if answer.get("re") not in waiting:
            return True
        waiting.discard(answer["re"])
        if answer.type == "reply":
            codes["ok"] += 1
            body = answer.get("body") or {}
            if body.get("accepted") is True:
                jobs.append(body["job_id"])
        else:
            codes[answer["code"]] += 1
        return True

    for i in range(n):
        msg_id = f"{sender}-{i}"
        waiting.add(msg_id)
        job_id = None if first_id is None else first_id + i
        sock.send_multipart([EMPTY, REQ, b"scheduler", _payload(kind, sender, msg_id, job_id)])
        if rate > 0:
            due = start + (i + 1) / rate
            while time.monotonic() < due:
                take(max(1, int((due - time.monotonic()) * 1000)))
    sent = time.monotonic()
    while waiting and take(int(patience * 1000)):
        pass
    sock.close(0)
    ctx.term()
    return {"sent": n, "answers": dict(codes), "unanswered": len(waiting), "jobs": jobs,
            "send_s": round(sent - start, 3), "total_s": round(time.monotonic() - start, 3)}


def run_floods(endpoints_file: Path, kind: str, n: int, rate: float = 0.0,
               patience: float = 30.0, first_id: int | None = None,
               clients: int = CLIENTS) -> list[dict]:
    """`clients` flooding processes at once, each sending `n` (client i's submits under ids
    from first_id + i * n, where given); what each got."""
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.flood", kind, str(endpoints_file), str(n), "--rate",
         str(rate), "--patience", str(patience),
         *(["--first-id", str(first_id + i * n)] if first_id is not None else [])],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True) for i in range(clients)]
    return [json.loads(p.communicate(timeout=300)[0]) for p in procs]


class Probe(threading.Thread):
    """An operator asking for every job's status every `every` s, with one try of up to
    10 s: (start, seconds to an answer, or None when none came)."""

    def __init__(self, requester: Any, every: float = 0.25):
        super().__init__(daemon=True)
        self.requester, self.every = requester, every
        self.samples: list[tuple[float, float | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                start = time.monotonic()
                try:
                    self.requester.request("scheduler", "status.query", what="all")
                    took: float | None = time.monotonic() - start
                except (RequestFailed, RequestTimeout):
                    took = None
                self.samples.append((start, took))
                self.stop.wait(self.every)
        finally:
            self.requester.close()

    def worst(self, since: float, until: float = float("inf")) -> float:
        """The longest wait of the queries started in [since, until); inf for one unanswered."""
        waits = [float("inf") if took is None else took
                 for start, took in self.samples if since <= start < until]
        if not waits:
            raise AssertionError("no probe in that window")
        return max(waits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.flood")
    parser.add_argument("kind", choices=("submit", "status"))
    parser.add_argument("endpoints")
    parser.add_argument("n", type=int)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--patience", type=float, default=30.0)
    parser.add_argument("--first-id", type=int, default=None)
    args = parser.parse_args(argv)
    print(json.dumps(flood(args.kind, Endpoints.load(args.endpoints), args.n, args.rate,
                           args.patience, args.first_id)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
