"""Many real node agents in one process, for the scale benchmarks.

Each agent is the node agent's own code (`node_agent.agent.run`: its service thread and
sockets, its link's registration, heartbeats and outbox, its job table), on a thread of this
process; only the trainers are stand-ins (`StandInTrainer`, no process: a 2-core machine
cannot run thousands), which run until stopped; so each agent looks at them four times a
second (`--tick`, AgentConfig.tick) instead of twenty: at twenty, 1,024 agents took 1.3 of the
machine's 2 cores doing nothing, at four 0.55. What the benchmark reads back, written as JSON
to --out when the host is told to stop (SIGTERM or SIGINT):

* `handled`: (wall time, request type, job id, node) of every launch, stop and regroup an
  agent answered, for the whole-round latency;
* `heartbeats`: per node, [wall time sent, acknowledged] of every heartbeat, the agent's own
  record of its liveness (a scheduler that declares it dead although it sent a heartbeat
  within the timeout before is wrong).

Run from the repository root (bench_service.py --real-agents starts these):
    python bench/agent_host.py --endpoints FILE --run-dir DIR --first 0 --count 256 --out F
"""
from __future__ import annotations

import argparse
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
from trainer.exits import EXIT_STOPPED  # noqa: E402

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


def stand_in_spawn(cfg: AgentConfig, job_id: int, gpus: tuple, workload: dict, *rest: Any) -> list:
    cfg.trainer_dir.mkdir(parents=True, exist_ok=True)  # a regroup writes the pace file there
    return [StandInTrainer()]


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
                         "stand-ins end only when stopped, so a node's 20 looks a second "
                         "would be this machine's CPU spent on nothing")
    args = ap.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    launcher.spawn = stand_in_spawn
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
