"""The live scheduler at scale: journaled submissions a second, job starts a second from a
backlog, and a backlog run to its end with every job finished once, with the node agent's
own code.

Real processes and sockets: a broker and the scheduler service (`muri-s`, default preset) as
subprocesses, N node agents running the real `node_agent` code (`agent_host.py`, --per-host
of them a process, stand-in trainers), and M client processes, each submitting its own range
of job ids one request at a time, as a feeder does. A submission counts once the scheduler
acknowledged it, which it does only after the job's journal commit is durable
(synchronous=FULL).

Three cases:

* submissions (the default): the agents up, the clients submit for `--seconds`. Reported:
  acknowledged submissions a second (all clients together), each request's latency (median,
  p99), and the check that nothing was lost: every acknowledged id is in the journal exactly
  once, and the journal holds no job that no client submitted.
* starts (`--starts`): the clients submit a `--backlog` while no agent is up (nothing can
  start), then the agents come up and the rounds start what fits. Reported: jobs started a
  second, by the agents' own record of the launches they answered (from the first to the last
  launch of the fill, and from the first registration), the launches the scheduler logged,
  and that no job was launched twice without a stop between.
* finish (`--starts --finish SECONDS`): the starts case's backlog, then agents whose stand-in trainers do a job's
  work in SECONDS of running (agent_host.py --finish-after; stopped ones resume from their
  checkpoint) and write the trainers' ledgers; over once the scheduler logged every job
  finished (or after --finish-timeout). Reported, besides the launches and stops: the jobs
  that finished by the journal (`finished_journal`), the log (`finished_log`) and the
  trainers' ledgers (`finished_ledgers`), those counted twice by any (`finished_twice`),
  found by one and not another, or finished unsubmitted, and `trainer.ledger.verdict`'s
  judgement of the ledgers alone (`ledger_verdict`, `ledger_verdict_problems`: no runs of a
  job overlap, each resumes where the last checkpoint left it, each finishes once). `ok`
  says all held and nothing was lost; the exit status is 1 when not.

All report the scheduler's CPU share over the measured span (its user+system time over the
wall time; 1.0 is one core), the machine's load and busy share, and the agents declared dead
against each agent's own heartbeat record (`false_deaths`).

`--plot FILE` draws the rate a second over the run (acknowledgements, first launches, or
finishes) and under it the scheduler's CPU share, the machine's busy share and its load,
sampled every half second.

Run from the repository root (the issue's cases):
    python bench/bench_scale.py --clients 8 --seconds 60 [--agents 16] [--plot FILE]
    python bench/bench_scale.py --starts --agents 1024 --backlog 10000 [--plot FILE]
    python bench/bench_scale.py --starts --finish 2 --agents 64 --backlog 1000
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import multiprocessing as mp
import os
import sqlite3
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import structlog  # noqa: E402

from bench_service import (LogTail, Usage, busy_processes, cluster_files,  # noqa: E402
                           false_deaths, log_time, pin_split, start_hosts, start_services,
                           stop_cluster, stop_hosts)
from broker.client import Requester  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from broker.testing import wait_until  # noqa: E402
from traces.feeder import job_map  # noqa: E402
from traces.generate import generate  # noqa: E402
from trainer.ledger import read_ledgers, verdict  # noqa: E402

CLIENT_RANGE = 10_000_000  # client c submits ids c * CLIENT_RANGE + 1, + 2, ...
SETTLED_S = 5.0  # the fill is over once no job started for this long


def client(ep_file: str, index: int, start_at: float, seconds: float, count: int | None,
           out) -> None:
    """Submit jobs one request at a time from `start_at` (wall
    clock) for `seconds`, or until `count` were acknowledged; put (acknowledged ids,
    latencies in ms, refused, the wall time of each acknowledgement, the iterations of each
    acknowledged job) on `out`."""
    endpoints = Endpoints.load(Path(ep_file))
    requester = Requester(endpoints, f"bench-client-{index}", timeout=30.0, retries=5)
    shapes = generate(500, seed=100 + index, max_gpus=8, backlog=True,
                      median_duration=10 * 86400.0, min_duration=86400.0)
    acked, latencies, refused, times, iterations = [], [], 0, [], []
    time.sleep(max(0.0, start_at - time.time()))  # all clients begin together
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and (count is None or len(acked) < count):
        rec = dataclasses.replace(shapes[n % len(shapes)], job_id=index * CLIENT_RANGE + n + 1)
        n += 1
        began = time.monotonic()
        reply = requester.request("scheduler", "job.submit", job=job_map(rec))
        latencies.append((time.monotonic() - began) * 1000.0)
        if reply["body"].get("accepted"):
            acked.append(rec.job_id)
            times.append(time.time())
            iterations.append(rec.iterations)
        else:
            refused += 1
    out.put((acked, latencies, refused, times, iterations))


def run_clients(ep_file: Path, clients: int, seconds: float,
                count: int | None = None) -> tuple[list, float]:
    """M client processes submitting together; their results and the wall time they took
    (from the moment all began)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 3.0  # the clients' imports done before the clock starts
    each = None if count is None else -(-count // clients)
    procs = [ctx.Process(target=client, args=(str(ep_file), c + 1, start_at, seconds, each, out))
             for c in range(clients)]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start_at - time.time()))
    wall0 = time.monotonic()
    results = [out.get(timeout=seconds + 600 if count is None else 3600) for _ in procs]
    wall = time.monotonic() - wall0
    for p in procs:
        p.join(10)
    return results, wall


