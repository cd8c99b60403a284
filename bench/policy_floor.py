"""How fast a simulation could be if its policy cost nothing: the floor under the fast policies.

Run from the repository root:
    python bench/policy_floor.py [--traces trace1,trace4] [--policies srtf,srsf,tiresias]
        [--trace-dir DIR] [--artifact DIR [--artifact-python PY]] [--repeat N] [--json]

A run is made twice in this process: once as it is, keeping every round's plan, then again
with a stand-in policy (`Recorded`) that hands those plans back in turn and does nothing
else (no order kept, no hooks). The second run is the same simulation (checked: every job's
outcome equal) minus all the policy's work, so its time is what the simulator loop and the
core's bookkeeping (advance, round, apply, ends) cost on their own. No change to any policy
can bring a run below it. With --artifact, the artifact's own time on the same trace (its
process minus its start-up, as bench_sim's side by side) turns that into the highest ratio
any policy speed-up could reach: artifact / floor. Times are CPU seconds, the fastest of
--repeat runs each.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from scheduler.core.policies.base import Policy, RoundContext  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.core.state import Plan  # noqa: E402
from scheduler.sim.simulator import Simulator  # noqa: E402
from specs import load_spec  # noqa: E402
from traces import read_trace  # noqa: E402

import bench_sim  # noqa: E402

REFERENCE = bench_sim.REFERENCE


class Recorded(Policy):
    """Hands back a recorded run's plans, one per round, in order; its hooks do nothing (the
    base's are no-ops, and the one the core calls per advance does nothing here either)."""

    name = "recorded"

    def __init__(self, recorded: Policy, plans: list[Plan]):
        super().__init__(recorded.model)
        self.runs_unplaced = recorded.runs_unplaced  # its plans are checked as the recorded's
        self._plans = iter(plans)

    def on_changes(self, jobs) -> None:
        """Time moved on: the recorded plans need nothing of it."""

    def plan(self, ctx: RoundContext) -> Plan:
        plan = next(self._plans, None)
        if plan is None:
            raise RuntimeError("more rounds than the recorded run")
        return plan


def timed(records, spec, policy: str, preset, plans: list[Plan] | None = None):
    """(CPU s, outcomes, plans) of one run; with `plans`, the policy is replaced by them."""
    keep: list[Plan] = []
    sim = Simulator(records, spec, policy, preset,
                    on_round=None if plans is not None else lambda t, plan, core: keep.append(plan))
    if plans is not None:
        sim.core.policy = Recorded(sim.core.policy, plans)
    start = time.process_time()
    result = sim.run()
    return time.process_time() - start, result.outcomes, keep


def floor(records, spec, policy: str, preset_name: str = "paper", repeat: int = 1) -> dict:
    """The run as it is and the same run with its policy's work taken out (fastest of
    `repeat` each); raises if the two runs' outcomes differ (the floor would not be the same
    simulation)."""
    preset = get_preset(preset_name)
    full, outcomes, plans = min((timed(records, spec, policy, preset) for _ in range(repeat)),
                                key=lambda run: run[0])
    bare = []
    for _ in range(repeat):
        try:
            seconds, replayed, _ = timed(records, spec, policy, preset, plans)
        except RuntimeError:  # more rounds than recorded
            replayed = None
        if replayed != outcomes:
            raise AssertionError(f"{policy}: the recorded plans gave other outcomes")
        bare.append(seconds)
    return {"policy": policy, "jobs": len(records), "rounds": len(plans),
            "full_cpu_s": round(full, 4), "floor_cpu_s": round(min(bare), 4),
            "policy_share": round(1 - min(bare) / full, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="trace1,trace4")
    ap.add_argument("--policies", default="srtf,srsf,tiresias")
    ap.add_argument("--trace-dir", type=Path, help="where TRACE.csv lies (default: the "
                    "artifact's trace-data/ with --artifact, else ../shared/reference)")
    ap.add_argument("--spec", type=Path, default=REFERENCE / "n8g8.csv")
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--artifact", type=Path, help="the artifact's simulator/ folder")
    ap.add_argument("--artifact-python", default=sys.executable)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON line per case as well")
    args = ap.parse_args(argv)
    trace_dir = args.trace_dir or (args.artifact / "trace-data" if args.artifact else REFERENCE)
    traces, policies = args.traces.split(","), args.policies.split(",")
    unknown = [p for p in policies if p not in bench_sim.FAST_POLICIES]
    if args.artifact and unknown:
        ap.error(f"no artifact schedule for {unknown}; choose from "
                 f"{', '.join(bench_sim.FAST_POLICIES)}")
    spec = load_spec(args.spec)
    # one-off costs (lazy imports) are not charged to the first case
    timed(read_trace(trace_dir / f"{traces[0]}.csv")[:20], spec, policies[0],
          get_preset(args.preset))
    startup = (bench_sim.artifact_startup(args.artifact, args.artifact_python,
                                          trace_dir / f"{traces[0]}.csv", policies, args.spec,
                                          args.repeat) if args.artifact else {})
    rows = []
    for trace in traces:
        path = trace_dir / f"{trace}.csv"
        records = read_trace(path)
        for policy in policies:
            row = {"trace": trace, **floor(records, spec, policy, args.preset, args.repeat)}
            if args.artifact:
                runs = [bench_sim.run_artifact(args.artifact, args.artifact_python, path,
                                               bench_sim.FAST_POLICIES[policy], args.spec, 3600)
                        for _ in range(args.repeat)]
                done = [run.cpu_s for run, avg in runs if avg is not None]
                if done:
                    art = min(done) - startup[policy].cpu_s
                    row.update(artifact_sim_cpu_s=round(art, 3),
                               ratio_now=round(art / row["full_cpu_s"], 1),
                               ratio_ceiling=round(art / row["floor_cpu_s"], 1))
            rows.append(row)
    head = f"{'case':<17}{'rounds':>7}{'full s':>9}{'floor s':>9}{'policy':>8}"
    if args.artifact:
        head += f"{'art s':>9}{'x now':>7}{'x max':>7}"
    print("CPU seconds, fastest of", args.repeat, "| floor = the same run with its policy's "
          "work taken out | x max = artifact / floor")
    print(head)
    for row in rows:
        line = (f"{row['policy'] + ' ' + row['trace']:<17}{row['rounds']:>7}"
                f"{row['full_cpu_s']:>9.3f}{row['floor_cpu_s']:>9.3f}"
                f"{row['policy_share']:>8.0%}")
        if "ratio_ceiling" in row:
            line += (f"{row['artifact_sim_cpu_s']:>9.3f}{row['ratio_now']:>7}"
                     f"{row['ratio_ceiling']:>7}")
        print(line)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
