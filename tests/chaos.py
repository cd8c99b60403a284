"""A seeded chaos harness for the live system: SIGKILL agents, trainers, the scheduler and the
broker at random times during a LiveCluster run, restart them, then check that every job
completed exactly once and that the report is still produced.

Exactly-once is judged twice: from the scheduler's own records (scheduler.log, journal.db) and,
independently, from the trainers' ledgers (trainer/ledger.py: who ran which job when, from
where to where). A trainer this harness SIGKILLs writes no end record, so the harness watches
its pid die and records the wall time it saw it gone (`deaths`): the sound upper bound of that
process's run interval that the ledger verdict needs.

Why a seed: a failing run must be reproducible. The seed alone fixes the kill schedule (when,
which kind of process, which one of its kind, how long a killed agent stays down); the run
prints it and writes it to RUN_DIR/chaos.json, and the same seed replays the same schedule.
What a kill hits (which trainer is running at that instant) also depends on timing, so the
executed kills are recorded next to the plan.

A scheduler kill is the restart race's test: the agent running most of this run's trainers is
paused (SIGSTOP; its trainers, in sessions of their own, run on) across the restart and for
`down_s` after the new scheduler answers, so the other agents re-register first. A restarted
scheduler that does not wait for the paused node launches that node's jobs a second time, and
the ledgers show the two runs overlapping.

Used by tests/e2e/test_chaos.py (small, CI) and bench/chaos.py (long runs).
"""
from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from scheduler.tools.report import read_records
from tests.flood import CLIENTS, FLOOD_ITERATIONS, Probe, run_floods
from tests.live_system import ROOT, LiveCluster, log_records, wait_for
from traces import write_trace
from traces.generate import generate
from trainer.ledger import judge_run_dir

KINDS = ("agent", "trainer", "scheduler", "broker")
# the hostile run: an agent paused (shorter than the agent timeout: slow, not dead), the
# scheduler killed, and four clients flooding submits, then status queries (tests/flood.py)
HOSTILE = ("pause", "scheduler", "submit-flood", "status-flood")
FLOOD_SUBMITS = 25         # pipelined by each flooding client: each accepted one must run once
FLOOD_QUERIES = (2500, 1250.0)  # status queries by each client, and at what rate per second
FLOOD_FIRST_ID = 10_000    # flooded jobs' ids, clear of the trace's
OPERATOR_BOUND_S = 2.0     # an operator's status query answered during a flood...
AFTER_BOUND_S = 1.0        # ...and from 1 s to 3 s after it
AFTER_WINDOW = (1.0, 3.0)


@dataclass(frozen=True)
class Kill:
    """One planned kill: `at` wall seconds after the feed starts; `pick` chooses among the
    live processes of that kind (modulo how many there are); a killed agent is restarted
    after `down_s`, everything else at once (a trainer is relaunched by the scheduler); for a
    scheduler kill, `down_s` is how long the busiest agent stays paused once the restarted
    scheduler answers."""

    at: float
    target: str
    pick: int
    down_s: float = 0.0


def plan_kills(seed: int, kills: int, window: tuple[float, float], min_spacing: float,
               kinds: tuple[str, ...] = KINDS) -> list[Kill]:
    """`kills` kills inside `window`, at least `min_spacing` apart, from `seed` alone.

    Every kind is hit at least once when there are enough kills; the rest are drawn freely.
    """
    start, end = window
    slack = (end - start) - (kills - 1) * min_spacing
    if kills < 1 or slack < 0:
        raise ValueError(f"{kills} kills {min_spacing} s apart do not fit in {window}")
    rng = random.Random(seed)
    # sorted uniform points in the slack, then spread by the spacing: gaps >= min_spacing
    points = sorted(rng.uniform(0.0, slack) for _ in range(kills))
    targets = list(kinds[:kills]) + [rng.choice(kinds) for _ in range(kills - len(kinds))]
    rng.shuffle(targets)
    return [Kill(at=round(start + p + i * min_spacing, 3), target=t, pick=rng.randrange(1000),
                 down_s=_down(rng, t, min_spacing))
            for i, (p, t) in enumerate(zip(points, targets))]


