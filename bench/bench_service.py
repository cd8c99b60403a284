"""Scheduler service under load: round latency with many agents and a deep queue.

Real processes and sockets: a broker and the scheduler service (`muri-s`, default preset) as
subprocesses; N lightweight agents in this process (one broker service each, registering and
heartbeating like node_agent, answering launch/stop at once and running nothing: a stand-in
for nodes, since hundreds of trainers do not fit on this machine); a backlog of jobs submitted
at t=0, then single arrivals one by one, each starting a round. The latencies are the ones
the service itself logs for every round (`round` events, `latency_ms`), read from its log.
It also reports heartbeats the scheduler wrongly declared missed and the service's RSS: at
the start, once the backlog is in, halfway through the arrivals and at the end (flat from the
backlog on, since the arrivals only replace what the rounds keep).

Run from the repository root:
    python bench/bench_service.py [--agents 64] [--jobs 1000] [--arrivals 30]
    python bench/bench_service.py --agents 256 --jobs 5000 --target-ms 1000 --target-p99-ms 1000
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import structlog  # noqa: E402

from broker.client import HandlerError, Requester, Service  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from broker.testing import wait_until  # noqa: E402
from traces.generate import generate  # noqa: E402
from traces.muri_csv import write_trace  # noqa: E402
from scheduler.report import read_records  # noqa: E402
from traces.feeder import job_map  # noqa: E402

GPUS_PER_NODE = 8


class LightAgent:
    """One node as the scheduler sees it: registers, heartbeats, accepts launches and stops."""

    def __init__(self, endpoints: Endpoints, node: str, heartbeat: float):
        self.node, self.heartbeat = node, heartbeat
        self.running: dict[int, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.service = Service(endpoints, f"agent.{node}", self.handle, heartbeat=0.5)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.requester = Requester(endpoints, f"agent.{node}", timeout=5.0, retries=3)
        self.registered = False

    def serve(self) -> None:
        try:
            self.service.serve(self.stop)
        finally:
            self.service.close()

    def handle(self, msg) -> dict:
        with self.lock:
            if msg.type == "job.launch":
                self.running[int(msg["job_id"])] = float(msg["start_iteration"])
                return {"launched": True, "already_running": False, "pid": 0,
                        "gpus": list(msg["gpus"])}
            if msg.type == "job.stop":
                its = self.running.pop(int(msg["job_id"]), None)
                return {"iterations": its or 0.0, "was_running": its is not None,
                        "finished": False, "exit_code": 3}
        raise HandlerError("unsupported", msg.type)

    def beat(self) -> None:
        with self.lock:
            running = [{"job_id": j, "iterations": i} for j, i in sorted(self.running.items())]
        if not self.registered:
            self.requester.request("scheduler", "agent.register", node=self.node,
                                   gpus=list(range(GPUS_PER_NODE)), cpus=32, mem=256.0,
                                   running=running)
            self.registered = True
        else:
            self.requester.request("scheduler", "agent.heartbeat", node=self.node,
                                   running=running)


def heartbeats(agents: list[LightAgent], stop: threading.Event, errors: list) -> None:
    period = agents[0].heartbeat
    while not stop.is_set():
        started = time.monotonic()
        for agent in agents:
            try:
                agent.beat()
            except Exception as err:  # counted: a refused heartbeat is a wrongly missed one
                errors.append(f"{agent.node}: {err!r}")
                agent.registered = False
        stop.wait(max(0.0, period - (time.monotonic() - started)))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def events(log: Path, name: str) -> list[dict]:
    return [rec for rec in read_records(log)[0] if rec["event"] == name]


def round_latencies(log: Path) -> list[dict]:
    return events(log, "round")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1000, help="backlog submitted at t=0")
    ap.add_argument("--arrivals", type=int, default=30, help="single arrivals after the backlog")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--target-ms", type=float, default=200.0, help="median round latency")
    ap.add_argument("--target-p99-ms", type=float, default=None,
                    help="p99 round latency (the load case: 256 agents, 5,000 jobs: 1000)")
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    run_dir = Path(tempfile.mkdtemp(prefix="interlace-bench-service-"))
    spec_file = run_dir / "spec.csv"
    spec_file.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                         f"1,{args.agents},{GPUS_PER_NODE},32,256\n")
    ep_file = run_dir / "endpoints.json"
    procs = []
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    agents: list[LightAgent] = []
    stop = threading.Event()
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "broker.broker", "--ports", "0,0,0", "--endpoints-file",
             str(ep_file), "--run-dir", str(run_dir)], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(ep_file.exists, 30, 0.05)
        endpoints = Endpoints.load(ep_file)
        sched = subprocess.Popen(
            [sys.executable, "-m", "scheduler.service", "--spec", str(spec_file), "--policy",
             "muri-s", "--endpoints", str(ep_file), "--run-dir", str(run_dir),
             "--time-scale", "1", "--round", "60", "--agent-timeout", str(10 * args.heartbeat)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(sched)
        agents = [LightAgent(endpoints, f"n{i}", args.heartbeat) for i in range(args.agents)]
        for agent in agents:
            agent.thread.start()
        errors: list[str] = []
        beats = threading.Thread(target=heartbeats, args=(agents, stop, errors), daemon=True)
        beats.start()
        feeder = Requester(endpoints, "bench-feeder", timeout=10.0, retries=5)
        wait_until(lambda: all(a.registered for a in agents), 60, 0.1)
        rss = {"start": rss_mb(sched.pid)}
        records = generate(args.jobs + args.arrivals, seed=11, max_gpus=8, backlog=True,
                           median_duration=10 * 86400.0, min_duration=86400.0)
        write_trace(run_dir / "trace.csv", records)
        for rec in records[:args.jobs]:
            feeder.request("scheduler", "job.submit", job=job_map(rec))
        log = run_dir / "scheduler.log"
        wait_until(lambda: log.exists() and round_latencies(log), 120, 0.2)
        rss["backlog_in"] = rss_mb(sched.pid)
        backlog_rounds = len(round_latencies(log))
        for n, rec in enumerate(records[args.jobs:]):
            if n == args.arrivals // 2:
                rss["middle"] = rss_mb(sched.pid)
            seen = len(round_latencies(log))
            feeder.request("scheduler", "job.submit", job=job_map(rec))
            wait_until(lambda: len(round_latencies(log)) > seen, 60, 0.02)
        rss["end"] = rss_mb(sched.pid)
        rounds = round_latencies(log)
        steady = [r["latency_ms"] for r in rounds[backlog_rounds:]]
        first = rounds[0]["latency_ms"]
        result = {
            "case": f"scheduler service, {args.agents} agents, {args.jobs} queued jobs",
            "rounds": len(steady), "first_round_ms": round(first, 1),
            "median_ms": round(statistics.median(steady), 1),
            "p99_ms": round(sorted(steady)[min(len(steady) - 1, int(0.99 * len(steady)))], 1),
            "max_ms": round(max(steady), 1), "target_median_ms": args.target_ms,
            "heartbeats_refused": len(errors),
            "agents_declared_dead": len(events(log, "agent_dead")), "scheduler_rss_mb": {k: round(v, 1)
                                                                    for k, v in rss.items()},
        }
        result["meets_target"] = (result["median_ms"] < args.target_ms and not errors
                                  and not result["agents_declared_dead"]
                                  and (args.target_p99_ms is None
                                       or result["p99_ms"] < args.target_p99_ms))
        print(json.dumps(result))
        return 0
    finally:
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
