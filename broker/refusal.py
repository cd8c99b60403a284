"""Refusing a request, in one place for the scheduler and the node agents.

A handler raises `Refusal(code, reason)` for input it will not act on; `as_handler` turns it
into the wire's error reply (`HandlerError`) and any other exception into an `internal` one,
so a bug costs one request, never the process. The checks both sides apply to the fields
they share (`all_ints`, `running_list`) live here too, so the two cannot drift apart; the
schema's own bounds (broker/messages.py BOUNDS) have already run when a handler sees a message.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from specs.limits import MAX_NAME_CHARS


class Refusal(Exception):
    """A request the receiver will not act on; becomes HandlerError(code, reason) on the wire."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason = code, reason


def all_ints(items: Any) -> bool:
    """Every item a plain int (a bool is an int to Python, never a job id or a GPU here)."""
    return all(isinstance(i, int) and not isinstance(i, bool) for i in items)


def running_list(items: Any) -> list[tuple[int, float]]:
    """An agent's `running` list ([{job_id, iterations}, ...]) as (job, iterations) pairs."""
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            raise Refusal("bad_request", f"running entries must be maps, got {item!r}")
        job_id, its = item.get("job_id"), item.get("iterations", 0.0)
        if not isinstance(job_id, int) or isinstance(job_id, bool) \
                or not isinstance(its, (int, float)) or isinstance(its, bool):
            raise Refusal("bad_request", f"running entry needs int job_id and numeric "
                                         f"iterations, got {item!r}")
        out.append((job_id, float(its)))
    return out


def long_string(value: Any, limits: Mapping[str, int] | None = None,
                default: int = MAX_NAME_CHARS) -> tuple[str, int, int] | None:
    """The first string in `value` (a request's fields: maps, lists and their keys, to any
    depth) longer than its bound, as (where, its length, the bound); None when all fit.
    `limits` bounds a field by its path with list indices as `[]` (`job.command[]`); any
    other string, a map's key included, is a name (`default`). Walked without recursion: a
    frame of nested lists is deeper than Python's stack."""
    limits = limits or {}
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            limit = limits.get(re.sub(r"\[\d+\]", "[]", path), default)
            if len(item) > limit:
                return path, len(item), limit
        elif isinstance(item, Mapping):
            for key, sub in item.items():
                if isinstance(key, str) and len(key) > default:
                    return f"a key of {path or 'the request'}", len(key), default
                stack.append((f"{path}.{key}" if path else str(key), sub))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{path}[{i}]", sub) for i, sub in enumerate(item))
    return None


def bounded_strings(fields: Any, limits: Mapping[str, int] | None = None,
                    default: int = MAX_NAME_CHARS) -> None:
    """Refuse (`bad_request`, one line naming the field and its bound) a request with a
    string past its bound (`long_string`)."""
    found = long_string(fields, limits, default)
    if found is not None:
        where, length, limit = found
        raise Refusal("bad_request", f"{where} is {length} characters long, at most {limit}")


def as_handler(handle: Callable[[Any], dict[str, Any]], log: Any,
               log_refusals: bool = False) -> Callable[[Any], dict[str, Any]]:
    """A broker Service handler around `handle`: Refusal -> HandlerError(code, reason) (logged
    here when `log_refusals`; a Service given a RefusalLog counts them itself), any other
    exception -> HandlerError("internal") with the traceback logged."""
    from broker.client import HandlerError

    def handler(msg: Any) -> dict[str, Any]:
        try:
            return handle(msg)
        except Refusal as err:
            if log_refusals:
                log.warning("request_refused", type=msg.type, code=err.code, reason=err.reason)
            raise HandlerError(err.code, err.reason) from None
        except HandlerError:
            raise
        except Exception as err:  # a bug costs one request, not the process
            log.exception("request_failed", type=msg.type, sender=msg.sender)
            raise HandlerError("internal", f"{type(err).__name__}: {err}") from None

    return handler
