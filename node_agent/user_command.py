"""A user's own program as a job (`interlace-submit -- python train.py`): its checks and its
processes, one per GPU rank, each with the documented INTERLACE_* environment.

Why its own module: the packaged trainers get their settings as flags; a user's program gets
them as environment variables it (or trainer/api.py) reads, and the agent otherwise treats it
as any trainer: exit 0 is finished, exit 3 stopped with a checkpoint, SIGTERM asks it to
stop (a program that ignores the API dies of it and resumes from its last checkpoint).

The environment (also the standard torch.distributed names, so `init_process_group("env://")`
works unchanged):

  INTERLACE_JOB_ID          the job id
  INTERLACE_RANK            this process's rank (RANK)
  INTERLACE_WORLD_SIZE      processes in the job, one per GPU (WORLD_SIZE)
  INTERLACE_LOCAL_RANK      rank among this node's processes of the job (LOCAL_RANK)
  INTERLACE_MASTER_ADDR     rank 0's rendezvous address (MASTER_ADDR; multi-rank jobs)
  INTERLACE_MASTER_PORT     rank 0's rendezvous port (MASTER_PORT; multi-rank jobs)
  INTERLACE_VISIBLE_DEVICES the GPUs given to this process (CUDA_VISIBLE_DEVICES)
  INTERLACE_GATE            the group's stage gate endpoint; empty when the job runs alone
  INTERLACE_CHECKPOINT_DIR  this job's own directory for checkpoints (kept across restarts)
  INTERLACE_ITERATIONS      iterations the job was submitted with
  INTERLACE_START_ITERATION where the scheduler expects it to resume (its last checkpoint)
  INTERLACE_ENDPOINTS       the broker's endpoints file (stage times and progress go there)
  INTERLACE_TIME_SCALE      trace seconds per wall second (telemetry is in trace seconds)
  INTERLACE_NODE            the node's name
  INTERLACE_CLIENT_KEY      the CURVE client key file for a keyed broker (when there is one)
  INTERLACE_GPU_MEM_GB      GPU memory the job declared, GB per GPU (0: none); its reports say
                            it until the program measures its own (trainer/api.py)
  INTERLACE_PROGRESS_FILE   where the program may write its completed iterations, one number a
                            line, the last one counting (node_agent/progress_file.py)
  INTERLACE_WORKDIR         the directory it runs in: where it was submitted, or the job's own
                            (`interlace-submit --own-workdir`, RUN/jobs/job-<id>)
  INTERLACE_LEASE_FILE      the agent's lease: trainer/api.py's should_stop() turns true once it
                            has run out (node_agent/lease.py)

OMP_NUM_THREADS is 1 unless the agent's own environment sets it. Each rank's stdout and stderr
are appended to its output file (node_agent/joblog.py), after a marker line per launch.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from broker.refusal import Refusal
from node_agent import joblog, progress_file
from node_agent.config import AgentConfig
from specs.limits import MAX_PATH_CHARS
from specs.limits import MAX_COMMAND_ARGS, MAX_COMMAND_CHARS

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # trainer.api of this very checkout


def job_dir(checkpoints: str | os.PathLike, job_id: int) -> Path:
    """The job's own checkpoint directory, beside the progress records the agent reads."""
    return Path(checkpoints) / f"job-{int(job_id)}"


def own_workdir(run_dir: str | os.PathLike, job_id: int) -> Path:
    """The job's own working directory (`--own-workdir`), kept across its launches."""
    return Path(run_dir) / "jobs" / f"job-{int(job_id)}"


def check(w: dict) -> dict[str, Any]:
    """A command workload: iterations > 0, a non-empty argv of strings, a work dir."""
    try:
        total = float(w["iterations"])
        argv = [str(a) for a in w["argv"]] if isinstance(w["argv"], (list, tuple)) else None
        workdir = str(w.get("workdir") or "")
    except (KeyError, TypeError, ValueError) as err:
        raise Refusal("bad_workload", f"a command workload needs iterations and argv: "
                                      f"{err!r}") from None
    if not argv or not argv[0] or not total > 0:
        raise Refusal("bad_workload", f"need a non-empty argv and iterations > 0, got {w!r}")
    if len(argv) > MAX_COMMAND_ARGS or sum(map(len, argv)) + len(workdir) > MAX_COMMAND_CHARS:
        raise Refusal("bad_workload", f"argv too long (at most {MAX_COMMAND_ARGS} arguments, "
                                      f"{MAX_COMMAND_CHARS} characters with the work dir)")
    if workdir and not Path(workdir).is_dir():
        raise Refusal("bad_workload", f"work dir {workdir!r} does not exist on this node")
    progress = w.get("progress_file") or ""
    if not isinstance(progress, str) or len(progress) > MAX_PATH_CHARS or "\0" in progress:
        raise Refusal("bad_workload", f"progress_file must be a path of at most "
                                      f"{MAX_PATH_CHARS} characters")
    return {"kind": "command", "iterations": total, "argv": argv, "workdir": workdir,
            "turns": bool(w.get("turns", True)), "own_workdir": bool(w.get("own_workdir")),
            "progress_file": progress}


