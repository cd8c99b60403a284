"""Refusing a request, in one place for the scheduler and the node agents.

A handler raises `Refusal(code, reason)` for input it will not act on; `as_handler` turns it
into the wire's error reply (`HandlerError`) and any other exception into an `internal` one,
so a bug costs one request, never the process. The checks both sides apply to the fields
they share (`all_ints`, `running_list`) live here too, so the two cannot drift apart; the
schema's own bounds (broker/messages.py BOUNDS) have already run when a handler sees a message.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping


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
