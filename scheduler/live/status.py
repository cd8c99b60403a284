"""The `status.query` reply: counts, agents, and each job's state, cut to fit one frame.

Each job's state is its lifecycle phase as a status word (lifecycle.STATUS): the counts are
the lifecycle's, so they include the jobs that ended before a restart, as the journal does.
What the core says of a job (progress, group, why it waits) is the last round's view
(coreview.py): a reply never waits for a round."""
from __future__ import annotations

from typing import Any

from scheduler.core.state import Status
from scheduler.live.failures import Failure
from scheduler.live.ledger import node_name
from scheduler.live.lifecycle import WORDS
from scheduler.live.state import LiveState

# a status reply lists at most this many jobs (up to ~470 bytes each, a waiting job's reason
# with long tenant names included; frames are capped at 256 KiB)
STATUS_JOBS_LIMIT = 500
# what a cut status list keeps first
_STATE_ORDER = {"running": 0, "pending": 1, "failed": 2, "finished": 3, "cancelled": 4}
# a job's last failure of its own: the newest FAILURES_SHOWN a list shows carry the last
# FAILURE_LINES lines of output, every line cut to LINE_CHARS, the others how they ended cut
# to EXIT_CHARS (a reply must fit one frame)
FAILURES_SHOWN = 20
FAILURE_LINES = 10
LINE_CHARS = 200
EXIT_CHARS = 100


def job_state(state: LiveState, job_id: int) -> str:
    return state.jobs.status_of(job_id)


def tenant_of(state: LiveState, job_id: int) -> str:
    """The tenant a known job runs for ("" without a tenants file)."""
    tenancy = state.opt.tenancy
    if tenancy is None:
        return ""
    record = state.jobs.records.get(job_id)
    if record is None:
        entry = state.jobs.past.get(job_id)
        record = entry.record if entry is not None else None
    named = record.tenant if record is not None else ""
    found = tenancy.tenant_of(named)
    return found.name if found is not None else named or tenancy.default


def status(state: LiveState, jobs: bool = True, limit: int | None = None,
           tenant: str | None = None) -> dict[str, Any]:
    """The status.query reply: counts, agents and (unless a summary) every job's state, at
    most `limit` jobs (running first; default STATUS_JOBS_LIMIT). With `tenant`, only that
    tenant's jobs, and counts of them."""
    limit = STATUS_JOBS_LIMIT if limit is None else limit
    with state.lock:
        listed = []
        wall = state.clock()
        if jobs:
            listed = _jobs(state, tenant)
        total = len(listed)
        if total > limit:
            listed.sort(key=lambda j: (_STATE_ORDER[j["state"]], j["job_id"]))
            del listed[limit:]
        _failures(state, listed)
        return {
            "now": state.now(), "policy": state.opt.policy, "rounds": state.rounds.count,
            "counts": state.jobs.status_counts() if tenant is None else
            _counts(state, tenant),
            "agents": {name: {"online": True, "gpus": list(a.gpus),
                              "last_heartbeat_s": wall - a.last_seen,
                              **({"gpu_mem_gb": a.gpu_mem_gb} if a.gpu_mem_gb else {}),
                              **({"gpu_type": a.gpu_type} if a.gpu_type else {})}
                       for name, a in sorted(state.agents.items())},
            "offline": [node_name(n) for n in range(state.opt.spec.num_nodes)
                        if node_name(n) not in state.agents],
            "refused": state.refusals.counts(), "round_failures": state.rounds.failures,
            "transitions_refused": dict(state.jobs.refused),
            # where a new job's id may start (interlace-submit): every id known, ended too
            "max_job_id": state.jobs.known(),
            **({"jobs": listed, "jobs_truncated": total > len(listed)} if jobs else {}),
        }


def _counts(state: LiveState, tenant: str) -> dict[str, int]:
    """Jobs of `tenant` per status word (a cancelled or failed job is not finished)."""
    out = dict.fromkeys(WORDS, 0)
    for job_id in (*state.jobs.records, *state.jobs.past):
        if tenant_of(state, job_id) == tenant:
            out[state.jobs.status_of(job_id)] += 1
    return out


def failure_doc(failure: Failure, lines: int = FAILURE_LINES,
                whole: bool = False) -> dict[str, Any]:
    """A job's last failure of its own as replies show it: how it ended, the failures in a
    row it made, when, the iterations it had done, until when it backed off (None: it
    failed for good), and the last `lines` lines of its output, each cut to its last
    LINE_CHARS unless `whole` (an HTTP body has no frame to fit)."""
    exit = failure.exit if whole else failure.exit[:LINE_CHARS if lines else EXIT_CHARS]
    kept = failure.output[-lines:] if lines else ()
    return {"exit": exit, "failures": failure.count, "at": failure.at,
            "iterations": failure.iterations, "not_before": failure.not_before,
            "output": list(kept) if whole else [line[-LINE_CHARS:] for line in kept]}


