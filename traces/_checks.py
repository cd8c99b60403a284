"""Per-job checks shared by the CSV reader and `validate`, so both report the same problems.

The checks take already-parsed values, each paired with the text to show back to the user
(the raw CSV cell, or the repr of an in-memory value), and know nothing about files.
"""

from __future__ import annotations

import math
import re
from typing import Container, Mapping, Sequence

from specs.fit import POOL_TOO_LARGE, TOO_LARGE, Fit
from specs.gpu_types import types_problem
from specs.limits import (MAX_BATCH_SIZE, MAX_GPU_MEM_GB, MAX_GPUS, MAX_ID, MAX_ITERATIONS,
                          MAX_NAME_CHARS, MAX_SECONDS, MAX_TRACE_SECONDS, show)
from specs.pools import NAME
from traces.errors import Problem

# (value, text shown after "got") for one field; a field that is absent or failed to parse
# is simply left out of the mapping, so its own problem is not reported twice.
Value = tuple[object, str]
Finding = tuple[str | None, str]

REQUIRED_COLUMNS = (
    "job_id",
    "num_gpu",
    "submit_time",
    "iterations",
    "model_name",
    "batch_size",
    "duration",
    "interval",
    "iteration_time",
    "resource_time_0",
    "resource_time_1",
    "resource_time_2",
)
OPTIONAL_COLUMNS = ("resource_time_3", "priority", "gpu_mem_gb", "gpu_type")
STAGE_COLUMNS = ("resource_time_0", "resource_time_1", "resource_time_2", "resource_time_3")

# integer fields and their smallest and largest allowed values
INT_FIELDS: Mapping[str, tuple[int, int]] = {
    "job_id": (0, MAX_ID),
    "num_gpu": (1, MAX_GPUS),
    "iterations": (1, MAX_ITERATIONS),
    "batch_size": (1, MAX_BATCH_SIZE),
}
# time fields: whether zero is forbidden (a zero iteration time means no work at all), and
# the largest value (seconds)
TIME_FIELDS: Mapping[str, tuple[bool, float]] = {
    "submit_time": (False, MAX_TRACE_SECONDS),
    "duration": (False, MAX_TRACE_SECONDS),
    "interval": (False, MAX_TRACE_SECONDS),
    "iteration_time": (True, MAX_SECONDS),
}


# said once per file, so a trace made for a bigger cluster is one line, not one per job
TOO_LARGE_HINT = ("give --spec a cluster of at least {} GPUs, or make the trace for this one "
                  "(interlace-trace generate --max-gpus {})")
POOL_TOO_LARGE_HINT = ("give --spec a pool of at least {} GPUs, or make the trace for this "
                       "cluster (interlace-trace generate --max-gpus {})")
# TOO_LARGE and POOL_TOO_LARGE as made, with the job's GPU count
_TOO_LARGE = re.compile(r"job needs (\d+) GPUs but the (?:cluster has only|largest pool has) "
                        r"\d+")


def fold_too_large(problems: list[Problem], fit: Fit | None) -> list[Problem]:
    """The problems with every job too large for the cluster (for a pooled spec, for its
    largest pool, whatever the job's type) said in one line, at the first such job, with the
    way out: 21 lines saying the same thing hide the fix."""
    if fit is None:
        return problems
    too_large: list[tuple[Problem, int]] = []
    for p in problems:
        match = _TOO_LARGE.fullmatch(p.message) if p.field == "num_gpu" else None
        if match:
            too_large.append((p, int(match.group(1))))
    if not too_large:
        return problems
    first = too_large[0][0]
    most = max(n for _, n in too_large)
    jobs = f"{len(too_large)} jobs need" if len(too_large) > 1 else "a job needs"
    if fit.pooled:
        message = (f"{jobs} more GPUs than the cluster's largest pool holds ({fit.largest}; "
                   f"up to {most}, the first here): "
                   + POOL_TOO_LARGE_HINT.format(most, fit.largest))
    else:
        message = (f"{jobs} more GPUs than the cluster's {fit.total_gpus} (up to {most}; the "
                   "first here): " + TOO_LARGE_HINT.format(most, fit.total_gpus))
    line = Problem(first.file, first.line, first.field, message)
    folded = {id(p) for p, _ in too_large[1:]}
    return [line if p is first else p for p in problems if id(p) not in folded]


# the non-stage fields before `priority`, in CSV column order
SCALAR_ORDER = REQUIRED_COLUMNS[:9]


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _check_time(value: object, shown: str, *, positive: bool, most: float) -> str | None:
    if not is_number(value):
        return f"must be a finite number, got {shown}"
    if value < 0:
        return f"must be non-negative, got {shown}"
    if positive and value == 0:
        return f"must be positive, got {shown}"
    if value > most:
        return f"must be at most {_seconds(most)}, got {shown}"
    return None


def _seconds(bound: float) -> str:
    """A time bound in both units: records hold seconds, trace files milliseconds."""
    return f"{show(bound)} s ({show(bound * 1000)} ms in a trace file)"


