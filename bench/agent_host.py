"""Many real node agents in one process, for the scale benchmarks.

Each agent is the node agent's own code (`node_agent.agent.run`: its service thread and
sockets, its link's registration, heartbeats and outbox, its job table), on a thread of this
process; only the trainers are stand-ins (no process: a 2-core machine cannot run thousands).
By default they run until stopped (`StandInTrainer`), so each agent looks at them four times
a second (`--tick`, AgentConfig.tick) instead of twenty: at twenty, 1,024 agents took 1.3 of
the machine's 2 cores doing nothing, at four 0.55.

With `--finish-after SECONDS` they do their job's work instead (`FinishingTrainer`): all of
a job's iterations (the launch's workload says how many) in that many seconds of running,
whatever its shape, so a backlog of trace jobs days long ends in minutes; a stopped one
resumes where its checkpoint left it. They write what the emulated trainer writes (the
progress record the agent reads, trainer/checkpoint; the node's ledger, trainer/ledger.py:
`start`, `checkpoint`, `end`) and exit as it does (finished, or stopped when told to stop),
so the agent reports them through its own paths and `trainer.ledger.verdict` can judge the
run. A job must fit one node (the launch of a job over several nodes gives each its own
stand-in, as it gives each its own emulated trainer).

What the benchmark reads back, written as JSON to --out when the host is told to stop
(SIGTERM or SIGINT):

* `handled`: (wall time, request type, job id, node) of every launch, stop and regroup an
  agent answered, for the whole-round latency;
* `heartbeats`: per node, [wall time sent, acknowledged] of every heartbeat, the agent's own
  record of its liveness (a scheduler that declares it dead although it sent a heartbeat
  within the timeout before is wrong).

Run from the repository root (bench_service.py --real-agents starts these):
    python bench/agent_host.py --endpoints FILE --run-dir DIR --first 0 --count 256 --out F \
        [--finish-after SECONDS]
Each agent's run folder is DIR/<node> (its checkpoints, trainers' files and ledger).
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import structlog  # noqa: E402

from node_agent import agent as node_agent  # noqa: E402
from node_agent import launcher  # noqa: E402
from node_agent.config import AgentConfig  # noqa: E402
from node_agent.link import Link  # noqa: E402
from trainer import checkpoint  # noqa: E402
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED  # noqa: E402
from trainer.ledger import Ledger, ledger_path  # noqa: E402

GPUS_PER_NODE = 8


class StandInTrainer:
    """What the agent's launcher would return for a trainer (the subset of Popen it uses):
    runs until terminated or killed, then exits as a stopped trainer does."""

    pid = 0

    def __init__(self) -> None:
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.returncode = EXIT_STOPPED

    kill = terminate

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class FinishingTrainer(StandInTrainer):
    """A stand-in that does its job's work: iterations at a fixed rate, all `total` of them
    in `finish_after` s of running, from where the job's progress record (or the launch's
    start, whichever is ahead) left it, as the emulated trainer resumes (trainer/api.py).

    Its records are the emulated trainer's, by the trainer's own writers: the ledger's
    `start` at launch; at its end, the ledger's `checkpoint`, the progress record the agent
    reads (done when finished) and the ledger's `end`. It ends when the agent looks at it
    (`poll`) once its work is done (exit finished), or when told to stop (`terminate`: exit
    stopped where it stands, or finished if its work was done by then). A relaunch of a
    finished job ends at once, finished, as the trainer's does.

    No process: its ledger pid is this host's (the process its work ran in: a death of the
    host bounds all of its runs), and the ledger's own random incarnation, one per run, is
    what tells its runs apart. `pid` stays 0 for the agent: there is nothing to signal."""

    def __init__(self, cfg: AgentConfig, job_id: int, total: float, start: float,
                 finish_after: float):
        super().__init__()
        self.cfg, self.job_id, self.total = cfg, int(job_id), float(total)
        self.rate = self.total / finish_after  # iterations a second
        self.lock = threading.Lock()  # the agent's threads may poll and stop it together
        self.ledger = Ledger(ledger_path(cfg.run_dir, cfg.node), job_id, cfg.node)
        record = checkpoint.read(cfg.checkpoint_dir, job_id)
        self.resumed = max(record.iterations if record else 0.0, float(start))
        self.began = time.monotonic()
        self.ledger.start(self.resumed, self.total)
        if record is not None and record.done and record.iterations >= self.total:
            self.ledger.end("finished")  # nothing to do: trainer.api.Job.exit_finished
            self.returncode = EXIT_FINISHED

    def position(self) -> float:
        return min(self.total, self.resumed + self.rate * (time.monotonic() - self.began))

    def poll(self) -> int | None:
        with self.lock:
            if self.returncode is None and self.position() >= self.total:
                self._end(self.total)
            return self.returncode

    def terminate(self) -> None:
        with self.lock:
            if self.returncode is None:
                self._end(self.position())

    kill = terminate

    def _end(self, at: float) -> None:
        """The trainer's stop or finish (trainer.api.Job._save, then its exit)."""
        done = at >= self.total
        self.ledger.checkpoint(at)  # before the record is durable, as the ledger requires
        checkpoint.write(self.cfg.checkpoint_dir, checkpoint.Checkpoint(
            job_id=self.job_id, iterations=at, total=self.total, node=self.cfg.node,
            done=done))
        self.ledger.end("finished" if done else "stopped")
        self.returncode = EXIT_FINISHED if done else EXIT_STOPPED


