"""What a Slurm allocation offers Interlace, read from the variables Slurm sets in a job.

Why its own module: the cluster spec the scheduler plans with must be the allocation, not a
file someone keeps in step by hand; and the rules for reading Slurm's variables (several
spellings for GPUs, compressed per-node lists) are easy to get wrong, so they live in one
pure place that tests feed with environments.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

SPEC_HEADER = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"


class AllocationError(ValueError):
    """The environment is not a usable allocation; the message says what is missing."""


@dataclass(frozen=True)
class Allocation:
    """One Slurm job's allocation, as Interlace sees it (homogeneous: per-node minimums)."""

    job_id: str
    nodes: tuple[str, ...]  # Slurm node names, in SLURM_NODEID order
    gpus_per_node: int
    cpus_per_node: int
    mem_gb: int
    restarts: int = 0  # SLURM_RESTART_COUNT: 0 on the first start, n after n requeues

    def agent_name(self, index: int) -> str:
        """Node i of the spec is served by the agent named n<i> (the scheduler's rule)."""
        return f"n{index}"

    def spec_csv(self) -> str:
        """A one-switch cluster spec of these nodes (the scheduler's --spec file)."""
        return (f"{SPEC_HEADER}\n1,{len(self.nodes)},{self.gpus_per_node},"
                f"{self.cpus_per_node},{self.mem_gb}\n")


def per_node_counts(value: str) -> list[int]:
    """Slurm's compressed per-node list, e.g. SLURM_JOB_CPUS_PER_NODE='8(x2),4' -> [8, 8, 4]."""
    counts: list[int] = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not m:
            raise AllocationError(f"cannot read the per-node list {value!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def _ids(env: Mapping[str, str], key: str) -> list[str]:
    return [g.strip() for g in env.get(key, "").split(",") if g.strip()]


def gpu_count(env: Mapping[str, str]) -> int | None:
    """GPUs per node as Slurm granted them, or None when the job asked for none.

    In order: SLURM_GPUS_ON_NODE (set with any GPU request), SLURM_JOB_GPUS (the ids on the
    batch node), SLURM_GPUS_PER_NODE ('4' or 'a100:4'), then CUDA_VISIBLE_DEVICES."""
    on_node = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if on_node.isdigit():
        return int(on_node)
    if _ids(env, "SLURM_JOB_GPUS"):
        return len(_ids(env, "SLURM_JOB_GPUS"))
    count = env.get("SLURM_GPUS_PER_NODE", "").strip().rsplit(":", 1)[-1]
    if count.isdigit():
        return int(count)
    return len(_ids(env, "CUDA_VISIBLE_DEVICES")) or None


def gpu_ids(env: Mapping[str, str], count: int) -> list[int]:
    """The GPU ids an agent offers on its node: the first `count` that Slurm made visible to
    its step (CUDA_VISIBLE_DEVICES), else logical ids 0..count-1 (emulated GPUs)."""
    visible = _ids(env, "CUDA_VISIBLE_DEVICES")
    if len(visible) >= count and all(g.isdigit() for g in visible):
        return [int(g) for g in visible[:count]]
    return list(range(count))


def _memory_gb(env: Mapping[str, str], cpus: int) -> int:
    if env.get("SLURM_MEM_PER_NODE", "").isdigit():
        return max(1, int(env["SLURM_MEM_PER_NODE"]) // 1024)
    if env.get("SLURM_MEM_PER_CPU", "").isdigit():
        return max(1, int(env["SLURM_MEM_PER_CPU"]) * cpus // 1024)
    return max(1, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30)


def expand_hostlist(nodelist: str) -> list[str]:
    """SLURM_JOB_NODELIST ('sn[0-3],gpu7') as names, by Slurm itself (`scontrol show
    hostnames`): its syntax has more corners than a regex should own."""
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        raise AllocationError(f"scontrol show hostnames {nodelist}: {out.stderr.strip()}")
    return out.stdout.split()


def from_env(env: Mapping[str, str], *, gpus: int | None = None,
             expand: Callable[[str], Sequence[str]] = expand_hostlist) -> Allocation:
    """The allocation this process runs in; `gpus` overrides what Slurm says (for clusters
    whose GPUs are not Slurm GRES, or logical GPUs of emulated trainers)."""
    job_id = env.get("SLURM_JOB_ID", "")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        raise AllocationError("not inside a Slurm allocation (no SLURM_JOB_ID / "
                              "SLURM_JOB_NODELIST); use `interlace-slurm submit` to get one")
    nodes = tuple(expand(nodelist))
    if not nodes:
        raise AllocationError(f"the node list {nodelist!r} names no node")
    cpus_list = per_node_counts(env.get("SLURM_JOB_CPUS_PER_NODE", "")) or \
        [int(env.get("SLURM_CPUS_ON_NODE", "1") or 1)]
    cpus = min(cpus_list)
    count = gpus if gpus is not None else gpu_count(env)
    if not count or count < 1:
        raise AllocationError("this allocation has no GPUs: ask sbatch for some "
                              "(--gpus-per-node N) or pass --gpus-per-node N to interlace-slurm")
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    return Allocation(job_id=job_id, nodes=nodes, gpus_per_node=int(count), cpus_per_node=cpus,
                      mem_gb=_memory_gb(env, cpus),
                      restarts=int(restarts) if restarts.isdigit() else 0)
