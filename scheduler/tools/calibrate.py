"""`interlace-calibrate`: fit the cost model's free terms to measured runs, and say how well the
fitted model predicts each policy's run, including the runs it was not fitted on.

Method (docs/simulator.md#calibration):

1. Restart overhead and calibration, from the runs of policies that never interleave: each
   job held its GPUs `running = c * alone + o * starts` seconds, fitted by least squares on
   each job's relative error (short jobs weigh as much as long ones); spread by bootstrap
   over jobs.
2. Group slowdown by group size, from the runs of policies that interleave: each job's
   held seconds as the simulator replays the run (same trace, cluster and round period)
   against the measured ones, least squares on their logarithms, minimised by a pattern
   search on a 0.05 grid (a replay is a discrete schedule: no gradient to follow). Spread:
   the values fitted on each interleaving run alone.
3. Cross-validation: each policy's run predicted by values fitted without it.

The testbed's logs do not say which jobs ran together, so a slowdown is fitted through
replays rather than read off group by group; the residual by each job's dominant resource
says whether a factor by resource mix would add anything.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from scheduler.core.metrics import percentile
from scheduler.presets import Preset, get_preset
from scheduler.sim.simulator import SimResult, simulate
from scheduler.tools.runlogs import (RunLog, RunLogError, read_testbed_jobs, find_testbed)
from specs import SpecError, load_spec
from specs.options import OneLineParser, number
from specs.spec import ClusterSpec
from traces import TraceError, read_trace
from traces.record import JobRecord

PROG = "interlace-calibrate"
INTERLEAVING = ("muri-s", "muri-l")  # the policies whose runs tell the group slowdown
SIZES = (2, 3, 4)
STEP = 0.05
# the moves the search tries, a STEP at a time: each size alone, then pairs and all together
# (the sizes trade against each other: one alone may not improve where two together do)
DIRECTIONS = tuple(d for base in ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1),
                                  (0, 1, 1), (1, 1, 1))
                   for d in (base, tuple(-x for x in base)))
BOUNDS = (1.0, 2.5)  # a group slowdown the search may take
STAGES = ("data", "gpu", "net")  # a trace's three stage times, for the residual by resource


@dataclass(frozen=True)
class OverheadFit:
    calibration: float
    overhead_s: float
    calibration_sd: float
    overhead_sd: float
    jobs: int


@dataclass(frozen=True)
class Errors:
    """How far a replay is from the measured run: relative errors of the average and p99
    JCT and the makespan; per job, the median |log(replayed JCT / measured JCT)| and the mean
    squared log ratio of the seconds each job held GPUs."""

    avg: float
    p99: float
    makespan: float
    job_jct: float
    job_running: float

    def row(self) -> dict[str, float]:
        return {"avg_jct": self.avg, "p99_jct": self.p99, "makespan": self.makespan,
                "job_jct_median_abs_log": self.job_jct, "job_running_msle": self.job_running}


@dataclass
class Calibration:
    overhead: OverheadFit
    slowdown: dict[int, float]
    slowdown_by_run: dict[str, dict[int, float]]
    errors: dict[str, Errors]
    cross: dict[str, Errors] = field(default_factory=dict)
    by_resource: dict[str, float] = field(default_factory=dict)
    replays: int = 0


def fit_overhead(logs: Sequence[RunLog], samples: int = 200, seed: int = 0) -> OverheadFit:
    """`running = c * alone + o * starts` over every job of `logs`, each job's error taken
    relative to its measured running time; standard deviations by bootstrap."""
    rows = [(j.alone, j.starts, j.running) for log in logs for j in log.jobs.values()
            if j.running > 0 and j.alone > 0]
    if len(rows) < 3:
        raise RunLogError("too few jobs in the runs of policies that do not interleave to fit "
                          "a restart overhead (3 needed)")
    data = np.array(rows, dtype=float)

    def solve(d: np.ndarray) -> np.ndarray:
        w = 1.0 / d[:, 2]
        return np.linalg.lstsq(d[:, :2] * w[:, None], d[:, 2] * w, rcond=None)[0]

    c, o = solve(data)
    rng = np.random.default_rng(seed)
    boot = np.array([solve(data[rng.integers(0, len(data), len(data))])
                     for _ in range(samples)])
    return OverheadFit(float(c), float(max(o, 0.0)), float(boot[:, 0].std()),
                       float(boot[:, 1].std()), len(rows))


def errors(log: RunLog, result: SimResult) -> Errors:
    """The replay `result` against the measured `log`, over the jobs both hold."""
    replayed = {o.job_id: o for o in result.outcomes if o.end is not None}
    ids = [i for i in log.jobs if i in replayed]
    if not ids:
        raise RunLogError(f"{log.source}: no job of the log was replayed")
    real = [log.jobs[i] for i in ids]
    sim = [replayed[i] for i in ids]
    rj, sj = [j.jct for j in real], [o.jct for o in sim]
    rend = max(j.end for j in real) - min(j.submit for j in real)
    send = max(o.end for o in sim) - min(o.submit for o in sim)
    job_jct = float(np.median([abs(math.log(max(s, 1e-9) / max(r, 1e-9)))
                               for s, r in zip(sj, rj)]))
    job_running = float(np.mean([math.log(max(o.running or 0.0, 1.0) / max(j.running, 1.0)) ** 2
                                 for o, j in zip(sim, real)]))
    return Errors(float(np.mean(sj) / np.mean(rj) - 1),
                  percentile(sj, 0.99) / percentile(rj, 0.99) - 1, send / rend - 1,
                  job_jct, job_running)


def fitted_preset(base: Preset, overhead: OverheadFit, slowdown: Mapping[int, float]) -> Preset:
    """`base` with the fitted terms: one restart overhead for every model, the calibration,
    the group slowdowns."""
    return replace(base, model=replace(
        base.model, overhead_table=MappingProxyType({}),
        overhead_default=round(overhead.overhead_s, 1),
        calibration=round(overhead.calibration, 3),
        group_slowdown=MappingProxyType(dict(slowdown))))


class Replays:
    """Replays of one trace on one cluster at one round period, counted."""

    def __init__(self, records: Sequence[JobRecord], spec: ClusterSpec, round_interval: float):
        self.records, self.spec, self.round_interval = records, spec, round_interval
        self.count = 0

    def __call__(self, policy: str, preset: Preset) -> SimResult:
        self.count += 1
        return simulate(self.records, self.spec, policy, preset,
                        round_interval=self.round_interval)


def fit_slowdown(replay: Replays, base: Preset, overhead: OverheadFit,
                 logs: Sequence[RunLog], start: Mapping[int, float]) -> dict[int, float]:
    """Pattern search, STEP at a time, for the slowdowns whose replays of `logs` come
    closest per job (the mean of Errors.job_running over the logs)."""
    cache: dict[tuple[float, ...], float] = {}

    def loss(values: tuple[float, ...]) -> float:
        if values not in cache:
            preset = fitted_preset(base, overhead, dict(zip(SIZES, values)))
            cache[values] = float(np.mean([errors(log, replay(log.policy, preset)).job_running
                                           for log in logs]))
        return cache[values]

    best = tuple(round(start.get(m, 1.0), 2) for m in SIZES)
    improved = True
    while improved:
        improved = False
        for direction in DIRECTIONS:
            while True:
                trial = tuple(round(v + d * STEP, 2) for v, d in zip(best, direction))
                if not all(BOUNDS[0] <= v <= BOUNDS[1] for v in trial):
                    break
                if loss(trial) < loss(best) - 1e-9:
                    best, improved = trial, True
                else:
                    break
    return dict(zip(SIZES, best))


def residual_by_resource(records: Sequence[JobRecord], log: RunLog, result: SimResult) -> dict[str, float]:
    """Mean log(replayed / measured) seconds held, by each job's dominant stage: a factor by
    resource mix would help where these differ."""
    dominant = {r.job_id: STAGES[int(np.argmax(r.stage_times[:3]))] for r in records
                if len(r.stage_times) >= 3}
    replayed = {o.job_id: o for o in result.outcomes}
    out: dict[str, list[float]] = {}
    for job_id, job in log.jobs.items():
        o = replayed.get(job_id)
        if o is None or job_id not in dominant or not o.running or job.running <= 0:
            continue
        out.setdefault(dominant[job_id], []).append(math.log(o.running / job.running))
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}


def calibrate(records: Sequence[JobRecord], spec: ClusterSpec, logs: Mapping[str, RunLog],
              round_interval: float, base: Preset, start: Mapping[int, float],
              cross_validate: bool = True) -> Calibration:
    replay = Replays(records, spec, round_interval)
    plain = [log for name, log in logs.items() if name not in INTERLEAVING]
    mixed = [log for name, log in logs.items() if name in INTERLEAVING]
    overhead = fit_overhead(plain or mixed)
    slowdown = fit_slowdown(replay, base, overhead, mixed, start) if mixed else dict(start)
    fits: dict[tuple[str, ...], dict[int, float]] = {}  # by the runs fitted on

    def fit_on(runs: list[RunLog]) -> dict[int, float]:
        """The slowdowns fitted on `runs` alone, from the joint fit's (each set once: a
        run's own fit is also the other run's held-out fit)."""
        key = tuple(sorted(run.policy for run in runs))
        if key not in fits:
            fits[key] = fit_slowdown(replay, base, overhead, runs, slowdown)
        return fits[key]

    by_run = {log.policy: fit_on([log]) for log in mixed} if len(mixed) > 1 else {}
    preset = fitted_preset(base, overhead, slowdown)
    results = {name: replay(name, preset) for name in logs}
    cal = Calibration(overhead, slowdown, by_run,
                      {name: errors(log, results[name]) for name, log in logs.items()})
    for log in mixed:
        for stage, value in residual_by_resource(records, log, results[log.policy]).items():
            cal.by_resource.setdefault(stage, 0.0)
            cal.by_resource[stage] += value / len(mixed)
    if cross_validate:
        for name, log in logs.items():
            rest_plain = [other for other in plain if other.policy != name] or plain
            held_out = fit_overhead(rest_plain) if name not in INTERLEAVING else overhead
            if name in INTERLEAVING and len(mixed) > 1:  # held_out is `overhead` here
                values = fit_on([m for m in mixed if m.policy != name])
            else:
                values = slowdown
            cal.cross[name] = errors(log, replay(name, fitted_preset(base, held_out, values)))
    cal.replays = replay.count
    return cal


# -- the command line ------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=(
        "Fit the cost model's restart overhead, calibration and group slowdowns to measured "
        "runs (a testbed folder of per-policy job logs, the trace and the cluster), and show "
        "how well the fitted model predicts each policy, cross-validated."))
    p.add_argument("testbed", metavar="FOLDER",
                   help="cluster_trace.csv, a cluster spec CSV and <Policy>-job.csv per policy "
                        "(the artifact's cluster experiment layout)")
    p.add_argument("--round-interval", type=number(0, 1e6, unit="s"), default=360.0,
                   metavar="SECONDS",
                   help="the measured scheduler's round period, for the replays (default 360, "
                        "the paper's testbed)")
    p.add_argument("--preset", default="default", choices=("default", "paper"),
                   help="the preset whose model is fitted (its policy settings replay the runs)")
    p.add_argument("--merge-rule", default="efficiency", choices=("efficiency", "completion"),
                   help="the merge rule the measured Muri ran, for its replays (default "
                        "efficiency, the paper's: the testbed ran it)")
    p.add_argument("--no-cv", action="store_true", help="skip the cross-validation")
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


def _text(cal: Calibration, round_interval: float) -> str:
    o = cal.overhead
    lines = [f"restart overhead {o.overhead_s:.1f} s a start (sd {o.overhead_sd:.1f}), "
             f"calibration {o.calibration:.3f} (sd {o.calibration_sd:.3f}), "
             f"from {o.jobs} jobs of runs that do not interleave",
             "group slowdown " + ", ".join(f"{m}: {v:.2f}" for m, v in cal.slowdown.items())
             + (" (fitted on each run alone: " + "; ".join(
                 f"{run} " + ", ".join(f"{v:.2f}" for v in values.values())
                 for run, values in cal.slowdown_by_run.items()) + ")"
                if cal.slowdown_by_run else ""),
             f"replays at a {round_interval:g} s round period; errors of the fitted model "
             f"(avg, p99 JCT, makespan; per job: median |log JCT ratio|)"]
    for name, e in cal.errors.items():
        cross = cal.cross.get(name)
        lines.append(f"  {name:>9}: avg {e.avg:+.1%}  p99 {e.p99:+.1%}  makespan "
                     f"{e.makespan:+.1%}  per job {e.job_jct:.3f}"
                     + (f"   held out: avg {cross.avg:+.1%}" if cross else ""))
    if cal.by_resource:
        lines.append("residual by dominant stage (mean log replayed/measured held time): "
                     + ", ".join(f"{k} {v:+.3f}" for k, v in cal.by_resource.items()))
    lines.append(f"{cal.replays} replays")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        trace, spec_file, files = find_testbed(Path(args.testbed))
        logs = {name: read_testbed_jobs(path, name) for name, path in files.items()}
        records = read_trace(trace)
        spec = load_spec(spec_file)
    except (RunLogError, TraceError, SpecError) as err:
        print(f"{PROG}: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    base = get_preset(args.preset, muri_merge_rule=args.merge_rule)
    cal = calibrate(records, spec, logs, args.round_interval, base,
                    base.model.group_slowdown or {m: 1.3 for m in SIZES},
                    cross_validate=not args.no_cv)
    if args.json:
        print(json.dumps({
            "overhead_s": cal.overhead.overhead_s, "overhead_sd": cal.overhead.overhead_sd,
            "calibration": cal.overhead.calibration,
            "calibration_sd": cal.overhead.calibration_sd,
            "group_slowdown": {str(k): v for k, v in cal.slowdown.items()},
            "slowdown_by_run": {run: {str(k): v for k, v in values.items()}
                                for run, values in cal.slowdown_by_run.items()},
            "errors": {k: e.row() for k, e in cal.errors.items()},
            "cross_validation": {k: e.row() for k, e in cal.cross.items()},
            "residual_by_dominant_stage": cal.by_resource,
            "round_interval": args.round_interval, "replays": cal.replays}))
    else:
        print(_text(cal, args.round_interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
