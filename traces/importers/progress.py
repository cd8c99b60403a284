"""A progress bar on stderr for long imports: drawn only on a terminal or when asked, since a
log file would collect every redraw."""

from __future__ import annotations

import sys
import time


class Bar:
    def __init__(self, label: str, total: int, *, enabled: bool | None = None, stream=None,
                 unit: str = "MB", scale: float = 1e6):
        self.stream = sys.stderr if stream is None else stream
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else enabled
        self.label, self.total, self.unit, self.scale = label, max(total, 1), unit, scale
        self.start = self.last = time.monotonic()
        self.shown = False

    def __call__(self, done: int, note: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.25 and done < self.total:
            return
        self.last, self.shown = now, True
        width = 30
        filled = min(width, int(width * done / self.total))
        rate = done / self.scale / max(now - self.start, 1e-9)
        self.stream.write(
            f"\r{self.label:>8} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done / self.scale:,.1f}/{self.total / self.scale:,.1f} {self.unit} "
            f"{rate:,.1f} {self.unit}/s {note}  "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
        self.shown = False
