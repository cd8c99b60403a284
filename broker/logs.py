"""Structured JSON-line logging shared by every Interlace process.

Each process calls `configure_logging` once at start; afterwards `structlog.get_logger()`
anywhere in that process writes one JSON object per line (with `ts`, `level`, `component`,
`event`) to stderr and to `run_dir/<component>.log`, so `tail` and tests can filter them.
Records from the standard `logging` module (libraries) come out in the same format.

A log that cannot be written (the disk is full, stderr is gone) is said once on stderr, in
one line, and its records are dropped: logging's default, a `--- Logging error ---` block
with a traceback for every record, buried what the process was saying and, at shutdown,
whether it shut down cleanly.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import structlog

_HANDLER_TAG = "_interlace_handler"  # marks handlers we installed, so reconfiguring replaces them


class _SaysOnce:
    """A logging handler that, when writing fails, says so once on stderr and drops the
    record (and later ones it cannot write) instead of printing a traceback per record."""

    component = ""
    _said = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        err = sys.exc_info()[1]
        if not isinstance(err, OSError):
            super().handleError(record)  # type: ignore[misc]  # a bug: logging's own report
            return
        if self._said:
            return
        self._said = True
        where = getattr(self, "baseFilename", None) or "its log to stderr"
        try:
            sys.stderr.write(f"{self.component}: cannot write {where} ({err.strerror or err});"
                             f" log records that cannot be written are dropped\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass  # stderr is what failed: nowhere left to say it


class _StreamHandler(_SaysOnce, logging.StreamHandler):
    pass


class _FileHandler(_SaysOnce, logging.FileHandler):
    pass


def configure_logging(component: str, run_dir: Path | str | None, level: str = "info") -> Any:
    """Route structlog and stdlib logging to JSON lines on stderr and `run_dir/<component>.log`.

    Calling it again (tests, a re-exec) replaces the handlers it installed before. Returns a
    logger bound to the component, for convenience.
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else int(level)
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")

    def add_component(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        event_dict.setdefault("component", component)
        return event_dict

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        add_component,
    ]
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared,
                    structlog.processors.StackInfoRenderer(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(), *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(default=repr)],
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_TAG, False)]:
        root.removeHandler(old)
        old.close()
    handlers: list[Any] = [_StreamHandler(sys.stderr)]
    if run_dir is not None:
        path = Path(run_dir)
        path.mkdir(parents=True, exist_ok=True)
        handlers.append(_FileHandler(path / f"{component}.log", encoding="utf-8"))
    for handler in handlers:
        setattr(handler, _HANDLER_TAG, True)
        handler.component = component
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(numeric)
    return structlog.get_logger(component).bind(component=component)
