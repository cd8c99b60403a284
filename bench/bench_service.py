"""Scheduler service under load: round latency with many agents and a deep queue.

Real processes and sockets: a broker and the scheduler service (`muri-s`, default preset) as
subprocesses; N lightweight agents in this process (one broker service each, registering and
heartbeating like node_agent, answering launch/stop/regroup at once and running nothing: a
stand-in for nodes, since hundreds of trainers do not fit on this machine); a backlog of jobs
submitted at t=0, then single arrivals one by one, each starting a round. Two latencies per arrival:
the planning time the service logs for the round (`round` events, `latency_ms`: `core.round()`
alone), and the whole round, from the arrival (the submit request's send time) to the last
launch, stop or regroup the agents acknowledged in the round it triggered (each LightAgent
timestamps its replies; a round that sends the agents nothing ends at its `round_done` line).
Each arrival waits until the round it triggered is applied (`round_done` in the service's
log) before the next is sent, so every agent reply is counted in the right round.
It also reports heartbeats the scheduler wrongly declared missed and the service's RSS: at
the start, once the backlog is in, halfway through the arrivals and at the end (flat from the
backlog on, since the arrivals only replace what the rounds keep).

With --real-agents the agents are the node agent's own code, --per-host of them to an
agent_host.py process (stand-in trainers, no process each); their replies come back when
they stop, and the agents the scheduler declared dead are judged against each agent's own
record of the heartbeats it sent (`false_deaths`). --load N runs N busy processes beside.

Run from the repository root (the README's figures: 200 arrivals, so that p99 is not the max):
    python bench/bench_service.py [--agents 64] [--jobs 1000] [--arrivals 30]
    python bench/bench_service.py --agents 256 --jobs 5000 --arrivals 200 --target-ms 1000 \
        --target-p99-ms 1000
    python bench/bench_service.py --agents 1024 --jobs 10000 --arrivals 60 --real-agents
The targets (--target-ms, --target-p99-ms) are for the planning time.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import structlog  # noqa: E402

from broker.client import HandlerError, Requester, Service  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from broker.testing import wait_until  # noqa: E402
from traces.generate import generate  # noqa: E402
from traces.muri_csv import write_trace  # noqa: E402
from traces.feeder import job_map  # noqa: E402

GPUS_PER_NODE = 8


class LightAgent:
    """One node as the scheduler sees it: registers, heartbeats, accepts launches, stops and
    regroups, and timestamps each reply."""

    def __init__(self, endpoints: Endpoints, node: str, heartbeat: float,
                 acks: list[tuple[float, str, int]]):
        self.node, self.heartbeat = node, heartbeat
        self.acks = acks  # shared by all agents: (wall time of the reply, type, job)
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
        reply = self.answer(msg)
        # wall time, not monotonic: it is compared with the service's log timestamps too
        # (one list for all agents; list.append is atomic)
        self.acks.append((time.time(), msg.type, int(msg["job_id"])))
        return reply

    def answer(self, msg) -> dict:
        with self.lock:
            if msg.type == "job.launch":
                self.running[int(msg["job_id"])] = float(msg["start_iteration"])
                return {"launched": True, "already_running": False, "pid": 0,
                        "gpus": list(msg["gpus"])}
            if msg.type == "job.stop":
                its = self.running.pop(int(msg["job_id"]), None)
                return {"iterations": its or 0.0, "was_running": its is not None,
                        "finished": False, "exit_code": 3}
            if msg.type == "job.regroup" and int(msg["job_id"]) in self.running:
                # like the node agent with emulated trainers: the job goes on where it is
                return {"regrouped": True, "iterations": self.running[int(msg["job_id"])]}
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


def log_time(record: dict) -> float:
    """Epoch seconds of a log record (structlog's ISO `ts`)."""
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()


def percentiles(values: list[float]) -> dict[str, float]:
    """Median, p99 (`sorted[int(0.99 n)]`, as the simulator's metrics) and max, in ms."""
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
            "max_ms": round(ordered[-1], 1)}


