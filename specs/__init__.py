"""Cluster specs: the shape of the machine a trace is scheduled on."""

from __future__ import annotations

from pathlib import Path

from specs.spec import ClusterSpec, SpecError, load_spec

__all__ = ["ClusterSpec", "SpecError", "load_spec", "spec_path", "available_specs",
           "DEFAULT_SPEC"]

DEFAULT_SPEC = "n2g8"  # the cluster every tool assumes when not given one (16 GPUs)


def available_specs() -> list[str]:
    """Names of the spec files shipped with the package."""
    return sorted(p.stem for p in Path(__file__).parent.glob("*.csv"))


def spec_path(name: str) -> Path:
    """Path of a packaged spec by name (e.g. "n8g8"), so callers need not know the layout."""
    path = Path(__file__).parent / f"{name}.csv"
    if not name or "/" in name or "\\" in name or not path.is_file():
        raise SpecError(
            name,
            [(None, None, f"no packaged spec of that name (have: {', '.join(available_specs())})")],
        )
    return path