class Sampler:
    """The scheduler's CPU share, the machine's busy share and load (bench_service.Usage),
    over each `every` s from `start` until `end`: the run's load as it went, for the plot."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float, float, float]] = []  # wall, cpu, busy, load
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def end(self) -> list[tuple[float, float, float, float]]:
        self._stop.set()
        self._thread.join(5)
        return self.samples

    def _run(self) -> None:
        try:
            usage = Usage(self.pid)
            while not self._stop.wait(self.every):
                used = usage.end()
                self.samples.append((time.time(), used["scheduler_cpu_share"],
                                     used["machine_busy_share"], used["load_1min"][1]))
                usage = Usage(self.pid)
        except OSError:  # the scheduler exited
            return


def reader(tail: LogTail, event: str):
    """A function that returns the scheduler's `event` records logged since it was last
    called, reading only those (the bench polls it while the scheduler works)."""
    read = 0

    def new() -> list[dict]:
        nonlocal read
        records = tail.poll()
        found = [r for r in records[read:] if r["event"] == event]
        read = len(records)
        return found
    return new


def counter(tail: LogTail, event: str):
    """A function that counts the scheduler's `event` records so far (see `reader`)."""
    new, found = reader(tail, event), 0

    def count() -> int:
        nonlocal found
        found += len(new())
        return found
    return count


def plot(path: Path, title: str, label: str, events: list[float],
         samples: list[tuple[float, float, float, float]]) -> None:
    """Events a second (submissions or starts) over the run, and under it the scheduler's
    CPU share, the machine's busy share and its load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min([*events, *(s[0] for s in samples)])
    fig, (top, low) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    seconds = int(max(e - t0 for e in events)) + 1 if events else 1
    counts = [0] * seconds
    for e in events:
        counts[min(int(e - t0), seconds - 1)] += 1
    top.step(range(seconds), counts, where="post")
    top.set_ylabel(f"{label} a second")
    top.set_title(title, fontsize=9)
    xs = [s[0] - t0 for s in samples]
    low.plot(xs, [s[1] for s in samples], label="scheduler CPU (cores)")
    low.plot(xs, [(os.cpu_count() or 1) * s[2] for s in samples],
             label="machine busy (cores)")
    low.plot(xs, [s[3] for s in samples], ":", label="load average (1 min)")
    low.set_xlabel("seconds")
    low.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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


def launched_twice(acks: list[tuple]) -> int:
    """Jobs an agent was told to launch again with no stop between there (a double start).
    `acks`: the agents' (wall time, type, job, node) records."""
    running: collections.Counter[tuple[int, str]] = collections.Counter()
    twice = set()
    for _, kind, job_id, node in sorted(acks):
        if kind == "job.launch":
            running[job_id, node] += 1
            if running[job_id, node] > 1:
                twice.add(job_id)
        elif kind == "job.stop":
            running[job_id, node] = 0
    return len(twice)


def submissions(args, run_dir: Path, ep_file: Path, sched) -> dict:
    """The submissions case: agents up, clients submitting for `--seconds`."""
    usage, sampler = Usage(sched.pid), Sampler(sched.pid).start()
    results, wall = run_clients(ep_file, args.clients, args.seconds)
    used = usage.end()
    acked = [j for r in results for j in r[0]]
    latencies = sorted(x for r in results for x in r[1])
    return {"case": f"{args.clients} clients x {args.seconds:g} s, {args.agents} real agents, "
                    f"muri-s default preset, {args.load} busy processes beside",
            "submissions_per_s": round(len(acked) / wall, 1),
            "latency_ms": {"median": round(statistics.median(latencies), 2),
                           "p99": round(latencies[int(0.99 * (len(latencies) - 1))], 2)},
            "refused": sum(r[2] for r in results), **used,
            "_acked": acked, "_events": [t for r in results for t in r[3]],
            "_samples": sampler.end()}


