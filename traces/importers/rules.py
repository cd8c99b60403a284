"""The odd-row rules every format shares, and the ledger that counts what each rule did.

Every row read ends in exactly one place: kept, or dropped for the first reason below that
applies, so `read == kept + sum(dropped)` always holds. Adjustments (a fractional GPU count
rounded up, a Philly attempt without times left out) change a kept row and are counted apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from traces.importers.source import FAILED, KILLED, Malformed, Row, SourceJob

# Drop reasons in the order they are tried; the first that applies is the one counted.
ROW_REASONS = (
    ("malformed", "row cannot be read (wrong field count, a cell that is not a number/time)"),
    ("missing_times", "no usable submit time or run time (None, empty, never started)"),
    ("negative_duration", "run time below zero (end before start)"),
    ("zero_duration", "run time of zero seconds"),
    ("no_tasks", "PAI job with no row in the task table"),
    ("cpu_only", "zero GPUs: a CPU job"),
    ("fractional_gpus", "fractional GPU count, with --fractional drop"),
    ("too_many_gpus", "more GPUs than the cluster (--spec) holds, or any pool of its types"),
    ("no_pool", "no pool of the cluster (--spec) has a GPU type it accepts with the memory "
                "it needs"),
    ("failed_or_killed", "failed or killed, with --drop-failed"),
    ("other_tenant", "tenant other than --tenant"),
)
LATE_REASONS = (
    ("duplicate", "job id seen on an earlier row of the same file"),
    ("out_of_window", "submitted before --since or at/after --until"),
    ("beyond_limit", "after the first --limit jobs"),
)
REASONS = dict(ROW_REASONS + LATE_REASONS)
ADJUSTMENTS = {
    "fractional_gpus_ceiled": "fractional GPU count rounded up to a whole GPU",
    "attempts_skipped": "Philly attempts without usable times left out of the run time",
    "failed_or_killed_kept": "failed or killed jobs kept (they held their GPUs that long)",
}
EXAMPLES_PER_REASON = 3


@dataclass(frozen=True)
class RowRules:
    """The choices a user makes about odd rows (see `interlace-trace import --help`)."""

    total_gpus: int | None = None
    fit: Any = None  # specs.fit.Fit of the --spec: a job that no pool holds is dropped
    fractional: str = "ceil"  # or "drop"
    drop_failed: bool = False
    tenant: str | None = None


@dataclass
class Ledger:
    """Counts per reason, plus a few located examples for each so a user can look."""

    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {r: 0 for r in REASONS})
    adjusted: dict[str, int] = field(default_factory=lambda: {a: 0 for a in ADJUSTMENTS})
    examples: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, where: str, detail: str = "") -> None:
        self.dropped[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES_PER_REASON:
            shown.append(f"{where}: {detail}" if detail else where)

    def adjust(self, what: str, count: int = 1) -> None:
        self.adjusted[what] += count

    def balanced(self) -> bool:
        return self.read == self.kept + sum(self.dropped.values())


def apply_row_rules(row: Row, rules: RowRules, ledger: Ledger) -> SourceJob | None:
    """The row as it will be kept (GPU count whole), or None after counting why it is not."""
    ledger.read += 1
    if isinstance(row, Malformed):
        ledger.drop("malformed", row.where, row.message)
        return None
    job = row
    if job.submit is None or job.duration is None:
        ledger.drop("missing_times", job.where, f"job {job.key}")
        return None
    if job.duration < 0:
        ledger.drop("negative_duration", job.where, f"job {job.key}: {job.duration:g} s")
        return None
    if job.duration == 0:
        ledger.drop("zero_duration", job.where, f"job {job.key}")
        return None
    if math.isnan(job.gpus):  # the PAI reader's mark for a job without tasks
        ledger.drop("no_tasks", job.where, f"job {job.key}")
        return None
    if job.gpus <= 1e-9:
        ledger.drop("cpu_only", job.where, f"job {job.key}")
        return None
    whole = math.ceil(job.gpus - 1e-9)
    fractional = abs(job.gpus - round(job.gpus)) > 1e-9
    if fractional and rules.fractional == "drop":
        ledger.drop("fractional_gpus", job.where, f"job {job.key}: {job.gpus:g} GPUs")
        return None
    if rules.total_gpus is not None and whole > rules.total_gpus:
        ledger.drop("too_many_gpus", job.where,
                    f"job {job.key}: {whole} GPUs > {rules.total_gpus}")
        return None
    why = rules.fit.misfit(whole, job.gpu_types, job.gpu_mem_gb) if rules.fit else None
    if why:  # the rule every reader of the trace applies (specs/fit.py): it would refuse it
        what, message = why[0]
        ledger.drop("too_many_gpus" if what == "size" else "no_pool", job.where,
                    f"job {job.key}: {message}")
        return None
    failed = job.status in (FAILED, KILLED)
    if failed and rules.drop_failed:
        ledger.drop("failed_or_killed", job.where, f"job {job.key}: {job.status}")
        return None
    if rules.tenant is not None and job.tenant != rules.tenant:
        ledger.drop("other_tenant", job.where, f"job {job.key}: tenant {job.tenant!r}")
        return None
    if fractional:
        ledger.adjust("fractional_gpus_ceiled")
    if job.skipped_attempts:
        ledger.adjust("attempts_skipped", job.skipped_attempts)
    if failed:
        ledger.adjust("failed_or_killed_kept")
    job.gpus = whole
    return job
