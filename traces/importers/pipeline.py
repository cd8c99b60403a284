"""One import: read a public log, apply the row rules, sort by submit time, cut the window,
assign models and write the Muri CSV and its summary, all streamed.

Pass 1 reads rows and spills the kept ones to sorted runs on disk; pass 2 merges the runs in
submit order, drops duplicates and rows outside the window or the limit, and writes. Peak
memory is one run of rows plus 9 bytes per row that passed the row rules (its id's hash and
its duplicate flag).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence, TextIO

from specs.gpu_types import ASSUMED, GPU_MEM_GB
from specs.limits import show
from traces.importers.assign import ModelRule, choose_model, make_record, parse_model_rule
from traces.importers.progress import Bar
from traces.importers.rules import ADJUSTMENTS, REASONS, Ledger, RowRules, apply_row_rules
from traces.importers.source import Progress, Row
from traces.importers.spill import Spill
from traces.muri_csv import TraceWriter

EXTRA_COLUMNS = ("user", "tenant", "source_id", "status", "workload")
# the tenant of every job whose tenant is not among the --tenants-top N
OTHERS = "others"

Reader = Callable[["Inputs", Progress], Iterator[Row]]
# what the summary says of a format that gives no GPU facts beyond the count
NO_GPU_FACTS = "the log states no GPU type or memory: jobs accept any type and state no memory"


@dataclass(frozen=True)
class Inputs:
    """The files of one import: the main SRC files, plus PAI's task and group-tag tables."""

    sources: tuple[Path, ...]
    tasks: Path | None = None
    groups: Path | None = None
    tenant_per_file: bool = False  # gavel: each file is a virtual cluster, its name the tenant

    def all_files(self) -> list[Path]:
        return [*self.sources, *(p for p in (self.tasks, self.groups) if p is not None)]


@dataclass(frozen=True)
class Bound:
    """A --since/--until: an absolute time (epoch seconds) or seconds after the log's first
    submission (`relative`)."""

    seconds: float
    relative: bool = False

    def resolve(self, first_submit: float) -> float:
        return first_submit + self.seconds if self.relative else self.seconds


@dataclass(frozen=True)
class Options:
    rules: RowRules = field(default_factory=RowRules)
    models: ModelRule = field(default_factory=lambda: parse_model_rule("gputime"))
    seed: int = 0
    since: Bound | None = None
    until: Bound | None = None
    limit: int | None = None
    tenants_top: int | None = None  # keep the N tenants with the most GPU-hours, fold the rest
    progress: bool | None = None  # None: on a terminal only
    temp_dir: str | None = None


def summary_path(out: Path) -> Path:
    return out.with_name(out.name + ".summary.json")


