"""`interlace-spec`: make a cluster spec from a real cluster's node list, and show what a spec
holds, without a traceback ever reaching the user.

Exit status: 0 done; 2 bad input or options (one stderr line per fault), or an output file
that exists without --force; 1 the output could not be written."""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

from specs import SpecError, available_specs, load_spec, spec_path
from specs.gpu_speed import by_family, source
from specs.gpu_types import ASSUMED, GPU_MEM_GB, parse_override
from specs.limits import show
from specs.openb import NodeListError, pools_of, read_node_list
from specs.options import OneLineParser
from specs.pools import NAME, spec_text
from specs.spec import ClusterSpec, Pool

PROG = "interlace-spec"
UNSTATED = "(unstated)"  # how a pool of no stated GPU type is listed

IMPORT_EPILOG = """\
NODE_LIST is openb_node_list_all_node.csv from github.com/alibaba/clusterdata
cluster-trace-gpu-v2023 (sn,cpu_milli,memory_mib,gpu,model). Nodes alike in GPUs, GPU type,
CPUs and memory become one pool. Each GPU's memory comes from vendor data sheets; the list's
G2 and G3 are undisclosed types whose figures are assumptions (--gpu-mem states them)."""


def _gpu_mem(text: str) -> tuple[str, float]:
    """An argparse type for `--gpu-mem TYPE=GB`."""
    try:
        kind, gb = parse_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not NAME.fullmatch(kind):
        raise argparse.ArgumentTypeError(
            f"TYPE must be 1-64 letters, digits or _.+- (starting with a letter or digit), "
            f"got {text!r}")
    return kind, gb


