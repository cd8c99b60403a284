"""What one node agent is told at start (the command line's result, node_agent/cli.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from node_agent.lease import DEFAULT_S as DEFAULT_LEASE_S


@dataclass(frozen=True)
class AgentConfig:
    node: str
    gpus: tuple[int, ...]
    cpus: int
    mem: float
    endpoints_file: str
    run_dir: Path
    time_scale: float = 1.0
    heartbeat: float = 0.5
    report_every: float = 0.2
    stop_timeout: float = 10.0
    request_timeout: float = 2.0
    request_retries: int = 2
    address: str = "127.0.0.1"  # where other nodes reach this node's rank-0 rendezvous
    gate_stall_timeout: float = 30.0
    client_key: str | None = None  # CURVE secret certificate; also handed to its trainers
    wait_endpoints: float = 30.0  # seconds to wait for the broker's endpoints file
    metrics: tuple[str, int] | None = None  # (host, port) to serve Prometheus metrics on
    metrics_key: str | None = None  # the secret non-loopback scrapers must send (--metrics-key)
    metrics_insecure: bool = False  # allow a non-loopback metrics host keyless
    metrics_key_always: bool = False  # ask loopback scrapers for the key too
    gpu_mem_gb: float = 0.0  # each of its GPUs' memory (GB; 0: not known), told the scheduler
    gpu_type: str = ""  # its GPUs' type as the spec names it ("": not known), told the scheduler
    # how often (s, at most a quarter heartbeat) the agent looks at its trainers and its link,
    # and its threads at whether to stop: a trainer that exits by itself is reported this late
    # at most (a stop's end at once)
    tick: float = 0.05
    # how long its trainers may go on unheard (node_agent/lease.py), until the scheduler
    # says otherwise at registration
    lease: float = DEFAULT_LEASE_S

    @property
    def name(self) -> str:
        return f"agent.{self.node}"

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def trainer_dir(self) -> Path:
        return self.run_dir / "trainers"

    @property
    def lease_file(self) -> Path:
        return self.run_dir / f"lease-{self.node}"
