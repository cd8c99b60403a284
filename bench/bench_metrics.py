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

On a loaded machine the rounds' own spread is larger than that, so the same is measured a
second way, in one process and without sockets: `core.round()` at the same queue depth, under
the state's lock as the service runs it, with a thread rendering the registry (the very
exposition /metrics serves) every --scrape-every seconds on alternate rounds, next to an A/A
control (the same alternation with no scraping) that shows the noise floor of the figure;
and the CPU each scrape takes (its thread's CPU time: waiting for the lock costs none), whose
share of every --scrape-every seconds bounds what the scrapes can take from the rounds.

Run from the repository root:
    python bench/bench_metrics.py [--agents 64] [--jobs 1000] [--arrivals 120] [--scrape-every 0.1]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import structlog  # noqa: E402

from bench_service import (LightAgent, LogTail, arrival_round, cluster_files,  # noqa: E402
                           percentiles, start_agents, start_services, stop_cluster,
                           triggered_round, whole_round)
from broker.client import Requester  # noqa: E402
from traces.feeder import job_map  # noqa: E402
from traces.generate import generate  # noqa: E402

GPUS_PER_NODE = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The scrape loop runs in a process of its own, as Prometheus would: a thread in this
# process would take the GIL from the light agents and slow their replies, not the scheduler.
# It scrapes while the flag file exists, and prints one JSON line (its latencies) on exit.
_LOOP = """
import json, os, signal, sys, time, urllib.request
url, every, flag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
out = {"latencies": [], "errors": 0, "size": 0}
signal.signal(signal.SIGTERM, lambda *_: (print(json.dumps(out), flush=True), os._exit(0)))
while True:
    if os.path.exists(flag):
        began = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                out["size"] = len(reply.read())
            out["latencies"].append(time.perf_counter() - began)
        except OSError:
            out["errors"] += 1
    time.sleep(every)
"""


class Scraper:
    """A process GETting /metrics every `every` seconds while switched `on`."""

    def __init__(self, url: str, every: float, flag: Path):
        self.flag = flag
        self.proc = subprocess.Popen([sys.executable, "-c", _LOOP, url, str(every), str(flag)],
                                     stdout=subprocess.PIPE, text=True)
        self.latencies: list[float] = []
        self.errors = self.size = 0

    def on(self, scraping: bool) -> None:
        if scraping:
            self.flag.touch()
        else:
            self.flag.unlink(missing_ok=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        if out.strip():
            got = json.loads(out.strip().splitlines()[-1])
            self.latencies, self.errors, self.size = got["latencies"], got["errors"], got["size"]


def summary(arrivals: list[dict]) -> dict:
    whole = [a["whole_ms"] for a in arrivals]
    return {"arrivals": len(arrivals),
            "planning": percentiles([a["planning_ms"] for a in arrivals]),
            "whole_round": percentiles(whole),
            "whole_round_mean_ms": round(statistics.fmean(whole), 2)}


def in_process(jobs: int, agents: int, rounds: int, every: float) -> dict:
    """Median core.round() with and without a scrape thread, alternating round by round."""
    from prometheus_client import generate_latest

    from scheduler.live.ledger import Placed
    from scheduler.live.metrics import SchedulerMetrics
    from scheduler.live.options import Options
    from scheduler.live.state import LiveState
    from specs.spec import ClusterSpec

    class Quiet:
        def __getattr__(self, level: str):
            return lambda event, **kw: None

    cluster = ClusterSpec(num_switch=1, nodes_per_switch=agents, gpus_per_node=GPUS_PER_NODE,
                          cpus_per_node=32, mem_per_node=256)
    out = {}
    for case in ("aa_control", "scraped"):
        with tempfile.TemporaryDirectory() as tmp:
            state = LiveState(Options(spec=cluster, policy="muri-s", run_dir=Path(tmp)),
                              Quiet(), time.monotonic)
            metrics = SchedulerMetrics(state)
            records = generate(jobs + rounds, seed=11, max_gpus=8, backlog=True)
            for rec in records[:jobs]:
                state.core.submit(rec, 0.0)
            for group in state.core.round(1.0).groups:
                for j in group.jobs:
                    state.ledger.place(j, Placed(group.jobs, group.tt, group.placement), {})
            on, stop, scrapes = threading.Event(), threading.Event(), []

            def loop() -> None:
                while not stop.is_set():
                    if on.is_set():  # CPU of this thread only: waiting for the lock is free
                        began = time.thread_time()
                        generate_latest(metrics.registry)
                        scrapes.append(time.thread_time() - began)
                    stop.wait(every)

            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            sides: dict[bool, list[float]] = {False: [], True: []}
            for i, rec in enumerate(records[jobs:]):
                scraped = i % 2 == 1
                on.set() if scraped and case == "scraped" else on.clear()
                with state.lock:
                    state.core.submit(rec, 2.0 + i)
                    began = time.perf_counter()
                    state.core.round(2.0 + i)
                    sides[scraped].append(time.perf_counter() - began)
            stop.set()
            thread.join()
            state.journal.close()
            quiet, loud = statistics.median(sides[False]), statistics.median(sides[True])
            out[case] = {"rounds_each": len(sides[False]),
                         "quiet_median_ms": round(quiet * 1000, 1),
                         "other_median_ms": round(loud * 1000, 1),
                         "overhead_pct": round(100.0 * (loud / quiet - 1.0), 2),
                         "scrapes": len(scrapes)}
            if scrapes:  # the CPU a scrape takes from the rounds (the GIL), every `every` s
                cpu = statistics.median(scrapes)
                out[case].update(scrape_cpu_median_ms=round(cpu * 1000, 2),
                                 scrape_cpu_share_pct=round(100.0 * cpu / every, 2))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1000, help="backlog submitted at t=0")
    ap.add_argument("--arrivals", type=int, default=120, help="single arrivals, half scraped")
    ap.add_argument("--block", type=int, default=1, help="arrivals per quiet/scraped block")
    ap.add_argument("--in-process-rounds", type=int, default=60,
                    help="rounds of the in-process measurement, half scraped (0: skip it)")
    ap.add_argument("--scrape-every", type=float, default=0.1, help="seconds between scrapes")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--round-timeout", type=float, default=600.0)
    ap.add_argument("--target-pct", type=float, default=5.0)
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    run_dir, spec_file, ep_file = cluster_files("interlace-bench-metrics-", args.agents)
    port = free_port()
    procs: list[subprocess.Popen] = []
    agents: list[LightAgent] = []
    stop = threading.Event()
    scraper = None
    try:
        endpoints, _ = start_services(procs, run_dir, spec_file, ep_file, args.heartbeat,
                                      ("--metrics", f"127.0.0.1:{port}"))
        acks, errors = start_agents(endpoints, args.agents, args.heartbeat, stop, agents)
        feeder = Requester(endpoints, "bench-feeder", timeout=10.0, retries=5)
        records = generate(args.jobs + args.arrivals, seed=11, max_gpus=8, backlog=True,
                           median_duration=10 * 86400.0, min_duration=86400.0)
        for rec in records[:args.jobs]:
            feeder.request("scheduler", "job.submit", job=job_map(rec))
        tail = LogTail(run_dir / "scheduler.log")
        triggered_round(tail, records[args.jobs - 1].job_id, args.round_timeout)
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape_every,
                          run_dir / "scraping")
        sides: dict[str, list[dict]] = {"quiet": [], "scraped": []}
        for n, rec in enumerate(records[args.jobs:]):
            scraped = (n // args.block) % 2 == 1
            scraper.on(scraped)
            sent = time.time()
            feeder.request("scheduler", "job.submit", job=job_map(rec))
            round_ = arrival_round(tail, rec.job_id, sent, args.round_timeout)
            sides["scraped" if scraped else "quiet"].append(round_)
        scraper.on(False)
        scraper.close()
        sides = {side: [whole_round(a, acks) for a in rounds] for side, rounds in sides.items()}
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
        if args.in_process_rounds:
            result["in_process_planning"] = in_process(args.jobs, args.agents,
                                                       args.in_process_rounds, args.scrape_every)
        print(json.dumps(result))
        return 0
    finally:
        if scraper is not None:
            scraper.close()
        stop_cluster(stop, agents, procs)


if __name__ == "__main__":
    sys.exit(main())
