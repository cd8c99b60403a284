"""`interlace-sweep`: the cross product of traces x policies x presets x seeds, run in parallel
(local processes, or an existing Dask cluster), into one tidy CSV and a folder of plots.

The sweep resumes: a run whose row is already in OUT/runs.csv (keyed by trace, policy, preset,
seed, and tenants file with --tenants) is not run again, so a killed or interrupted sweep is
finished by running the same command again. Bad input exits non-zero with one line per
problem before any run starts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scheduler.plugins import PolicyError, UnknownPolicy, make_policy, policy_names
from scheduler.presets import PRESETS, get_preset
from scheduler.sim.cli import cpu_problems, tenant_problems
from scheduler.tools.sweep_dask import DaskError, dask_missing, run_dask
from scheduler.tools.sweep_runs import NONE, Task, default_processes, run_local
from scheduler.tools.sweep_store import TENANTS_CSV, Store, StoreError
from scheduler.tools.sweep_traces import SEED_HELP, load, perturb
from specs import DEFAULT_SPEC, SpecError, available_specs, load_spec, spec_path
from specs.limits import MAX_PROCESSES, MAX_SEEDS, MAX_WAIT_S
from specs.options import OneLineParser, number
from specs.tenants import TenantsError, load_tenants
from traces import TraceError, available_traces

PROG = "interlace-sweep"


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Simulate every combination of traces, policies, presets and seeds; one row "
                    "per run in OUT/runs.csv (times in seconds), plots in OUT/report/. Runs "
                    "already in OUT/runs.csv are not run again (a killed sweep resumes).",
        epilog=f"Seeds: --seeds N runs seeds 0..N-1; {SEED_HELP}.")
    p.add_argument("--traces", required=True, metavar="CSV|NAME[,...]",
                   help="trace CSVs (Muri schema) or packaged trace names "
                        f"({', '.join(available_traces())}), comma-separated")
    p.add_argument("--policies", required=True, metavar="NAME[,...]",
                   help=f"comma-separated policies: {', '.join(policy_names())}, or "
                        "package.module:Class (resolved by name where each run runs)")
    p.add_argument("--presets", default="default", metavar="NAME[,...]",
                   help=f"comma-separated presets: {', '.join(sorted(PRESETS))} (default: default)")
    p.add_argument("--seeds", type=number(1, MAX_SEEDS, integer=True), default=1, metavar="N",
                   help=f"seeds 0..N-1 per trace (default: 1, the traces as they are; at most "
                        f"{MAX_SEEDS})")
    p.add_argument("--spec", default=DEFAULT_SPEC, metavar="CSV|NAME",
                   help=f"cluster spec CSV or packaged name ({', '.join(available_specs())}; "
                        f"default: {DEFAULT_SPEC})")
    p.add_argument("--tenants", metavar="none|FILE.toml[,...]",
                   help="also sweep over teams' quotas: 'none' is one queue for all, a "
                        "tenants file (docs/tenants.md) its quotas; none,FILE compares the "
                        "two. Adds the tenants file and Jain's fairness index to runs.csv, "
                        f"OUT/{TENANTS_CSV} (a row per run and tenant; without quotas a "
                        "job's tenant is the trace's tenant column as it is) and a "
                        "per-tenant plot")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the sweep's folder: runs.csv, runs/ (per-run detail), report/ (PNGs)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=number(1, MAX_PROCESSES, integer=True), metavar="K",
                       help="local processes (default: the CPUs this process may use; at most "
                            f"{MAX_PROCESSES})")
    where.add_argument("--dask", metavar="ADDRESS",
                       help="run on this Dask distributed scheduler (e.g. tcp://host:8786) "
                            "instead of local processes; its workers need interlace installed")
    p.add_argument("--dask-timeout", type=number(0, MAX_WAIT_S, above=True, unit="s"),
                   default=30.0, metavar="SECONDS",
                   help="how long to wait for the Dask scheduler to answer (default: 30, at "
                        f"most {MAX_WAIT_S:g})")
    p.add_argument("--no-report", action="store_true", help="write the CSV only, no plots")
    return p


class _Progress:
    """On a terminal a bar redrawn in place; off one (a log, a pipe) a line per run."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()

    def __call__(self, task: Task, outcome) -> None:
        self.done += 1
        failed = isinstance(outcome, BaseException)
        self.failed += failed
        what = f"{task.trace} {task.policy} {task.preset} seed {task.seed}"
        if task.tenants is not None:
            what += f" tenants {task.tenants}"
        if failed:
            line = f"{what}: failed: {type(outcome).__name__}: {outcome}"
        else:
            row = outcome[0]
            line = f"{what}: avg JCT {row['avg_jct_s'] / 3600:.2f} h in {row['wall_s']:.1f} s"
        elapsed = time.monotonic() - self.start
        if self.tty:
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            bad = f", {self.failed} failed" if self.failed else ""
            if failed:
                self.stream.write(f"\r\033[K{PROG}: {line}\n")
            self.stream.write(f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total} runs{bad} {elapsed:.0f} s")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"{PROG}: [{self.done}/{self.total}] {line}\n")
        self.stream.flush()


class Usage(str):
    """A problem that is a usage error (a name that names nothing): exit status 2."""


