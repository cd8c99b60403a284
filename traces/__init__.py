"""Trace records, the Muri CSV reader/writer, the validator and a Philly-like generator."""

from __future__ import annotations

from pathlib import Path

from traces.errors import Problem, TraceError
from traces.generate import generate
from traces.models import MODELS, ModelProfile
from traces.muri_csv import read_trace, write_trace
from traces.record import STAGES_3, STAGES_4, JobRecord
from traces.validate import validate

__all__ = [
    "JobRecord",
    "STAGES_3",
    "STAGES_4",
    "read_trace",
    "write_trace",
    "validate",
    "generate",
    "TraceError",
    "Problem",
    "MODELS",
    "ModelProfile",
    "default_trace_path",
    "available_traces",
]


def available_traces() -> list[str]:
    """Names of the traces shipped with the package."""
    return sorted(p.stem for p in (Path(__file__).parent / "data").glob("*.csv"))


def default_trace_path(name: str = "default") -> Path:
    """Path of a packaged trace by name ("default", "philly_1k")."""
    path = Path(__file__).parent / "data" / f"{name}.csv"
    if not name or "/" in name or "\\" in name or not path.is_file():
        have = ", ".join(available_traces())
        raise TraceError([Problem(name, None, None, f"no packaged trace of that name (have: {have})")])
    return path
