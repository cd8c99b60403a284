"""Live vs model with real torch jobs: does the simulator predict what the live system does?

Why this exists: the emulated live test is circular (its trainers run at the planned pace
and the simulator is charged the overhead that same run measured). Here the jobs are real
torch trainers (trainer/torch_run.py) on the emulated cluster (real broker, scheduler,
agents on loopback, time scale 1), and the simulator knows only what was measured BEFORE
the live run, in two separate passes:

* a profiling pass: each model trained alone, outside any scheduler, for a fixed number of
  iterations; its steady iteration time and its io/cpu/gpu/net split (`profiles.json`);
* a launch test: a trainer started a few times for one iteration; spawn to exit is the
  restart cost (`restart.json`). Spawn to the end of the first iteration
  (`trainer_first_iteration`) is kept beside it, but a live job also pays its exit (final
  checkpoint, interpreter teardown) before its GPU is free, so the whole run is the cost.

Each node's agent, and so its trainers, is pinned to its own CPU core (the solo passes run
on core 0): on this CPU-only machine a "GPU" is a core, and two nodes must not compete for
one. Everything else on the machine (other work included) is shared, which is what the
repeats measure.

`run_policy` reads those two files into `Known`, builds the trace from them, runs the
simulator and writes `predicted.json`, and only then starts the live cluster: the
prediction is complete before the live run exists, so nothing of it can leak in. The
comparison is per job (relative JCT error), plus average JCT and makespan. Repeating the
live run (`--repeats`) measures how much live JCTs differ run to run, which is what any
bound on the error has to be judged against.

The machine's pace is the largest part of the error and no scheduler model can know it in
advance (this VM ran the same trainer 1-2x slower from one minute to the next). So each live
run is also replayed: the simulator is told the pace each job's trainers measured in that run
(their own logs, `live_paces`) and still only the launch test's restart costs. The replay's
error is the scheduling model's own (queueing, restarts, the policy's choices); the pace
ratios (live / profiled) show how much of the prediction's error the machine accounts for
(`pace_band`). A replay needs each job's own pace, so it is made only where every launch was
a group of one. Usage:

    python -m bench.live_compare --out DIR [--form full|short] [--policies muri-s,srsf]
        [--repeats 2]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Sequence

from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from scheduler.tools.report import load_run, read_records
from specs import load_spec
from tests.live_system import ROOT, LiveCluster, trainer_env, write_spec
from traces import read_trace, write_trace
from traces.record import JobRecord

STAGES = ("io", "cpu", "gpu", "net")
CORES = (0, 1)  # node i's trainers on core CORES[i % 2]; the solo passes on core 0
BATCH = {"bert": 16, "gpt2": 16}  # the workloads' default batch sizes (informational here)


@dataclass(frozen=True)
class JobSpec:
    """One job of the live mix: a real model, how long it trains, when it arrives."""

    job_id: int
    model: str
    iterations: int
    submit: float


@dataclass(frozen=True)
class Form:
    """A cluster, a job mix and how hard to profile: the benchmark's and the test's."""

    nodes: int
    gpus: int
    jobs: tuple[JobSpec, ...]
    profile_repeats: int
    launch_repeats: int

    @property
    def models(self) -> list[str]:
        return sorted({j.model for j in self.jobs})


def _mix(*rows: tuple[str, int, float]) -> tuple[JobSpec, ...]:
    return tuple(JobSpec(i, m, n, s) for i, (m, n, s) in enumerate(rows))


# solo ~10-40 s each (on this 2-core machine, unloaded); 2 one-GPU nodes
FULL = Form(nodes=2, gpus=1, profile_repeats=2, launch_repeats=3, jobs=_mix(
    ("bert", 800, 0), ("resnet18", 50, 0), ("gpt2", 1200, 5), ("shufflenet_v2_x1_0", 100, 10),
    ("bert", 1500, 15), ("resnet18", 30, 20), ("gpt2", 600, 30),
    ("shufflenet_v2_x1_0", 150, 40), ("bert", 500, 50), ("gpt2", 1800, 60)))
# the CI form: the two models that start fastest, four jobs nearly at once, each waiting job
# over twice as long as any that runs before it: a running job's first measured profile,
# slower than the solo prior under a different load, does not make SRSF preempt it for a
# job it has not measured yet (a cascade of restarts the model cannot know of; the full
# form keeps it and reports what it costs)
SHORT = Form(nodes=2, gpus=1, profile_repeats=3, launch_repeats=3, jobs=_mix(
    ("bert", 900, 0), ("gpt2", 1000, 0), ("bert", 2200, 2), ("gpt2", 2600, 4)))
FORMS = {"full": FULL, "short": SHORT}
# iterations of a profiling run, by model: ~5-10 s of steady training each
PROFILE_ITERATIONS = {"bert": 200, "gpt2": 200, "resnet18": 20, "shufflenet_v2_x1_0": 40,
                      "vgg16": 10, "vgg19": 10}


# -- the passes before the live run ---------------------------------------------------------
def run_trainer(model: str, iterations: int, job_id: int, run_dir: Path,
                timeout: float = 300, core: int = 0) -> tuple[list[dict], float]:
    """Train `model` alone for `iterations` on one CPU core (as a live node's trainers run),
    as an agent would start it but with no scheduler, broker or gate: its log records and
    its wall time from spawn to exit. The timing window spans the whole run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "trainer.run", "--workload", model, "--iterations",
           str(iterations), "--job-id", str(job_id), "--node", "solo", "--checkpoint-dir",
           str(run_dir / "checkpoints"), "--run-dir", str(run_dir), "--report-every", "1e9"]
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=trainer_env(), capture_output=True, text=True,
                          timeout=timeout, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"solo {model} exited {done.returncode}: {done.stderr[-600:]}")
    return read_records(run_dir / f"trainer-{job_id}.log")[0], wall