def backlog(args, ep_file: Path, tail: LogTail) -> tuple[list[int], dict[int, float]]:
    """Submit `--backlog` jobs while no agent is up and wait until the scheduler has them
    all; the acknowledged ids and each one's iterations, as its client submitted it."""
    results, _ = run_clients(ep_file, args.clients, float("inf"), args.backlog)
    acked = [j for r in results for j in r[0]]
    totals = {j: float(its) for r in results for j, its in zip(r[0], r[4])}
    submitted = counter(tail, "job_submitted")
    wait_until(lambda: submitted() >= len(acked), 600, 0.2)
    wait_until(lambda: round_applied_after_submissions(tail.poll()), 600, 0.1)
    return acked, totals


def round_applied_after_submissions(records: list[dict]) -> bool:
    """Whether a round was planned after the last submission and applied: the service logs
    a submission and plans a round each under its lock, so the first `round` after the
    last `job_submitted` took every submission, and its `round_done` closes it."""
    last = next((i for i in range(len(records) - 1, -1, -1)
                 if records[i]["event"] == "job_submitted"), None)
    if last is None:
        return False
    planned = next((i for i in range(last + 1, len(records))
                    if records[i]["event"] == "round"), None)
    return planned is not None and any(r["event"] == "round_done"
                                       for r in records[planned + 1:])


def starts(args, run_dir: Path, ep_file: Path, sched, tail: LogTail) -> tuple[dict, list]:
    """The starts case: a backlog in while no agent is up, then the agents; the fill is over
    once no job started for SETTLED_S. Returns the result and the agent hosts."""
    acked, _ = backlog(args, ep_file, tail)
    usage, sampler = Usage(sched.pid), Sampler(sched.pid).start()
    hosts = start_hosts(ep_file, run_dir, args.agents, args.per_host, args.heartbeat, tail,
                        cpus=args.host_cpus)
    last: list = [0, time.monotonic(), None]  # jobs started, when that last changed, usage
    started_so_far = counter(tail, "job_started")

    def settled() -> bool:
        started = started_so_far()
        if started != last[0]:  # the usage up to the fill's last start, not the wait after it
            last[:] = [started, time.monotonic(), usage.end()]
        return started > 0 and time.monotonic() - last[1] >= SETTLED_S

    wait_until(settled, 1800, 0.2)
    used = last[2]
    records = tail.poll()
    registered = min(log_time(r) for r in records if r["event"] == "agent_registered")
    started = [r for r in records if r["event"] == "job_started"]
    result = {"case": f"{len(acked)} queued jobs, then {args.agents} real agents come up, "
                      f"muri-s default preset, {args.load} busy processes beside",
              "backlog": len(acked), "jobs_started_logged": len(started),
              "_registered": registered, "_acked": acked, "_samples": sampler.end(), **used}
    return result, hosts


def judge_starts(result: dict, acks: list) -> dict:
    """The starts case's figures from the agents' own record of what they answered."""
    launches = sorted(a for a in acks if a[1] == "job.launch")
    jobs = {a[2] for a in launches}
    first, end = launches[0][0], launches[-1][0]
    registered = result.pop("_registered")
    first_launch: dict[int, float] = {}
    for t, _, job_id, _ in launches:
        first_launch.setdefault(job_id, t)
    result["_events"] = list(first_launch.values())
    return dict(result, **agent_work(acks), fill_s=round(end - first, 2),
                starts_per_s=round(len(jobs) / max(end - first, 1e-9), 1),
                starts_per_s_from_registration=round(len(jobs) / max(end - registered, 1e-9), 1))


def agent_work(acks: list) -> dict:
    """What the agents' own record says they did: launches answered, jobs started, stops,
    and whether a job was launched twice on a node without a stop between."""
    launches = [a for a in acks if a[1] == "job.launch"]
    return {"launch_requests": len(launches), "jobs_started": len({a[2] for a in launches}),
            "stops": sum(1 for a in acks if a[1] == "job.stop"),
            "launched_twice_without_stop": launched_twice(acks)}


