"""`interlace-trace`: make and check trace files without a traceback ever reaching the user."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from specs import DEFAULT_SPEC, available_specs
from specs.fit import Fit
from specs.limits import (MAX_GPUS, MAX_GPUS_PER_NODE, MAX_ID, MAX_JOBS, MAX_SEED, MAX_SIGMA,
                          MAX_TRACE_SECONDS, show)
from specs.options import OneLineParser, number
from specs.tenants import MAX_TENANTS, TenantsError, load_tenants
from traces.errors import TraceError
from traces.generate import generate, spread_over
from traces.muri_csv import write_trace
from traces.validate import validate

PROG = "interlace-trace"


# integer options and their bounds (specs.limits)
_positive_int = number(1, MAX_ID, integer=True)
_seed = number(0, MAX_SEED, integer=True)
_trace_seconds = number(0, MAX_TRACE_SECONDS, unit="s")
_positive_trace_seconds = number(0, MAX_TRACE_SECONDS, above=True, unit="s")


def _parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG,
                           description="Generate, import and validate Interlace trace files.")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write a seeded Philly-like synthetic trace")
    gen.add_argument("--jobs", type=number(1, MAX_JOBS, integer=True), required=True,
                     help=f"number of jobs (at most {MAX_JOBS})")
    gen.add_argument("--seed", type=_seed, required=True, help="random seed")
    gen.add_argument("--out", type=Path, required=True, help="CSV file to write")
    gen.add_argument("--backlog", action="store_true", help="submit every job at time 0")
    gen.add_argument("--max-gpus", type=number(1, MAX_GPUS, integer=True), default=None,
                     help=f"largest job (GPUs; default: what the simulator's default spec "
                          f"{DEFAULT_SPEC} holds, so the trace runs there as it is)")
    gen.add_argument("--mean-interarrival", type=_trace_seconds, default=1800.0,
                     help="mean seconds between submissions (default 1800)")
    gen.add_argument("--median-duration", type=_positive_trace_seconds, default=3600.0,
                     help="median job run time, seconds (default 3600)")
    gen.add_argument("--duration-sigma", type=number(0, MAX_SIGMA), default=1.8,
                     help=f"lognormal sigma of run times (default 1.8, at most {MAX_SIGMA:g})")
    gen.add_argument("--min-duration", type=_positive_trace_seconds, default=60.0,
                     help="shortest run time, seconds (default 60)")
    gen.add_argument("--max-duration", type=_positive_trace_seconds, default=5 * 86400.0,
                     help="longest run time, seconds (default 5 days)")
    gen.add_argument("--tenants", metavar="FILE.toml",
                     help="spread the jobs over this tenants file's tenants, each job to one "
                          "that may hold it, in proportion to quota + borrow_limit (a tenant "
                          "column; seeded by --seed)")

    _import_parser(sub)

    val = sub.add_parser("validate", help="check a trace; one line per problem on stderr")
    val.add_argument("path", help="trace CSV file")
    val.add_argument("--spec", default=DEFAULT_SPEC,
                     help="cluster spec file or packaged spec name: "
                     f"{', '.join(available_specs())} (default {DEFAULT_SPEC}, as interlace-sim)")
    return parser


IMPORT_EPILOG = """\
formats and the file to pass as SRC:
  philly  cluster_job_log (JSON list) from github.com/msr-fiddle/philly-traces
  helios  cluster_log.csv (one per cluster) from github.com/S-Lab-System-Group/HeliosData
  pai     from github.com/alibaba/clusterdata cluster-trace-gpu-v2020: SRC is the
          directory holding pai_job_table.csv, pai_task_table.csv and (optional)
          pai_group_tag_table.csv, or SRC is pai_job_table.csv with --tasks FILE
          [--groups FILE]
  openb   openb_pod_list_*.csv from github.com/alibaba/clusterdata cluster-trace-gpu-v2023
  gavel   Gavel's tab-separated traces (github.com/stanford-futuredata/gavel
          scheduler/traces/): a folder of *.trace files, one per virtual cluster (each
          file's name is its jobs' tenant), or one file

