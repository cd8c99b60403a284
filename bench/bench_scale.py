"""The live scheduler's intake at scale: journaled submissions per second from concurrent clients.

Real processes and sockets: a broker and the scheduler service (`muri-s`, default preset) as
subprocesses, N stand-in agents in this process (bench_service.LightAgent: they register,
heartbeat and answer launches and stops at once), and M client processes, each submitting
its own range of job ids one request at a time for `--seconds`, as a feeder does. A
submission counts once the scheduler acknowledged it, which it does only after the job's
journal commit is durable (synchronous=FULL). Reported: acknowledged submissions per second
(all clients together), each request's latency (median, p99), the scheduler's CPU share over
the run (its user+system time over the wall time; 1.0 is one core), the machine's load and
busy share, the queue the rounds had to plan at the end, and the check that nothing was lost:
every acknowledged id is in the journal exactly once, and the journal holds no job that no
client submitted.

Run from the repository root (the issue's case: 8 clients for a minute):
    python bench/bench_scale.py --clients 8 --seconds 60 [--agents 16]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_service import (LightAgent, cluster_files, cpu_seconds, machine_busy,  # noqa: E402
                           start_agents, start_services, stop_cluster)
from broker.client import Requester  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from traces.feeder import job_map  # noqa: E402
from traces.generate import generate  # noqa: E402

CLIENT_RANGE = 10_000_000  # client c submits ids c * CLIENT_RANGE + 1, + 2, ...


def client(ep_file: str, index: int, start_at: float, seconds: float, out) -> None:
    """Submit jobs one request at a time from `start_at` (wall clock) for `seconds`; put
    (acknowledged ids, latencies in ms, refused) on `out`."""
    endpoints = Endpoints.load(Path(ep_file))
    requester = Requester(endpoints, f"bench-client-{index}", timeout=30.0, retries=5)
    shapes = generate(500, seed=100 + index, max_gpus=8, backlog=True,
                      median_duration=10 * 86400.0, min_duration=86400.0)
    acked, latencies, refused = [], [], 0
    time.sleep(max(0.0, start_at - time.time()))  # all clients begin together
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        rec = dataclasses.replace(shapes[n % len(shapes)], job_id=index * CLIENT_RANGE + n + 1)
        n += 1
        began = time.monotonic()
        reply = requester.request("scheduler", "job.submit", job=job_map(rec))
        latencies.append((time.monotonic() - began) * 1000.0)
        if reply["body"].get("accepted"):
            acked.append(rec.job_id)
        else:
            refused += 1
    out.put((acked, latencies, refused))


def journal_check(path: Path, acked: list[int]) -> dict:
    """Every acknowledged id in the journal once; no journaled job that no client sent."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ids = [row[0] for row in db.execute("SELECT job_id FROM jobs")]
        submitted = db.execute("SELECT job_id, COUNT(*) FROM events WHERE kind='submitted' "
                               "GROUP BY job_id HAVING COUNT(*) > 1").fetchall()
    finally:
        db.close()
    journaled = set(ids)
    want = set(acked)
    return {"acknowledged": len(acked), "journaled": len(journaled),
            "acknowledged_twice": len(acked) - len(want),
            "acknowledged_missing": len(want - journaled),
            "journaled_unacknowledged": len(journaled - want),  # in flight at the end
            "submitted_events_twice": len(submitted),
            "foreign": sum(1 for j in journaled if not 1 <= j % CLIENT_RANGE <= CLIENT_RANGE)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--target", type=float, default=1000.0, help="submissions per second")
    args = ap.parse_args(argv)
    run_dir, spec_file, ep_file = cluster_files("interlace-bench-scale-", args.agents)
    procs: list[subprocess.Popen] = []
    agents: list[LightAgent] = []
    stop = threading.Event()
    try:
        endpoints, sched = start_services(procs, run_dir, spec_file, ep_file, args.heartbeat)
        _, errors = start_agents(endpoints, args.agents, args.heartbeat, stop, agents)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        start_at = time.time() + 3.0  # the clients' imports done before the clock starts
        clients = [ctx.Process(target=client, args=(str(ep_file), c + 1, start_at,
                                                    args.seconds, out))
                   for c in range(args.clients)]
        for p in clients:
            p.start()
        time.sleep(max(0.0, start_at - time.time()))
        cpu0, busy0, load0 = cpu_seconds(sched.pid), machine_busy(), os.getloadavg()[0]
        wall0 = time.monotonic()
        results = [out.get(timeout=args.seconds + 120) for _ in clients]
        wall = time.monotonic() - wall0
        cpu1, busy1 = cpu_seconds(sched.pid), machine_busy()
        load1 = os.getloadavg()[0]
        for p in clients:
            p.join(10)
        acked = [j for r in results for j in r[0]]
        latencies = sorted(x for r in results for x in r[1])
        stop_cluster(stop, agents, procs)
        procs, agents = [], []
        check = journal_check(run_dir / "journal.db", acked)
        result = {
            "case": f"{args.clients} clients x {args.seconds:g} s, {args.agents} stand-in "
                    "agents, muri-s default preset",
            "submissions_per_s": round(len(acked) / wall, 1),
            "latency_ms": {"median": round(statistics.median(latencies), 2),
                           "p99": round(latencies[int(0.99 * (len(latencies) - 1))], 2)},
            "refused": sum(r[2] for r in results),
            "scheduler_cpu_share": round((cpu1 - cpu0) / wall, 2),
            "machine_busy_share": round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 2),
            "cores": os.cpu_count(),
            "load_1min": [round(load0, 2), round(load1, 2)],
            "heartbeats_refused": len(errors),
            "journal": check,
            "target_per_s": args.target,
        }
        result["lost"] = bool(check["acknowledged_missing"] or check["acknowledged_twice"]
                              or check["submitted_events_twice"] or check["foreign"])
        result["meets_target"] = result["submissions_per_s"] >= args.target and not result["lost"]
        print(json.dumps(result))
        return 0
    finally:
        stop_cluster(stop, agents, procs)


if __name__ == "__main__":
    sys.exit(main())