def run_import(fmt: str, reader: Reader, inputs: Inputs, out: Path, options: Options,
               *, stream: TextIO | None = None, gpu_facts: str | None = None,
               notes: dict | None = None) -> dict:
    """Write `out` and its summary; return the summary. TraceError for an unusable input.
    `gpu_facts`: what the format states of a job's GPUs beyond their count (GPU_FACTS of
    traces.importers), which the summary repeats; None: nothing. `notes`: what else the
    format's import decided (NOTES of traces.importers), repeated under `notes`."""
    ledger = Ledger()
    total = sum(_size(p) for p in inputs.all_files())
    bar = Bar("reading", total, enabled=options.progress, stream=stream)
    spill = Spill(options.temp_dir)
    first_seen: float | None = None
    stated = {"types": False, "memory": False}  # whether the trace needs these columns
    try:
        for row in reader(inputs, bar):
            submit = getattr(row, "submit", None)
            if submit is not None and (first_seen is None or submit < first_seen):
                first_seen = submit
            job = apply_row_rules(row, options.rules, ledger)
            if job is not None:
                file_of = job.where.rsplit(":", 1)[0]
                spill.add(job.submit, f"{file_of}\0{job.key}",  # type: ignore[arg-type]
                          (job.key, job.duration, int(job.gpus), job.user, job.tenant,
                           job.status, job.workload, job.priority, job.where,
                           job.gpu_types, job.gpu_mem_gb, job.share_of, job.model))
                stated["types"] = stated["types"] or bool(job.gpu_types)
                stated["memory"] = stated["memory"] or bool(job.gpu_mem_gb)
        bar(total)
        bar.close()
        duplicate = spill.duplicates()
        written = Bar("writing", spill.count, enabled=options.progress, stream=stream,
                      unit="k rows", scale=1e3)
        models, gpu, tenants = _write(out, spill, duplicate, ledger, options, first_seen,
                                      written, stated)
        written.close()
    finally:
        bar.close()  # a bar cut short by an error still ends its line before the message
        spill.close()
    summary = _summary(fmt, inputs, out, options, ledger, models, first_seen,
                       _gpu_summary(gpu_facts, gpu), tenants)
    if notes:
        summary["notes"] = notes
    with open(summary_path(out), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
        handle.write("\n")
    return summary


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _selected(spill: Spill, duplicate, options: Options, first_seen: float | None,
              drop: Callable[[str, str, str], None], bar: Progress = lambda _: None
              ) -> Iterator[tuple]:
    """The spilled rows the trace gets, in submit order; `drop(reason, where, detail)` for
    each other one (an id seen before, outside the window, past the limit)."""
    since = options.since.resolve(first_seen) if options.since and first_seen is not None else None
    until = options.until.resolve(first_seen) if options.until and first_seen is not None else None
    kept = done = 0
    for row in spill.merged():
        done += 1
        if done % 8192 == 0:
            bar(done)
        submit, seq, key, where = row[0], row[1], row[3], row[11]
        if duplicate[seq]:
            drop("duplicate", where, f"job {key} again")
        elif (since is not None and submit < since) or (until is not None and submit >= until):
            drop("out_of_window", where, f"job {key}")
        elif options.limit is not None and kept >= options.limit:
            drop("beyond_limit", where, f"job {key}")
        else:
            kept += 1
            yield row


def _tenant_rule(spill: Spill, duplicate, options: Options, first_seen: float | None
                 ) -> Callable[[str], str]:
    """What each tenant is written as. With --tenants-top N, the N tenants whose written jobs
    hold the most GPU-hours stay, every other becomes OTHERS: a tenants file must name every
    tenant of the trace, and a real log has hundreds of users. Ranked on the rows written
    (an extra pass), so a window's own heavy users are the ones kept; "" (none named) stays."""
    if options.tenants_top is None:
        return str
    usage: dict[str, float] = {}
    for row in _selected(spill, duplicate, options, first_seen, lambda *_: None):
        tenant = row[7]
        if tenant:
            usage[tenant] = usage.get(tenant, 0.0) + row[5] * row[4]  # GPUs x seconds
    kept = set(sorted(usage, key=lambda t: (-usage[t], t))[:options.tenants_top])
    return lambda tenant: tenant if not tenant or tenant in kept else OTHERS


def _write(out: Path, spill: Spill, duplicate, ledger: Ledger, options: Options,
           first_seen: float | None, bar: Bar, stated: dict[str, bool]
           ) -> tuple[dict[str, int], dict, dict[str, list[float]]]:
    """Write the kept rows; (jobs per model, what the written jobs state of their GPUs,
    [jobs, GPU-seconds] per written tenant)."""
    tenant_of = _tenant_rule(spill, duplicate, options, first_seen)
    tenants: dict[str, list[float]] = {}
    models: dict[str, int] = {}
    gpu = {"with_types": 0, "with_memory": 0, "on_assumed_memory": 0, "shares_of": {}}
    part = out.with_name(out.name + ".part")
    first = previous = None
    try:
        with open(part, "w", encoding="utf-8", newline="") as handle:
            writer = TraceWriter(handle, memory=stated["memory"], types=stated["types"],
                                 extra=EXTRA_COLUMNS)
            for row in _selected(spill, duplicate, options, first_seen, ledger.drop, bar):
                (submit, _, _, key, duration, gpus, user, tenant, status, workload, priority,
                 where, types, memory, share_of, named) = row
                tenant = tenant_of(tenant)
                used = tenants.setdefault(tenant, [0, 0.0])
                used[0] += 1
                used[1] += gpus * duration
                if first is None:
                    first, previous = submit, 0.0
                relative = round(submit - first, 3)
                model = choose_model(options.models, options.seed, key, gpus, duration, workload,
                                     named)
                record = make_record(ledger.kept, gpus, relative,
                                     round(relative - previous, 3), duration, model, priority,
                                     gpu_types=tuple(types), gpu_mem_gb=memory)
                gpu["with_types"] += bool(types)
                if memory:
                    gpu["with_memory"] += 1
                    basis, gb, assumed = share_of
                    gpu["on_assumed_memory"] += assumed
                    shown = gpu["shares_of"].setdefault(basis, {"jobs": 0, "gb": gb})
                    shown["jobs"] += 1
                    if assumed:
                        shown["assumed"] = True
                previous = relative
                writer.write(record, (user, tenant, key, status, workload))
                models[model] = models.get(model, 0) + 1
                ledger.kept += 1
        os.replace(part, out)
    finally:
        if part.exists():
            part.unlink()
    bar(spill.count)
    return models, gpu, tenants


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a log's own number, beyond dates
        return None


def _gpu_summary(facts: str | None, gpu: dict) -> dict:
    """What the written jobs state of their GPUs, and on what grounds: the format's own
    words, and for memory from a share, the figure each share is of and which figures are
    this project's assumptions (specs/gpu_types.py)."""
    out: dict = {"facts": facts or NO_GPU_FACTS, "jobs_with_types": gpu["with_types"],
                 "jobs_with_memory_from_share": gpu["with_memory"]}
    if facts is not None:
        out["shares_of"] = dict(sorted(gpu["shares_of"].items()))
        out["jobs_on_assumed_memory"] = gpu["on_assumed_memory"]
        out["assumed_gb"] = {t: GPU_MEM_GB[t] for t in sorted(ASSUMED)}
    return out


def _summary(fmt: str, inputs: Inputs, out: Path, options: Options, ledger: Ledger,
             models: dict[str, int], first_seen: float | None, gpu: dict,
             tenants: dict[str, list[float]]) -> dict:
    assert ledger.balanced(), "every row read is kept or dropped once"
    return {
        "format": fmt,
        "inputs": [str(p) for p in inputs.all_files()],
        "output": str(out),
        "rows_read": ledger.read,
        "kept": ledger.kept,
        "dropped": {k: v for k, v in ledger.dropped.items()},
        "adjusted": {k: v for k, v in ledger.adjusted.items()},
        "examples": ledger.examples,
        "reasons": dict(REASONS),
        "adjustments": dict(ADJUSTMENTS),
        "models": dict(sorted(models.items())),
        "model_rule": options.models.describe(),
        "seed": options.seed,
        "first_submit_utc": _iso(first_seen),
        "gpu": gpu,
        # jobs and GPU-hours per written tenant, most GPU-hours first: what a tenants file's
        # quotas are sized from ("": jobs naming none)
        "tenants": {name: {"jobs": jobs, "gpu_hours": round(seconds / 3600, 3)}
                    for name, (jobs, seconds) in sorted(tenants.items(),
                                                        key=lambda t: (-t[1][1], t[0]))},
        "options": {
            "since": None if options.since is None else vars(options.since),
            "until": None if options.until is None else vars(options.until),
            "limit": options.limit,
            "tenant": options.rules.tenant,
            "tenants_top": options.tenants_top,
            "total_gpus": options.rules.total_gpus,
            "fractional": options.rules.fractional,
            "drop_failed": options.rules.drop_failed,
        },
    }


def summary_table(summary: dict) -> Sequence[str]:
    """The short human form of a summary, for stderr."""
    rows = [("rows read", summary["rows_read"]), ("kept", summary["kept"])]
    rows += [("dropped " + k, n) for k, n in summary["dropped"].items() if n]
    rows += [("adjusted " + k, n) for k, n in summary["adjusted"].items() if n]
    named = [name for name in summary["tenants"] if name]
    if named:
        rows.append(("tenants", len(named)))
    lines = []
    for label, count in rows:
        lines.append(f"{label:<30}{count:>10}")
        if label == "dropped malformed":  # where, and which field: the user's first look
            lines += [f"  {example}" for example in summary["examples"].get("malformed", ())]
    for name, note in summary.get("notes", {}).items():
        said = ", ".join(f"{k} -> {v}" for k, v in note.items()) if isinstance(note, dict) \
            else note
        lines.append(f"{name}: {said}")
    gpu = summary["gpu"]
    if "shares_of" not in gpu:  # the format gives no GPU facts
        return lines + [f"GPU types and memory: {gpu['facts']}"]
    lines += [f"{label:<30}{count:>10}" for label, count in (
        ("jobs with GPU types", gpu["jobs_with_types"]),
        ("jobs with memory from a share", gpu["jobs_with_memory_from_share"]),
        ("  of them on an assumed figure", gpu["jobs_on_assumed_memory"]))]
    assumed = ", ".join(f"{t} {show(gb)} GB" for t, gb in gpu["assumed_gb"].items())
    return lines + [f"GPU types and memory: {gpu['facts']}",
                    f"assumed GPU memory (undisclosed types; specs/gpu_types.py): {assumed}"]
