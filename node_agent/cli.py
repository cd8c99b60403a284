"""The node agent's command line: `python -m node_agent.agent --node NAME --gpus 0,1 ...`.
Parses and checks the options, sets up logging and the stop on SIGTERM or Ctrl-C; the agent's
module then runs its loop with what `start` returns. This module does not import the agent,
so the program (node_agent/agent.py run as __main__) and its command line import no circle."""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from node_agent.config import AgentConfig
from node_agent.lease import DEFAULT_S as DEFAULT_LEASE_S
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
    p.add_argument("--gpu-type", type=gpu_type_option, default=None, metavar="NAME",
                   help="its GPUs' type as the spec's pools name it, e.g. T4 or V100M32 "
                        "(default: from nvidia-smi, else torch with CUDA, else not stated); "
                        "the scheduler refuses an agent whose type is not its node's pool's")
    p.add_argument("--endpoints", required=True, help="the broker's endpoints file")
    p.add_argument("--wait-endpoints", type=wait, default=30.0, metavar="S",
                   help="seconds to wait for the endpoints file (the broker may be starting)")
    p.add_argument("--run-dir", required=True, help="logs, trainers/ and checkpoints/ go here")
    p.add_argument("--time-scale", type=scale, default=1.0, help="trace seconds per wall second")
    p.add_argument("--heartbeat", type=seconds, default=0.5, help="seconds between heartbeats")
    p.add_argument("--report-every", type=seconds, default=0.2,
                   help="trainers' wall seconds between telemetry/checkpoints")
    p.add_argument("--lease", type=seconds, default=DEFAULT_LEASE_S, metavar="S",
                   help="seconds its trainers go on without the scheduler hearing this agent, "
                        "then stop with a checkpoint (the scheduler's registration reply "
                        "sets it, below its own timeout for a silent agent)")
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
    gpu_type = a.gpu_type
    if gpu_type is None:
        try:
            gpu_type = detected_gpu_type(gpus)
        except ValueError as err:
            p.error(str(err))
    cfg = AgentConfig(node=a.node, gpus=gpus, cpus=a.cpus, mem=a.mem, gpu_mem_gb=gpu_mem,
                      gpu_type=gpu_type,
                      endpoints_file=str(Path(a.endpoints).resolve()),
                      run_dir=Path(a.run_dir).resolve(), time_scale=a.time_scale,
                      heartbeat=a.heartbeat, report_every=a.report_every,
                      stop_timeout=a.stop_timeout, address=a.address, lease=a.lease,
                      wait_endpoints=a.wait_endpoints,
                      metrics=a.metrics, metrics_key=a.metrics_key,
                      metrics_insecure=a.metrics_insecure,
                      metrics_key_always=a.metrics_key_always,
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


def gpu_type_option(text: str) -> str:
    """An argparse type: a GPU type as a spec's pools name one (specs.pools.NAME)."""
    from specs.pools import NAME

    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"must be 1-64 letters, digits or _.+- (starting with a letter or digit), "
            f"as the spec's gpu_type, got {text!r}")
    return text


# nvidia-smi's names of the types real cluster lists name (specs/gpu_types.py), as named there
SMI_TYPES: Mapping[str, str] = MappingProxyType({
    "Tesla T4": "T4", "NVIDIA T4": "T4",
    "Tesla P100-PCIE-16GB": "P100", "Tesla P100-SXM2-16GB": "P100",
    "Tesla V100-SXM2-16GB": "V100M16", "Tesla V100-PCIE-16GB": "V100M16",
    "Tesla V100-SXM2-32GB": "V100M32", "Tesla V100-PCIE-32GB": "V100M32",
    "NVIDIA A10": "A10",
})
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.+-]")


def gpu_type_name(device_name: str) -> str:
    """A GPU type from the name nvidia-smi or torch gives the device: the spec's name for a
    type in SMI_TYPES, else the name with spaces (and anything else a type may not hold) as
    '-', cut to 64 characters; "" for a name that leaves nothing."""
    name = device_name.strip()
    if name in SMI_TYPES:
        return SMI_TYPES[name]
    name = _NOT_IN_NAME.sub("-", name)[:64]
    from specs.pools import NAME

    return name if NAME.fullmatch(name) else ""


def detected_gpu_type(gpus: Sequence[int], run: Callable[..., Any] = subprocess.run,
                      device_names: Callable[[Sequence[int]], list[str]] | None = None) -> str:
    """The type of `gpus` as nvidia-smi names them, else as torch with CUDA does; "" where
    neither can say (emulated agents state theirs with --gpu-type). ValueError when they are
    not all of one type: a node's pool has one."""
    names = smi_gpu_names(gpus, run)
    if names is None:
        names = (device_names or torch_gpu_names)(gpus)
    types = sorted({gpu_type_name(n) for n in names} - {""})
    if len(types) > 1:
        raise ValueError(f"--gpus {','.join(map(str, gpus))} are of types {', '.join(types)}; "
                         "give the agent GPUs of one type, or say which with --gpu-type")
    return types[0] if types else ""


def smi_gpu_names(gpus: Sequence[int], run: Callable[..., Any] = subprocess.run
                  ) -> list[str] | None:
    """nvidia-smi's name of each of `gpus`; None without nvidia-smi or when it does not list
    them all."""
    try:
        out = run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                  capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = {}
    for line in out.splitlines():
        index, sep, name = line.partition(",")
        if sep and index.strip().isdigit() and name.strip():
            names[int(index)] = name.strip()
    return [names[g] for g in gpus] if all(g in names for g in gpus) else None


def torch_gpu_names(gpus: Sequence[int]) -> list[str]:
    """torch's name of each of `gpus` where a GPU driver is present and torch has CUDA; []
    otherwise. Without a driver torch is not imported: it takes seconds, and an emulated
    agent (no GPU) would pay them at every start."""
    if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia")):
        return []
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        count = torch.cuda.device_count()
        return [torch.cuda.get_device_name(g) for g in gpus] if all(
            0 <= g < count for g in gpus) else []
    except Exception:  # a broken CUDA install: say nothing rather than fail to start
        return []


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