def _parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="Make and show Interlace cluster specs.")
    sub = parser.add_subparsers(dest="command", required=True)

    imp = sub.add_parser("import", help="write a pooled spec from a real cluster's node list",
                         epilog=IMPORT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_argument("format", choices=["openb"], help="the node list's format")
    imp.add_argument("node_list", metavar="NODE_LIST", help="the node list (CSV)")
    imp.add_argument("--out", type=Path, required=True, metavar="SPEC",
                     help="pooled spec file to write")
    imp.add_argument("--gpu-mem", type=_gpu_mem, action="append", default=[],
                     metavar="TYPE=GB", help="each GPU's memory for a type (GB), in place of "
                     "the built-in figure; may be repeated")
    imp.add_argument("--force", action="store_true", help="replace SPEC if it exists")

    shw = sub.add_parser("show", help="list a spec's pools and totals")
    shw.add_argument("spec", metavar="SPEC", help="spec file (Muri's form or pooled) or "
                     f"packaged spec name: {', '.join(available_specs())}")
    shw.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    return parser


def _say(lines: Sequence[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def _out_problem(out: Path, source: str, force: bool) -> str | None:
    """Why `out` cannot be written, checked before any reading; None if it can."""
    if not out.parent.is_dir():
        return f"{out}: no such directory {str(out.parent)!r}"
    if out.is_dir():
        return f"{out}: is a directory"
    try:
        if os.path.exists(source) and os.path.samefile(out, source):
            return f"--out {out}: is the node list; writing it would destroy it"
    except OSError:
        pass
    if os.path.lexists(out) and not force:
        return f"{out}: exists; --force replaces it"
    return None


def _write(out: Path, text: str, force: bool) -> None:
    """Write `text` to `out` whole or not at all: into a temporary file beside it, then
    renamed over it (with `force`) or linked to its name, which fails if a file took the
    name since it was checked. FileExistsError, or OSError, with nothing left behind."""
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if force:
            os.replace(tmp, out)
            return
        try:
            os.link(tmp, out)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links
            if os.path.lexists(out):
                raise FileExistsError(out) from None
            os.replace(tmp, out)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _import(args: argparse.Namespace) -> int:
    overrides: dict[str, float] = {}
    for kind, gb in args.gpu_mem:
        if kind in overrides:
            print(f"{PROG}: error: --gpu-mem: {kind} given twice", file=sys.stderr)
            return 2
        overrides[kind] = gb
    problem = _out_problem(args.out, args.node_list, args.force)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        shapes = read_node_list(args.node_list)
    except NodeListError as exc:
        _say(exc.problems)
        return 2
    memory = {**GPU_MEM_GB, **overrides}
    spec = ClusterSpec.of_pools(pools_of(shapes, memory))
    try:
        _write(args.out, spec_text(spec), args.force)
    except FileExistsError:
        print(f"{args.out}: exists; --force replaces it", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{args.out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for line in _import_summary(args.node_list, args.out, spec, overrides):
        print(line)
    present = {pool.gpu_type for pool in spec.pools if pool.gpus}
    for kind in sorted(set(overrides) - present):
        print(f"{PROG}: warning: --gpu-mem {kind}: no node in {args.node_list} has that type",
              file=sys.stderr)
    return 0


def _import_summary(source: str, out: Path, spec: ClusterSpec,
                    overrides: Mapping[str, float]) -> list[str]:
    """What the import wrote, and where each GPU memory figure comes from."""
    pools = spec.layout
    cpu_only = sum(p.nodes for p in pools if not p.gpus)
    lines = [f"wrote {out}: {len(pools)} pools from {source}",
             f"nodes: {spec.num_nodes} ({cpu_only} CPU-only)",
             f"GPUs: {spec.total_gpus}"]
    by_type = _gpus_by_type(pools)
    memory = {p.gpu_type or UNSTATED: p.gpu_mem_gb for p in pools if p.gpus}
    width = max(len(kind) for kind in by_type)
    for kind, gpus in by_type.items():
        gb = memory[kind]
        figure = f"{show(gb)} GB each" if gb else "no memory figure"
        source_of = (" (--gpu-mem)" if kind in overrides
                     else " (assumed)" if gb and kind in ASSUMED else "")
        lines.append(f"  {kind:<{width}} {gpus:>7} GPUs  {figure}{source_of}")
    assumed = sorted(kind for kind in by_type if kind in ASSUMED and kind not in overrides)
    given = sorted(kind for kind in by_type if kind in overrides)
    origin = ["GPU memory: vendor data sheets"]
    if assumed:
        origin.append(f"assumed for {', '.join(assumed)} (undisclosed types; --gpu-mem "
                      "TYPE=GB states them)")
    if given:
        origin.append(f"given by --gpu-mem for {', '.join(given)}")
    lines.append("; ".join(origin))
    unknown = sorted(kind for kind, gb in memory.items() if not gb and kind != UNSTATED)
    if unknown:
        lines.append(f"no memory figure for {', '.join(unknown)}: gpu_mem_gb left empty, so "
                     "groups there are not bounded by memory (--gpu-mem TYPE=GB states it)")
    return lines


def _gpus_by_type(pools: Sequence[Pool]) -> dict[str, int]:
    """GPUs of each type, by name, those of no stated type last."""
    counts: Counter[str] = Counter()
    for pool in pools:
        if pool.gpus:
            counts[pool.gpu_type or UNSTATED] += pool.gpus
    return dict(sorted(counts.items(), key=lambda item: (item[0] == UNSTATED, item[0])))


def _load(text: str) -> ClusterSpec:
    """The spec a path or a packaged spec's name names."""
    path = Path(text)
    if path.suffix == ".csv" or path.exists() or len(path.parts) > 1:
        return load_spec(path)
    return load_spec(spec_path(text))


def _show(args: argparse.Namespace) -> int:
    try:
        spec = _load(args.spec)
    except SpecError as exc:
        _say(exc.problems)
        return 2
    pools = spec.layout
    cpu_only = sum(p.nodes for p in pools if not p.gpus)
    if args.json:
        print(json.dumps({
            "pools": [{"name": p.name, "nodes": p.nodes, "gpus_per_node": p.gpus_per_node,
                       "gpu_type": p.gpu_type or None, "gpu_mem_gb": p.gpu_mem_gb or None,
                       "cpus_per_node": p.cpus_per_node, "mem_per_node": p.mem_per_node,
                       "nodes_per_switch": p.nodes_per_switch or None} for p in pools],
            "nodes": spec.num_nodes, "gpus": spec.total_gpus,
            "gpus_by_type": _gpus_by_type(pools), "cpu_only_nodes": cpu_only,
            "gpu_speed": {kind: {**by_family(kind), "source": source(kind)}
                          for kind in _gpus_by_type(pools) if kind != UNSTATED}}))
        return 0
    head = ("pool", "nodes", "GPUs/node", "type", "GB/GPU", "CPUs/node", "mem/node GB",
            "nodes/switch")
    rows = [(p.name, str(p.nodes), str(p.gpus_per_node), p.gpu_type or "-",
             show(p.gpu_mem_gb) if p.gpu_mem_gb else "-", str(p.cpus_per_node),
             str(p.mem_per_node), str(p.nodes_per_switch) if p.nodes_per_switch else "-")
            for p in pools]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2]),
                 row[3].ljust(widths[3]), row[4].rjust(widths[4]), row[5].rjust(widths[5]),
                 row[6].rjust(widths[6]), row[7].rjust(widths[7])]
        print("  ".join(cells).rstrip())
    print(f"nodes: {spec.num_nodes} ({cpu_only} CPU-only)")
    print(f"GPUs: {spec.total_gpus}")
    print("GPUs by type: " + ", ".join(f"{kind} {gpus}"
                                       for kind, gpus in _gpus_by_type(pools).items()))
    kinds = [kind for kind in _gpus_by_type(pools) if kind != UNSTATED]
    if kinds:
        print("GPU stage speed (a V100 = 1), by model family:")
        width = max(len(kind) for kind in kinds)
        for kind in kinds:
            figures = ", ".join(f"{family} {value:.2f}"
                                for family, value in by_family(kind).items())
            print(f"  {kind:<{width}}  {figures}  ({source(kind)})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `interlace-spec` command; its exit status (see the module's docstring)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already said in one line
        return exc.code if isinstance(exc.code, int) else 0
    try:
        return {"import": _import, "show": _show}[args.command](args)
    except Exception as exc:  # the promise is: never a traceback
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
