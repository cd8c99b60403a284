"""Outside an allocation: `interlace-slurm submit` is `sbatch scripts/slurm/interlace.sbatch`
with the options an Interlace allocation needs.

Why a wrapper: the options that make Slurm's lifecycle work for Interlace are easy to
forget and fail late (hours later, at the time limit): one task per node, `--requeue`, the
warning signal to the batch step (`--signal=B:USR1@S`) that lets it checkpoint and requeue
before the limit, and append-mode output so a requeued start does not erase the first.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from scheduler.tools.slurm.launcher import ROOT

SCRIPT = ROOT / "scripts" / "slurm" / "interlace.sbatch"


@dataclass(frozen=True)
class Request:
    """What the operator asks Slurm for."""

    nodes: int
    gpus_per_node: int | None = None  # GPUs as Slurm GRES
    emulate_gpus: int | None = None  # no GRES: logical GPU ids (emulated trainers)
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    job_name: str = "interlace"
    run_dir: Path | None = None
    requeue: bool = True
    exclusive: bool = True
    warn_s: int = 120
    sbatch_args: tuple[str, ...] = ()


def sbatch_argv(req: Request, run_args: Sequence[str] = (), script: Path = SCRIPT) -> list[str]:
    """The sbatch command line; the run's own options (trace, time scale, ...) follow the
    script and reach `interlace-slurm run` unchanged."""
    argv = ["sbatch", "--parsable", f"--nodes={req.nodes}", "--ntasks-per-node=1",
            f"--job-name={req.job_name}", "--requeue" if req.requeue else "--no-requeue",
            f"--signal=B:USR1@{req.warn_s}", "--open-mode=append"]
    if req.exclusive:
        argv.append("--exclusive")
    for flag, value in (("--time", req.time), ("--partition", req.partition),
                        ("--account", req.account), ("--gpus-per-node", req.gpus_per_node)):
        if value is not None:
            argv.append(f"{flag}={value}")
    out_dir = Path(req.run_dir).resolve() if req.run_dir else Path.cwd()
    argv.append(f"--output={out_dir / 'slurm-%j.out'}")
    argv += list(req.sbatch_args)
    argv.append(str(script))
    if req.run_dir:
        argv += ["--run-dir", str(Path(req.run_dir).resolve())]
    if req.emulate_gpus is not None:
        argv += ["--gpus-per-node", str(req.emulate_gpus)]
    if not req.requeue:
        argv.append("--no-requeue")
    return argv + list(run_args)


def submit_env(env: Mapping[str, str]) -> dict[str, str]:
    """sbatch exports the caller's environment (--export=ALL): the batch script then runs
    this Python, with this checkout importable, on the allocation's first node."""
    path = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return dict(env, INTERLACE_PYTHON=sys.executable, PYTHONPATH=path)


def submit(req: Request, run_args: Sequence[str] = ()) -> int:
    """Run sbatch; print the job id (stdout) and where the run directory is."""
    if req.run_dir:
        Path(req.run_dir).mkdir(parents=True, exist_ok=True)
    argv = sbatch_argv(req, run_args)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=submit_env(os.environ),
                              timeout=120)
    except FileNotFoundError:
        print("interlace-slurm: sbatch not found: run this on a Slurm login node",
              file=sys.stderr)
        return 1
    if done.returncode != 0:
        print(f"interlace-slurm: sbatch failed: {done.stderr.strip()}", file=sys.stderr)
        return done.returncode
    job = done.stdout.strip().split(";")[0]
    print(job)
    where = Path(req.run_dir).resolve() if req.run_dir else f"interlace-{job}/ (in this folder)"
    print(f"interlace-slurm: job {job} submitted; run directory {where}", file=sys.stderr)
    return 0
