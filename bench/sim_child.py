"""One simulation in a process of its own, so the parent can read its peak memory and cap its time.

Usage (what bench/subrun.py runs):  python bench/sim_child.py '<JSON task>'
The task names the trace (a CSV file, or `generate` arguments), the cluster (a spec file or
its five fields), the policy and the preset; one JSON line with the outcome goes to stdout.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.presets import Preset, get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import ClusterSpec, load_spec  # noqa: E402
from traces import generate, read_trace  # noqa: E402


def records_of(task: dict) -> list:
    """The trace a task names: a file it reads, or the seeded generator's arguments."""
    if "trace_file" in task:
        return read_trace(task["trace_file"])
    return generate(**task["generate"])


def spec_of(task: dict) -> ClusterSpec:
    if "spec_file" in task:
        return load_spec(task["spec_file"])
    return ClusterSpec(**task["spec"])


class _Heartbeat:
    """Every `every` seconds a JSON line on stderr: events so far, jobs done, CPU and wall
    seconds, so that a run stopped at its cap still tells how far it got and how fast."""

    def __init__(self, every: float = 5.0):
        self.every, self.events = every, 0
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        self.next = self.wall + every

    def __call__(self, finished: int, n: int) -> None:
        self.events += 1
        now = time.perf_counter()
        if now >= self.next:
            self.next = now + self.every
            print(json.dumps({"events": self.events, "finished": finished,
                              "cpu_s": time.process_time() - self.cpu,
                              "wall_s": now - self.wall}), file=sys.stderr, flush=True)


def preset_of(task: dict) -> Preset:
    """The task's preset: its name, with any fields it overrides (e.g. a Themis solver)."""
    return get_preset(task["preset"], **task.get("preset_overrides", {}))


def warm_up(spec: ClusterSpec, policy: str, preset: Preset) -> None:
    """A few-job backlog first, so one-off costs (a policy's lazy imports: Muri's scipy takes
    about a second) are not charged to the run measured; small sizes would show them most."""
    simulate(generate(6, seed=0, max_gpus=min(8, spec.total_gpus), backlog=True), spec, policy,
             preset)


def run_task(task: dict) -> dict:
    """Simulate the task; the figures a benchmark table reports."""
    records = records_of(task)
    spec = spec_of(task)
    preset = preset_of(task)
    if task.get("warm_up", True):
        warm_up(spec, task["policy"], preset)
    cpu = time.process_time()
    result = simulate(records, spec, task["policy"], preset,
                      progress=_Heartbeat())
    cpu = time.process_time() - cpu
    s = result.summary
    return {"jobs": len(records), "finished": sum(o.end is not None for o in result.outcomes),
            "rounds": result.rounds, "wall_s": result.wall_s, "cpu_s": cpu, "avg_jct": s.avg_jct,
            "p99_jct": s.p99_jct, "makespan": s.makespan}


def main() -> int:
    print(json.dumps(run_task(json.loads(sys.argv[1]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