def finishes(args, run_dir: Path, ep_file: Path, sched, tail: LogTail) -> tuple[dict, list]:
    """The finish case: the starts case's backlog, then agents whose stand-ins do their jobs'
    work (agent_host.py --finish-after); over once the scheduler logged every acknowledged
    job finished, or after --finish-timeout (the checks then find what did not finish).
    Returns the result and the agent hosts."""
    acked, totals = backlog(args, ep_file, tail)
    usage, sampler = Usage(sched.pid), Sampler(sched.pid).start()
    hosts = start_hosts(ep_file, run_dir, args.agents, args.per_host, args.heartbeat, tail,
                        ("--finish-after", repr(args.finish)), cpus=args.host_cpus)
    want, finished, new = set(acked), set(), reader(tail, "job_finished")

    def all_finished() -> bool:
        finished.update(r.get("job_id") for r in new())
        return want <= finished

    try:
        wait_until(all_finished, args.finish_timeout, 0.2)
        timed_out = False
    except AssertionError:
        timed_out = True
    used = usage.end()
    records = tail.poll()
    registered = min(log_time(r) for r in records if r["event"] == "agent_registered")
    ends = [log_time(r) for r in records if r["event"] == "job_finished"]
    drain = max(ends, default=registered) - registered
    result = {"case": f"{len(acked)} queued jobs, then {args.agents} real agents come up and "
                      f"run them to their end ({args.finish:g} s of running a job), muri-s "
                      f"default preset, {args.load} busy processes beside",
              "backlog": len(acked), "finish_after_s": args.finish, "timed_out": timed_out,
              "drain_s": round(drain, 2),
              "finished_per_s": round(len(want & finished) / max(drain, 1e-9), 1),
              "_acked": acked, "_totals": totals, "_events": ends,
              "_samples": sampler.end(), **used}
    return result, hosts