class LogTail:
    """The service's JSON-lines log, read incrementally: polling it often stays cheap (a
    full re-read of a 5,000-job log would compete with the service for the CPU)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.records = path, 0, []

    def poll(self) -> list[dict]:
        if self.path.exists():
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self.offset += len(complete)
            for line in complete.decode("utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("event"), str):
                    self.records.append(record)
        return self.records


def triggered_round(tail: LogTail, job_id: int, timeout: float) -> tuple[dict, dict]:
    """The round a submission triggered, once applied: its `round` and `round_done` records.

    The service logs `job_submitted` and plans a round each under its lock, and rounds run
    one at a time in its loop: the first `round` after the job's `job_submitted` is the one
    that took its arrival, and the first `round_done` after that round closes it.
    """
    def applied():
        records = tail.poll()
        at = next((i for i in range(len(records) - 1, -1, -1)
                   if records[i]["event"] == "job_submitted"
                   and records[i].get("job_id") == job_id), None)
        if at is None:
            return None
        planned = next((i for i in range(at + 1, len(records))
                        if records[i]["event"] == "round"), None)
        if planned is None:
            return None
        done = next((r for r in records[planned + 1:] if r["event"] == "round_done"), None)
        return None if done is None else (records[planned], done)

    return wait_until(applied, timeout, 0.01)


def arrival_round(tail: LogTail, job_id: int, sent: float, timeout: float) -> dict:
    """The round an arrival sent at `sent` triggered, once applied: its planning time and
    the window its agent replies fall in (`whole_round` reads them when all are in)."""
    planned, done = triggered_round(tail, job_id, timeout)
    end = log_time(done)
    # rounds (a tick) that ended inside the window would mix their replies in: counted
    others = sum(1 for r in tail.records if r["event"] == "round_done" and r is not done
                 and sent <= log_time(r) <= end)
    return {"planning_ms": planned["latency_ms"], "window": (sent, end),
            "apply_ms": done["apply_ms"], "other_rounds": others,
            "stops": len(planned["stops"]), "launches": len(planned["launches"]),
            "regroups": len(planned.get("regroups", []))}


def whole_round(arrival: dict, acks: list[tuple[float, str, int]]) -> dict:
    """The arrival with its whole-round time: from its send to the last agent reply that came
    before its round's `round_done` (the previous round was applied before the arrival was
    sent, so every reply in that window is this round's); a round that sent the agents
    nothing ends at its `round_done`."""
    sent, end = arrival["window"]
    replies = [a[0] for a in acks if sent <= a[0] <= end]
    return dict(arrival, acks=len(replies), whole_ms=(max(replies, default=end) - sent) * 1000.0)


class StatusProbe:
    """`status.query` every `every` seconds from a client of its own, as a user's
    `interlace-status` would ask while rounds run: each reply's (send time, latency ms)."""

    def __init__(self, endpoints: Endpoints, every: float):
        self.endpoints, self.every = endpoints, every
        self.stop, self.times = threading.Event(), []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = Requester(self.endpoints, "bench-status", timeout=30.0, retries=0)
        try:
            while not self.stop.wait(self.every):
                sent = time.time()
                client.request("scheduler", "status.query")
                self.times.append((sent, (time.time() - sent) * 1000.0))
        finally:
            client.close()

    def during(self, rounds: list[dict]) -> list[float]:
        """The latencies of the queries that were out while a round planned (its `round`
        record is logged when planning ends, `latency_ms` after it began)."""
        windows = [(log_time(r) - r["latency_ms"] / 1000.0, log_time(r)) for r in rounds]
        return [ms for sent, ms in self.times
                if any(sent <= end and sent + ms / 1000.0 >= begin for begin, end in windows)]


