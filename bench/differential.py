"""Differential check: our `paper` preset against the published artifact's simulator, job by job.

Run from the repository root:

    python bench/differential.py --artifact DIR --traces 20 --seed 1 [--policies srtf,...]
        [--jobs-range 30,200] [--limit 300] [--workers K] [--artifact-python PY]
    python bench/differential.py            # no artifact: against the recorded result
    python bench/differential.py --artifact DIR --record tests/data/differential_record.json

Each trace is generated from (kind, seed, jobs) by our own generator plus adversarial reshaping
(Poisson, uniform and bursty arrivals, all-at-once backlogs, ties in durations and arrivals,
single-GPU floods, all-8-GPU jobs) and written as a Muri CSV; both simulators read that file on
the n8g8 spec. The artifact (DIR: its `simulator/` folder, never part of this repository) runs as
a subprocess in a temporary folder with a time limit and `--autopack=False` (the setting of
the published figures); its per-job results are its log folder's `job.csv`. Printed per policy: the largest relative difference on average JCT, p99 JCT and
makespan, and on any single job's JCT, with the trace that shows it.

A policy may name a group size, `muri-l@2`: Muri with groups of at most K jobs (the
artifact's `--packing_num K`, our `--max-group K`); the default list runs K = 2 and 3 too.

A `late` case (`--cases late-s1-n1000`, never in a --traces rotation: the artifact needs an
hour or more for it) is long and loaded, from 2e6 s on, with arrivals placed 0.1-2 ms after
jobs' ends, where the artifact's closeness tests turn relative: the state trace1 reached once.

Without --artifact, the artifact's per-job JCTs recorded in tests/data/differential_record.json
(outputs only: the traces are regenerated from their seeds; `late` ones, made by running our
simulator, are kept in tests/data/differential_traces/) stand in for it.
"""
from __future__ import annotations

import argparse
import bisect
import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec  # noqa: E402
from traces import read_trace, write_trace  # noqa: E402
from traces.generate import generate  # noqa: E402
from traces.record import JobRecord  # noqa: E402

SPEC_FILE = ROOT / "specs" / "n8g8.csv"
RECORD_FILE = ROOT / "tests" / "data" / "differential_record.json"
#: recorded traces whose making runs our simulator (`late`), kept as made
STORED_TRACES = ROOT / "tests" / "data" / "differential_traces"
# our policy name -> the artifact's --schedule name
ARTIFACT_SCHEDULE = {
    "srtf": "shortest",
    "srsf": "shortest-gpu",
    "tiresias": "dlas-gpu",
    "antman": "antman",
    "themis": "themis",
    "muri-s": "multi-resource-blossom-same-gpu",
    "muri-l": "multi-resource-blossom-same-gpu-unaware",
}
#: Muri with groups of at most K jobs: `NAME@K`, the artifact's --packing_num K
GROUP_SIZES = (2, 3)
POLICIES = list(ARTIFACT_SCHEDULE) + [f"{p}@{k}" for p in ("muri-s", "muri-l")
                                      for k in GROUP_SIZES]


def variant(policy: str) -> tuple[str, int | None]:
    """'muri-l@2' -> ('muri-l', 2); 'srtf' -> ('srtf', None)."""
    base, _, size = policy.partition("@")
    return base, int(size) if size else None


def preset_for(policy: str):
    """The paper preset as the artifact runs `policy` (its group size, if it names one)."""
    _, size = variant(policy)
    return get_preset("paper") if size is None else get_preset("paper", muri_max_group=size)
KINDS = ("poisson", "uniform", "bursty", "backlog", "ties", "flood1", "all8", "mixed", "late")
#: the kinds a --traces run rotates through; `late` is long and costly, named with --cases
ROTATION = KINDS[:-1]
#: `late` traces start here, where the artifact's relative closeness (1e-9) passes 1e-4 s
LATE_START = 2_000_000.0
#: the policies whose ends a `late` trace puts arrivals just after, in turn
LATE_POLICIES = ("muri-l", "muri-s", "antman")
EXACT = 1e-9  # relative: what counts as the same number


