"""`interlace-sim`: run policies on a trace and a cluster spec; print a table or JSON lines.

Other tools call this, so its contract is fixed: `--json` prints one object per policy per
line with at least policy, jobs, avg_jct, p50_jct, p99_jct, makespan, wall_s (seconds).
Bad input exits non-zero with one clear line per problem, never a traceback.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from scheduler.core.metrics import JobOutcome, dumps, summary_dict
from scheduler.core.model import INTERFERENCE
from scheduler.core.placement import Demand, cpu_misfit
from scheduler.plugins import (PolicyError, UnknownPolicy, describe_plugins, did_you_mean,
                               make_policy, policy_names)
from scheduler.presets import PRESETS, get_preset
from scheduler.sim.explain import GroupLog, explain
from scheduler.sim.simulator import SimResult, simulate
from specs import DEFAULT_SPEC, SpecError, available_specs, load_spec, spec_path
from specs.gpu_speed import missing_types
from specs.limits import MAX_SECONDS
from specs.options import OneLineParser, gpu_speed, number
from specs.tenants import Tenancy, TenantsError, job_problem, load_tenants
from traces import TraceError, available_traces, default_trace_path, read_trace
from traces.validate import no_jobs_problem

PROG = "interlace-sim"


class _Bar:
    """Progress on stderr. On a terminal, a bar once a run has taken a couple of seconds; off
    one (a pipe, a log file, which would collect every redraw), one line when a policy starts
    and one when it ends, so a long run is never silent."""

    def __init__(self, label: str, stream=None, delay: float = 2.0):
        self.label = label
        self.stream = sys.stderr if stream is None else stream  # today's, not import time's
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.delay = delay
        self.start = time.monotonic()
        self.shown = False
        self.last = 0.0

    def begin(self, jobs: int) -> None:
        if not self.tty:
            self.stream.write(f"{PROG}: {self.label}: simulating {jobs} jobs\n")
            self.stream.flush()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.tty or now - self.start < self.delay or now - self.last < 0.2:
            return
        self.last, self.shown = now, True
        width = 30
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{self.label:>14} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} jobs {now - self.start:5.1f}s")
        self.stream.flush()

    def close(self, ok: bool = True) -> None:
        if self.shown:
            self.stream.write("\n")
        elif not self.tty and ok:
            self.stream.write(f"{PROG}: {self.label}: done in "
                              f"{time.monotonic() - self.start:.1f} s\n")
        self.stream.flush()


def _resolve(value: str, packaged, suffix: str) -> Path:
    path = Path(value)
    if path.exists() or path.suffix == suffix or "/" in value:
        return path
    return packaged(value)


def _policy_help(plugins: list[str] | None) -> str:
    text = (f"comma-separated policies: {', '.join(policy_names())}; or one of your own as "
            "package.module:Class (default: muri-s,srsf,tiresias)")
    if plugins is not None:
        text += "; installed plug-ins: " + ("; ".join(plugins) if plugins else "none")
    return text.replace("%", "%%")  # argparse %-formats help texts


class _Parser(OneLineParser):
    """Its --help also says where each installed policy plug-in comes from and which are
    broken: that imports them, which only a help text asks for."""

    def format_help(self) -> str:
        for action in self._actions:
            if action.dest == "policy":
                action.help = _policy_help(describe_plugins())
        return super().format_help()


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Simulate scheduling policies on a job trace and a cluster spec. "
                    "Every option has a default: with none, the packaged 'default' trace "
                    "on n2g8 under muri-s, srsf and tiresias.")
    p.add_argument("--trace", default="default", metavar="CSV|NAME",
                   help="trace CSV (Muri schema), or a packaged trace name: "
                        f"{', '.join(available_traces())} (default: default)")
    p.add_argument("--spec", default=DEFAULT_SPEC, metavar="CSV|NAME",
                   help="cluster spec CSV, or a packaged spec name: "
                        f"{', '.join(available_specs())} (default: {DEFAULT_SPEC})")
    p.add_argument("--policy", default="muri-s,srsf,tiresias", metavar="NAME[,NAME...]",
                   help=_policy_help(None))
    p.add_argument("--preset", default="default", choices=sorted(PRESETS),
                   help="time accounting: 'paper' reproduces the artifact, 'default' is physical "
                        "(default: default)")
    p.add_argument("--restart-overhead", type=number(0, MAX_SECONDS, unit="s"), metavar="SECONDS",
                   help="charge this many trace seconds per (re)start for every model, in place "
                        "of the preset's per-model table (e.g. what interlace-report --json "
                        "measured on a live run)")
    p.add_argument("--max-group", type=number(1, 4, integer=True), metavar="K",
                   help="Muri's groups hold at most K jobs (1-4; the preset's: 4); as the "
                        "artifact's --packing_num K under paper: K matching rounds, K jobs "
                        "reserved per admitted job, merges of at most K")
    p.add_argument("--auto-unpack", choices=("on", "off"),
                   help="Muri splits a group slower than its members run one after another "
                        "(the preset's: on under default, off under paper; the artifact's "
                        "--autopack, on in its Fig. 13 runs)")
    p.add_argument("--round-interval", type=number(0, MAX_SECONDS, unit="s"), default=0.0,
                   metavar="SECONDS",
                   help="plan only every SECONDS trace seconds, at their multiples, as a "
                        "scheduler that runs in rounds does: arrivals wait for the next round "
                        "and freed GPUs idle until it (e.g. 360 for the paper's testbed; "
                        "default 0: plan at every arrival and end)")
    p.add_argument("--no-interference", action="store_true",
                   help="groups at the interleave model's own pace: no interference factor "
                        "(default's, fitted to the paper's testbed: "
                        + ", ".join(f"{v:g}x" for v in INTERFERENCE.values())
                        + " for groups of " + ", ".join(map(str, INTERFERENCE)) + ")")
    p.add_argument("--gpu-speed", type=gpu_speed, action="append", default=[],
                   metavar="[MODEL:]TYPE=SPEED",
                   help="how fast a GPU type runs a job's GPU stage, a V100 being 1, for one "
                        "model or every model, in place of the shipped table (interlace-spec "
                        "show prints it); repeat for several")
    p.add_argument("--tenants", metavar="FILE.toml",
                   help="teams sharing the cluster: quotas, borrowing limits, weights, "
                        "cohorts (docs/tenants.md); each job's tenant from the trace's tenant "
                        "column. Adds per-tenant figures to the table, --json and --out")
    p.add_argument("--json", action="store_true", help="one JSON object per policy per line")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the JCT CDF of the policies (any format matplotlib writes: "
                        ".png, .pdf, .svg, ...)")
    p.add_argument("--out", metavar="DIR", help="write per-job CSV and a summary per policy here")
    p.add_argument("--explain", nargs="?", const="", metavar="A,B",
                   help="after the table, compare policies A and B of --policy (with no "
                        "A,B: the first and the last) job by job: which finishes each job "
                        "sooner, time waiting, and run time against the job's time alone "
                        "(why the JCT CDFs cross); then where the time goes by decile of job "
                        "length (waiting, running slower in a group, restarting) and how "
                        "groups were made (short with long, regroups per arrival)")
    return p


def _plot_formats() -> set[str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())


def check_outputs(plot: str | None, out: str | None) -> list[str]:
    """One line per output that cannot be written, found before any simulation runs (so a
    typo costs no minutes of simulating and no traceback at the end). Nothing is created."""
    problems = []
    if plot is not None:
        path = Path(plot)
        suffix = path.suffix.lower().lstrip(".")
        formats = _plot_formats()
        parent = path.parent
        if suffix not in formats:
            kind = f"a .{suffix} file" if suffix else "a file without an extension"
            choices = ", ".join("." + f for f in sorted(formats))
            problems.append(f"--plot {plot}: cannot draw {kind} (use one of {choices})")
        elif path.is_dir():
            problems.append(f"--plot {plot}: is a directory")
        elif not parent.is_dir():
            problems.append(f"--plot {plot}: no such directory {str(parent)!r}")
        elif not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            problems.append(f"--plot {plot}: not writable")
        elif (why := _cannot_create(parent, directory=False)) is not None:
            problems.append(f"--plot {plot}: cannot write in {parent} ({why})")
    if out is not None:
        path = Path(out)
        existing = path  # the directory itself, or the nearest ancestor mkdir would start from
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            what = "is not a directory" if existing == path else f"{existing} is not a directory"
            problems.append(f"--out {out}: cannot create the directory ({what})")
        elif not os.access(existing, os.W_OK | os.X_OK):
            problems.append(f"--out {out}: {existing} is not writable")
        elif (why := _cannot_create(existing, directory=True)) is not None:
            problems.append(f"--out {out}: cannot create the directory in {existing} ({why})")
    return problems


def _cannot_create(folder: Path, *, directory: bool) -> str | None:
    """Why nothing can be made in `folder`, tried with a file or folder removed at once:
    os.access says yes to root everywhere, even in /proc."""
    try:
        if directory:
            os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".interlace-probe-"))
        else:
            fd, name = tempfile.mkstemp(dir=folder, prefix=".interlace-probe-")
            os.close(fd)
            os.unlink(name)
    except OSError as err:
        return err.strerror or str(err)
    return None


def plot_title(trace: str, spec: str, preset: str, restart_overhead: float | None = None) -> str:
    """What a plot shows: the trace, the spec and the preset (and a replaced overhead)."""
    title = f"trace {Path(trace).name}, spec {Path(spec).name}, preset {preset}"
    if restart_overhead is not None:
        title += f", restart {restart_overhead:g} s"
    return title


def preset_overrides(args: argparse.Namespace) -> dict:
    """The preset fields the command line replaces (see get_preset)."""
    overrides: dict = {}
    if args.restart_overhead is not None:
        overrides.update(overhead_table={}, overhead_default=args.restart_overhead)
    if args.max_group is not None:
        overrides["muri_max_group"] = args.max_group
    if args.auto_unpack is not None:
        overrides["muri_auto_unpack"] = args.auto_unpack == "on"
    if args.no_interference:
        overrides["group_slowdown"] = {}
    if args.gpu_speed:
        overrides["gpu_speed"] = dict(args.gpu_speed)
    return overrides



def _fail(lines, status: int = 1) -> int:
    for line in lines:
        print(f"{PROG}: {line}", file=sys.stderr)
    return status


def explain_pair(value: str, policies: list[str]) -> tuple[tuple[str, str] | None, str | None]:
    """The two policies `--explain [A,B]` compares, or why it cannot (a usage error)."""
    if len(policies) < 2:
        return None, "--explain: needs two or more policies, and a table (not --json)"
    if not value:
        return (policies[0], policies[-1]), None
    pair = [p.strip() for p in value.split(",")]
    if len(pair) != 2 or pair[0] == pair[1]:
        return None, f"--explain {value}: give two different policies as A,B"
    for name in pair:
        if name not in policies:
            return None, (f"--explain {value}: {name!r} is not in --policy"
                          f"{did_you_mean(name, policies)} (choose from {', '.join(policies)})")
    return (pair[0], pair[1]), None


def main(argv: list[str] | None = None) -> int:
    """Ctrl-C ends it with one line and exit status 130; what finished is kept (see run)."""
    try:
        return run(argv)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    preset = get_preset(args.preset, **preset_overrides(args))
    problems, usage = [], []
    for name in policies:
        try:
            make_policy(name, preset)  # a plug-in's mistakes show here, before any run
        except UnknownPolicy as err:
            usage.append(f"--policy: {err}")
        except PolicyError as err:
            problems.append(f"--policy: {err}")
    if not policies:
        usage.append("--policy: no policy given")
    spec = records = None
    try:
        spec = load_spec(_resolve(args.spec, spec_path, ".csv"))
    except SpecError as err:
        problems.extend(getattr(err, "problems", None) or [str(err)])
    else:
        problems.extend(missing_types(args.gpu_speed, (p.gpu_type for p in spec.layout)))
    trace_path = None
    try:
        trace_path = _resolve(args.trace, default_trace_path, ".csv")
        records = read_trace(trace_path, spec=spec)
    except TraceError as err:
        problems.extend(str(p) for p in err.problems)
    else:
        if not records:
            problems.append(str(no_jobs_problem(trace_path)))
    if spec is not None and records:
        problems.extend(cpu_problems(records, spec, preset, trace_path))
    tenancy = None
    if args.tenants is not None:
        try:
            tenancy = load_tenants(args.tenants)
        except TenantsError as err:
            problems.append(f"--tenants {err}")
        else:
            problems.extend(tenant_problems(tenancy, records or (), trace_path, policies,
                                             preset))
    problems.extend(check_outputs(args.plot, args.out))
    pair = None
    if args.explain is not None:
        if args.json:
            usage.append("--explain: needs two or more policies, and a table (not --json)")
        elif not usage:
            pair, why = explain_pair(args.explain, policies)
            usage.extend([why] if why else [])
    if usage or problems:
        return _fail(usage + problems, 2 if usage else 1)
    results: list[SimResult] = []
    logs: dict[str, GroupLog] = {}
    name, bar = policies[0], None
    try:  # a policy is kept (table, plot) once its outputs are written
        for name in policies:
            bar = _Bar(name)
            bar.begin(len(records))
            log = logs[name] = GroupLog() if pair else None
            try:
                result = simulate(records, spec, name, preset, progress=bar, on_round=log,
                                  tenancy=tenancy, round_interval=args.round_interval)
            except (RuntimeError, PolicyError) as err:
                bar.close(ok=False)
                return _fail([f"{name}: {err}"])
            bar.close()
            bar = None
            if args.json:
                extra = {} if result.tenants is None else {"tenants": result.tenants}
                print(dumps(summary_dict(name, result.summary, round(result.wall_s, 4),
                                         preset=preset.name, rounds=result.rounds, **extra)),
                      flush=True)
            if args.out:
                try:
                    _write_outputs(Path(args.out), result)
                except OSError as err:
                    return _fail([f"--out {args.out}: cannot write ({err.strerror or err})"])
            results.append(result)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close(ok=False)
        return interrupted(name, results, args, preset)
    if not args.json:
        print(format_table(results))
        if tenancy is not None:
            print("\n" + format_tenants(results))
    if pair:
        by_name = {r.policy: r for r in results}
        if not args.explain:
            print(f"\n--explain compares the first and the last of --policy "
                  f"(--explain A,B picks two):")
        print("\n".join(explain(by_name[pair[0]], by_name[pair[1]], records, logs)))
    return _plot(results, args, preset)


def _plot(results: list[SimResult], args: argparse.Namespace, preset) -> int:
    if args.plot:
        try:
            plot_cdf(results, Path(args.plot),
                     title=plot_title(args.trace, args.spec, preset.name, args.restart_overhead))
        except (OSError, ValueError) as err:
            return _fail([f"--plot {args.plot}: cannot write ({err})"])
    return 0


def interrupted(name: str, results: list[SimResult], args: argparse.Namespace, preset) -> int:
    """Ctrl-C while `name` ran: the policies finished before it keep their table and plot
    (their --out rows are written already); one line says so. Exit status 130."""
    kept = ", ".join(r.policy for r in results)
    if results and not args.json:
        print(format_table(results))
        if results[0].tenants is not None:
            print("\n" + format_tenants(results))
    if results:
        _plot(results, args, preset)  # a plot that cannot be written says so itself
    where = "".join(f", {what} in {path}" for what, path in
                    (("rows", args.out), ("plot", args.plot)) if path and results)
    print(f"{PROG}: interrupted during {name}; "
          + (f"kept {kept}{where}" if results else "no policy had finished"),
          file=sys.stderr)
    return 130


def cpu_problems(records: Sequence, spec, preset, trace: object, shown: int = 5) -> list[str]:
    """The trace's jobs that no node that could hold them has the CPUs for (they would wait
    for ever): the first `shown`, and how many more."""
    demand = Demand(preset.model.cpu_per_gpu, preset.model.cpu_single_gpu)
    seen: dict[tuple, str | None] = {}
    found = []
    for r in records:
        key = (r.num_gpu, r.gpu_types, r.gpu_mem_gb)
        if key not in seen:
            seen[key] = cpu_misfit(demand, spec, r)
        if seen[key]:
            found.append(f"{trace}: job {r.job_id}: {seen[key]}")
    if len(found) > shown:
        found[shown:] = [f"{trace}: and {len(found) - shown} more jobs no node has the CPUs "
                         f"for"]
    return found


def tenant_problems(tenancy: Tenancy, records: Sequence, trace: object,
                     policies: Sequence[str], preset, shown: int = 5) -> list[str]:
    """Why the trace's jobs or the policies cannot run under `tenancy`: the first `shown`
    jobs at fault, and how many more."""
    found = [why for r in records
             if (why := job_problem(tenancy, r.job_id, r.tenant, r.num_gpu,
                                    r.priority_class))]
    lines = [f"{trace}: {why}" for why in found[:shown]]
    if len(found) > shown:
        lines.append(f"{trace}: and {len(found) - shown} more jobs the tenants file cannot "
                     f"take")
    for name in policies:
        try:
            if not make_policy(name, preset).plans_partial:
                lines.append(f"--tenants: policy {name!r} cannot plan for tenants (it keeps "
                             f"its own jobs running whatever the round's queue)")
        except PolicyError:
            pass  # said already
    return lines


def format_tenants(results: list[SimResult]) -> str:
    """Per policy and tenant: jobs, average JCT and waiting, GPU-hours used against owed,
    borrowed, the most GPUs held; and the fairness index."""
    rows = [("policy", "tenant", "jobs", "avg JCT h", "waiting h", "GPU-h used", "GPU-h owed",
             "borrowed", "peak GPUs", "fairness")]
    for r in results:
        tenants = r.tenants or {"by_tenant": {}, "fairness": None}
        fair = tenants["fairness"]
        for name, t in tenants["by_tenant"].items():
            rows.append((r.policy, name, str(t["jobs"]),
                         "-" if t["avg_jct"] is None else f"{t['avg_jct'] / 3600:.2f}",
                         "-" if t["avg_queueing"] is None else f"{t['avg_queueing'] / 3600:.2f}",
                         f"{t['gpu_hours']:.1f}", f"{t['quota_gpu_hours']:.1f}",
                         f"{t['borrowed_gpu_hours']:.1f}", str(t["peak_gpus"]),
                         "-" if fair is None else f"{fair:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows)


def write_jobs_csv(path: Path, outcomes: Sequence[JobOutcome]) -> None:
    """One row per job (the core computes outcomes; writing them is this tool's)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "num_gpu", "model", "submit", "start", "end", "jct",
                    "queueing", "preemptions", "starts", "gpu_type"])
        for o in outcomes:
            w.writerow([o.job_id, o.num_gpu, o.model, o.submit, o.start, o.end,
                        o.jct if o.end is not None else "", o.queueing if o.start is not None else "",
                        o.preemptions, o.starts, o.gpu_type])