def _down(rng: random.Random, target: str, min_spacing: float) -> float:
    """How long a killed agent stays down, or an agent stays paused across a scheduler
    restart (at least 1.5 s: time for the other agents to re-register and a round to run)."""
    if target == "agent":
        return round(rng.uniform(0.0, min(3.0, min_spacing / 2)), 3)
    if target == "scheduler":
        return round(rng.uniform(1.5, 3.0), 3)
    if target == "pause":  # past the lease (0.6 of the timeout) at times, never the timeout
        return round(rng.uniform(2.0, 10.0), 3)
    return 0.0


def trainer_pids(run_dir: Path) -> dict[int, int]:
    """{job_id: pid} of the trainer processes of this run, found in /proc (the trainers run in
    their own sessions, so they are nobody's process group but their own)."""
    return {job: pid for pid, (job, _) in trainers(run_dir).items()}


def trainers(run_dir: Path) -> dict[int, tuple[int, str]]:
    """{pid: (job_id, node)} of the trainer processes of this run, from their command lines."""
    want = str(Path(run_dir).resolve())
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        args = [a.decode("utf-8", "replace") for a in args]
        if "trainer.run" not in args or "--run-dir" not in args or "--job-id" not in args:
            continue
        if args[args.index("--run-dir") + 1] != want:
            continue
        try:
            node = args[args.index("--node") + 1] if "--node" in args else "?"
            found[int(entry.name)] = (int(args[args.index("--job-id") + 1]), node)
        except (ValueError, IndexError):
            continue
    return found


def _gone(pid: int) -> bool:
    """The process has exited: no /proc entry, or a zombie (it runs no code any more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def kill_and_watch(pid: int, timeout: float = 10.0) -> float | None:
    """SIGKILL `pid` and wait until it is gone; returns the wall time (time.time()) at which
    it was seen gone, an upper bound of its life; None if it was gone before the kill or did
    not die within `timeout` (no sound bound then)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.005)  # polling a pid we cannot wait() on (not our child)
    return time.time()