def workdir_of(cfg: AgentConfig, job_id: int, workload: dict) -> str:
    """Where the command runs: where it was submitted, or its own directory."""
    if workload.get("own_workdir"):
        return str(own_workdir(cfg.run_dir, job_id))
    return workload["workdir"] or os.getcwd()


def progress_path(cfg: AgentConfig, job_id: int, workload: dict) -> Path:
    """The file the agent reads the command's progress from: the one it was submitted with
    (`--progress-file`, in its working directory unless absolute), else the job's own."""
    named = workload.get("progress_file")
    if named:
        return Path(workdir_of(cfg, job_id, workload)) / named
    return progress_file.path_for(job_dir(cfg.checkpoint_dir, job_id))


def environment(cfg: AgentConfig, job_id: int, gpus: tuple[int, ...], total: float,
                start: float, rank: int, world: int, local_rank: int, rendezvous: dict,
                gate: Any, gpu_mem: float = 0.0, workdir: str = "",
                progress: str = "") -> dict[str, str]:
    """The documented variables for one process of the job (see the module docstring)."""
    visible = ",".join(map(str, gpus))
    own = {
        "INTERLACE_JOB_ID": str(job_id), "INTERLACE_RANK": str(rank),
        "INTERLACE_WORLD_SIZE": str(world), "INTERLACE_LOCAL_RANK": str(local_rank),
        "INTERLACE_MASTER_ADDR": str(rendezvous.get("master_addr", "127.0.0.1")),
        "INTERLACE_MASTER_PORT": str(rendezvous.get("master_port", "")),
        "INTERLACE_VISIBLE_DEVICES": visible,
        "INTERLACE_GATE": gate.endpoint if gate is not None else "",
        "INTERLACE_CHECKPOINT_DIR": str(job_dir(cfg.checkpoint_dir, job_id)),
        "INTERLACE_ITERATIONS": repr(total), "INTERLACE_START_ITERATION": repr(start),
        "INTERLACE_ENDPOINTS": str(cfg.endpoints_file),
        "INTERLACE_TIME_SCALE": repr(cfg.time_scale), "INTERLACE_NODE": cfg.node,
        "INTERLACE_CLIENT_KEY": cfg.client_key or "",
        "INTERLACE_GPU_MEM_GB": repr(float(gpu_mem)),
        "INTERLACE_PROGRESS_FILE": progress or str(progress_file.path_for(
            job_dir(cfg.checkpoint_dir, job_id))),
        "INTERLACE_WORKDIR": workdir,
        "INTERLACE_LEASE_FILE": str(cfg.lease_file),
    }
    torch_names = {"RANK": own["INTERLACE_RANK"], "WORLD_SIZE": own["INTERLACE_WORLD_SIZE"],
                   "LOCAL_RANK": own["INTERLACE_LOCAL_RANK"], "CUDA_VISIBLE_DEVICES": visible}
    if rendezvous:
        torch_names.update(MASTER_ADDR=own["INTERLACE_MASTER_ADDR"],
                           MASTER_PORT=own["INTERLACE_MASTER_PORT"])
    return {**own, **torch_names}


def spawn(cfg: AgentConfig, job_id: int, gpus: tuple[int, ...], workload: dict, start: float,
          rank: int, world: int, rendezvous: dict, gate: Any) -> list[subprocess.Popen]:
    """One process per GPU of this slice (one in all for a one-rank job); the lowest rank
    here gets the gate (the others take no turns, as with the torch trainer). It runs where it
    was submitted, or in the job's own directory, made at its first launch."""
    job_dir(cfg.checkpoint_dir, job_id).mkdir(parents=True, exist_ok=True)
    cfg.trainer_dir.mkdir(parents=True, exist_ok=True)
    ranks = len(gpus) if world > 1 else 1
    workdir = workdir_of(cfg, job_id, workload)
    if workload.get("own_workdir"):
        Path(workdir).mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
    for i in range(ranks):
        mine = gpus[i:i + 1] if ranks > 1 else gpus
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   PYTHONPATH=path,  # trainer.api of this very checkout
                   **environment(cfg, job_id, mine, workload["iterations"], start, rank + i,
                                 world, i, rendezvous, gate if i == 0 else None,
                                 workload.get("gpu_mem_gb", 0.0), workdir,
                                 str(progress_path(cfg, job_id, workload))))
        with joblog.open_output(cfg.trainer_dir, job_id, rank + i if world > 1 else None,
                                start, cfg.node) as err:
            try:  # own session, as for the packaged trainers: the agent alone signals it
                procs.append(subprocess.Popen(workload["argv"], stdin=subprocess.DEVNULL,
                                              stdout=err, stderr=err, env=env, cwd=workdir,
                                              start_new_session=True, close_fds=True))
            except OSError as exc:  # no such program, not executable: refused, none left
                for proc in procs:
                    proc.kill()
                    proc.wait()
                raise Refusal("bad_workload", f"cannot start {workload['argv'][0]!r}: "
                                              f"{exc.strerror or exc}") from None
    return procs
