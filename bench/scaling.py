"""The simulator's scaling benchmark: the same offered load at 1k, 10k, 100k jobs on clusters
grown in proportion (100,000 jobs on 2,048 GPUs), every policy, each run in its own process.

Used by `python bench/bench_sim.py --scaling`; the pieces are public so tests can check them.
A run reports wall time, events (the simulator's rounds), time per event and peak RSS; one
that passes the per-run cap is shown as "> cap" rather than waited for.
"""
from __future__ import annotations

import csv
import json
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from specs import ClusterSpec  # noqa: E402
from traces import generate, write_trace  # noqa: E402
from traces.generate import GPU_MIX  # noqa: E402

import subrun  # noqa: E402

POLICIES = ["fifo", "srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]
SIZES = [1_000, 10_000, 100_000]
# The scale: 100,000 jobs on 2,048 GPUs, i.e. GPUs in proportion to jobs.
GPUS_PER_JOB = 2_048 / 100_000
GPUS_PER_NODE = 8
NODES_PER_SWITCH = 32  # used where the node count divides by it; else one switch
NODE_CPUS, NODE_MEM = 92, 520  # as the packaged specs
# The load: bench_sim's 20,000-job case (one arrival every 225 s on 512 GPUs, jobs up to 32
# GPUs), i.e. the same GPU demand per GPU-second at every size.
LOAD_INTERARRIVAL_S, LOAD_GPUS, LOAD_MAX_JOB_GPUS = 225.0, 512, 32
TRACE_SEED = 3
# our policy name -> the artifact's --schedule name (fifo has none there)
ARTIFACT_SCHEDULE = {
    "srtf": "shortest", "srsf": "shortest-gpu", "tiresias": "dlas-gpu", "antman": "antman",
    "themis": "themis", "muri-s": "multi-resource-blossom-same-gpu",
    "muri-l": "multi-resource-blossom-same-gpu-unaware",
}


def cluster_for(jobs: int) -> ClusterSpec:
    """Nodes of 8 GPUs, as many as jobs x GPUS_PER_JOB GPUs round to (at least one)."""
    nodes = max(1, round(jobs * GPUS_PER_JOB / GPUS_PER_NODE))
    per_switch = NODES_PER_SWITCH if nodes % NODES_PER_SWITCH == 0 else nodes
    return ClusterSpec(nodes // per_switch, per_switch, GPUS_PER_NODE, NODE_CPUS, NODE_MEM)


def _mean_gpus(max_gpus: int) -> float:
    sizes = [g for g in GPU_MIX if g <= max_gpus]
    return sum(g * GPU_MIX[g] for g in sizes) / sum(GPU_MIX[g] for g in sizes)


def trace_args(jobs: int, seed: int = TRACE_SEED) -> dict:
    """`generate` arguments for `jobs` jobs at the benchmark's load on cluster_for(jobs):
    jobs no wider than the cluster (at most 32 GPUs), arrivals spaced so that the expected
    GPU demand per GPU of the cluster is the reference case's."""
    gpus = cluster_for(jobs).total_gpus
    max_gpus = max(g for g in GPU_MIX if g <= min(LOAD_MAX_JOB_GPUS, gpus))
    gap = (LOAD_INTERARRIVAL_S * LOAD_GPUS / gpus
           * _mean_gpus(max_gpus) / _mean_gpus(LOAD_MAX_JOB_GPUS))
    return {"n_jobs": jobs, "seed": seed, "max_gpus": max_gpus,
            "mean_interarrival": round(gap, 3)}


def _spec_fields(spec: ClusterSpec) -> dict:
    return {"num_switch": spec.num_switch, "nodes_per_switch": spec.nodes_per_switch,
            "gpus_per_node": spec.gpus_per_node, "cpus_per_node": spec.cpus_per_node,
            "mem_per_node": spec.mem_per_node}


def write_spec(path: Path, spec: ClusterSpec) -> None:
    """The spec as a CSV in Muri's columns (for the artifact)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node",
                         "mem_p_node"])
        writer.writerow([spec.num_switch, spec.nodes_per_switch, spec.gpus_per_node,
                         spec.cpus_per_node, spec.mem_per_node])


def time_artifact(artifact: Path, python: str, trace_file: Path, spec_file: Path, policy: str,
                  limit: float | None) -> dict:
    """Wall seconds of the artifact's whole run (a process: reads, simulates, logs), capped."""
    with tempfile.TemporaryDirectory(prefix="scaling-artifact-") as tmp:
        (Path(tmp) / "log").mkdir()
        cmd = [python, str(artifact / "run_sim.py"), f"--cluster_spec={spec_file}",
               "--scheme=yarn", f"--trace_file={trace_file}",
               f"--schedule={ARTIFACT_SCHEDULE[policy]}", f"--log_path={Path(tmp) / 'log'}",
               "--multi_resource", "4", "--autopack=False"]
        run = subrun.run_capped(cmd, limit, cwd=tmp)
    out = {"artifact_s": run.wall_s, "artifact_timed_out": run.timed_out,
           "artifact_rss_mb": run.peak_rss_bytes / 2**20}
    if not run.timed_out and run.returncode != 0:
        out["artifact_error"] = f"failed ({run.returncode}): {run.stderr.strip()[-200:]}"
    return out


def _progress(task: dict, row: dict, k: int, n: int) -> None:
    state = row.get("error") or f"{row['wall_s']:.1f} s, {row['rounds']} events"
    print(f"[{k}/{n}] {task['policy']} {task['jobs_label']} jobs: {state}", file=sys.stderr,
          flush=True)


def figures(task: dict, row: dict, limit: float | None) -> dict:
    """A table row from a child's outcome: the cluster, times, events, per event, peak RSS;
    for a capped run how far it got and how fast (its last heartbeat)."""
    jobs = task["jobs_label"]
    spec = cluster_for(jobs)
    out = {"jobs": jobs, "gpus": spec.total_gpus, "nodes": spec.num_nodes,
           "policy": task["policy"], "preset": task["preset"], "limit_s": limit,
           "timed_out": row["timed_out"], "peak_rss_mb": round(row["peak_rss_mb"], 1),
           "process_s": round(row["child_wall_s"], 3),
           "process_cpu_s": round(row["child_cpu_s"], 3)}
    if "error" in row:
        out["error"] = row["error"]
        beat = row.get("partial")
        if beat and beat["events"]:
            out.update(partial_events=beat["events"], partial_finished=beat["finished"],
                       partial_cpu_s=round(beat["cpu_s"], 3),
                       partial_ms_per_event=round(1000 * beat["wall_s"] / beat["events"], 4),
                       partial_cpu_ms_per_event=round(1000 * beat["cpu_s"] / beat["events"], 4))
    else:
        per_event = 1000 / max(row["rounds"], 1)
        out.update(wall_s=row["wall_s"], cpu_s=row["cpu_s"], events=row["rounds"],
                   ms_per_event=round(row["wall_s"] * per_event, 4),
                   cpu_ms_per_event=round(row["cpu_s"] * per_event, 4),
                   finished=row["finished"])
    return out


def run(sizes: list[int], policies: list[str], preset: str, limit: float | None,
        artifact: Path | None = None, artifact_python: str = sys.executable,
        artifact_limit: float | None = None, workers: int = 1, progress: bool = True) -> list[dict]:
    """One row per (size, policy): the cluster, our figures and, with `artifact`, its time."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="scaling-") as folder:
        tasks = []
        for jobs in sizes:
            spec = cluster_for(jobs)
            task = {"spec": _spec_fields(spec), "preset": preset, "jobs_label": jobs}
            if artifact is not None:  # both sides read the same CSV files
                trace_file = Path(folder) / f"scaling-{jobs}.csv"
                spec_file = Path(folder) / f"scaling-{jobs}-spec.csv"
                write_trace(trace_file, generate(**trace_args(jobs)))
                write_spec(spec_file, spec)
                task.update(trace_file=str(trace_file), spec_file=str(spec_file))
            else:
                task["generate"] = trace_args(jobs)
            tasks += [dict(task, policy=p) for p in policies]
        for task, row in subrun.run_all(tasks, limit, workers, _progress if progress else None):
            out = figures(task, row, limit)
            jobs = out["jobs"]
            if artifact is not None and task["policy"] in ARTIFACT_SCHEDULE:
                out.update(time_artifact(artifact, artifact_python, Path(task["trace_file"]),
                                         Path(task["spec_file"]), task["policy"], artifact_limit))
                if progress:
                    print(f"  artifact {task['policy']} {jobs} jobs: {out['artifact_s']:.1f} s"
                          f"{' (capped)' if out['artifact_timed_out'] else ''}",
                          file=sys.stderr, flush=True)
            rows.append(out)
    return rows


def ratio(row: dict) -> str:
    """Artifact process time over ours ("more than" where the artifact was capped)."""
    if "artifact_s" not in row or "artifact_error" in row:
        return row.get("artifact_error", "")[:30]
    ours = row["process_s"]
    if row["timed_out"]:
        return "ours capped" if not row["artifact_timed_out"] else "both capped"
    text = f"{row['artifact_s'] / ours:.1f}x"
    return f"more than {text}" if row["artifact_timed_out"] else text


def table(rows: list[dict]) -> str:
    artifact = any("artifact_s" in r for r in rows)
    head = (f"{'jobs':>7} {'GPUs':>5} {'policy':9} {'wall s':>9} {'CPU s':>9} {'events':>8} "
            f"{'ms/event':>9} {'CPU ms/ev':>9} {'peak RSS MB':>11}")
    if artifact:
        head += f" {'process s':>9} {'artifact s':>11} {'artifact/ours':>14}"
    lines = [head]
    for r in rows:
        if "error" in r and "partial_events" in r:  # capped: how far it got, how fast
            wall, cpu, events = r["error"], f"> {r['process_cpu_s']:.0f}", f">{r['partial_events']}"
            per = f"~{r['partial_ms_per_event']:.3f}"
            cpu_per = f"~{r['partial_cpu_ms_per_event']:.3f}"
        elif "error" in r:  # the CPU time is the whole child's, up to the cap
            wall, cpu, events, per, cpu_per = (r["error"], f"> {r['process_cpu_s']:.0f}", "-",
                                               "-", "-")
        else:
            wall, cpu, events = f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", str(r["events"])
            per, cpu_per = f"{r['ms_per_event']:.3f}", f"{r['cpu_ms_per_event']:.3f}"
        rss = f"{'> ' if r['timed_out'] else ''}{r['peak_rss_mb']:.0f}"
        line = (f"{r['jobs']:>7} {r['gpus']:>5} {r['policy']:9} {wall:>9} {cpu:>9} {events:>8} "
                f"{per:>9} {cpu_per:>9} {rss:>11}")
        if artifact:
            art = ("-" if "artifact_s" not in r else
                   f"{'> ' if r['artifact_timed_out'] else ''}{r['artifact_s']:.1f}")
            line += f" {r['process_s']:>9.2f} {art:>11} {ratio(r):>14}"
        lines.append(line)
    return "\n".join(lines)


def write_outputs(rows: list[dict], out: Path) -> dict[str, Path]:
    """scaling.csv, scaling.json and scaling.png (wall and CPU ms per event against jobs,
    log-log)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "scaling.csv", "json": out / "scaling.json", "png": out / "scaling.png"}
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(paths["csv"], "w", newline="") as fh:
        writer = csv.DictWriter(fh, fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    paths["json"].write_text(json.dumps(rows, indent=1))
    plot(rows, paths["png"])
    return paths


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, key, what in ((axes[0], "ms_per_event", "wall"), (axes[1], "cpu_ms_per_event", "CPU")):
        for policy in dict.fromkeys(r["policy"] for r in rows):
            done = sorted((r["jobs"], r[key]) for r in rows
                          if r["policy"] == policy and "error" not in r)
            if done:
                ax.plot(*zip(*done), marker="o", label=policy)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("jobs (cluster GPUs in proportion)")
        ax.set_ylabel(f"{what} ms per simulated event")
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.suptitle("Simulator scaling (runs past the cap omitted)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(args) -> int:
    """The --scaling mode of bench_sim.py: `args` carries its parsed options."""
    sizes = [int(s) for s in args.sizes.split(",") if s]
    policies = [p for p in args.policies.split(",") if p]
    started = time.perf_counter()
    rows = run(sizes, policies, args.preset, args.limit, args.artifact, args.artifact_python,
               args.artifact_limit, args.workers)
    print(table(rows))
    paths = write_outputs(rows, args.out)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.0f} s; "
          f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0 if all("error" not in r or r["timed_out"] for r in rows) else 1