def _failures(state: LiveState, listed: list[dict[str, Any]]) -> None:
    """Each listed job's last failure of its own (`last_failure`); the newest
    FAILURES_SHOWN with the last lines of its output."""
    failed = [(f, line) for line in listed
              if (f := state.jobs.failure(line["job_id"])) is not None]
    failed.sort(key=lambda pair: pair[0].at, reverse=True)
    for shown, (failure, line) in enumerate(failed):
        line["last_failure"] = failure_doc(failure, FAILURE_LINES if shown < FAILURES_SHOWN
                                           else 0)


def _jobs(state: LiveState, tenant: str | None = None) -> list[dict[str, Any]]:
    """Every job's line (only `tenant`'s, where given): those of this run from the last
    round's view and the ledger (one submitted since: from its record), those that ended
    before it from the journal."""
    listed = []
    view, scale, now = state.view, state.opt.time_scale, state.now()
    since = max(0.0, (now - view.now) / scale)  # wall seconds since the view was taken
    for job_id, record in state.jobs.records.items():
        if tenant is not None and tenant_of(state, job_id) != tenant:
            continue
        job = view.jobs.get(job_id)
        where = state.ledger.placed.get(job_id)
        done = state.jobs.done(job_id, view)
        line = {
            "job_id": job_id, "state": state.jobs.status_of(job_id),
            "iterations_done": done, "progress_known": progress_known(record, done),
            "iterations": record.iterations, "num_gpu": record.num_gpu,
            "nodes": [node_name(n) for n in where.nodes] if where else [],
            "group": list(where.group) if where else [],
            "preemptions": state.jobs.preemptions[job_id],
            "regroups": state.jobs.regroups[job_id],
            "regroup_stops": state.jobs.regroup_stops[job_id],
        }
        if state.opt.tenancy is not None:
            line["tenant"] = job.tenant if job is not None else tenant_of(state, job_id)
        if line["state"] == "pending":
            if job is None:  # as the core's reasons say of a job no round has seen
                line.update(reason="arrived", why="submitted since the last round", ahead=0)
            else:
                if job_id in view.queue:
                    position, start = view.queue[job_id]
                    line["position"] = position
                    line["expected_start"] = None if start is None else max(0.0, start - since)
                line.update(_waiting(view.waiting.get(job_id), now, scale))
        elif job is not None and job.status is Status.RUNNING \
                and job.running_since is not None:
            line["running_for"] = max(0.0, (now - job.running_since) / scale)
            if job.tt is not None and job.solo_time > 0:
                line["slowdown"] = job.tt / job.solo_time
        listed.append(line)
    _number(line for line in listed if "position" in line)
    for job_id, entry in state.jobs.past.items():  # ended before this run
        if tenant is not None and tenant_of(state, job_id) != tenant:
            continue
        listed.append({
            "job_id": job_id, "state": state.jobs.status_of(job_id),
            "iterations_done": entry.iterations_done,
            "progress_known": progress_known(entry.record, entry.iterations_done),
            "iterations": entry.record.iterations, "num_gpu": entry.record.num_gpu,
            "nodes": [], "group": [], "preemptions": entry.preemptions,
        })
    return listed


def progress_known(record: Any, done: float) -> bool:
    """Whether the job's iterations done are known: a user's command that has reported
    none (no trainer/api.py checkpoint, no progress file) shows them unknown, not 0."""
    return not record.command or done > 0


def _number(lines) -> None:
    """Positions 1..n over the lines shown pending, in the policy's order: a job the core
    has queued again while its trainers are still stopping shows running and takes no place."""
    for position, line in enumerate(sorted(lines, key=lambda l: l["position"]), start=1):
        line["position"] = position


def _waiting(why, now: float, scale: float) -> dict[str, Any]:
    """A pending job's reason fields (docs/waiting.md); a job the core started but whose
    launch is under way is `launching`."""
    if why is None:
        return {"reason": "launching", "why": "its trainers are being launched", "ahead": 0}
    out: dict[str, Any] = {"reason": why.reason, "why": why.text, "ahead": why.ahead}
    if why.until is not None:
        out["reason_ends"] = max(0.0, (why.until - now) / scale)
    if why.guard:
        out["guard"] = why.guard
    return out