def stand_in_spawn(cfg: AgentConfig, job_id: int, gpus: tuple, workload: dict, start: float,
                   *rest: Any, finish_after: float | None = None) -> list:
    """launcher.spawn with stand-ins: one that runs until stopped, or, with `finish_after`,
    one that does the job's work (its launch's iterations) in that many seconds."""
    cfg.trainer_dir.mkdir(parents=True, exist_ok=True)  # a regroup writes the pace file there
    if finish_after is None:
        return [StandInTrainer()]
    return [FinishingTrainer(cfg, job_id, workload["iterations"], start, finish_after)]


class Records:
    """What the agents did, as the benchmark reads it back (appends are atomic)."""

    def __init__(self) -> None:
        self.handled: list[tuple[float, str, int, str]] = []
        self.heartbeats: dict[str, list[tuple[float, bool]]] = {}

    def install(self) -> None:
        """Wrap the agent's request handler and its link's sends to record them."""
        handle, send = node_agent.Agent.handle, Link._send
        records = self

        def recorded_handle(agent: Any, msg: Any) -> dict:
            reply = handle(agent, msg)
            if msg.type in ("job.launch", "job.stop", "job.regroup"):
                records.handled.append((time.time(), msg.type, int(msg["job_id"]),
                                        agent.cfg.node))
            return reply

        def recorded_send(link: Any, type_: str, **fields: Any) -> str:
            sent = time.time()
            outcome = send(link, type_, **fields)
            if type_ == "agent.heartbeat":
                records.heartbeats.setdefault(link.cfg.node, []).append((sent, outcome == "ok"))
            return outcome

        node_agent.Agent.handle = recorded_handle
        Link._send = recorded_send

    def as_json(self) -> dict:
        return {"handled": self.handled, "heartbeats": self.heartbeats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--first", type=int, default=0, help="the first node's index (n<first>)")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tick", type=float, default=0.25,
                    help="how often each agent looks at its trainers (AgentConfig.tick): the "
                         "stand-ins end only when stopped (or, with --finish-after, are seen "
                         "finished this late at most), so a node's 20 looks a second would "
                         "be this machine's CPU spent on nothing")
    ap.add_argument("--finish-after", type=float, default=None,
                    help="stand-ins that do all of a job's iterations in this many seconds "
                         "of running and write the trainers' ledger (default: they run "
                         "until stopped and write nothing)")
    args = ap.parse_args(argv)
    if args.finish_after is not None and not args.finish_after > 0:
        ap.error("--finish-after must be > 0")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    launcher.spawn = functools.partial(stand_in_spawn, finish_after=args.finish_after)
    records = Records()
    records.install()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threads = []
    for i in range(args.first, args.first + args.count):
        node = f"n{i}"
        cfg = AgentConfig(node=node, gpus=tuple(range(GPUS_PER_NODE)), cpus=32, mem=256.0,
                          endpoints_file=args.endpoints, run_dir=args.run_dir / node,
                          heartbeat=args.heartbeat, request_timeout=5.0, request_retries=2,
                          tick=args.tick)
        thread = threading.Thread(target=node_agent.run,
                                  args=(cfg, stop, structlog.get_logger(node=node)),
                                  name=f"agent-{node}", daemon=True)
        thread.start()
        threads.append(thread)
    stop.wait()
    for thread in threads:
        thread.join(30.0)
    args.out.write_text(json.dumps(records.as_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