# -- traces --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TraceCase:
    kind: str
    seed: int
    jobs: int

    @property
    def name(self) -> str:
        return f"{self.kind}-s{self.seed}-n{self.jobs}"

    @classmethod
    def parse(cls, name: str) -> "TraceCase":
        """The case a name such as `backlog-s6019-n77` names (as printed by a run)."""
        parts = name.rsplit("-", 2)
        if (len(parts) == 3 and parts[0] in KINDS and parts[1][:1] == "s"
                and parts[2][:1] == "n" and parts[1][1:].isdigit() and parts[2][1:].isdigit()):
            return cls(parts[0], int(parts[1][1:]), int(parts[2][1:]))
        raise ValueError(f"not a trace case name: {name!r} (kind-sSEED-nJOBS, kind one of "
                         f"{', '.join(KINDS)})")


def _resubmit(jobs: list[JobRecord], submit_ms: list[int]) -> list[JobRecord]:
    """The jobs with new submit times (whole ms), re-numbered 0.. in submit order."""
    order = sorted(range(len(jobs)), key=lambda i: submit_ms[i])  # stable: ties keep order
    out, previous = [], 0
    for new_id, i in enumerate(order):
        ms = int(submit_ms[i])
        out.append(dataclasses.replace(jobs[i], job_id=new_id, submit_time=ms / 1000,
                                       interval=(ms - previous) / 1000))
        previous = ms
    return out


def _submit_ms(jobs: list[JobRecord]) -> list[int]:
    return [round(j.submit_time * 1000) for j in jobs]


def make_trace(case: TraceCase) -> list[JobRecord]:
    """The trace a case names: identical for identical cases, on every machine."""
    rng = np.random.default_rng([case.seed, KINDS.index(case.kind)])
    n = case.jobs
    gap = float(rng.uniform(200.0, 1500.0))  # mean seconds between arrivals: from light to heavy
    kind = case.kind
    if kind == "mixed":
        kind = KINDS[int(rng.integers(len(KINDS) - 1))]
        gap /= 2
    if kind == "backlog":
        return generate(n, case.seed, backlog=True)
    if kind == "late":
        return late_trace(case, float(rng.uniform(2000.0, 3500.0)))
    if kind == "uniform":
        return generate(n, case.seed, arrival="uniform", mean_interarrival=round(gap))
    if kind == "flood1":
        return generate(n, case.seed, mean_interarrival=gap / 4, max_gpus=1)
    if kind == "all8":
        jobs = generate(n, case.seed, mean_interarrival=gap, max_gpus=8)
        return [dataclasses.replace(j, num_gpu=8) for j in jobs]
    jobs = generate(n, case.seed, mean_interarrival=gap)
    if kind == "bursty":
        # bursts of up to 12 jobs within a few seconds (some at the same ms), long quiet gaps
        submit, t, left = [], 0, n
        while left > 0:
            size = min(left, int(rng.integers(1, 13)))
            submit += [t + int(rng.choice([0, 0, rng.integers(0, 5000)])) for _ in range(size)]
            left -= size
            t += int(rng.exponential(gap * 6) * 1000)
        return _resubmit(jobs, submit)
    if kind == "ties":
        # runs of identical jobs (same model, size, length) and shared arrival times
        jobs = list(jobs)
        submit = _submit_ms(jobs)
        for i in range(1, n):
            if rng.random() < 0.5:
                prev = jobs[i - 1]
                jobs[i] = dataclasses.replace(
                    prev, job_id=jobs[i].job_id, submit_time=jobs[i].submit_time,
                    interval=jobs[i].interval, priority=jobs[i].priority)
            if rng.random() < 0.4:
                submit[i] = submit[i - 1]
        return _resubmit(jobs, submit)
    return jobs  # poisson


