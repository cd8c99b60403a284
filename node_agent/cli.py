"""The node agent's command line: `python -m node_agent.agent --node NAME --gpus 0,1 ...`.
Parses and checks the options, sets up logging and the stop on SIGTERM or Ctrl-C; the agent's
module then runs its loop with what `start` returns. This module does not import the agent,
so the program (node_agent/agent.py run as __main__) and its command line import no circle."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from node_agent.config import AgentConfig
from specs.limits import MAX_CPUS, MAX_GPU_MEM_GB, MAX_MEM, MAX_TIME_SCALE, MAX_WAIT_S
from specs.options import number


def parse_args(argv: Sequence[str] | None = None) -> tuple[AgentConfig, str]:
    # bounded numbers (specs/limits.py): one line naming the option and its range
    scale = number(1 / MAX_TIME_SCALE, MAX_TIME_SCALE)
    seconds = number(0, MAX_WAIT_S, above=True, unit="s")
    wait = number(0, MAX_WAIT_S, unit="s")
    p = argparse.ArgumentParser(prog="python -m node_agent.agent", description=(
        "The node agent: `python -m node_agent.agent --node NAME --gpus 0,1,2,3 "
        "--endpoints FILE ...`."))
    p.add_argument("--node", required=True, help="node name; the service is agent.<NODE>")
    p.add_argument("--gpus", required=True, help="GPU indices of this node, e.g. 0,1,2,3")
    p.add_argument("--cpus", type=number(1, MAX_CPUS, integer=True), default=os.cpu_count() or 1)
    p.add_argument("--mem", type=number(0, MAX_MEM), default=0.0, help="memory in GB")
    p.add_argument("--gpu-mem", type=number(0, MAX_GPU_MEM_GB), default=None, metavar="GB",
                   help="each GPU's memory in GB (default: what nvidia-smi says of the "
                        "smallest of --gpus, else not stated); the scheduler refuses an agent "
                        "with less than its spec's gpu_mem_p_gpu")
    p.add_argument("--endpoints", required=True, help="the broker's endpoints file")
    p.add_argument("--wait-endpoints", type=wait, default=30.0, metavar="S",
                   help="seconds to wait for the endpoints file (the broker may be starting)")
    p.add_argument("--run-dir", required=True, help="logs, trainers/ and checkpoints/ go here")
    p.add_argument("--time-scale", type=scale, default=1.0, help="trace seconds per wall second")
    p.add_argument("--heartbeat", type=seconds, default=0.5, help="seconds between heartbeats")
    p.add_argument("--report-every", type=seconds, default=0.2,
                   help="trainers' wall seconds between telemetry/checkpoints")
    p.add_argument("--stop-timeout", type=seconds, default=10.0,
                   help="seconds a trainer gets to checkpoint after SIGTERM before SIGKILL")
    p.add_argument("--address", default="127.0.0.1",
                   help="this node's address for torch rendezvous (other nodes connect to it)")
    p.add_argument("--log-level", default="info")
    from broker.metrics_http import add_arguments as add_metrics_arguments
    add_metrics_arguments(p)
    from broker.keys import add_client_key_argument
    add_client_key_argument(p)
    a = p.parse_args(argv)
    try:
        gpus = tuple(int(g) for g in a.gpus.split(",") if g.strip() != "")
    except ValueError:
        p.error(f"--gpus must be comma-separated integers, got {a.gpus!r}")
    if not gpus or len(set(gpus)) != len(gpus):
        p.error(f"--gpus must list distinct GPU indices, got {a.gpus!r}")
    from broker.metrics_http import check_arguments as check_metrics_arguments
    check_metrics_arguments(p, a)
    gpu_mem = a.gpu_mem if a.gpu_mem is not None else detected_gpu_mem(gpus)
    cfg = AgentConfig(node=a.node, gpus=gpus, cpus=a.cpus, mem=a.mem, gpu_mem_gb=gpu_mem,
                      endpoints_file=str(Path(a.endpoints).resolve()),
                      run_dir=Path(a.run_dir).resolve(), time_scale=a.time_scale,
                      heartbeat=a.heartbeat, report_every=a.report_every,
                      stop_timeout=a.stop_timeout, address=a.address,
                      wait_endpoints=a.wait_endpoints,
                      metrics=a.metrics, metrics_key=a.metrics_key,
                      metrics_insecure=a.metrics_insecure,
                      client_key=str(Path(a.client_key).resolve()) if a.client_key else None)
    return cfg, a.log_level


def detected_gpu_mem(gpus: Sequence[int], run: Callable[..., Any] = subprocess.run) -> float:
    """The memory of the smallest of `gpus` as nvidia-smi reports it (GB = GiB, as torch
    counts), or 0 where there is no nvidia-smi or it says nothing of them."""
    try:
        out = run(["nvidia-smi", "--query-gpu=index,memory.total",
                   "--format=csv,noheader,nounits"], capture_output=True, text=True,
                  timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0.0
    return parse_gpu_mem(out, gpus)


def parse_gpu_mem(text: str, gpus: Sequence[int]) -> float:
    """nvidia-smi's `index, memory.total` rows (MiB) -> the smallest of `gpus` in GB."""
    sizes = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                sizes[int(parts[0])] = float(parts[1]) / 1024
            except ValueError:
                continue
    mine = [sizes[g] for g in gpus if g in sizes]
    return min(mine) if len(mine) == len(gpus) else 0.0


def start(argv: Sequence[str] | None = None) -> tuple[AgentConfig, threading.Event, Any]:
    """The agent's config, the event SIGTERM and Ctrl-C set, and its logger (logging set up)."""
    cfg, level = parse_args(argv)
    import structlog

    from broker.logs import configure_logging

    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(f"agent-{cfg.node}", cfg.run_dir, level=level)
    log = structlog.get_logger().bind(node=cfg.node)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return cfg, stop, log
