"""`interlace-trace`: make and check trace files without a traceback ever reaching the user."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from specs import available_specs
from traces.errors import TraceError
from traces.generate import generate
from traces.muri_csv import write_trace
from traces.validate import validate

PROG = "interlace-trace"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so main() can return the status like any other function."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")


def _int_at_least(minimum: int, kind: str):
    """An argparse type for integers >= minimum, with a message naming `kind`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {text!r}")
        return value
    return parse


_positive_int = _int_at_least(1, "positive")
_non_negative_int = _int_at_least(0, "non-negative")


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description="Generate and validate Interlace trace files.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="write a seeded Philly-like synthetic trace")
    gen.add_argument("--jobs", type=_positive_int, required=True, help="number of jobs")
    gen.add_argument("--seed", type=_non_negative_int, required=True, help="random seed")
    gen.add_argument("--out", type=Path, required=True, help="CSV file to write")
    gen.add_argument("--backlog", action="store_true", help="submit every job at time 0")
    gen.add_argument("--max-gpus", type=_positive_int, default=32, help="largest job (GPUs)")
    gen.add_argument("--mean-interarrival", type=_non_negative_float, default=1800.0,
                     help="mean seconds between submissions (default 1800)")
    gen.add_argument("--median-duration", type=_positive_float, default=3600.0,
                     help="median job run time, seconds (default 3600)")
    gen.add_argument("--duration-sigma", type=_non_negative_float, default=1.8,
                     help="lognormal sigma of run times (default 1.8)")
    gen.add_argument("--min-duration", type=_positive_float, default=60.0,
                     help="shortest run time, seconds (default 60)")
    gen.add_argument("--max-duration", type=_positive_float, default=5 * 86400.0,
                     help="longest run time, seconds (default 5 days)")

    val = sub.add_parser("validate", help="check a trace; one line per problem on stderr")
    val.add_argument("path", help="trace CSV file")
    val.add_argument("--spec", help="cluster spec file or packaged spec name: "
                     f"{', '.join(available_specs())}")
    return parser


def _generate(args: argparse.Namespace) -> int:
    if args.min_duration > args.max_duration:
        print(f"{PROG}: error: --min-duration exceeds --max-duration", file=sys.stderr)
        return 2
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


def _validate(args: argparse.Namespace) -> int:
    from specs import SpecError

    spec = None
    if args.spec is not None:
        try:
            spec = _load_spec(args.spec)
        except SpecError as exc:
            for line in exc.problems:
                print(line, file=sys.stderr)
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
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and friends
        return exc.code if isinstance(exc.code, int) else 0
    try:
        return _generate(args) if args.command == "generate" else _validate(args)
    except TraceError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    except Exception as exc:  # the promise is: never a traceback
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