def false_deaths(records: list[dict], beats: dict[str, list], timeout: float) -> list[str]:
    """The agents the scheduler declared dead (`agent_dead` in its log) although, by the
    agent's own record (`beats`: node -> [wall time sent, acknowledged] of each heartbeat),
    it sent a heartbeat less than `timeout` before."""
    wrong = []
    for r in records:
        if r["event"] != "agent_dead":
            continue
        at, node = log_time(r), r.get("node")
        if any(at - timeout < sent <= at for sent, _ in beats.get(node, ())):
            wrong.append(f"{node} at {at:.1f}")
    return wrong


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class Usage:
    """A process's CPU share (user+system over wall; 1.0 is one core) and the machine's busy
    share and load between `__init__` and `end`."""

    def __init__(self, pid: int):
        self.pid = pid
        self.cpu, self.busy = cpu_seconds(pid), machine_busy()
        self.wall, self.load = time.monotonic(), os.getloadavg()[0]

    def end(self) -> dict:
        wall = time.monotonic() - self.wall
        busy = machine_busy()
        return {"scheduler_cpu_share": round((cpu_seconds(self.pid) - self.cpu) / wall, 2),
                "machine_busy_share": round((busy[0] - self.busy[0])
                                            / max(1, busy[1] - self.busy[1]), 2),
                "cores": os.cpu_count(),
                "load_1min": [round(self.load, 2), round(os.getloadavg()[0], 2)]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1000, help="backlog submitted at t=0")
    ap.add_argument("--arrivals", type=int, default=30, help="single arrivals after the backlog")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--round-timeout", type=float, default=600.0,
                    help="seconds to wait for a round to be applied (the backlog's included)")
    ap.add_argument("--target-ms", type=float, default=200.0, help="median round latency")
    ap.add_argument("--target-p99-ms", type=float, default=None,
                    help="p99 round latency (the load case: 256 agents, 5,000 jobs: 1000)")
    ap.add_argument("--real-agents", action="store_true",
                    help="the node agent's own code (agent_host.py, --per-host agents a "
                         "process, stand-in trainers) instead of the light stand-ins")
    ap.add_argument("--per-host", type=int, default=256)
    ap.add_argument("--load", type=int, default=0,
                    help="busy processes run beside the benchmark (2 x cores: twice loaded)")
    ap.add_argument("--pin", action="store_true",
                    help="the scheduler on a core of its own, everything else on the others")
    ap.add_argument("--status-every", type=float, default=0.1, metavar="SECONDS",
                    help="a status.query this often during the arrivals (0: none)")
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    pin = pin_split() if args.pin else (None, None)
    if pin[1] is not None:  # the light agents and the clients run in this process
        os.sched_setaffinity(0, {int(c) for c in pin[1].split(",")})
    run_dir, spec_file, ep_file = cluster_files("interlace-bench-service-", args.agents)
    procs: list = []
    agents: list[LightAgent] = []
    hosts: list = []
    stop = threading.Event()
    try:
        endpoints, sched = start_services(procs, run_dir, spec_file, ep_file, args.heartbeat,
                                          pin=pin)
        log = run_dir / "scheduler.log"
        tail = LogTail(log)
        if args.real_agents:
            hosts = start_hosts(ep_file, run_dir, args.agents, args.per_host, args.heartbeat,
                                tail, cpus=pin[1])
            acks, errors = [], []
        else:
            acks, errors = start_agents(endpoints, args.agents, args.heartbeat, stop, agents)
        procs.extend(busy_processes(args.load))
        feeder = Requester(endpoints, "bench-feeder", timeout=10.0, retries=5)
        rss = {"start": rss_mb(sched.pid)}
        records = generate(args.jobs + args.arrivals, seed=11, max_gpus=8, backlog=True,
                           median_duration=10 * 86400.0, min_duration=86400.0)
        write_trace(run_dir / "trace.csv", records)
        for rec in records[:args.jobs]:
            feeder.request("scheduler", "job.submit", job=job_map(rec))
        # the backlog is in once the round that took its last job is applied
        triggered_round(tail, records[args.jobs - 1].job_id, args.round_timeout)
        rss["backlog_in"] = rss_mb(sched.pid)
        usage = Usage(sched.pid)
        probe = StatusProbe(endpoints, args.status_every)
        if args.status_every > 0:
            probe.thread.start()
        arrivals = []
        for n, rec in enumerate(records[args.jobs:]):
            if n == args.arrivals // 2:
                rss["middle"] = rss_mb(sched.pid)
            sent = time.time()
            feeder.request("scheduler", "job.submit", job=job_map(rec))
            arrivals.append(arrival_round(tail, rec.job_id, sent, args.round_timeout))
        rss["end"] = rss_mb(sched.pid)
        used = usage.end()
        probe.stop.set()
        if probe.thread.is_alive():
            probe.thread.join(60)
        beats: dict[str, list] = {}
        if hosts:
            acks, beats = stop_hosts(hosts)
            hosts = []
        arrivals = [whole_round(a, acks) for a in arrivals]
        first = next(r for r in tail.records if r["event"] == "round")["latency_ms"]
        work = [a for a in arrivals if a["acks"]]
        dead = [r for r in tail.poll() if r["event"] == "agent_dead"]
        result = {
            "case": f"scheduler service, {args.agents} "
                    f"{'real' if args.real_agents else 'stand-in'} agents, {args.jobs} queued "
                    f"jobs, {args.load} busy processes beside",
            "arrivals": len(arrivals), "first_round_ms": round(first, 1),
            # core.round() alone, as the service logs it (latency_ms)
            "planning": percentiles([a["planning_ms"] for a in arrivals]),
            # arrival sent -> last agent reply of the round it triggered
            "whole_round": percentiles([a["whole_ms"] for a in arrivals]),
            # the service's own view: end of planning -> round_done (apply_ms)
            "apply": percentiles([a["apply_ms"] for a in arrivals]),
            "rounds_with_agent_work": len(work),
            "agent_replies": sum(a["acks"] for a in arrivals),
            "launches": sum(a["launches"] for a in arrivals),
            "stops": sum(a["stops"] for a in arrivals),
            "regroups": sum(a["regroups"] for a in arrivals),
            # rounds (ticks) that ran between an arrival and its own round: 0 expected
            "other_rounds_in_window": sum(a["other_rounds"] for a in arrivals),
            # agent replies between the first arrival and the last one's round_done that fell
            # in no arrival's round: 0 unless a round_done came before its round's last reply
            # (or a tick round sent some); after it, stopping the agent hosts requeues jobs
            "replies_outside_rounds": sum(
                1 for t, *_ in list(acks)
                if arrivals[0]["window"][0] <= t <= arrivals[-1]["window"][1]
                and not any(a["window"][0] <= t <= a["window"][1] for a in arrivals)),
            # status.query latency (full listing) during the arrivals, and of the queries
            # that were out while a round planned
            **({"status": percentiles([ms for _, ms in probe.times]),
                "status_while_planning": percentiles(probe.during(
                    [r for r in tail.records if r["event"] == "round"
                     and log_time(r) >= arrivals[0]["window"][0]]) or [0.0]),
                "status_queries": len(probe.times)} if probe.times else {}),
            "pinned": args.pin,
            "target_median_ms": args.target_ms,
            "heartbeats_refused": len(errors),
            "agents_declared_dead": len(dead),
            "scheduler_rss_mb": {k: round(v, 1) for k, v in rss.items()},
            **used,
        }
        if args.real_agents:  # judged by the agents' own heartbeat records
            sent = [b for node in beats.values() for b in node]
            result["heartbeats_sent"] = len(sent)
            result["heartbeats_unacknowledged"] = sum(1 for _, ok in sent if not ok)
            result["false_deaths"] = false_deaths(dead, beats, 10 * args.heartbeat)
        # the targets are for the planning time, as before
        result["median_ms"] = result["planning"]["median_ms"]
        result["p99_ms"] = result["planning"]["p99_ms"]
        result["meets_target"] = (result["median_ms"] < args.target_ms and not errors
                                  and not result["agents_declared_dead"]
                                  and (args.target_p99_ms is None
                                       or result["p99_ms"] < args.target_p99_ms))
        print(json.dumps(result))
        return 0
    finally:
        if hosts:
            stop_hosts(hosts)
        stop_cluster(stop, agents, procs)


