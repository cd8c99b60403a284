"""What Prometheus scraping costs the scheduler: its rounds with and without a scrape loop.

The same set-up as bench/bench_service.py (real broker and scheduler service as
subprocesses, the scheduler with `--metrics`; N light agents in this process; a backlog of
jobs, then single arrivals, each waiting for the round it triggered to be applied), so both
latencies are that benchmark's: planning (`core.round()`, as the service logs it) and the
whole round (arrival sent -> last agent reply of its round). The arrivals alternate in
blocks between "quiet" and "scraped" (a thread GETs /metrics every --scrape-every seconds,
10x Prometheus' usual fastest interval at the default 0.1 s), so drift of the machine's load
falls on both sides alike. The overhead is the relative change of the whole round's median
(and mean) from quiet to scraped; the target is under 5%.

Run from the repository root:
    python bench/bench_metrics.py [--agents 64] [--jobs 1000] [--arrivals 80] [--scrape-every 0.1]
"""
from __future__ import annotations

import argparse
import json
import logging
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import structlog  # noqa: E402

from bench_service import (LightAgent, LogTail, arrival_round, heartbeats,  # noqa: E402
                           percentiles, triggered_round)
from broker.client import Requester  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from broker.testing import wait_until  # noqa: E402
from traces.feeder import job_map  # noqa: E402
from traces.generate import generate  # noqa: E402

GPUS_PER_NODE = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Scraper:
    """GETs /metrics every `every` seconds while `on` is set; keeps each scrape's latency."""

    def __init__(self, url: str, every: float):
        self.url, self.every = url, every
        self.on, self.stop = threading.Event(), threading.Event()
        self.latencies: list[float] = []
        self.errors = 0
        self.size = 0
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def scrape(self) -> None:
        began = time.perf_counter()
        try:
            with urllib.request.urlopen(self.url, timeout=10) as reply:
                self.size = len(reply.read())
            self.latencies.append(time.perf_counter() - began)
        except OSError:
            self.errors += 1

    def loop(self) -> None:
        while not self.stop.is_set():
            if self.on.is_set():
                self.scrape()
            self.stop.wait(self.every)


def summary(arrivals: list[dict]) -> dict:
    whole = [a["whole_ms"] for a in arrivals]
    return {"arrivals": len(arrivals),
            "planning": percentiles([a["planning_ms"] for a in arrivals]),
            "whole_round": percentiles(whole),
            "whole_round_mean_ms": round(statistics.fmean(whole), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1000, help="backlog submitted at t=0")
    ap.add_argument("--arrivals", type=int, default=80, help="single arrivals, half scraped")
    ap.add_argument("--block", type=int, default=5, help="arrivals per quiet/scraped block")
    ap.add_argument("--scrape-every", type=float, default=0.1, help="seconds between scrapes")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--round-timeout", type=float, default=600.0)
    ap.add_argument("--target-pct", type=float, default=5.0)
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    run_dir = Path(tempfile.mkdtemp(prefix="interlace-bench-metrics-"))
    spec_file = run_dir / "spec.csv"
    spec_file.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                         f"1,{args.agents},{GPUS_PER_NODE},32,256\n")
    ep_file = run_dir / "endpoints.json"
    port = free_port()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    procs: list[subprocess.Popen] = []
    agents: list[LightAgent] = []
    stop = threading.Event()
    scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape_every)
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "broker.broker", "--ports", "0,0,0", "--endpoints-file",
             str(ep_file), "--run-dir", str(run_dir)], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(ep_file.exists, 30, 0.05)
        endpoints = Endpoints.load(ep_file)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "scheduler.live", "--spec", str(spec_file), "--policy",
             "muri-s", "--endpoints", str(ep_file), "--run-dir", str(run_dir),
             "--time-scale", "1", "--round", "60", "--agent-timeout", str(10 * args.heartbeat),
             "--metrics", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        acks: list[tuple[float, str, int]] = []
        agents = [LightAgent(endpoints, f"n{i}", args.heartbeat, acks)
                  for i in range(args.agents)]
        for agent in agents:
            agent.thread.start()
        errors: list[str] = []
        threading.Thread(target=heartbeats, args=(agents, stop, errors), daemon=True).start()
        feeder = Requester(endpoints, "bench-feeder", timeout=10.0, retries=5)
        wait_until(lambda: all(a.registered for a in agents), 60, 0.1)
        records = generate(args.jobs + args.arrivals, seed=11, max_gpus=8, backlog=True,
                           median_duration=10 * 86400.0, min_duration=86400.0)
        for rec in records[:args.jobs]:
            feeder.request("scheduler", "job.submit", job=job_map(rec))
        tail = LogTail(run_dir / "scheduler.log")
        triggered_round(tail, records[args.jobs - 1].job_id, args.round_timeout)
        scraper.thread.start()
        sides: dict[str, list[dict]] = {"quiet": [], "scraped": []}
        for n, rec in enumerate(records[args.jobs:]):
            scraped = (n // args.block) % 2 == 1
            if scraped and not scraper.on.is_set():
                scraper.on.set()
                scraper.scrape()  # the loop is on before this block's first arrival
            elif not scraped:
                scraper.on.clear()
            sent = time.time()
            feeder.request("scheduler", "job.submit", job=job_map(rec))
            round_ = arrival_round(tail, rec.job_id, sent, acks, args.round_timeout)
            sides["scraped" if scraped else "quiet"].append(round_)
        scraper.on.clear()
        quiet, loud = summary(sides["quiet"]), summary(sides["scraped"])
        median_pct = 100.0 * (loud["whole_round"]["median_ms"]
                              / quiet["whole_round"]["median_ms"] - 1.0)
        mean_pct = 100.0 * (loud["whole_round_mean_ms"] / quiet["whole_round_mean_ms"] - 1.0)
        result = {
            "case": f"scheduler service, {args.agents} agents, {args.jobs} queued jobs, "
                    f"/metrics every {args.scrape_every:g} s on the scraped side",
            "quiet": quiet, "scraped": loud,
            "whole_round_overhead_median_pct": round(median_pct, 2),
            "whole_round_overhead_mean_pct": round(mean_pct, 2),
            "scrapes": len(scraper.latencies), "scrape_errors": scraper.errors,
            "scrape": percentiles([s * 1000.0 for s in scraper.latencies])
            if scraper.latencies else None,
            "scrape_bytes": scraper.size,
            "target_pct": args.target_pct,
            "heartbeats_refused": len(errors),
            "meets_target": median_pct < args.target_pct and not errors
            and scraper.errors == 0 and bool(scraper.latencies),
        }
        print(json.dumps(result))
        return 0
    finally:
        scraper.stop.set()
        stop.set()
        for agent in agents:
            agent.stop.set()
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
