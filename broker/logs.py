"""Structured JSON-line logging shared by every Interlace process.

Each process calls `configure_logging` once at start; afterwards `structlog.get_logger()`
anywhere in that process writes one JSON object per line (with `ts`, `level`, `component`,
`event`) to stderr and to `run_dir/<component>.log`, so `tail` and tests can filter them.
Records from the standard `logging` module (libraries) come out in the same format.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import structlog

_HANDLER_TAG = "_interlace_handler"  # marks handlers we installed, so reconfiguring replaces them


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
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if run_dir is not None:
        path = Path(run_dir)
        path.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path / f"{component}.log", encoding="utf-8"))
    for handler in handlers:
        setattr(handler, _HANDLER_TAG, True)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(numeric)
    return structlog.get_logger(component).bind(component=component)