def late_trace(case: TraceCase, gap: float) -> list[JobRecord]:
    """A long, loaded trace from LATE_START on whose arrivals come 0.1-2 ms after a job's end.

    Late in a trace the artifact's Muri and AntMan loops take an end that close to the next
    arrival at the arrival (math.isclose's default rel_tol, 2 ms at 2e6 s): the state trace1
    met once, at 4.7e6 s, and short random traces never reach. Loaded like trace1 (hours-long
    jobs, twice the cluster's GPU-time offered); each LATE_POLICIES member in turn gets
    `case.jobs // 150` such arrivals, spread over the trace: its schedule under the paper
    preset (which the differential holds equal to the artifact's) gives the first end past
    the last one placed, and the next job's arrival moves there. A move changes nothing before it, so every
    arrival placed earlier keeps its end.
    """
    jobs = generate(case.jobs, case.seed, mean_interarrival=gap, median_duration=14400.0)
    submit = [ms + round(LATE_START * 1000) for ms in _submit_ms(jobs)]
    jobs = _resubmit(jobs, submit)
    spec, placed = load_spec(SPEC_FILE), 0.0
    turns = len(LATE_POLICIES) * max(1, case.jobs // 150)
    span = jobs[-1].submit_time - LATE_START
    for turn in range(turns):
        policy = LATE_POLICIES[turn % len(LATE_POLICIES)]
        after = max(placed + 1.0, LATE_START + span * turn / turns)  # spread over the trace
        ends = sorted(o.end for o in simulate(jobs, spec, policy, preset_for(policy)).outcomes
                      if o.end is not None and o.end > after)
        arrivals = [j.submit_time for j in jobs]
        for end in ends:
            ms = math.floor(end * 1000) + 1
            if ms / 1000 - end <= 1e-4:
                ms += 1
            nxt = bisect.bisect_right(arrivals, end)  # the first arrival after it
            # an arrival free to move (none already within a second of this end)
            if nxt < len(arrivals) and arrivals[nxt] > end + 1.0:
                submit = _submit_ms(jobs)
                submit[nxt] = ms
                jobs, placed = _resubmit(jobs, submit), ms / 1000
                break
        else:
            break
    return jobs


def case_trace(case: TraceCase) -> list[JobRecord]:
    """The trace a case names: as stored, where the record keeps it, else made."""
    stored = STORED_TRACES / f"{case.name}.csv"
    return read_trace(stored) if stored.is_file() else make_trace(case)


def make_cases(count: int, seed: int, jobs_range: tuple[int, int]) -> list[TraceCase]:
    rng = np.random.default_rng(seed)
    lo, hi = jobs_range
    return [TraceCase(ROTATION[i % len(ROTATION)], seed * 1000 + i,
                      int(rng.integers(lo, hi + 1))) for i in range(count)]


# -- runs ----------------------------------------------------------------------------------
def ours(trace_file: str, policy: str) -> dict[int, tuple[float, float]]:
    """job id -> (JCT, end time) from our simulator, paper preset."""
    result = simulate(read_trace(trace_file), load_spec(SPEC_FILE), variant(policy)[0],
                      preset_for(policy))
    return {o.job_id: (o.jct, o.end) for o in result.outcomes if o.end is not None}


def artifact(trace_file: str, policy: str, artifact_dir: str, python: str,
             limit: float) -> dict[int, tuple[float, float]] | str:
    """job id -> (JCT, end time) from the artifact's job.csv, or why there is none."""
    with tempfile.TemporaryDirectory(prefix="differential-") as tmp:
        log = Path(tmp) / "log"
        log.mkdir()
        base, size = variant(policy)
        cmd = [python, str(Path(artifact_dir) / "run_sim.py"), f"--cluster_spec={SPEC_FILE}",
               "--print", "--scheme=yarn", f"--trace_file={trace_file}",
               f"--schedule={ARTIFACT_SCHEDULE[base]}", f"--log_path={log}",
               *(["--packing_num", str(size)] if size else []),
               "--multi_resource", "4",
               # its flag's default unpacks slow groups (Muri loops only); the published
               # figures, and so the paper preset, have auto-unpack off
               "--autopack=False"]
        try:
            proc = subprocess.run(cmd, cwd=tmp, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=limit, text=True)
        except subprocess.TimeoutExpired:
            return f"artifact ran past {limit:g} s"
        if proc.returncode != 0:
            return f"artifact failed ({proc.returncode}): {proc.stderr.strip()[-300:]}"
        return read_job_log(log / "job.csv")


def read_job_log(path: Path) -> dict[int, tuple[float, float]]:
    """The artifact's per-job log: columns by header name (job_id, JCT, end_time)."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    head = rows[0]
    jid, jct, end = head.index("job_id"), head.index("JCT"), head.index("end_time")
    return {int(r[jid]): (float(r[jct]), float(r[end])) for r in rows[1:] if r}


def summary(per_job: dict[int, tuple[float, float]]) -> dict[str, float]:
    """Average and p99 JCT (the published convention) and makespan, alike for both sides."""
    jcts = sorted(v[0] for v in per_job.values())
    n = len(jcts)
    return {"avg": sum(jcts) / n, "p99": jcts[min(int(n * 0.99), n - 1)],
            "makespan": max(v[1] for v in per_job.values())}


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return (a - b) / abs(b) if b else float("inf")


def compare(mine: dict, theirs: dict) -> dict:
    """Relative differences (ours - artifact) / artifact: summary metrics, and the worst job."""
    out = {}
    s_mine, s_theirs = summary(mine), summary(theirs)
    for key in ("avg", "p99", "makespan"):
        out[key] = _rel(s_mine[key], s_theirs[key])
    worst, worst_job = 0.0, None
    for job_id in set(mine) | set(theirs):
        if job_id not in mine or job_id not in theirs:
            d = float("inf")
        else:
            d = _rel(mine[job_id][0], theirs[job_id][0])
        if abs(d) > abs(worst):
            worst, worst_job = d, job_id
    out["job"], out["job_id"] = worst, worst_job
    out["jobs"] = len(theirs)
    return out


def _task(case: TraceCase, policy: str, folder: str, artifact_dir: str | None, python: str,
          limit: float, recorded: dict | None) -> dict:
    trace_file = str(Path(folder) / f"{case.name}.csv")
    started = time.perf_counter()
    mine = ours(trace_file, policy)
    ours_s = time.perf_counter() - started
    row = {"trace": case.name, "policy": policy, "ours_s": ours_s}
    if artifact_dir is not None:
        started = time.perf_counter()
        theirs = artifact(trace_file, policy, artifact_dir, python, limit)
        row["artifact_s"] = time.perf_counter() - started
    else:
        theirs = {int(k): tuple(v) for k, v in recorded.items()}
    if isinstance(theirs, str):
        row["error"] = theirs
        return row
    row["artifact_jobs"] = {str(k): list(v) for k, v in sorted(theirs.items())}
    row.update(compare(mine, theirs))
    return row


def load_record(path: Path = RECORD_FILE) -> dict:
    with open(path) as fh:
        return json.load(fh)


def run(cases: list[TraceCase], policies: list[str], artifact_dir: str | None, python: str,
        limit: float, workers: int, recorded: dict | None = None, progress: bool = True):
    rows = []
    with tempfile.TemporaryDirectory(prefix="differential-traces-") as folder:
        for case in cases:
            write_trace(Path(folder) / f"{case.name}.csv", case_trace(case))
        tasks = [(c, p) for c in cases for p in policies
                 if recorded is None or p in recorded["results"].get(c.name, {})]
        with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(_task, c, p, folder, artifact_dir, python, limit,
                                   None if recorded is None else recorded["results"][c.name][p])
                       for c, p in tasks]
            for done, future in enumerate(as_completed(futures), start=1):
                row = future.result()
                rows.append(row)
                if progress:
                    state = row.get("error") or f"worst job {row['job']:+.2e}"
                    print(f"[{done}/{len(futures)}] {row['trace']} {row['policy']}: {state}",
                          file=sys.stderr, flush=True)
    return rows


def report(rows: list[dict], policies: list[str]) -> bool:
    """Print the per-policy table; True when every completed run is exact."""
    all_exact = True
    print(f"{'policy':9} {'runs':>5} {'exact':>6} {'avg JCT':>10} {'p99 JCT':>10} "
          f"{'makespan':>10} {'any job':>10}  worst trace (job)")
    for policy in policies:
        mine = [r for r in rows if r["policy"] == policy and "error" not in r]
        errors = [r for r in rows if r["policy"] == policy and "error" in r]
        if not mine and not errors:
            continue
        exact = [r for r in mine if max(abs(r[k]) for k in ("avg", "p99", "makespan", "job"))
                 <= EXACT]
        all_exact &= len(exact) == len(mine)

        def worst(key: str) -> dict | None:
            return max(mine, key=lambda r: abs(r[key]), default=None)

        cells = [f"{worst(k)[k]:+10.2e}" if mine else f"{'-':>10}"
                 for k in ("avg", "p99", "makespan", "job")]
        w = worst("job")
        where = f"{w['trace']} (job {w['job_id']})" if w and w["job"] else ""
        print(f"{policy:9} {len(mine):5d} {len(exact):6d} {' '.join(cells)}  {where}")
        for r in errors:
            print(f"    {r['trace']}: {r['error']}")
    return all_exact


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", help="the artifact's simulator/ folder (never committed)")
    ap.add_argument("--artifact-python", default=os.environ.get("ARTIFACT_PYTHON", sys.executable),
                    help="the Python that runs the artifact (needs numpy, cvxpy, ecos)")
    ap.add_argument("--traces", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--jobs-range", default="30,200")
    ap.add_argument("--cases", help="comma-separated case names (e.g. backlog-s6019-n77) "
                                    "instead of --traces/--seed")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds per artifact run")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--record", help="write the artifact's per-job results to this JSON file")
    ap.add_argument("--json", help="write every run's comparison to this file")
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    if args.artifact is None:
        recorded = load_record()
        cases = [TraceCase(**c) for c in recorded["cases"]]
        print(f"no --artifact: against the record {RECORD_FILE.relative_to(ROOT)} "
              f"({len(cases)} traces)")
    else:
        if not (Path(args.artifact) / "run_sim.py").is_file():
            ap.error(f"no run_sim.py in {args.artifact}")
        recorded = None
        lo, hi = (int(x) for x in args.jobs_range.split(","))
        try:
            cases = ([TraceCase.parse(c) for c in args.cases.split(",")] if args.cases
                     else make_cases(args.traces, args.seed, (lo, hi)))
        except ValueError as exc:
            ap.error(str(exc))
    started = time.perf_counter()
    rows = run(cases, policies, args.artifact, args.artifact_python, args.limit, args.workers,
               recorded)
    exact = report(rows, policies)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.0f} s; "
          f"{'all exact' if exact else 'NOT all exact'} (<= {EXACT:g} relative)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.record:
        results: dict = {}
        for r in rows:
            if "error" not in r:
                results.setdefault(r["trace"], {})[r["policy"]] = r["artifact_jobs"]
        for case in cases:
            if case.kind == "late":  # made with our simulator: kept as made
                STORED_TRACES.mkdir(parents=True, exist_ok=True)
                write_trace(STORED_TRACES / f"{case.name}.csv", case_trace(case))
        data = {"note": "the artifact's per-job (JCT, end) by trace and policy, from "
                        "bench/differential.py --record; traces regenerate from the cases "
                        "(late ones are kept in differential_traces/)",
                "cases": [dataclasses.asdict(c) for c in cases], "results": results}
        Path(args.record).write_text(json.dumps(data, indent=None, separators=(",", ":")))
        print(f"recorded {sum(map(len, results.values()))} runs in {args.record}")
    return 0 if exact and not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
