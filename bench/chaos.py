"""Chaos run of the live system: `python bench/chaos.py --jobs 60 --kills 10 --seed N [--seeds K]`.

Starts broker, scheduler (muri-s), 3 agents and the feeder on loopback, SIGKILLs agents,
trainers, the scheduler and the broker by a schedule drawn from the seed (restarting each),
then checks that every job finished exactly once (scheduler.log and journal; and, apart from
the scheduler, the trainers' own ledgers: no overlapping runs, no gaps, nothing counted twice)
and that the report is produced. Prints the seed first: the same seed replays the same kill
schedule; prints the kills by kind (planned/executed) and the ledger totals last.
With `--seeds K`, K campaigns run one after another (seeds N, N+1, ...), each in its own
run directory, and one verdict line per seed is printed at the end.
`--hostile` runs the other plan (tests/chaos.py HOSTILE): agents paused shorter than the
agent timeout, scheduler kills, four clients pipelining submits and four flooding status
queries; every acknowledged flooded job must finish once too, no agent may be declared dead,
and an operator's status query must be answered within the flood bounds.
Exit status 0 when every run held up, 1 when one did not (RUN_DIR/chaos.json says why).
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chaos import HOSTILE, KINDS, ChaosConfig, run_chaos  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/chaos.py", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--seed", type=int, default=None, help="default: a fresh random seed")
    p.add_argument("--seeds", type=int, default=1,
                   help="campaigns to run, seeds SEED, SEED+1, ... (default 1)")
    p.add_argument("--time-scale", type=float, default=250.0,
                   help="trace seconds per wall second (default 250)")
    p.add_argument("--spacing", type=float, default=6.0, help="min wall seconds between kills")
    p.add_argument("--window", type=float, default=None,
                   help="kills fall in [4, 4+WINDOW] wall seconds after the feed starts "
                        "(default: sized to the trace's arrivals)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="wall seconds to wait for every job after the last kill")
    p.add_argument("--run-dir", default=None, help="default: a new temporary directory")
    p.add_argument("--hostile", action="store_true",
                   help="agents paused (past their lease at times, never past the agent "
                        "timeout), scheduler kills, and submit and status floods by four "
                        "clients, instead of SIGKILLs of every kind of process")
    a = p.parse_args(argv)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(10**6)
    # arrivals average 400 trace s apart: keep kills while jobs still arrive and run
    window = a.window or max(a.kills * a.spacing + 4, 0.8 * a.jobs * 400 / a.time_scale)
    base = Path(a.run_dir) if a.run_dir else Path(tempfile.mkdtemp(prefix="chaos-"))
    verdicts = []
    for seed in range(seed, seed + max(1, a.seeds)):
        cfg = ChaosConfig(seed=seed, jobs=a.jobs, kills=a.kills, time_scale=a.time_scale,
                          window=(4.0, 4.0 + window), min_spacing=a.spacing,
                          finish_timeout=a.timeout, kinds=HOSTILE if a.hostile else KINDS)
        run_dir = base / f"seed-{seed}" if a.seeds > 1 else base
        print(f"seed {seed}", flush=True)
        summary = run_chaos(cfg, run_dir, say=lambda line: print(line, flush=True))
        print(f"summary: {run_dir / 'chaos.json'}")
        problems = summary["verdict"]["problems"]
        verdicts.append((seed, summary["ok"], f"seed {seed}: {'OK' if summary['ok'] else 'FAILED'} "
                         f"in {summary['wall_s']:.0f}s, {summary['kills_done']} kills; "
                         + ("; ".join(problems)[:400] if problems else
                            f"all {a.jobs + summary['flooded_jobs']} jobs finished exactly "
                            "once" + "".join(f"; flood of {f['seconds']:.1f}s: operator "
                                             f"waited <= {f['operator_worst_during']:.2f}s, "
                                             f"{f['operator_worst_after']:.2f}s after"
                                             for f in summary["floods"]))))
    print(f"verdicts ({len(verdicts)} seeds):")
    for _, _, line in verdicts:
        print(line, flush=True)
    return 0 if all(ok for _, ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