def _write_outputs(out: Path, result: SimResult) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_jobs_csv(out / f"{result.policy}-jobs.csv", result.outcomes)
    extra = {} if result.tenants is None else {"tenants": result.tenants}
    (out / f"{result.policy}-summary.json").write_text(
        dumps(summary_dict(result.policy, result.summary, result.wall_s, preset=result.preset,
                           utilisation=result.utilisation, **extra)) + "\n")
    if result.tenants is not None:
        with open(out / f"{result.policy}-tenants.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["time", "tenant", "gpus", "quota", "borrow_limit"])
            by_tenant = result.tenants["by_tenant"]
            for time_s, name, gpus in result.tenant_rows:
                w.writerow([time_s, name, gpus, by_tenant[name]["quota"],
                            by_tenant[name]["borrow_limit"]])


def format_table(results: list[SimResult]) -> str:
    rows = [("policy", "jobs", "avg JCT h", "p50 JCT h", "p99 JCT h", "makespan h",
             "queueing h", "GPU util", "preempt", "avg vs 1st", "wall s")]
    base = results[0].summary.avg_jct if results else 1.0
    for r in results:
        s = r.summary
        rows.append((r.policy, str(s.jobs), f"{s.avg_jct / 3600:.2f}", f"{s.p50_jct / 3600:.2f}",
                     f"{s.p99_jct / 3600:.2f}", f"{s.makespan / 3600:.2f}",
                     f"{s.avg_queueing / 3600:.2f}", percent(s.gpu_utilisation),
                     str(s.preemptions), f"{s.avg_jct / base:.2f}x", f"{r.wall_s:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows)


def percent(share: float) -> str:
    """A share as a percentage with two significant digits below 10% (a fraction of a
    percent is never shown as 0%), whole percents from there."""
    value = 100.0 * share
    if value == 0 or value >= 10 or not math.isfinite(value):
        return f"{value:.0f}%"
    digits = max(1 - math.floor(math.log10(abs(value))), 0)
    return f"{value:.{digits}f}%"


def plot_cdf(results: list[SimResult], path: Path, title: str | None = None) -> None:
    """The JCT CDF of each result, log hours, each policy's mean dashed; beside it the tail
    (the share of jobs whose JCT passes each value, log-log), where gains in the mean, the
    tail and the makespan show when the CDFs overlap; the legend gives those figures.
    `title` says what was run (trace, spec, preset), so a figure that travels alone still
    says what it shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, tail) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in results:
        jct = sorted(o.jct / 3600 for o in r.outcomes if o.end is not None)
        if not jct:
            continue
        n, s = len(jct), r.summary
        label = (f"{r.policy}: mean {s.avg_jct / 3600:.4g} h, p99 {s.p99_jct / 3600:.4g} h, "
                 f"makespan {s.makespan / 3600:.4g} h")
        line, = ax.plot(jct, [(i + 1) / n for i in range(n)], label=label)
        ax.axvline(s.avg_jct / 3600, color=line.get_color(), linestyle="--", linewidth=0.8)
        tail.plot(jct, [(n - i) / n for i in range(n)], color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours; dashed: each policy's mean)")
    ax.set_ylabel("fraction of jobs finished")
    tail.set_xscale("log")
    tail.set_yscale("log")
    tail.set_xlabel("JCT (hours)")
    tail.set_ylabel("fraction of jobs with a longer JCT")
    fig.legend(loc="lower center", ncol=1, fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=9)
    for a in (ax, tail):
        a.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.045 * max(len(results), 1) + 0.02, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