def start_hosts(ep_file: Path, run_dir: Path, count: int, per_host: int, heartbeat: float,
                tail: LogTail, extra: tuple[str, ...] = (), cpus: str | None = None
                ) -> list[tuple[subprocess.Popen, Path]]:
    """Start `count` real node agents, `per_host` to an agent_host.py process (`extra`: more
    of its options), and wait until the scheduler logged every one registered. Each agent's
    run folder is RUN_DIR/agents/<node>."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    hosts = []
    for first in range(0, count, per_host):
        out = run_dir / f"host-{first}.json"
        hosts.append((subprocess.Popen(pinned(
            [sys.executable, str(ROOT / "bench" / "agent_host.py"), "--endpoints", str(ep_file),
             "--run-dir", str(run_dir / "agents"), "--first", str(first),
             "--count", str(min(per_host, count - first)), "--heartbeat", str(heartbeat),
             "--out", str(out), *extra], cpus), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=open(run_dir / f"host-{first}.err", "wb")), out))

    def registered() -> bool:
        return len({r.get("node") for r in tail.poll()
                    if r["event"] == "agent_registered"}) >= count
    try:
        wait_until(registered, 120, 0.2)
    except BaseException:  # the caller never gets them to stop: stopped here
        stop_hosts(hosts)
        raise
    return hosts


def stop_hosts(hosts: list[tuple[subprocess.Popen, Path]]) -> tuple[list, dict]:
    """Stop the agent hosts; their agents' replies (wall time, type, job, node) and heartbeat
    records (node -> [wall time sent, acknowledged])."""
    for proc, _ in hosts:
        proc.terminate()
    acks, beats = [], {}
    for proc, out in hosts:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            continue
        if out.exists():
            data = json.loads(out.read_text())
            acks.extend(tuple(a) for a in data["handled"])
            beats.update(data["heartbeats"])
    return acks, beats


def busy_processes(count: int) -> list[subprocess.Popen]:
    """`count` processes that spin on a core each: other work on the machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             stdout=subprocess.DEVNULL) for _ in range(count)]


