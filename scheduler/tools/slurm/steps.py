"""The command lines of an Interlace allocation: each agent's `srun` step and what runs in it.

Why pure functions: what Slurm is asked for (one step per node, its name, its CPUs, whether
it may share the node with the batch step) decides how `scancel`, `squeue` and cgroups treat
the agents, so it is written once, here, and tested as data.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from scheduler.tools.slurm.allocation import Allocation

STEP_PREFIX = "interlace-agent-"  # squeue --steps shows interlace-agent-n0, -n1, ...
KEYS = "keys"  # RUN_DIR/keys: the CURVE key folder of this allocation


def step_name(alloc: Allocation, index: int) -> str:
    return STEP_PREFIX + alloc.agent_name(index)


def client_key(run_dir: Path, name: str) -> Path:
    """The secret certificate of client `name` in the allocation's key folder."""
    return Path(run_dir) / KEYS / "clients" / f"{name}.key_secret"


def agent_step(python: str, alloc: Allocation, index: int, run_dir: Path, time_scale: float,
               *, slurm_gpus: bool, agent_args: Sequence[str] = ()) -> list[str]:
    """`srun` of node `index`'s agent: one task on that node, a step of its own named
    interlace-agent-n<i>, every CPU of the node (its trainers run inside the step),
    --overlap so it shares the first node with the batch step that runs the scheduler, and
    the node's GPUs as GRES when Slurm granted them (`slurm_gpus`)."""
    argv = ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={alloc.nodes[index]}",
            f"--job-name={step_name(alloc, index)}", f"--cpus-per-task={alloc.cpus_per_node}",
            "--kill-on-bad-exit=0"]
    if slurm_gpus:
        argv.append(f"--gres=gpu:{alloc.gpus_per_node}")
    return argv + [python, "-m", "scheduler.tools.slurm", "agent",
                   "--node", alloc.agent_name(index), "--run-dir", str(run_dir),
                   "--gpus-per-node", str(alloc.gpus_per_node),
                   "--cpus", str(alloc.cpus_per_node), "--mem", str(alloc.mem_gb),
                   "--time-scale", repr(float(time_scale)),
                   *(["--", *agent_args] if agent_args else [])]


def node_agent(python: str, node: str, gpus: Sequence[int], cpus: int, mem_gb: int,
               run_dir: Path, time_scale: float, address: str,
               agent_args: Sequence[str] = ()) -> list[str]:
    """The node agent the step runs (exec'd, so the step's signals reach it directly)."""
    run_dir = Path(run_dir)
    return [python, "-m", "node_agent.agent", "--node", node,
            "--gpus", ",".join(str(g) for g in gpus), "--cpus", str(cpus), "--mem", str(mem_gb),
            "--endpoints", str(run_dir / "endpoints.json"), "--run-dir", str(run_dir),
            "--client-key", str(client_key(run_dir, f"agent-{node}")),
            "--address", address, "--time-scale", repr(float(time_scale)),
            "--wait-endpoints", "120", *agent_args]
