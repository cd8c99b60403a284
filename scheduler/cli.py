"""`interlace-sim`: run policies on a trace and a cluster spec; print a table or JSON lines.

Other tools call this, so its contract is fixed: `--json` prints one object per policy per
line with at least policy, jobs, avg_jct, p50_jct, p99_jct, makespan, wall_s (seconds).
Bad input exits non-zero with one clear line per problem, never a traceback.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from scheduler.metrics import dumps, summary_dict, write_jobs_csv
from scheduler.policies import POLICIES
from scheduler.presets import PRESETS, get_preset
from scheduler.simulator import SimResult, simulate
from specs import SpecError, load_spec, spec_path
from traces import TraceError, default_trace_path, read_trace


class _Bar:
    """A progress bar on stderr, shown only once a run has taken a couple of seconds, and
    only on a terminal (a log file would collect every redraw)."""

    def __init__(self, label: str, stream=sys.stderr, delay: float = 2.0):
        self.label, self.stream = label, stream
        self.delay = delay if getattr(stream, "isatty", lambda: False)() else float("inf")
        self.start = time.monotonic()
        self.shown = False
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.start < self.delay or now - self.last < 0.2:
            return
        self.last, self.shown = now, True
        width = 30
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{self.label:>14} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} jobs {now - self.start:5.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _resolve(value: str, packaged, suffix: str) -> Path:
    path = Path(value)
    if path.exists() or path.suffix == suffix or "/" in value:
        return path
    return packaged(value)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="interlace-sim",
        description="Simulate scheduling policies on a job trace and a cluster spec.")
    p.add_argument("--trace", default="default",
                   help="trace CSV (Muri schema), or a packaged trace name (default, philly_1k)")
    p.add_argument("--spec", default="n2g8",
                   help="cluster spec CSV, or a packaged spec name (n2g8, n4g4, n8g8, n64g8)")
    p.add_argument("--policy", default="muri-s,srsf,tiresias",
                   help=f"comma-separated policies: {', '.join(POLICIES)}")
    p.add_argument("--preset", default="default", choices=sorted(PRESETS),
                   help="time accounting: 'paper' reproduces the artifact, 'default' is physical")
    p.add_argument("--restart-overhead", type=_seconds, metavar="SECONDS",
                   help="charge this many trace seconds per (re)start for every model, in place "
                        "of the preset's per-model table (e.g. what interlace-report --json "
                        "measured on a live run)")
    p.add_argument("--json", action="store_true", help="one JSON object per policy per line")
    p.add_argument("--plot", metavar="FILE.png", help="draw the JCT CDF of the policies")
    p.add_argument("--out", metavar="DIR", help="write per-job CSV and a summary per policy here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    problems = [f"--policy: unknown policy {p!r} (choose from {', '.join(POLICIES)})"
                for p in policies if p not in POLICIES]
    if not policies:
        problems.append("--policy: no policy given")
    spec = records = None
    try:
        spec = load_spec(_resolve(args.spec, spec_path, ".csv"))
    except SpecError as err:
        problems.extend(getattr(err, "problems", None) or [str(err)])
    try:
        records = read_trace(_resolve(args.trace, default_trace_path, ".csv"), spec=spec)
    except TraceError as err:
        problems.extend(str(p) for p in err.problems)
    if problems:
        for line in problems:
            print(f"interlace-sim: {line}", file=sys.stderr)
        return 1
    if not records:
        print("interlace-sim: the trace has no jobs", file=sys.stderr)
        return 1
    preset = get_preset(args.preset) if args.restart_overhead is None else get_preset(
        args.preset, overhead_table={}, overhead_default=args.restart_overhead)
    results: list[SimResult] = []
    for name in policies:
        bar = _Bar(name)
        try:
            result = simulate(records, spec, name, preset, progress=bar)
        except RuntimeError as err:
            bar.close()
            print(f"interlace-sim: {name}: {err}", file=sys.stderr)
            return 1
        bar.close()
        results.append(result)
        if args.json:
            print(dumps(summary_dict(name, result.summary, round(result.wall_s, 4),
                                     preset=preset.name, rounds=result.rounds)), flush=True)
        if args.out:
            _write_outputs(Path(args.out), result)
    if not args.json:
        print(format_table(results))
    if args.plot:
        plot_cdf(results, Path(args.plot))
    return 0


def _write_outputs(out: Path, result: SimResult) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_jobs_csv(out / f"{result.policy}-jobs.csv", result.outcomes)
    (out / f"{result.policy}-summary.json").write_text(
        dumps(summary_dict(result.policy, result.summary, result.wall_s, preset=result.preset,
                           utilisation=result.utilisation)) + "\n")


def format_table(results: list[SimResult]) -> str:
    rows = [("policy", "jobs", "avg JCT h", "p50 JCT h", "p99 JCT h", "makespan h",
             "queueing h", "GPU util", "preempt", "avg vs 1st", "wall s")]
    base = results[0].summary.avg_jct if results else 1.0
    for r in results:
        s = r.summary
        rows.append((r.policy, str(s.jobs), f"{s.avg_jct / 3600:.2f}", f"{s.p50_jct / 3600:.2f}",
                     f"{s.p99_jct / 3600:.2f}", f"{s.makespan / 3600:.2f}",
                     f"{s.avg_queueing / 3600:.2f}", f"{s.gpu_utilisation:.0%}",
                     str(s.preemptions), f"{s.avg_jct / base:.2f}x", f"{r.wall_s:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows)


def plot_cdf(results: list[SimResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = sorted(o.jct / 3600 for o in r.outcomes if o.end is not None)
        ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours)")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
