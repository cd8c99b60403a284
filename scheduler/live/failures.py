"""A job's own failures: how long it backs off after each, and when it has failed for good.

A program that exits with an error (not out of GPU memory: that runs it alone) or cannot be
started is relaunched only after a backoff that doubles with each failure in a row, capped;
after `max_failures` failures in a row without progress (no iteration checkpointed since the
last) the job is `failed` and never launched again, as Kubernetes' CrashLoopBackOff and
Slurm's requeue limits do. A job's own `max_restarts` (its record) replaces the bound: it
fails at its failure `max_restarts + 1`.

Pure bookkeeping, kept by the lifecycle (which journals each failure with its count, so a
restarted scheduler goes on counting: `restore`). Times are trace seconds; the options are
wall seconds (what an operator sees of a relaunch loop), turned into trace seconds by the
time scale.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

OUTPUT_LINES = 20  # the last lines of a failed run's output kept with its failure
OUTPUT_CHARS = 4000  # and at most this many characters of them


class Failure(NamedTuple):
    """One failed run of a job."""

    count: int  # failures in a row without progress, this one included
    iterations: float  # iterations done (checkpointed) when it failed
    exit: str  # how it ended: "exit status 1", "killed by SIGSEGV", "would not start: ..."
    output: tuple[str, ...]  # the last lines of its output (stdout and stderr)
    at: float  # trace seconds
    not_before: float | None  # when it may run again; None: it failed for good

    def detail(self) -> dict[str, Any]:
        """The journal's and status replies' form."""
        return {"count": self.count, "iterations": self.iterations, "exit": self.exit,
                "output": list(self.output), "at": self.at, "not_before": self.not_before}


def from_detail(detail: Any) -> Failure | None:
    """A Failure from its journaled form; None for anything else (a hand-written journal)."""
    if not isinstance(detail, Mapping):
        return None
    try:
        not_before = detail.get("not_before")
        return Failure(int(detail["count"]), float(detail["iterations"]),
                       str(detail["exit"]), tuple(str(line) for line in detail["output"]),
                       float(detail["at"]), None if not_before is None else float(not_before))
    except (KeyError, TypeError, ValueError):
        return None


def split_report(detail: str) -> tuple[str, tuple[str, ...]]:
    """An agent's `job.finished` detail: its first line says how the trainer ended (the
    exit and the output's last line), the lines after it are the output's last lines."""
    first, _, rest = detail.partition("\n")
    return first, tail_lines(rest)


def tail_lines(text: str) -> tuple[str, ...]:
    """The last OUTPUT_LINES lines of `text` (within OUTPUT_CHARS), trailing blanks off."""
    lines = text.rstrip().splitlines()[-OUTPUT_LINES:]
    while lines and sum(map(len, lines)) > OUTPUT_CHARS:
        lines.pop(0)
    return tuple(lines)


class Failures:
    """Each live job's last failure, and the rule that turns the next into a backoff or an
    end. `backoff` and `cap` are trace seconds."""

    def __init__(self, backoff: float, cap: float, max_failures: int):
        self.backoff, self.cap, self.max_failures = backoff, max(cap, backoff), max_failures
        self.last: dict[int, Failure] = {}

    def bound(self, record: Any) -> int:
        """Failures in a row after which the job fails: its own max_restarts + 1, or the
        scheduler's max_failures."""
        own = getattr(record, "max_restarts", None)
        return self.max_failures if own is None else own + 1

    def delay(self, count: int) -> float:
        """The backoff after the `count`th failure in a row: doubling from `backoff`, capped."""
        return min(self.backoff * 2.0 ** min(count - 1, 64), self.cap)

    def note(self, job_id: int, record: Any, iterations: float, exit: str,
             output: Sequence[str], now: float) -> Failure:
        """A run of the job failed at `now` with `iterations` done: the failure, counted
        from the last one unless the job made progress since."""
        last = self.last.get(job_id)
        count = last.count + 1 if last is not None and iterations <= last.iterations else 1
        not_before = now + self.delay(count) if count < self.bound(record) else None
        failure = Failure(count, iterations, exit, tuple(output), now, not_before)
        self.last[job_id] = failure
        return failure

    def restore(self, job_id: int, failure: Failure) -> None:
        self.last[job_id] = failure
