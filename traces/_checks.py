"""Per-job checks shared by the CSV reader and `validate`, so both report the same problems.

The checks take already-parsed values, each paired with the text to show back to the user
(the raw CSV cell, or the repr of an in-memory value), and know nothing about files.
"""

from __future__ import annotations

import math
from typing import Container, Mapping, Sequence

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
OPTIONAL_COLUMNS = ("resource_time_3", "priority")
STAGE_COLUMNS = ("resource_time_0", "resource_time_1", "resource_time_2", "resource_time_3")

# integer fields and their smallest allowed value
INT_FIELDS: Mapping[str, int] = {"job_id": 0, "num_gpu": 1, "iterations": 1, "batch_size": 1}
# time fields and whether zero is forbidden (a zero iteration time means no work at all)
TIME_FIELDS: Mapping[str, bool] = {
    "submit_time": False,
    "duration": False,
    "interval": False,
    "iteration_time": True,
}


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


def _check_time(value: object, shown: str, *, positive: bool) -> str | None:
    if not is_number(value):
        return f"must be a finite number, got {shown}"
    if value < 0:
        return f"must be non-negative, got {shown}"
    if positive and value == 0:
        return f"must be positive, got {shown}"
    return None


def check_job(
    values: Mapping[str, Value],
    stage_fields: Sequence[str],
    *,
    known_models: Container[str],
    total_gpus: int | None,
) -> list[Finding]:
    """Every problem of one job, as (field, message) pairs in column order."""
    found: list[Finding] = []
    model: str | None = None

    for name in SCALAR_ORDER:
        if name not in values:
            continue
        value, shown = values[name]
        if name in INT_FIELDS:
            minimum = INT_FIELDS[name]
            if not is_int(value) or value < minimum:
                kind = "positive" if minimum >= 1 else "non-negative"
                found.append((name, f"must be a {kind} integer, got {shown}"))
            elif name == "num_gpu" and total_gpus is not None and value > total_gpus:
                found.append(
                    (name, f"job needs {value} GPUs but the cluster has only {total_gpus}")
                )
        elif name in TIME_FIELDS:
            message = _check_time(value, shown, positive=TIME_FIELDS[name])
            if message:
                found.append((name, message))
        elif name == "model_name":
            if not isinstance(value, str) or not value.strip():
                found.append((name, f"must be a non-empty name, got {shown}"))
            else:
                model = value

    stage_ok: list[float] = []
    for name in stage_fields:
        if name not in values:
            continue
        value, shown = values[name]
        message = _check_time(value, shown, positive=False)
        if message:
            found.append((name, message))
        else:
            stage_ok.append(float(value))  # type: ignore[arg-type]

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

    return found