def finish_check(agents_dir: Path, journal: Path, logged: list[int], acked: list[int],
                 totals: dict[int, float]) -> dict:
    """Every submitted job finished, once, by the scheduler's journal and its log and by the
    trainers' own ledgers (RUN_DIR/<node>/ledger/, judged by trainer.ledger.verdict alone:
    no runs of a job overlap, its checkpointed segments tile it, no iteration counted
    twice), the same jobs by all three, and none that no client submitted.

    `logged`: the job ids of the scheduler's `job_finished` records; `totals`: {job:
    iterations}, as the clients submitted them."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        journaled = collections.Counter(dict(db.execute(
            "SELECT job_id, COUNT(*) FROM events WHERE kind='finished' GROUP BY job_id")))
    finally:
        db.close()
    records, unreadable = [], []
    for node_dir in sorted(p for p in agents_dir.iterdir() if p.is_dir()):
        found, bad = read_ledgers(node_dir)
        records += found
        unreadable += bad
    judged = verdict(records, totals, unreadable=unreadable)
    ledgers = collections.Counter(r.get("job") for r in records
                                  if r["kind"] == "end" and r.get("how") == "finished")
    log = collections.Counter(logged)
    submitted = set(acked)

    def some(ids: set) -> list:  # the first few of a set that should be empty
        return sorted(ids)[:20]

    check = {"finished_journal": len(journaled), "finished_log": len(log),
             "finished_ledgers": len(ledgers),
             "finished_twice": {"journal": sum(1 for n in journaled.values() if n > 1),
                                "log": sum(1 for n in log.values() if n > 1),
                                "ledgers": sum(1 for n in ledgers.values() if n > 1)},
             "finished_journal_not_ledgers": some(set(journaled) - set(ledgers)),
             "finished_ledgers_not_journal": some(set(ledgers) - set(journaled)),
             "finished_journal_or_log_only": some(set(journaled) ^ set(log)),
             "finished_unsubmitted": some((set(journaled) | set(ledgers) | set(log))
                                          - submitted),
             "unfinished": len(submitted - set(ledgers)),
             # runs that went on from a checkpoint: the resumes the verdict judged
             "ledger_resumed_runs": sum(1 for r in records
                                        if r["kind"] == "start" and r.get("resumed", 0) > 0),
             "ledger_verdict": judged.totals(),
             "ledger_verdict_problems": judged.problems[:20]}
    check["finished_once"] = bool(
        judged.ok and set(journaled) == set(ledgers) == set(log) == submitted
        and not any(check["finished_twice"].values()))
    return check


def judge_finishes(result: dict, acks: list, run_dir: Path, tail: LogTail) -> dict:
    """The finish case's checks, from the journal, the log, the ledgers and the agents'
    record of the launches and stops they answered."""
    logged = [r.get("job_id") for r in tail.poll() if r["event"] == "job_finished"]
    check = finish_check(run_dir / "agents", run_dir / "journal.db", logged, result["_acked"],
                         result.pop("_totals"))
    return dict(result, **agent_work(acks), **check)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--per-host", type=int, default=256, help="agents an agent_host process")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--starts", action="store_true",
                    help="measure job starts a second from a backlog instead")
    ap.add_argument("--finish", type=float, default=None, metavar="SECONDS",
                    help="with --starts: run the backlog to its end, each job SECONDS of "
                         "running, and check every job finished once by the journal, the "
                         "log and the trainers' ledgers (exit status 1 when not)")
    ap.add_argument("--finish-timeout", type=float, default=900.0,
                    help="with --finish: seconds to wait for the last job to finish")
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--load", type=int, default=0,
                    help="busy processes run beside the benchmark (2 x cores: twice loaded)")
    ap.add_argument("--plot", type=Path, default=None,
                    help="draw the rate a second and the load over the run to this file")
    ap.add_argument("--target", type=float, default=None,
                    help="per second: submissions (default 1000), or starts with --starts "
                         "(default 200)")
    ap.add_argument("--pin", action="store_true",
                    help="the scheduler on a core of its own, everything else on the others")
    args = ap.parse_args(argv)
    pin = pin_split() if args.pin else (None, None)
    args.host_cpus = pin[1]
    if pin[1] is not None:  # the clients run in processes this one starts
        os.sched_setaffinity(0, {int(c) for c in pin[1].split(",")})
    if args.finish is not None and not (args.starts and args.finish > 0):
        ap.error("--finish needs --starts and a run length > 0")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    target = args.target if args.target is not None else 200.0 if args.starts else 1000.0
    run_dir, spec_file, ep_file = cluster_files("interlace-bench-scale-", args.agents)
    procs: list = []
    hosts: list = []
    try:
        # --finish's stand-ins do a job's days of work in seconds: the scheduler is told so,
        # else it would refuse their progress as more than the jobs' pace allows
        unpaced = ("--unpaced-trainers",) if args.finish is not None else ()
        _, sched = start_services(procs, run_dir, spec_file, ep_file, args.heartbeat, unpaced,
                                  pin=pin)
        tail = LogTail(run_dir / "scheduler.log")
        procs.extend(busy_processes(args.load))
        if args.finish is not None:
            result, hosts = finishes(args, run_dir, ep_file, sched, tail)
        elif args.starts:
            result, hosts = starts(args, run_dir, ep_file, sched, tail)
        else:
            hosts = start_hosts(ep_file, run_dir, args.agents, args.per_host, args.heartbeat,
                                tail, cpus=args.host_cpus)
            result = submissions(args, run_dir, ep_file, sched)
        acks, beats = stop_hosts(hosts)
        hosts = []
        stop_cluster(threading.Event(), [], procs)
        procs = []
        if args.finish is not None:
            result = judge_finishes(result, acks, run_dir, tail)
        elif args.starts:
            result = judge_starts(result, acks)
        check = journal_check(run_dir / "journal.db", result.pop("_acked"))
        events, samples = result.pop("_events"), result.pop("_samples")
        if args.plot is not None:
            label = "jobs finished" if args.finish is not None \
                else "jobs started" if args.starts else "submissions"
            plot(args.plot, result["case"], label, events, samples)
        dead = [r for r in tail.poll() if r["event"] == "agent_dead"]
        sent = [b for node in beats.values() for b in node]
        result.update(journal=check, agents_declared_dead=len(dead),
                      false_deaths=false_deaths(dead, beats, 10 * args.heartbeat),
                      heartbeats_sent=len(sent),
                      heartbeats_unacknowledged=sum(1 for _, ok in sent if not ok))
        result["lost"] = bool(check["acknowledged_missing"] or check["acknowledged_twice"]
                              or check["submitted_events_twice"] or check["foreign"]
                              or result.get("launched_twice_without_stop"))
        if args.finish is not None:  # no rate to meet: the checks pass or fail
            result["ok"] = result["finished_once"] and not result["lost"] \
                and not result["timed_out"]
            print(json.dumps(result))
            return 0 if result["ok"] else 1
        rate = result["starts_per_s" if args.starts else "submissions_per_s"]
        result["target_per_s"] = target
        result["meets_target"] = rate >= target and not result["lost"] \
            and not result["false_deaths"]
        print(json.dumps(result))
        return 0
    finally:
        if hosts:
            stop_hosts(hosts)
        stop_cluster(threading.Event(), [], procs)


if __name__ == "__main__":
    sys.exit(main())
