"""The `status.query` reply: counts, agents, and each job's state, cut to fit one frame.

Each job's state is its lifecycle phase as a status word (lifecycle.STATUS): the counts are
the lifecycle's, so they include the jobs that ended before a restart, as the journal does."""
from __future__ import annotations

from typing import Any

from scheduler.core.state import Status
from scheduler.core.waiting import why_waiting
from scheduler.live.ledger import node_name
from scheduler.live.queue_view import projection
from scheduler.live.state import LiveState

# a status reply lists at most this many jobs (up to ~470 bytes each, a waiting job's reason
# with long tenant names included; frames are capped at 256 KiB)
STATUS_JOBS_LIMIT = 500
# what a cut status list keeps first
_STATE_ORDER = {"running": 0, "pending": 1, "finished": 2, "cancelled": 3}


def job_state(state: LiveState, job_id: int) -> str:
    return state.jobs.status_of(job_id)


def tenant_of(state: LiveState, job_id: int) -> str:
    """The tenant a known job runs for ("" without a tenants file)."""
    layer = state.core.tenants
    if layer is None:
        return ""
    if job_id in layer.tenant:
        return layer.tenant[job_id]
    entry = state.jobs.past.get(job_id)
    return (entry.record.tenant if entry is not None else "") or layer.tenancy.default


def status(state: LiveState, jobs: bool = True, limit: int | None = None,
           tenant: str | None = None) -> dict[str, Any]:
    """The status.query reply: counts, agents and (unless a summary) every job's state, at
    most `limit` jobs (running first; default STATUS_JOBS_LIMIT). With `tenant`, only that
    tenant's jobs, and counts of them."""
    limit = STATUS_JOBS_LIMIT if limit is None else limit
    with state.locked():
        listed = []
        wall = state.clock()
        if jobs:
            listed = _jobs(state, tenant)
        total = len(listed)
        if total > limit:
            listed.sort(key=lambda j: (_STATE_ORDER[j["state"]], j["job_id"]))
            del listed[limit:]
        return {
            "now": state.now(), "policy": state.opt.policy, "rounds": state.rounds.count,
            "counts": state.jobs.status_counts() if tenant is None else
            _counts(state, tenant),
            "agents": {name: {"online": True, "gpus": list(a.gpus),
                              "last_heartbeat_s": wall - a.last_seen,
                              **({"gpu_mem_gb": a.gpu_mem_gb} if a.gpu_mem_gb else {}),
                              **({"gpu_type": a.gpu_type} if a.gpu_type else {})}
                       for name, a in sorted(state.agents.items())},
            "offline": [node_name(n) for n in sorted(state.core.cluster.offline)],
            "refused": state.refusals.counts(), "round_failures": state.rounds.failures,
            "transitions_refused": dict(state.jobs.refused),
            # where a new job's id may start (interlace-submit): every id known, ended too
            "max_job_id": max(max(state.core.jobs, default=0),
                              max(state.jobs.past, default=0)),
            **({"jobs": listed, "jobs_truncated": total > len(listed)} if jobs else {}),
        }


def _counts(state: LiveState, tenant: str) -> dict[str, int]:
    """Jobs of `tenant` per status word, a cancelled one counting as finished."""
    out = {"pending": 0, "running": 0, "finished": 0}
    for job_id in (*state.core.jobs, *state.jobs.past):
        if tenant_of(state, job_id) == tenant:
            word = state.jobs.status_of(job_id)
            out["finished" if word == "cancelled" else word] += 1
    return out


def _jobs(state: LiveState, tenant: str | None = None) -> list[dict[str, Any]]:
    """Every job's line (only `tenant`'s, where given): those of this run from the core and
    the ledger, those that ended before it from the journal."""
    listed = []
    # position and expected start of each pending job: O(jobs log jobs), per query only
    core, scale, now = state.core, state.opt.time_scale, state.now()
    queue = projection(core, scale, state.nodes.gpus_of)
    why = why_waiting(core)  # O(jobs log jobs), per query only
    whose = core.tenants.tenant if core.tenants is not None else {}
    for job_id, job in core.jobs.items():
        if tenant is not None and whose.get(job_id) != tenant:
            continue
        where = state.ledger.placed.get(job_id)
        line = {
            "job_id": job_id, "state": state.jobs.status_of(job_id),
            "iterations_done": job.record.iterations - job.remaining,
            "iterations": job.record.iterations, "num_gpu": job.num_gpu,
            "nodes": [node_name(n) for n in where.nodes] if where else [],
            "group": list(where.group) if where else [],
            "preemptions": job.preemptions,
        }
        if job_id in whose:
            line["tenant"] = whose[job_id]
        if line["state"] == "pending":
            if job_id in queue:
                line["position"], line["expected_start"] = queue[job_id]
            line.update(_waiting(why.get(job_id), now, scale))
        elif job.status is Status.RUNNING and job.running_since is not None:
            group = core.placed.get(job_id)
            line["running_for"] = max(0.0, (now - job.running_since) / scale)
            if group is not None and job.solo_time > 0:
                line["slowdown"] = group.tt / job.solo_time
        listed.append(line)
    _number(line for line in listed if "position" in line)
    for job_id, entry in state.jobs.past.items():  # ended before this run
        if tenant is not None and tenant_of(state, job_id) != tenant:
            continue
        listed.append({
            "job_id": job_id, "state": state.jobs.status_of(job_id),
            "iterations_done": entry.iterations_done,
            "iterations": entry.record.iterations, "num_gpu": entry.record.num_gpu,
            "nodes": [], "group": [], "preemptions": entry.preemptions,
        })
    return listed


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
