"""The pace file: how an emulated trainer learns a new iteration time without a restart.

When the scheduler regroups a job on the GPUs it already runs on, only its pace changes (the
group's iteration time). The node agent writes the new pace here (atomically: write, then
rename) and the trainer, which looks at the file between chunks of its loop, goes on from
where it is at that pace. A file rather than a signal: a signal that arrives before the
trainer installed its handler would kill it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def write(path: Path | str, iteration_time: float) -> None:
    """Replace the pace file at once (write aside, rename over): a reader never sees half."""
    if not iteration_time > 0:
        raise ValueError(f"iteration_time must be > 0, got {iteration_time}")
    target = Path(path)
    aside = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    aside.write_text(json.dumps({"iteration_time": float(iteration_time)}), encoding="utf-8")
    os.replace(aside, target)


class PaceReader:
    """Reads the pace file when it was replaced since the last look (one stat per look)."""

    def __init__(self, path: Path | str | None):
        self.path = Path(path) if path else None
        self._seen: tuple | None = None

    def changed(self) -> float | None:
        """The new iteration time, or None when the file is absent, unchanged or unreadable."""
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        version = (st.st_ino, st.st_mtime_ns, st.st_size)
        if version == self._seen:
            return None
        self._seen = version
        try:
            value = float(json.loads(self.path.read_text(encoding="utf-8"))["iteration_time"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return value if value > 0 else None