Every row is kept or dropped for one counted reason (missing times, negative or zero run
time, zero GPUs, more GPUs than --spec holds, duplicate id, outside the window, ...);
the counts go to OUT.summary.json and, as a table, to stderr. Output times start at the
first kept job; TIME for --since/--until is a date-time (2017-10-03 or
"2017-10-03 12:00:00", UTC), epoch seconds, or +N[s|m|h|d] after the log's first
submission. --since is inclusive, --until exclusive; --limit keeps the first N jobs (by
submit time) that pass every other rule. The tenant is the Philly/Helios virtual cluster
or the PAI user; --tenant matches it as the log spells it, --tenants-top ranks the jobs
that are kept; OUT.summary.json gives each tenant's jobs and GPU-hours. --tenants-out
writes a tenants file beside the trace whose quotas share --spec's GPUs in proportion to
each VC's real size (--vc-sizes).
"""


def _import_parser(sub) -> None:
    from traces.importers import FORMATS
    from traces.importers.assign import __doc__ as models_doc

    rules = (models_doc or "").split("Rules (`--models`):", 1)[-1]
    imp = sub.add_parser(
        "import", help="convert a public cluster log (Philly, Helios, PAI, openb) to a trace",
        description="Convert a public GPU-cluster log into a Muri-schema trace that "
                    "interlace-sim reads, with user and tenant kept as extra columns.",
        epilog=IMPORT_EPILOG + "\nmodel rules (--models):" + rules,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_argument("format", choices=sorted(FORMATS), help="the log's format")
    imp.add_argument("sources", nargs="+", metavar="SRC", help="input file(s); see below")
    imp.add_argument("--out", type=Path, required=True, help="trace CSV to write")
    imp.add_argument("--spec", default=DEFAULT_SPEC,
                     help="cluster the trace is for: jobs needing more GPUs than it holds are "
                          "dropped (file or packaged name: "
                          f"{', '.join(available_specs())}; default {DEFAULT_SPEC}, as "
                          "interlace-sim)")
    imp.add_argument("--models", metavar="RULE",
                     help="how jobs get a model (default log for gavel, else gputime; see "
                          "below)")
    imp.add_argument("--seed", type=_seed, default=0,
                     help="seed of the model choice (default 0)")
    imp.add_argument("--since", type=_time_bound, metavar="TIME",
                     help="keep jobs submitted at or after TIME")
    imp.add_argument("--until", type=_time_bound, metavar="TIME",
                     help="keep jobs submitted before TIME")
    imp.add_argument("--limit", type=_positive_int, metavar="N", help="keep at most N jobs")
    imp.add_argument("--tenant", metavar="NAME",
                     help="keep only this tenant (Philly/Helios virtual cluster, PAI user)")
    imp.add_argument("--tenants-top", type=number(1, MAX_TENANTS - 1, integer=True),
                     metavar="N",
                     help="keep the N tenants whose kept jobs hold the most GPU-hours; every "
                          "other job's tenant becomes 'others' (so a tenants file of N+1 "
                          "names covers a log of many users)")
    imp.add_argument("--fractional", choices=("ceil", "drop"), default="ceil",
                     help="a fractional GPU count (PAI, openb): round up or drop (default ceil)")
    imp.add_argument("--drop-failed", action="store_true",
                     help="drop failed and killed jobs (default: keep them, they held GPUs)")
    imp.add_argument("--tasks", type=Path, metavar="FILE", help="pai: pai_task_table.csv")
    imp.add_argument("--groups", type=Path, metavar="FILE",
                     help="pai: pai_group_tag_table.csv (workload labels, for --models workload)")
    imp.add_argument("--tenants-out", type=Path, metavar="FILE.toml",
                     help="also write a tenants file: each tenant's quota its VC's share of "
                          "--spec's GPUs by its real size (needs --vc-sizes)")
    imp.add_argument("--vc-sizes", type=Path, metavar="CSV",
                     help="each VC's real nodes, a CSV vc,nodes (HeliosArtifact's "
                          "philly_vc.csv), for --tenants-out")
    imp.add_argument("--vc-gpus-per-node", type=number(1, MAX_GPUS_PER_NODE, integer=True),
                     default=8, metavar="N",
                     help="GPUs of a node of the real VCs (default 8), said in the tenants "
                          "file")
    imp.add_argument("--progress", action="store_true",
                     help="draw the progress bar even when stderr is not a terminal")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _time_bound(text: str):  # -> Bound
    from datetime import datetime, timezone

    from traces.importers import Bound

    cell = text.strip()
    try:
        if cell.startswith("+"):
            unit = _UNITS.get(cell[-1:].lower())
            number = float(cell[1:-1] if unit else cell[1:])
            if not 0 <= number < float("inf"):
                raise ValueError
            return Bound(number * (unit or 1), relative=True)
        try:
            number = float(cell)
        except ValueError:
            moment = datetime.fromisoformat(cell)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            return Bound(moment.timestamp())
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError
        return Bound(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a date-time, epoch seconds or +N[s|m|h|d], got {text!r}") from None


def _pai_inputs(args: argparse.Namespace):  # -> Inputs | str
    from traces.importers import Inputs
    from traces.importers.pai import FILES

    sources, tasks, groups = [], args.tasks, args.groups
    for src in map(Path, args.sources):
        if src.is_dir():
            sources.append(src / FILES["sources"])
            tasks = tasks or src / FILES["tasks"]
            if groups is None and (src / FILES["groups"]).exists():
                groups = src / FILES["groups"]
        else:
            sources.append(src)
    if tasks is None:
        return "pai: needs the task table: pass a directory as SRC, or --tasks FILE"
    return Inputs(tuple(sources), tasks, groups)


def _gavel_inputs(args: argparse.Namespace):  # -> Inputs | str
    """A folder's `*.trace` files, or the files named; each file is a VC where there is a
    folder or more than one file."""
    from traces.importers import Inputs
    from traces.importers.gavel import SUFFIX

    sources, folder = [], False
    for src in map(Path, args.sources):
        if src.is_dir():
            found = sorted(p for p in src.glob("*" + SUFFIX) if p.is_file())
            if not found:
                return f"gavel: {src}: no *{SUFFIX} file in this folder"
            sources += found
            folder = True
        else:
            sources.append(src)
    return Inputs(tuple(sources), tenant_per_file=folder or len(sources) > 1)


def _same_file(out: Path, src: Path) -> bool:
    """Whether writing `out` would overwrite `src` (the same path, a link to it)."""
    try:
        return out.resolve() == Path(src).resolve() or (
            out.exists() and os.path.samefile(out, src))
    except OSError:
        return False


def _import(args: argparse.Namespace) -> int:
    from traces.importers import (DEFAULT_MODELS, FORMATS, GPU_FACTS, NOTES, Inputs, Options,
                                  RowRules, run_import, summary_path)
    from traces.importers.assign import ModelRuleError, parse_model_rule
    from traces.importers.pipeline import summary_table
    from traces.importers.source import open_problem

    if (args.tenants_out is None) != (args.vc_sizes is None):
        print(f"{PROG}: error: --tenants-out and --vc-sizes go together", file=sys.stderr)
        return 2
    spec = _spec_or_say(args.spec)
    if spec is None:
        return 1
    sizes = None
    if args.vc_sizes is not None:
        from traces.importers.quotas import SizesError, read_sizes
        try:
            sizes = read_sizes(args.vc_sizes)
        except SizesError as exc:
            print(exc, file=sys.stderr)
            return 1
    try:
        model_rule = parse_model_rule(args.models or DEFAULT_MODELS.get(args.format, "gputime"))
    except ModelRuleError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "pai":
        inputs = _pai_inputs(args)
        if isinstance(inputs, str):
            print(f"{PROG}: error: {inputs}", file=sys.stderr)
            return 2
    elif args.tasks or args.groups:
        print(f"{PROG}: error: --tasks/--groups are for the pai format", file=sys.stderr)
        return 2
    elif args.format == "gavel":
        inputs = _gavel_inputs(args)
        if isinstance(inputs, str):
            print(f"{PROG}: error: {inputs}", file=sys.stderr)
            return 2
    else:
        inputs = Inputs(tuple(map(Path, args.sources)))
    problems = [str(p) for p in map(open_problem, inputs.all_files()) if p is not None]
    problems += [f"--{name} {path}: is the input {src}; writing it would destroy it"
                 for name, path in (("out", args.out), ("tenants-out", args.tenants_out))
                 if path is not None
                 for src in inputs.all_files() if _same_file(path, src)]
    if args.tenants_out is not None and args.tenants_out.resolve() == args.out.resolve():
        problems.append(f"--tenants-out {args.tenants_out}: is --out")
    if args.tenants_out is not None and not args.tenants_out.parent.is_dir():
        problems.append(f"{args.tenants_out}: no such directory "
                        f"{str(args.tenants_out.parent)!r}")
    parent = args.out.parent
    if not parent.is_dir():
        problems.append(f"{args.out}: no such directory {str(parent)!r}")
    elif args.out.is_dir():
        problems.append(f"{args.out}: is a directory")
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        return 1
    options = Options(
        rules=RowRules(total_gpus=spec.total_gpus, fit=Fit(spec), fractional=args.fractional,
                       drop_failed=args.drop_failed, tenant=args.tenant),
        models=model_rule, seed=args.seed, since=args.since, until=args.until,
        limit=args.limit, tenants_top=args.tenants_top,
        progress=True if args.progress else None)
    try:
        summary = run_import(args.format, FORMATS[args.format], inputs, args.out, options,
                             gpu_facts=GPU_FACTS.get(args.format), notes=NOTES.get(args.format))
    except OSError as exc:
        print(f"{getattr(exc, 'filename', None) or args.out}: cannot write: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    for line in summary_table(summary):
        print(line, file=sys.stderr)
    if not summary["kept"]:
        print(f"{PROG}: warning: no job kept; {summary_path(args.out)} says why",
              file=sys.stderr)
    print(f"wrote {summary['kept']} jobs to {args.out} "
          f"(summary: {summary_path(args.out)})")
    if sizes is not None:
        return _write_quotas(args, sizes, summary, spec.total_gpus)
    return 0


def _write_quotas(args: argparse.Namespace, sizes: dict[str, int], summary: dict,
                  total_gpus: int) -> int:
    """The tenants file of --tenants-out, and on stderr each quota and the VCs unsized."""
    from traces.importers.quotas import UNNAMED, quotas, tenants_toml

    names = [name or UNNAMED for name in summary["tenants"]]
    names = list(dict.fromkeys(names))
    owed = quotas(sizes, names, total_gpus)
    unsized = [name for name in names if not sizes.get(name)]
    cluster = Path(args.spec).stem
    text = tenants_toml(owed, sizes, total_gpus, args.vc_gpus_per_node, args.vc_sizes.name,
                        cluster)
    try:
        args.tenants_out.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"{args.tenants_out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for name in names:
        real = sizes.get(name, 0)
        print(f"quota {name:<12}{owed[name]:>6} GPUs"
              + (f"  ({real} nodes, {real * args.vc_gpus_per_node} GPUs real)" if real else ""),
              file=sys.stderr)
    if unsized:
        jobs = sum(summary["tenants"].get("" if n == UNNAMED else n, {}).get("jobs", 0)
                   for n in unsized)
        print(f"{args.vc_sizes}: no size for {len(unsized)} tenant(s) ({', '.join(unsized)}; "
              f"{jobs} jobs): quota 0, they borrow what others leave idle", file=sys.stderr)
    unused = sorted(set(sizes) - set(names))
    if unused:
        print(f"{args.vc_sizes}: {len(unused)} VC(s) with no job in the trace, given no quota: "
              f"{', '.join(unused)}", file=sys.stderr)
    print(f"wrote {len(owed)} tenants to {args.tenants_out}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    if args.min_duration > args.max_duration:
        print(f"{PROG}: error: --min-duration exceeds --max-duration", file=sys.stderr)
        return 2
    if args.max_gpus is None:
        spec = _spec_or_say(DEFAULT_SPEC)
        if spec is None:
            return 1
        args.max_gpus = spec.total_gpus
    records = generate(
        args.jobs,
        args.seed,
        mean_interarrival=args.mean_interarrival,
        max_gpus=args.max_gpus,
        backlog=args.backlog,
        median_duration=args.median_duration,
        duration_sigma=args.duration_sigma,
        min_duration=args.min_duration,
        max_duration=args.max_duration,
    )
    if args.tenants is not None:
        try:
            records = spread_over(records, load_tenants(args.tenants), args.seed)
        except (TenantsError, ValueError) as err:
            print(f"{PROG}: error: --tenants {err}", file=sys.stderr)
            return 2
    if records and records[-1].submit_time > MAX_TRACE_SECONDS:
        print(f"{PROG}: error: --mean-interarrival: {args.jobs} jobs {args.mean_interarrival:g} s "
              f"apart end at {records[-1].submit_time:.4g} s, past the traces' limit of "
              f"{show(MAX_TRACE_SECONDS)} s: lower it or --jobs", file=sys.stderr)
        return 2
    try:
        write_trace(args.out, records)
    except OSError as exc:
        print(f"{args.out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(records)} jobs to {args.out}")
    return 0


def _load_spec(text: str):  # -> ClusterSpec
    from specs import load_spec, spec_path

    path = Path(text)
    if path.suffix == ".csv" or path.exists() or len(path.parts) > 1:
        return load_spec(path)
    return load_spec(spec_path(text))


def _spec_or_say(text: str):
    """The cluster spec `text` names, or None once its problems are on stderr, a line each."""
    from specs import SpecError

    try:
        return _load_spec(text)
    except SpecError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return None


def _validate(args: argparse.Namespace) -> int:
    spec = _spec_or_say(args.spec)
    if spec is None:
        return 1
    problems = validate(args.path, spec=spec)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"{args.path}: ok")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 ok, 1 bad input (one stderr line per problem), 2 usage error."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already said in one line
        return exc.code if isinstance(exc.code, int) else 0
    try:
        commands = {"generate": _generate, "import": _import, "validate": _validate}
        return commands[args.command](args)
    except TraceError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    except Exception as exc:  # the promise is: never a traceback
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
