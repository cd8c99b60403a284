"""Trainer processes: their command line and environment, starting them, ending them.

Knows nothing of the scheduler or the job table: it turns a checked launch into processes
(one for an emulated job, one rank per GPU for a torch job) and ends them with a checkpoint
(SIGTERM, a bounded wait, then SIGKILL, noted in the run's ledger so its accounting holds).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from trainer.exits import EXIT_OOM

from node_agent import joblog
from node_agent.config import AgentConfig
from trainer import ledger, pace

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # so trainers import this very checkout


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, for a job's rendezvous; never a fixed one (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def spawn(cfg: AgentConfig, job_id: int, gpus: tuple[int, ...], workload: dict, start: float,
          rank: int, world: int, rendezvous: dict, gate: Any,
          pace_file: Path | None = None) -> list[subprocess.Popen]:
    """Start the job's processes here: one for an emulated job, one rank per GPU for a
    torch job (ranks rank..rank+len(gpus)-1; the lowest one takes the gate's turns)."""
    cfg.trainer_dir.mkdir(parents=True, exist_ok=True)
    if workload["kind"] == "command":  # the user's own program (node_agent/user_command.py)
        from node_agent.user_command import spawn as spawn_command

        return spawn_command(cfg, job_id, gpus, workload, start, rank, world, rendezvous, gate)
    common = [sys.executable, "-m", "trainer.run", "--job-id", str(job_id), "--node",
              cfg.node, "--endpoints", cfg.endpoints_file, "--checkpoint-dir",
              str(cfg.checkpoint_dir), "--iterations", repr(workload["iterations"]),
              "--time-scale", repr(cfg.time_scale), "--report-every", repr(cfg.report_every),
              "--start-iteration", repr(start), "--run-dir", str(cfg.run_dir),
              "--lease-file", str(cfg.lease_file)]
    common += ["--client-key", cfg.client_key] if cfg.client_key else []
    if workload.get("gpu_mem_gb"):  # declared: the emulated trainer reports it
        common += ["--gpu-mem", repr(workload["gpu_mem_gb"])]
    if workload["kind"] == "emulated":
        cmd = common + ["--iteration-time", repr(workload["iteration_time"]), "--stages",
                        ",".join(repr(s) for s in workload["stages"])]
        if pace_file is not None:  # fresh for each launch: no stale pace
            pace.write(pace_file, workload["iteration_time"])
            cmd += ["--pace-file", str(pace_file)]
        return [popen(cfg, job_id, cmd, gpus, None, start)]
    ranks = len(gpus) if world > 1 else 1  # world counts every GPU of the job
    procs = []
    for i in range(ranks):
        cmd = common + ["--workload", workload["model"], "--rank", str(rank + i),
                        "--world-size", str(world)]
        if workload["batch_size"]:
            cmd += ["--batch-size", str(workload["batch_size"])]
        if workload["config"]:
            cmd += ["--workload-config", json.dumps(workload["config"])]
        if rendezvous:
            cmd += ["--master-addr", rendezvous["master_addr"], "--master-port",
                    str(rendezvous["master_port"])]
        if gate is not None and i == 0:
            cmd += ["--gate", gate.endpoint]
        procs.append(popen(cfg, job_id, cmd, gpus[i:i + 1] if ranks > 1 else gpus,
                           rank + i if world > 1 else None, start))
    return procs


def popen(cfg: AgentConfig, job_id: int, cmd: list[str], gpus: tuple[int, ...],
          rank: int | None, start: float) -> subprocess.Popen:
    """One trainer process, its stderr appended to its rank's output file after a launch
    marker (node_agent/joblog.py)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)),
               PYTHONPATH=os.pathsep.join(p for p in (str(PROJECT_ROOT),
                                                       os.environ.get("PYTHONPATH")) if p))
    with joblog.open_output(cfg.trainer_dir, job_id, rank, start, cfg.node) as err:
        # own session: a Ctrl-C meant for the agent must not reach trainers unannounced;
        # the agent stops them itself, with checkpoints
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=env, cwd=str(PROJECT_ROOT),
                                start_new_session=True, close_fds=True)


def sigterm(procs: Sequence[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.terminate()
            except ProcessLookupError:
                pass


def terminate(cfg: AgentConfig, job_id: int, procs: Sequence[subprocess.Popen],
              log: Any) -> int:
    """SIGTERM every rank, wait (bounded), SIGKILL; returns the lead's exit status."""
    sigterm(procs)
    deadline = time.monotonic() + cfg.stop_timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            log.warning("trainer_kill", job=job_id, pid=proc.pid, after_s=cfg.stop_timeout)
            proc.kill()
            codes.append(proc.wait())
            ledger.note_reaped(cfg.run_dir, cfg.node, job_id, proc.pid)
    return codes[0]


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    if rc == EXIT_OOM:
        return f"out of GPU memory (exit status {rc})"
    return f"exit status {rc}"


OUTPUT_LINES = 20  # the last lines of a failed trainer's output its report carries
OUTPUT_BYTES = 4000  # read from the end of its output file for them


def output_tail(trainer_dir: Path, job_id: int) -> str:
    """The end of the job's output here (stdout and stderr, appended across launches): its
    one-rank file, or the rank file written last; the agent's launch markers left out."""
    paths = [trainer_dir / f"{job_id}.stderr"]
    if not paths[0].is_file():
        paths = sorted(trainer_dir.glob(f"{job_id}.r*.stderr"), key=_mtime)
    text = stderr_tail(paths[-1], OUTPUT_BYTES) if paths else ""
    return "\n".join(line for line in text.splitlines()
                     if joblog.parse_marker(line) is None).strip("\n")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def stderr_tail(path: Path, limit: int = 400) -> str:
    """The file's last `limit` bytes at most, from a line's start, trailing blanks off."""
    read_back = joblog.tail(path, limit)
    if read_back is None:
        return ""
    text, cut = read_back
    if cut:  # the first line read is cut: drop it
        text = text.partition("\n")[2]
    return text.strip("\n").rstrip()