class Chaos:
    """Carries out a kill plan against a LiveCluster, on the caller's thread."""

    def __init__(self, live: LiveCluster, plan: list[Kill], say: Callable[[str], None] = print):
        self.live, self.plan, self.say = live, plan, say
        self.done: list[dict] = []
        self.deaths: dict[int, float] = {}  # trainer pid -> wall time it was seen dead
        self.stop = threading.Event()
        self.flooded: list[int] = []  # ids of the flooded submits the scheduler accepted
        self.floods: list[tuple[float, float]] = []  # (start, end) of each flood, monotonic

    def execute(self, t0: float) -> list[dict]:
        """Kill by the plan (times from `t0`, a monotonic instant); returns what was hit."""
        for kill in self.plan:
            # waiting for the planned instant *is* the schedule, not a synchronisation
            if self.stop.wait(max(0.0, t0 + kill.at - time.monotonic())):
                break
            hit = self._kill(kill)
            record = {**asdict(kill), "t": round(time.monotonic() - t0, 2), "hit": hit}
            self.done.append(record)
            self.say(f"chaos: t={record['t']:.1f}s {kill.target}: {hit}")
        return self.done

    def _kill(self, kill: Kill) -> str:
        live = self.live
        if kill.target == "trainer":
            pids = trainer_pids(live.run_dir)
            if not pids:
                return "none running"
            job_id = sorted(pids)[kill.pick % len(pids)]
            died = kill_and_watch(pids[job_id])
            if died is None:
                return f"job {job_id} trainer (pid {pids[job_id]}) already gone"
            self.deaths[pids[job_id]] = died
            return f"job {job_id} trainer pid {pids[job_id]}"
        if kill.target == "agent":
            index = kill.pick % live.nodes
            pid = live.procs[f"agent-n{index}"].pid
            live.kill(f"agent-n{index}")
            self.stop.wait(kill.down_s)  # how long the node stays down is part of the plan
            live.start_agent(index)
            return f"agent-n{index} pid {pid}, restarted after {kill.down_s:.1f}s"
        if kill.target == "scheduler":
            return self._restart_scheduler(kill)
        if kill.target == "pause":
            index = kill.pick % live.nodes
            agent = live.procs[f"agent-n{index}"]
            os.killpg(agent.pid, signal.SIGSTOP)  # its trainers run on, in their own sessions
            try:
                self.stop.wait(kill.down_s)
            finally:
                os.killpg(agent.pid, signal.SIGCONT)
            return f"agent-n{index} paused {kill.down_s:.1f}s"
        if kill.target.endswith("-flood"):
            return self._flood(kill.target.split("-")[0])
        if kill.target == "broker":
            pid = live.procs["broker"].pid
            live.kill("broker")
            live.start_broker()  # the same ports: every component reconnects by itself
            return f"broker pid {pid}, restarted on the same ports"
        raise ValueError(f"unknown target {kill.target!r}")

    def _flood(self, kind: str) -> str:
        n, rate = (FLOOD_SUBMITS, 0.0) if kind == "submit" else FLOOD_QUERIES
        first = FLOOD_FIRST_ID + len(self.floods) * CLIENTS * n
        began = time.monotonic()
        results = run_floods(self.live.endpoints_file, kind, n, rate, patience=10.0,
                             first_id=first if kind == "submit" else None)
        self.floods.append((began, time.monotonic()))
        self.flooded += [j for r in results for j in r["jobs"]]
        # the window after it in which an operator's wait is judged (_flood_verdict), and
        # the bound on the last query started in it: no other kill may start before they
        # end, however long the flood took (a scheduler kill just after the window once
        # left a query started at its end unanswered)
        self.stop.wait(AFTER_WINDOW[1] + AFTER_BOUND_S)
        answers = collections.Counter()
        for r in results:
            answers.update(r["answers"])
            answers["unanswered"] += r["unanswered"]
        return f"{kind} flood by {CLIENTS} clients: {dict(answers)}"

    def _restart_scheduler(self, kill: Kill) -> str:
        """Kill and restart the scheduler while the busiest node's agent is paused, so the
        restarted scheduler hears from the other nodes first (the restart race)."""
        live = self.live
        per_node = collections.Counter(node for _, node in trainers(live.run_dir).values())
        node = per_node.most_common(1)[0][0] if per_node else f"n{kill.pick % live.nodes}"
        agent = live.procs.get(f"agent-{node}")
        paused = agent is not None and agent.poll() is None
        if paused:
            os.killpg(agent.pid, signal.SIGSTOP)
        try:
            pid = live.procs["scheduler"].pid
            live.kill("scheduler")
            live.start_scheduler()
            if paused:  # the pause counts from when the new scheduler can hear agents
                wait_for(lambda: live.status() is not None, 30, "the restarted scheduler")
                self.stop.wait(kill.down_s)
        finally:
            if paused:
                os.killpg(agent.pid, signal.SIGCONT)
        busy = f"{node} ({per_node[node]} trainers) paused {kill.down_s:.1f}s" if paused \
            else "no agent held back"
        return f"scheduler pid {pid}, restarted; {busy}"


# -- checking the outcome ------------------------------------------------------------------------
@dataclass
class Verdict:
    """What a chaos run is judged by; `problems` is empty when it held up."""

    jobs: int
    finished_logged: dict[int, int] = field(default_factory=dict)  # job -> job_finished lines
    finished_journal: dict[int, int] = field(default_factory=dict)  # job -> 'finished' events
    finished_unlogged: list[int] = field(default_factory=list)  # journaled, no log line
    ledger: dict = field(default_factory=dict)  # the trainers' ledger verdict's totals
    journal_states: dict[str, int] = field(default_factory=dict)
    integrity: str = ""
    report: dict | None = None
    feeder_rc: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _exactly_once(what: str, counts: dict[int, int], ids: list[int]) -> list[str]:
    missing = sorted(set(ids) - set(counts))
    twice = sorted(j for j, n in counts.items() if n > 1)
    strange = sorted(set(counts) - set(ids))
    out = []
    if missing:
        out.append(f"{what}: {len(missing)} jobs never finished: {missing}")
    if twice:
        out.append(f"{what}: jobs finished more than once: "
                   f"{ {j: counts[j] for j in twice} }")
    if strange:
        out.append(f"{what}: finished jobs that were never fed: {strange}")
    return out