def _check(args) -> tuple[list[str], object, dict, list[str], list[str], list[str],
                         dict[str, str] | None]:
    """(problems, spec, records by trace, traces, policies, presets, tenants files' texts by
    name, "" for none; None without --tenants)."""
    problems: list[str] = []
    traces, policies, presets = _names(args.traces), _names(args.policies), _names(args.presets)
    tenants = None if args.tenants is None else _names(args.tenants)
    for flag, names in (("--traces", traces), ("--policies", policies), ("--presets", presets),
                        ("--tenants", [NONE] if tenants is None else tenants)):
        if not names:
            problems.append(Usage(f"{flag}: none given"))
    if args.dask and (missing := dask_missing()):
        problems.append(f"--dask: {missing}")
    spec = None
    try:
        path = Path(args.spec)
        spec = load_spec(path if path.exists() or path.suffix == ".csv" or "/" in args.spec
                         else spec_path(args.spec))
    except SpecError as err:
        problems.extend(f"--spec: {p}" for p in (getattr(err, "problems", None) or [err]))
    records = {}
    if spec is not None:
        for trace in dict.fromkeys(traces):
            try:
                records[trace] = load(trace, spec)
            except TraceError as err:
                problems.extend(f"--traces: {p}" for p in err.problems)
            else:
                if not records[trace]:
                    problems.append(f"--traces: {trace}: no jobs")
    made = None
    for preset in dict.fromkeys(presets):
        try:
            made = get_preset(preset)
        except ValueError as err:
            problems.append(Usage(f"--presets: {err}"))
            continue
        for policy in dict.fromkeys(policies):
            try:
                make_policy(policy, made)  # the worker makes it again by the same name
            except UnknownPolicy as err:
                problems.append(Usage(f"--policies: {err}"))
            except PolicyError as err:  # one line that names the policy or plug-in
                problems.append(f"--policies: {err}")
        for trace, jobs in records.items():  # jobs that would wait for ever: as interlace-sim
            problems.extend(cpu_problems(jobs, spec, made, trace))
    texts = None if tenants is None else {}
    for name in dict.fromkeys(tenants or ()):
        if name == NONE:
            texts[name] = ""
            continue
        try:
            tenancy = load_tenants(name)
            texts[name] = Path(name).read_text(encoding="utf-8")  # what the workers parse
        except TenantsError as err:
            problems.append(f"--tenants {err}")
            continue
        except OSError as err:  # gone since it was read
            problems.append(f"--tenants {name}: cannot read ({err.strerror or err})")
            continue
        for trace, jobs in records.items():  # jobs it cannot take, AntMan: as interlace-sim
            problems.extend(tenant_problems(tenancy, jobs, trace, policies if made else (),
                                            made))
    return (problems, spec, records, list(dict.fromkeys(traces)),
            list(dict.fromkeys(policies)), list(dict.fromkeys(presets)), texts)


def _fail(lines) -> int:
    status = 2 if any(isinstance(x, Usage) for x in lines) else 1
    for line in dict.fromkeys(str(x) for x in lines):
        print(f"{PROG}: {line}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already said in one line
        return exc.code if isinstance(exc.code, int) else 0
    problems, spec, records, traces, policies, presets, tenants = _check(args)
    if problems:
        return _fail(problems)
    store = Store(Path(args.out), tenants=tenants is not None)
    try:
        have = store.open()
    except StoreError as err:
        return _fail([err])
    try:
        other = {row["spec"] for row in have.values()} - {args.spec}
        if other:
            return _fail([f"--out {args.out}: holds runs on spec {', '.join(sorted(other))}, "
                          f"not {args.spec}; use another folder"])
        files = [()] if tenants is None else [(name,) for name in tenants]  # the 5th key
        keys = [(t, p, r, s, *f) for t in traces for p in policies for r in presets
                for s in range(args.seeds) for f in files]
        todo = [k for k in keys if (k[0], k[1], k[2], str(k[3]), *k[4:]) not in have]
        processes = min(args.jobs or default_processes(), max(len(todo), 1))
        workers = (f"on Dask at {args.dask}" if args.dask else
                   f"in {processes} process{'es' * (processes > 1)}")
        print(f"{PROG}: {len(keys)} runs: {len(keys) - len(todo)} already in {store.csv}, "
              f"{len(todo)} to run {workers}", file=sys.stderr, flush=True)
        try:
            failed = _execute(args, store, spec, records, todo, tenants) if todo else 0
        except DaskError as err:
            return _fail([err])
        if tenants is not None:
            store.write_tenants()
        if not args.no_report:
            from scheduler.tools.sweep_plots import write_report

            made = write_report(store)
            print(f"{PROG}: report: {len(made)} plots in {store.folder / 'report'}",
                  file=sys.stderr)
        if failed:
            return _fail([f"{failed} of {len(todo)} runs failed (their rows are not written; "
                          "run the same command again to retry them)"])
        return 0
    finally:
        store.close()


def _execute(args, store: Store, spec, records: dict, todo: list[tuple],
             tenants: dict[str, str] | None) -> int:
    """Run the missing tasks, a row for each as it finishes; the number that failed."""
    cache: dict[tuple[str, int], tuple] = {}

    def tasks():
        for trace, policy, preset, seed, *tenancy in todo:
            jobs = cache.get((trace, seed))
            if jobs is None:
                jobs = cache[(trace, seed)] = tuple(perturb(records[trace], seed))
            name = tenancy[0] if tenancy else None
            yield Task(trace, policy, preset, seed, args.spec, spec, jobs, name,
                       tenants[name] if name else "")

    progress = _Progress(len(todo))
    if args.dask:
        outcomes = run_dask(tasks(), args.dask, args.dask_timeout)
    else:
        outcomes = run_local(tasks(), min(args.jobs or default_processes(), len(todo)))
    for task, outcome in outcomes:
        if not isinstance(outcome, BaseException):
            store.add(*outcome)
        progress(task, outcome)
    return progress.failed


if __name__ == "__main__":
    sys.exit(main())