def _event(records: list[dict], name: str) -> dict:
    found = [r for r in records if r["event"] == name]
    if not found:
        raise RuntimeError(f"no {name} in the trainer's log")
    return found[-1]


def _ts(record: dict) -> float:
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()


def solo_profile(records: list[dict], iterations: int) -> dict:
    """Steady iteration time (first iteration's end to the finish, so start-up is left out)
    and the stage split of the whole run, scaled to sum to it."""
    first, end = _event(records, "trainer_first_iteration"), _event(records, "trainer_finished")
    steady = (_ts(end) - _ts(first)) / (iterations - 1)
    stages = end["timing"]["stages"]
    total = sum(stages[s] for s in STAGES)
    return {"iteration_time": steady,
            "stages": [steady * stages[s] / total for s in STAGES]}


def profile_pass(models: Sequence[str], out: Path, repeats: int,
                 iterations: dict[str, int] = PROFILE_ITERATIONS) -> dict:
    """Each model alone, `repeats` times; profiles.json keeps the median and the spread."""
    measured: dict[str, list[dict]] = {m: [] for m in models}
    for k in range(repeats):  # in turns (a b a b), so a drift in the machine's pace is shared
        for model in models:
            records, _ = run_trainer(model, iterations[model], k,
                                     out / "profiling" / f"{model}-{k}")
            measured[model].append(solo_profile(records, iterations[model]))
    result = {}
    for model, runs in measured.items():
        times = [r["iteration_time"] for r in runs]
        best = sorted(runs, key=lambda r: r["iteration_time"])[len(runs) // 2]
        result[model] = dict(best, runs=times,
                             spread=(max(times) - min(times)) / statistics.median(times))
    (out / "profiles.json").write_text(json.dumps(result, indent=1))
    return result


def launch_test(models: Sequence[str], out: Path, repeats: int) -> dict:
    """The fixed cost of one run of a trainer: `repeats` fresh one-iteration runs per model,
    spawn to exit (interpreter start, imports, data, first iteration, checkpoint, exit: what a
    live job pays per launch besides its steady iterations). restart.json: the median and
    spread by model, and the start-to-first-iteration part the trainer logs."""
    result = {}
    for model in models:
        walls, firsts = [], []
        for k in range(repeats):
            records, wall = run_trainer(model, 1, k, out / "launch" / f"{model}-{k}")
            walls.append(wall)
            firsts.append(_event(records, "trainer_first_iteration")["restart_overhead_s"])
        med = statistics.median(walls)
        result[model] = {"restart_s": med, "runs": walls,
                         "spread": (max(walls) - min(walls)) / med, "first_iteration_s": firsts}
    (out / "restart.json").write_text(json.dumps(result, indent=1))
    return result


@dataclass(frozen=True)
class Known:
    """Everything the simulator is told: read from the two passes' files, nothing else."""

    profiles: dict  # model -> {"iteration_time", "stages" (io, cpu, gpu, net)}
    restart: dict  # model -> seconds

    @staticmethod
    def load(out: Path) -> "Known":
        profiles = json.loads((out / "profiles.json").read_text())
        restart = json.loads((out / "restart.json").read_text())
        return Known(profiles, {m: v["restart_s"] for m, v in restart.items()})

    def distorted(self, time_factor: float = 1.0, restart_factor: float = 1.0) -> "Known":
        """The same knowledge made wrong on purpose (to show the check can fail)."""
        return Known({m: {"iteration_time": p["iteration_time"] * time_factor,
                          "stages": [s * time_factor for s in p["stages"]]}
                      for m, p in self.profiles.items()},
                     {m: r * restart_factor for m, r in self.restart.items()})


def job_records(jobs: Sequence[JobSpec], known: Known) -> list[JobRecord]:
    """The trace rows: each job's profile is its model's solo profile."""
    rows = []
    for j in jobs:
        p = known.profiles[j.model]
        rows.append(JobRecord(job_id=j.job_id, num_gpu=1, submit_time=j.submit,
                              iterations=j.iterations, model_name=j.model,
                              batch_size=BATCH.get(j.model, 32),
                              duration=j.iterations * p["iteration_time"], interval=0.0,
                              iteration_time=p["iteration_time"],
                              stage_times=tuple(p["stages"])))
    return rows


def job_trace(path: Path, jobs: Sequence[JobSpec], known: Known) -> list[JobRecord]:
    """Write the jobs' trace as `known` profiles them, and read it back: the very rows (as
    rounded in the file) that the feeder sends and the simulator is given."""
    write_trace(path, job_records(jobs, known))
    return read_trace(path)


def predict(records: Sequence[JobRecord], spec_file: Path, policy: str,
            known: Known) -> dict[int, dict]:
    """The simulator's JCTs, given the trace and the restart costs only (the live system's
    torch preset: a regroup restarts the trainers)."""
    table = {(m, 1): r for m, r in known.restart.items()}
    preset = get_preset("default", overhead_table=table,
                        overhead_default=statistics.median(table.values()),
                        regroup_in_place=False)
    result = simulate(records, load_spec(spec_file), policy, preset)
    return {o.job_id: {"submit": o.submit, "end": o.end, "jct": o.jct,
                       "preemptions": o.preemptions} for o in result.outcomes}


# -- the live run ---------------------------------------------------------------------------
def outcomes(run_dir: Path) -> dict[int, dict]:
    """Each finished job of a live run as the scheduler logged it (trace seconds = wall
    seconds at time scale 1)."""
    return {o.job_id: {"submit": o.submit, "end": o.end, "jct": o.jct,
                       "preemptions": o.preemptions}
            for o in load_run(run_dir).outcomes if o.end is not None}


def live_paces(run_dir: Path) -> dict[int, float]:
    """Each job's steady seconds per iteration in a live run, from its trainers' own logs
    (each launch's first iteration to its stop or finish; start-up left out): the pace the
    machine actually gave, measured outside the scheduler."""
    paces = {}
    for log in run_dir.glob("trainer-*.log"):
        first, seconds, iterations = None, 0.0, 0
        for record in read_records(log)[0]:
            if record["event"] == "trainer_first_iteration":
                first = record
            elif record["event"] in ("trainer_finished", "trainer_stopped") and first:
                seconds += _ts(record) - _ts(first)
                iterations += record["iterations"] - first["iteration"]
                first = None
        if iterations > 0:
            paces[int(log.stem.split("-", 1)[1])] = seconds / iterations
    return paces


def ran_alone(run_dir: Path) -> bool:
    """Whether every launch of the live run was a group of one: only then is a trainer's wall
    pace its job's own pace (in a group it is the group's, interleaving included)."""
    started = [r for r in read_records(run_dir / "scheduler.log")[0]
               if r["event"] == "job_started"]
    return all(len(r["group"]) == 1 for r in started)


def repaced(records: Sequence[JobRecord], paces: dict[int, float]) -> list[JobRecord]:
    """The same jobs at the paces given (per job), the stage split kept: the trace a
    replay of the live run is simulated on."""
    out = []
    for r in records:
        pace = paces[r.job_id]
        out.append(dataclasses.replace(
            r, iteration_time=pace, duration=r.iterations * pace,
            stage_times=tuple(s * pace / r.iteration_time for s in r.stage_times)))
    return out


def live_run(trace: Path, spec_file: Path, form: Form, policy: str, run_dir: Path,
             timeout: float = 900) -> dict[int, dict]:
    """Feed the trace to a live cluster of real torch trainers; its `outcomes`."""
    cluster = LiveCluster(run_dir, str(spec_file), nodes=form.nodes, gpus_per_node=form.gpus,
                          policy=policy, time_scale=1.0, agent_cores=CORES,
                          scheduler_args=["--workload", "torch", "--torch-config", "{}",
                                          "--agent-timeout", "60"])
    try:
        cluster.start()
        feeder = cluster.feed(trace)
        cluster.wait_finished(len(form.jobs), timeout)
        if feeder.wait(timeout=60) != 0:
            raise RuntimeError("the feeder failed")
    finally:
        cluster.stop_all()
    return outcomes(run_dir)


# -- comparing ------------------------------------------------------------------------------
def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _makespan(jobs: dict[int, dict]) -> float:
    return max(j["end"] for j in jobs.values()) - min(j["submit"] for j in jobs.values())


def compare(predicted: dict[int, dict], live: dict[int, dict]) -> dict:
    """Relative errors (model / live - 1): per job, their |median|, p90 and max, and those of
    the average JCT and the makespan."""
    if set(predicted) != set(live):
        raise ValueError(f"jobs differ: predicted {sorted(predicted)}, live {sorted(live)}")
    per_job = {j: predicted[j]["jct"] / live[j]["jct"] - 1 for j in sorted(live)}
    absolute = [abs(e) for e in per_job.values()]
    avg_p = statistics.mean(p["jct"] for p in predicted.values())
    avg_l = statistics.mean(v["jct"] for v in live.values())
    return {"per_job": per_job, "median_abs": statistics.median(absolute),
            "p90_abs": _pct(absolute, 0.9), "max_abs": max(absolute),
            "avg_jct_live": avg_l, "avg_jct_model": avg_p, "avg_jct_err": avg_p / avg_l - 1,
            "makespan_live": _makespan(live), "makespan_model": _makespan(predicted),
            "makespan_err": _makespan(predicted) / _makespan(live) - 1}


@dataclass(frozen=True)
class Bound:
    """How far the model may be from a live run before the check fails (fractions)."""

    avg_jct: float
    median_job: float


def check(comparison: dict, bound: Bound) -> list[str]:
    """The violations of `bound` (empty: the model agrees with the live run)."""
    bad = []
    if abs(comparison["avg_jct_err"]) > bound.avg_jct:
        bad.append(f"avg JCT error {comparison['avg_jct_err']:+.1%} beyond {bound.avg_jct:.0%}")
    if comparison["median_abs"] > bound.median_job:
        bad.append(f"median per-job error {comparison['median_abs']:.1%} beyond "
                   f"{bound.median_job:.0%}")
    return bad


def pace_band(ratios: dict[int, float], slack: float) -> tuple[float, float]:
    """Where model / live average JCT may fall when the machine ran each job `ratios[j]`
    times slower (live pace / profiled pace) than the profiling pass measured: a job's JCT
    mixes work done at that pace with restarts and waits that keep their length, so the
    ratio lies between 1 / the largest and 1 / the smallest pace ratio (and 1), widened by
    `slack` (what the model is off by even at the right pace: the replay's bound)."""
    low = min(1.0, 1.0 / max(ratios.values()))
    high = max(1.0, 1.0 / min(ratios.values()))
    return low - slack, high + slack


def explained(comparison: dict, ratios: dict[int, float], slack: float) -> list[str]:
    """The prediction's violation, if its error is more than the machine's change of pace
    between the profiling pass and the live run accounts for (empty: none)."""
    low, high = pace_band(ratios, slack)
    got = comparison["avg_jct_model"] / comparison["avg_jct_live"]
    if low <= got <= high:
        return []
    return [f"model / live average JCT {got:.2f} outside {low:.2f}-{high:.2f}, what pace "
            f"ratios {min(ratios.values()):.2f}-{max(ratios.values()):.2f} explain"]


def run_spread(runs: Sequence[dict[int, dict]]) -> dict:
    """How much live JCTs differ between repeats of one configuration: per job (max - min) /
    mean, its median and max, and the same for the average JCT."""
    if len(runs) < 2:
        return {}
    per_job = {}
    for j in runs[0]:
        jcts = [r[j]["jct"] for r in runs]
        per_job[j] = (max(jcts) - min(jcts)) / statistics.mean(jcts)
    avgs = [statistics.mean(v["jct"] for v in r.values()) for r in runs]
    return {"per_job": per_job, "median": statistics.median(per_job.values()),
            "max": max(per_job.values()),
            "avg_jct": (max(avgs) - min(avgs)) / statistics.mean(avgs)}


# -- the benchmark --------------------------------------------------------------------------
def prepare(form: Form, out: Path, reuse: bool = False) -> tuple[Known, Path, Path]:
    """The profiling pass and the launch test (unless `reuse` and their files are there),
    then the trace and spec built from them."""
    out.mkdir(parents=True, exist_ok=True)
    if not (reuse and (out / "profiles.json").is_file()):
        profile_pass(form.models, out, form.profile_repeats)
    if not (reuse and (out / "restart.json").is_file()):
        launch_test(form.models, out, form.launch_repeats)
    known = Known.load(out)
    trace, spec = out / "trace.csv", out / "spec.csv"
    job_trace(trace, form.jobs, known)
    write_spec(spec, form.nodes, form.gpus)
    return known, trace, spec


def assess(predicted: dict[int, dict], run_dir: Path, records: Sequence[JobRecord],
           spec: Path, policy: str, known: Known) -> dict:
    """One live run against the prediction, and against a replay: the simulator again, told
    the pace each job's trainers measured in that run (and still only the launch test's
    restart costs), which separates the scheduling model's error from the machine's drift."""
    live, paces = outcomes(run_dir), live_paces(run_dir)
    profiled = {r.job_id: r.iteration_time for r in records}
    result = {"live": live, "comparison": compare(predicted, live), "paces": paces,
              "pace_ratios": {j: paces[j] / profiled[j] for j in sorted(paces)},
              "replay": None, "replay_comparison": None}
    if ran_alone(run_dir):  # else a trainer's pace is its group's: no replay to make
        replay = predict(repaced(records, paces), spec, policy, known)
        result.update(replay=replay, replay_comparison=compare(replay, live))
    return result


def run_policy(form: Form, known: Known, trace: Path, spec: Path, policy: str, out: Path,
               repeats: int) -> dict:
    """Predict first (written to disk), then run live `repeats` times and assess each."""
    records = read_trace(trace)
    predicted = predict(records, spec, policy, known)
    (out / f"predicted-{policy}.json").write_text(json.dumps(predicted, indent=1))
    runs = []
    for k in range(repeats):
        run_dir = out / "runs" / f"{policy}-{k}"
        live_run(trace, spec, form, policy, run_dir)
        runs.append(assess(predicted, run_dir, records, spec, policy, known))
    return {"policy": policy, "predicted": predicted, "runs": runs,
            "spread": run_spread([r["live"] for r in runs])}


def score(out: Path, policy: str) -> dict:
    """`run_policy`'s result again from the files of finished runs (predicted-POLICY.json,
    runs/POLICY-k/): to re-score, or to finish a benchmark interrupted after its runs."""
    predicted = {int(j): v for j, v in
                 json.loads((out / f"predicted-{policy}.json").read_text()).items()}
    known, records = Known.load(out), read_trace(out / "trace.csv")
    runs = [assess(predicted, d, records, out / "spec.csv", policy, known)
            for d in sorted((out / "runs").glob(f"{policy}-*"))]
    return {"policy": policy, "predicted": predicted, "runs": runs,
            "spread": run_spread([r["live"] for r in runs])}


def lines(result: dict, form: Form) -> list[dict]:
    """JSON lines: one per job per repeat, then one summary per repeat, then the spread."""
    models = {j.job_id: j.model for j in form.jobs}
    policy, out = result["policy"], []
    for k, run in enumerate(result["runs"]):
        live, cmp, rcmp = run["live"], run["comparison"], run["replay_comparison"]
        for j, err in cmp["per_job"].items():
            out.append({"kind": "job", "policy": policy, "repeat": k, "job": j,
                        "model": models[j], "jct_live": live[j]["jct"],
                        "jct_model": result["predicted"][j]["jct"], "rel_err": err,
                        "jct_replay": run["replay"][j]["jct"] if rcmp else None,
                        "replay_err": rcmp["per_job"][j] if rcmp else None,
                        "pace_live": run["paces"][j],
                        "pace_ratio": run["pace_ratios"][j],
                        "preemptions_live": live[j]["preemptions"],
                        "preemptions_model": result["predicted"][j]["preemptions"]})
        summary = {k2: v for k2, v in cmp.items() if k2 != "per_job"}
        summary.update({f"replay_{k2}": v for k2, v in (rcmp or {}).items() if k2 != "per_job"},
                       pace_ratio_min=min(run["pace_ratios"].values()),
                       pace_ratio_max=max(run["pace_ratios"].values()))
        out.append(dict(summary, kind="summary", policy=policy, repeat=k))
    if result["spread"]:
        out.append(dict({k2: v for k2, v in result["spread"].items() if k2 != "per_job"},
                        kind="live_spread", policy=policy))
    return out


def table(rows: Sequence[dict]) -> str:
    head = (f"{'policy':8} {'rep':>3} {'avg JCT live':>12} {'model':>8} {'err':>7} "
            f"{'makespan err':>12} {'|job err| med':>13} {'max':>6} {'pace live/profile':>17} "
            f"{'replay err':>10} {'|job| med':>9} {'max':>6}")
    body = [f"{r['policy']:8} {r['repeat']:3} {r['avg_jct_live']:12.1f} "
            f"{r['avg_jct_model']:8.1f} {r['avg_jct_err']:+7.1%} {r['makespan_err']:+12.1%} "
            f"{r['median_abs']:13.1%} {r['max_abs']:6.1%} "
            f"{r['pace_ratio_min']:8.2f}-{r['pace_ratio_max']:<8.2f} "
            + (f"{r['replay_avg_jct_err']:+10.1%} {r['replay_median_abs']:9.1%} "
               f"{r['replay_max_abs']:6.1%}" if "replay_avg_jct_err" in r
               else f"{'n/a (grouped)':>27}") for r in rows if r["kind"] == "summary"]
    spread = [f"{r['policy']:8} live run-to-run: per-job JCT spread median {r['median']:.1%}, "
              f"max {r['max']:.1%}; avg JCT {r['avg_jct']:.1%}"
              for r in rows if r["kind"] == "live_spread"]
    return "\n".join([head, *body, *spread])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="live_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="where every file of the run goes")
    p.add_argument("--form", choices=sorted(FORMS), default="full")
    p.add_argument("--policies", default="muri-s,srsf")
    p.add_argument("--repeats", type=int, default=2, help="live runs per policy (default 2)")
    p.add_argument("--reuse", action="store_true",
                   help="keep OUT's profiles.json and restart.json from an earlier run")
    p.add_argument("--score", action="store_true",
                   help="run nothing: score the finished runs already in OUT")
    a = p.parse_args(argv)
    form = FORMS[a.form]
    t0 = time.monotonic()
    rows: list[dict] = []
    if a.score:
        for policy in a.policies.split(","):
            rows += lines(score(a.out, policy), form)
    else:
        known, trace, spec = prepare(form, a.out, a.reuse)
        print(f"profiles and restart costs measured in {time.monotonic() - t0:.0f} s",
              file=sys.stderr, flush=True)
        for policy in a.policies.split(","):
            result = run_policy(form, known, trace, spec, policy, a.out, a.repeats)
            rows += lines(result, form)
            print(f"{policy}: done at {time.monotonic() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    with open(a.out / "results.jsonl", "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    for name in ("profiles.json", "restart.json"):
        print(f"{name}: {(a.out / name).read_text()}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
