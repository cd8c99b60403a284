"""What the live scheduler is told at start: everything it needs besides the broker."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specs.spec import ClusterSpec
from specs.tenants import Tenancy


@dataclass
class Options:
    """Everything the service needs besides the broker's endpoints."""

    spec: ClusterSpec
    policy: str = "muri-s"
    preset: str = "default"
    run_dir: Path = Path("run")
    time_scale: float = 1.0  # trace seconds per wall second
    round_s: float = 5.0  # wall seconds between rounds without any event (a safety net)
    # trace seconds of a fixed round period (0: a round at every event): rounds only at its
    # multiples, where something happened since the last (as the paper's testbed planned)
    round_interval: float = 0.0
    agent_timeout: float = 10.0  # wall seconds without a heartbeat before an agent is dead
    agent_request_timeout: float = 5.0  # per try, for job.stop / job.launch to an agent
    agent_request_retries: int = 3
    journal: Path | None = None  # default: run_dir/journal.db
    checkpoint_dir: Path | None = None  # default: run_dir/checkpoints (where agents write)
    # "emulated": trainers replay the planned pace; "torch": real training of the job's model
    workload: str = "emulated"
    # the trainers do not keep the pace they are launched with (stand-ins that compress a
    # job's work): a progress claim is then not bounded by what its pace allows
    unpaced_trainers: bool = False
    torch_config: dict = field(default_factory=dict)  # workload settings for every torch job
    profile_threshold: float = 0.1  # relative move of a measured profile that re-plans
    interference: bool = True  # groups slowed by the preset's factors (False: none)
    # (model or "" for all, GPU type) -> speed given by the operator (--gpu-speed)
    gpu_speed: dict = field(default_factory=dict)
    metrics: tuple[str, int] | None = None  # (host, port) to serve Prometheus metrics on
    metrics_key: str | None = None  # the secret non-loopback scrapers must send (--metrics-key)
    metrics_insecure: bool = False  # allow a non-loopback metrics host keyless
    metrics_key_always: bool = False  # ask loopback scrapers for the key too
    tenancy: Tenancy | None = None  # who shares the cluster (--tenants); None: one queue
    # a job's own failures (failures.py): the first backoff and its cap (wall seconds), and
    # the failures in a row without progress after which it is failed
    failure_backoff: float = 10.0
    failure_backoff_cap: float = 600.0
    max_failures: int = 3

    @property
    def journal_path(self) -> Path:
        return self.journal or self.run_dir / "journal.db"

    @property
    def checkpoints(self) -> Path:
        return self.checkpoint_dir or self.run_dir / "checkpoints"