def cluster_files(prefix: str, agents: int) -> tuple[Path, Path, Path]:
    """A fresh run folder, its spec (one node per stand-in agent, shaped as the project's
    8-GPU specs: an 8-GPU job asks for 48 CPUs, so nodes of fewer never run one) and the
    endpoints path."""
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))
    spec_file = run_dir / "spec.csv"
    spec_file.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                         f"1,{agents},{GPUS_PER_NODE},92,520\n")
    return run_dir, spec_file, run_dir / "endpoints.json"


def pinned(cmd: list[str], cpus: str | None) -> list[str]:
    """`cmd` run on `cpus` only (taskset's list, e.g. "0"), every thread of it; as is for None."""
    return cmd if cpus is None else ["taskset", "-c", cpus, *cmd]


def pin_split() -> tuple[str | None, str | None]:
    """(the scheduler's CPUs, everyone else's) for --pin: the scheduler on the first core of
    this process's, the rest on the others, as on a cluster whose agents run on their nodes."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    return str(cpus[0]), ",".join(str(c) for c in cpus[1:])


def start_services(procs: list, run_dir: Path, spec_file: Path, ep_file: Path,
                   heartbeat: float, extra: tuple[str, ...] = (),
                   pin: tuple[str | None, str | None] = (None, None)) -> tuple[Endpoints, Any]:
    """Start the broker, then the scheduler service (Muri-S, a round a minute unless an event
    asks, agents dead after ten missed heartbeats; `extra`: more of its options), appending
    each process to `procs` as it starts (so a caller's cleanup stops what did start).
    `pin`: the scheduler's CPUs and the broker's (None: any). Returns the endpoints and the
    scheduler's process."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    procs.append(subprocess.Popen(pinned(
        [sys.executable, "-m", "broker.broker", "--ports", "0,0,0", "--endpoints-file",
         str(ep_file), "--run-dir", str(run_dir)], pin[1]), cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_until(ep_file.exists, 30, 0.05)
    endpoints = Endpoints.load(ep_file)
    sched = subprocess.Popen(pinned(
        [sys.executable, "-m", "scheduler.live", "--spec", str(spec_file), "--policy",
         "muri-s", "--endpoints", str(ep_file), "--run-dir", str(run_dir),
         "--time-scale", "1", "--round", "60", "--agent-timeout", str(10 * heartbeat),
         *extra], pin[0]),
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(sched)
    return endpoints, sched


def start_agents(endpoints: Endpoints, count: int, heartbeat: float, stop: threading.Event,
                 agents: list) -> tuple[list, list[str]]:
    """Start `count` stand-in agents (appended to `agents`, for the caller's cleanup), their
    heartbeats until `stop`, and wait until all registered. Returns the agents' shared reply
    log (LightAgent.acks) and the heartbeat errors."""
    import zmq

    acks: list[tuple[float, str, int]] = []
    # two sockets an agent, all in this process: past zmq's default of 1,023
    zmq.Context.instance().set(zmq.MAX_SOCKETS, max(1024, 2 * count + 64))
    agents.extend(LightAgent(endpoints, f"n{i}", heartbeat, acks) for i in range(count))
    for agent in agents:
        agent.thread.start()
    errors: list[str] = []
    threading.Thread(target=heartbeats, args=(agents, stop, errors), daemon=True).start()
    wait_until(lambda: all(a.registered for a in agents), 60, 0.1)
    return acks, errors


def stop_cluster(stop, agents, procs) -> None:
    """Stop the stand-in agents, then the broker and scheduler processes (last started first)."""
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