def judge(run_dir: Path, job_ids: list[int], feeder_rc: int | None,
          totals: dict[int, float] | None = None,
          deaths: dict[int, float] | None = None) -> Verdict:
    """Read the run back (scheduler.log, journal.db, the report CLI) after every process ended.
    With `totals` ({job: iterations}), the trainers' ledgers are judged too (`deaths`: the
    trainers this harness killed, {pid: wall time seen dead})."""
    verdict = Verdict(jobs=len(job_ids), feeder_rc=feeder_rc)
    if totals is not None:
        ledger = judge_run_dir(run_dir, totals, deaths)
        verdict.ledger = ledger.totals()
        verdict.problems += [f"ledger: {p}" for p in ledger.problems]
    if feeder_rc != 0:
        verdict.problems.append(f"feeder exited with {feeder_rc}")
    logged = collections.Counter(rec.get("job_id")
                                 for rec in log_records(run_dir, "job_finished"))
    verdict.finished_logged = dict(logged)

    db = sqlite3.connect(run_dir / "journal.db")
    try:
        verdict.integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        verdict.journal_states = dict(db.execute(
            "SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        verdict.finished_journal = dict(db.execute(
            "SELECT job_id, COUNT(*) FROM events WHERE kind='finished' GROUP BY job_id"))
    finally:
        db.close()
    # a SIGKILL of the scheduler can fall between a finish's journal commit and its log line:
    # a job the journal shows finished may lack its line (counted), never have two
    verdict.finished_unlogged = sorted(set(verdict.finished_journal) - set(logged))
    verdict.problems += _exactly_once("scheduler.log", verdict.finished_logged,
                                      [j for j in job_ids if j not in verdict.finished_unlogged])
    if verdict.integrity != "ok":
        verdict.problems.append(f"journal integrity_check: {verdict.integrity}")
    if verdict.journal_states.get("finished", 0) != len(job_ids) or len(
            verdict.journal_states) != 1:
        verdict.problems.append(f"journal job states: {verdict.journal_states}")
    verdict.problems += _exactly_once("journal", verdict.finished_journal, job_ids)

    out = subprocess.run([sys.executable, "-m", "scheduler.tools.report", str(run_dir), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        verdict.problems.append(f"report exited {out.returncode}: {out.stderr.strip()[-500:]}")
    else:
        verdict.report = json.loads(out.stdout.strip().splitlines()[-1])
        if verdict.report.get("jobs") != len(job_ids) or verdict.report.get("unfinished"):
            verdict.problems.append(f"report counts {verdict.report.get('jobs')} jobs, "
                                    f"{verdict.report.get('unfinished')} unfinished")
    return verdict


_MENTIONS = ("kept", "strays", "lost", "requeued", "stops", "launches")


def job_story(run_dir: Path, job_id: int) -> list[str]:
    """Every log line of every process that concerns one job, in time order: what a failed
    run's reader needs first (the run directory itself is gone with the test's tmp_path)."""
    lines = []
    for path in sorted(Path(run_dir).glob("*.log")):
        for rec in read_records(path)[0]:
            if rec.get("job_id") == job_id or rec.get("job") == job_id or any(
                    isinstance(rec.get(k), list) and job_id in rec[k] for k in _MENTIONS):
                rest = {k: v for k, v in rec.items()
                        if k not in ("ts", "event", "component", "level")}
                lines.append(f"{rec.get('ts', '?')} {rec.get('component', path.stem)} "
                             f"{rec.get('event')} {json.dumps(rest, default=str)[:300]}")
    return sorted(lines)


# -- one whole run -------------------------------------------------------------------------------
@dataclass
class ChaosConfig:
    seed: int
    jobs: int = 20
    kills: int = 5
    time_scale: float = 250.0
    window: tuple[float, float] = (4.0, 40.0)  # wall seconds after the feed starts
    min_spacing: float = 6.0
    finish_timeout: float = 300.0
    spec: str = "n3g4"
    nodes: int = 3
    gpus_per_node: int = 4
    # longer than a scheduler kill's pause of an agent (restart + down_s): a paused agent is
    # slow, not dead, so a restarted scheduler that relaunches its jobs elsewhere is wrong
    agent_timeout: float = 12.0
    kinds: tuple[str, ...] = KINDS  # HOSTILE: pauses, a scheduler kill and floods


def chaos_trace(cfg: ChaosConfig, path: Path) -> dict[int, float]:
    """The run's trace, from the seed too: jobs of 1-4 GPUs, minutes to hours long.
    Returns {job: total iterations}."""
    records = generate(cfg.jobs, cfg.seed, max_gpus=cfg.gpus_per_node, mean_interarrival=400,
                       median_duration=1200, min_duration=300, max_duration=4 * 3600)
    write_trace(path, records)
    return {r.job_id: float(r.iterations) for r in records}


def run_chaos(cfg: ChaosConfig, run_dir: Path, say: Callable[[str], None] = print) -> dict:
    """Start a LiveCluster, feed the seeded trace, kill by the seeded plan, wait for every
    job, stop everything and judge. Returns the summary also written to run_dir/chaos.json."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_kills(cfg.seed, cfg.kills, cfg.window, cfg.min_spacing, cfg.kinds)
    say(f"chaos: seed={cfg.seed} jobs={cfg.jobs} kills={cfg.kills} run_dir={run_dir} "
        f"(rerun with the same seed for the same schedule)")
    say("chaos: plan " + ", ".join(f"{k.at:.1f}s {k.target}" for k in plan))
    totals = chaos_trace(cfg, run_dir / "trace.csv")
    job_ids = sorted(totals)
    live = LiveCluster(run_dir, spec=cfg.spec, nodes=cfg.nodes,
                       gpus_per_node=cfg.gpus_per_node, time_scale=cfg.time_scale,
                       scheduler_args=["--agent-timeout", str(cfg.agent_timeout)])
    chaos = Chaos(live, plan, say)
    wall0 = time.monotonic()
    waited: str | None = None
    feeder_rc = None
    probe = None
    try:
        live.start()
        probe = Probe(live.requester("operator", timeout=10.0, retries=0))
        probe.start()
        feeder = live.feed(run_dir / "trace.csv")
        chaos.execute(time.monotonic())
        try:
            live.wait_finished(cfg.jobs + len(chaos.flooded), cfg.finish_timeout)
        except AssertionError as err:
            waited = str(err)
        try:
            feeder_rc = feeder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            feeder_rc = None
    finally:
        if probe is not None:
            probe.stop.set()
            probe.join()
        live.stop_all()
        killed = sorted(chaos.deaths)  # the trainers this harness SIGKILLed, before the strays
        strays = _reap_trainers(run_dir)
        chaos.deaths.update(strays)
    wall = time.monotonic() - wall0
    totals.update(dict.fromkeys(chaos.flooded, float(FLOOD_ITERATIONS)))
    job_ids = sorted(totals)
    verdict = judge(run_dir, job_ids, feeder_rc, totals, chaos.deaths)
    floods = [_flood_verdict(probe, began, ended) for began, ended in chaos.floods]
    verdict.problems += [p for f in floods for p in f.pop("problems")]
    if "pause" in cfg.kinds:  # every pause was shorter than the agent timeout
        verdict.problems += [f"an agent paused, not dead, declared dead: {r.get('node')} "
                             f"({r.get('reason')})" for r in log_records(run_dir, "agent_dead")]
    if strays:
        verdict.problems.append(f"trainers still running after the run: pids {sorted(strays)}")
    if waited:
        verdict.problems.insert(0, waited)
    summary = {
        "seed": cfg.seed, "config": asdict(cfg), "ok": verdict.ok, "wall_s": round(wall, 1),
        "plan": [asdict(k) for k in plan], "kills": chaos.done, "killed_trainers": killed,
        "floods": floods, "flooded_jobs": len(chaos.flooded),
        "kills_by_kind": kills_by_kind(plan, chaos.done),
        "ledger": verdict.ledger,
        "verdict": {**asdict(verdict),
                    "finished_logged": len(verdict.finished_logged),
                    "finished_journal": len(verdict.finished_journal)},
    }
    summary["kills_done"] = sum(v["executed"] for v in summary["kills_by_kind"].values())
    unfinished = sorted(set(job_ids) - set(verdict.finished_journal))
    summary["stories"] = {j: job_story(run_dir, j) for j in unfinished}
    (run_dir / "chaos.json").write_text(json.dumps(summary, indent=2))
    for job_id, story in summary["stories"].items():
        say(f"chaos: the story of unfinished job {job_id} ({len(story)} log lines):")
        for line in story[-80:]:
            say("  " + line)
    say("chaos: kills by kind (planned/executed): " + ", ".join(
        f"{k} {v['planned']}/{v['executed']}" for k, v in summary["kills_by_kind"].items()))
    say("chaos: ledger: " + ", ".join(f"{k} {v}" for k, v in verdict.ledger.items()))
    for flood in floods:
        say(f"chaos: a flood of {flood['seconds']:.1f}s: an operator waited at most "
            f"{flood['operator_worst_during']:.2f}s for status during it, "
            f"{flood['operator_worst_after']:.2f}s after it")
    say(f"chaos: seed={cfg.seed} {'OK' if verdict.ok else 'FAILED'} in {wall:.0f}s; "
        f"{summary['kills_done']} kills; " + ("; ".join(verdict.problems) or
                                            f"all {len(job_ids)} jobs finished exactly once"))
    return summary


def _flood_verdict(probe: Probe, began: float, ended: float) -> dict:
    """How long an operator waited for status during a flood, and in AFTER_WINDOW after it."""
    during, after = probe.worst(began, ended), probe.worst(ended + AFTER_WINDOW[0],
                                                           ended + AFTER_WINDOW[1])
    problems = []
    if during > OPERATOR_BOUND_S:
        problems.append(f"an operator waited {during:.2f} s for status during a flood "
                        f"(bound {OPERATOR_BOUND_S:g} s)")
    if after > AFTER_BOUND_S:
        problems.append(f"an operator waited {after:.2f} s for status after a flood "
                        f"(bound {AFTER_BOUND_S:g} s)")
    return {"seconds": round(ended - began, 2), "operator_worst_during": round(during, 3),
            "operator_worst_after": round(after, 3), "problems": problems}


def kills_by_kind(plan: list[Kill], done: list[dict]) -> dict[str, dict[str, int]]:
    """{kind: {planned, executed}}: a trainer kill with no trainer running (or one gone by
    the time it was hit) is planned but not executed."""
    out = {k: {"planned": 0, "executed": 0} for k in dict.fromkeys((*KINDS, *(k.target
                                                                           for k in plan)))}
    for kill in plan:
        out[kill.target]["planned"] += 1
    for rec in done:
        hit = rec["hit"]
        if hit != "none running" and "already gone" not in hit:
            out[rec["target"]]["executed"] += 1
    return out


def _reap_trainers(run_dir: Path) -> dict[int, float]:
    """Trainers outlive a SIGKILLed agent only until they notice (they stop when orphaned);
    any still there at the end are this run's, found by their --run-dir, and are killed.
    Returns {pid: wall time seen dead} of those (each one a problem: a stray trainer)."""
    deaths = {}
    for pid in trainer_pids(run_dir).values():
        died = kill_and_watch(pid)
        if died is not None:
            deaths[pid] = died
    return deaths