def check_job(
    values: Mapping[str, Value],
    stage_fields: Sequence[str],
    *,
    known_models: Container[str],
    fit: Fit | None = None,
) -> list[Finding]:
    """Every problem of one job, as (field, message) pairs in column order. `fit`: the
    cluster's pools (specs/fit.py), which the job's GPU count, types and memory must fit.
    The types come as `gpu_type` (a trace cell, already split) or `gpu_types` (a record)."""
    found: list[Finding] = []
    model: str | None = None
    counts: dict[str, int] = {}
    iteration_time: float | None = None
    misfit = _misfit(values, fit)

    for name in SCALAR_ORDER:
        if name not in values:
            continue
        value, shown = values[name]
        if name in INT_FIELDS:
            minimum, maximum = INT_FIELDS[name]
            if not is_int(value) or value < minimum:
                kind = "positive" if minimum >= 1 else "non-negative"
                found.append((name, f"must be a {kind} integer, got {shown}"))
            elif value > maximum:
                found.append((name, f"must be at most {show(maximum)}, got {shown}"))
            elif name == "num_gpu" and "size" in misfit:
                found.append((name, misfit["size"]))
            else:
                counts[name] = value  # type: ignore[assignment]
        elif name in TIME_FIELDS:
            positive, most = TIME_FIELDS[name]
            message = _check_time(value, shown, positive=positive, most=most)
            if message:
                found.append((name, message))
            elif name == "iteration_time":
                iteration_time = float(value)  # type: ignore[arg-type]
        elif name == "model_name":
            if not isinstance(value, str) or not value.strip():
                found.append((name, f"must be a non-empty name, got {shown[:80]}"))
            elif len(value) > MAX_NAME_CHARS:
                found.append((name, f"is {len(value)} characters long, at most "
                                    f"{MAX_NAME_CHARS}"))
            else:
                model = value

    stage_ok: list[float] = []
    for name in stage_fields:
        if name not in values:
            continue
        value, shown = values[name]
        message = _check_time(value, shown, positive=False, most=MAX_SECONDS)
        if message:
            found.append((name, message))
        else:
            stage_ok.append(float(value))  # type: ignore[arg-type]

    if "iterations" in counts and iteration_time is not None \
            and counts["iterations"] * iteration_time > MAX_TRACE_SECONDS:
        work = counts["iterations"] * iteration_time
        found.append(("iterations", f"times iteration_time is {work:.4g} s of work; "
                                    f"must be at most {show(MAX_TRACE_SECONDS)} s"))

    has_profile = any(t > 0 for t in stage_ok)
    if model is not None and model not in known_models and not has_profile:
        found.append(
            (
                "model_name",
                f"unknown model {model!r} and no stage profile "
                "(stage times missing or all zero)",
            )
        )
    elif stage_fields and len(stage_ok) == len(stage_fields) and not has_profile:
        found.append((f"{stage_fields[0]}..{stage_fields[-1]}", "stage times are all zero"))

    if "priority" in values:
        value, shown = values["priority"]
        if not is_int(value) or value not in (0, 1):
            found.append(
                ("priority", f"must be 0 (guaranteed) or 1 (opportunistic), got {shown}")
            )

    if "gpu_mem_gb" in values:
        value, shown = values["gpu_mem_gb"]
        if not is_number(value) or value < 0:
            found.append(("gpu_mem_gb", f"must be a non-negative number of GB, got {shown}"))
        elif value > MAX_GPU_MEM_GB:
            found.append(("gpu_mem_gb", f"must be at most {show(MAX_GPU_MEM_GB)} GB, got {shown}"))
        elif "memory" in misfit:
            found.append(("gpu_mem_gb", misfit["memory"]))

    for name in ("gpu_type", "gpu_types"):
        if name in values:
            value, shown = values[name]
            message = types_problem(value, shown) or misfit.get("type")
            if message:
                found.append((name, message))

    for name in ("tenant", "priority_class"):
        if name in values:
            value, shown = values[name]
            if not isinstance(value, str) or (value and not NAME.fullmatch(value)):
                found.append((name, f"must be empty or a name of 1-64 letters, digits or "
                                    f"_.+- (starting with a letter or digit), got {shown}"))

    return found


def _misfit(values: Mapping[str, Value], fit: Fit | None) -> dict[str, str]:
    """Why no pool of the cluster holds the job, by what is at fault ("type", "memory",
    "size"; specs/fit.py), judged on the job's valid values: a bad memory counts as none
    stated, a bad GPU count as one GPU (its own problem is said apart), bad types as no
    judgement at all (where it may run depends on them)."""
    if fit is None:
        return {}
    types: object = ()
    for name in ("gpu_type", "gpu_types"):
        if name in values:
            types = values[name][0]
            if types_problem(types, ""):
                return {}
    count = values.get("num_gpu", (None, ""))[0]
    valid_count = is_int(count) and 1 <= count <= MAX_GPUS  # type: ignore[operator]
    memory = values.get("gpu_mem_gb", (0.0, ""))
    mem = memory[0] if is_number(memory[0]) and 0 <= memory[0] <= MAX_GPU_MEM_GB else 0.0  # type: ignore[operator]
    found = dict(fit.misfit(count if valid_count else 1, types, mem,  # type: ignore[arg-type]
                            memory[1] if mem else None))
    if not valid_count:
        found.pop("size", None)
    return found
