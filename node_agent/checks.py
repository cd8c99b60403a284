"""What an agent checks in the scheduler's requests before it acts on them: GPUs that are
this node's, a workload it can run, a sane rank. Refusals are broker.refusal's, shared with
the scheduler's handlers."""
from __future__ import annotations

import math
from typing import Any

from types import MappingProxyType

from broker.refusal import Refusal, all_ints
from specs.limits import MAX_COMMAND_CHARS, MAX_GPU_MEM_GB, MAX_PATH_CHARS

# the strings of a request that may be longer than a name (specs.limits.MAX_NAME_CHARS)
STRING_LIMITS = MappingProxyType({"workload.argv[]": MAX_COMMAND_CHARS,
                                  "workload.workdir": MAX_PATH_CHARS,
                                  "workload.progress_file": MAX_PATH_CHARS})


def gpus(asked: Any, node: str, own: tuple[int, ...]) -> tuple[int, ...]:
    if not asked or not all_ints(asked):
        raise Refusal("bad_request", f"gpus must be a non-empty list of ints, got {asked!r}")
    if len(set(asked)) != len(asked):
        raise Refusal("bad_request", f"gpus lists a GPU twice: {asked!r}")
    unknown = sorted(set(asked) - set(own))
    if unknown:
        raise Refusal("bad_gpus", f"node {node} has no GPUs {unknown}")
    return tuple(asked)


def workload(w: dict) -> dict[str, Any]:
    """The launch's workload, checked: `emulated` (iterations, iteration_time, stages) or
    `torch` (iterations, model from the workload registry, optional batch_size/config)."""
    kind = w.get("kind")
    if kind == "command":
        from node_agent.user_command import check

        return {**check(w), "gpu_mem_gb": gpu_mem(w)}
    if kind == "torch":
        from workloads.registry import TORCH_NAMES

        try:
            total = float(w["iterations"])
            model = str(w["model"])
            batch = int(w.get("batch_size") or 0)
            config = dict(w.get("config") or {})
        except (KeyError, TypeError, ValueError) as err:
            raise Refusal("bad_workload", f"a torch workload needs iterations and model: "
                                          f"{err!r}") from None
        if model not in TORCH_NAMES or not total > 0 or batch < 0:
            raise Refusal("bad_workload", f"need a model among {sorted(TORCH_NAMES)}, "
                                          f"iterations > 0, batch_size >= 0; got {w!r}")
        return {"kind": kind, "iterations": total, "model": model, "batch_size": batch,
                "config": config, "gpu_mem_gb": gpu_mem(w)}
    if kind != "emulated":
        raise Refusal("unsupported_workload", f"workload kind {kind!r} is not supported")
    try:
        total, tt = float(w["iterations"]), float(w["iteration_time"])
        stages = tuple(float(s) for s in w["stages"])
    except (KeyError, TypeError, ValueError) as err:
        raise Refusal("bad_workload", f"workload needs iterations, iteration_time, "
                                      f"stages: {err!r}") from None
    if not (total > 0 and tt > 0 and len(stages) == 3 and all(s >= 0 for s in stages)):
        raise Refusal("bad_workload", "need iterations > 0, iteration_time > 0 and three "
                                      f"non-negative stage times, got {w!r}")
    return {"kind": kind, "iterations": total, "iteration_time": tt, "stages": stages,
            "gpu_mem_gb": gpu_mem(w)}


def gpu_mem(w: Any) -> float:
    """The GPU memory a workload declares (GB per GPU; 0: none)."""
    try:
        value = float(w.get("gpu_mem_gb") or 0.0)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 <= value <= MAX_GPU_MEM_GB:
        raise Refusal("bad_workload", f"gpu_mem_gb must be a number of GB in "
                                      f"[0, {MAX_GPU_MEM_GB:g}], got {w.get('gpu_mem_gb')!r}")
    return value


def ranks(msg: Any) -> tuple[int, int]:
    """(rank, world size) of a launch."""
    rank, world = int(msg.get("rank") or 0), int(msg.get("world_size") or 1)
    if not 0 <= rank < world:
        raise Refusal("bad_request", f"rank {rank} is not within world size {world}")
    return rank, world


def start_iteration(msg: Any) -> float:
    start = float(msg["start_iteration"])
    if not start >= 0:
        raise Refusal("bad_request", f"start_iteration must be >= 0, got {start}")
    return start


def regroup(msg: Any) -> tuple[int, float, list]:
    """(job, iteration time, group) of a job.regroup."""
    job_id = int(msg["job_id"])
    tt = float(msg["iteration_time"])
    if not tt > 0:
        raise Refusal("bad_request", f"iteration_time must be > 0, got {tt}")
    group = list(msg["group"])
    if job_id not in group or not all_ints(group):
        raise Refusal("bad_request", f"group must list job ids with {job_id}: {group!r}")
    return job_id, tt, group
