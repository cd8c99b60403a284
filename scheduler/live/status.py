"""The `status.query` reply: counts, agents, and each job's state, cut to fit one frame.

Each job's state is its lifecycle phase as a status word (lifecycle.STATUS): the counts are
the lifecycle's, so they include the jobs that ended before a restart, as the journal does."""
from __future__ import annotations

from typing import Any

from scheduler.live.ledger import node_name
from scheduler.live.queue_view import projection
from scheduler.live.state import LiveState

# a status reply lists at most this many jobs (~120 bytes each; frames are capped at 256 KiB)
STATUS_JOBS_LIMIT = 1500
# what a cut status list keeps first
_STATE_ORDER = {"running": 0, "pending": 1, "finished": 2, "cancelled": 3}


def job_state(state: LiveState, job_id: int) -> str:
    return state.jobs.status_of(job_id)


def status(state: LiveState, jobs: bool = True) -> dict[str, Any]:
    """The status.query reply: counts, agents and (unless a summary) every job's state."""
    with state.locked():
        listed = []
        wall = state.clock()
        if jobs:
            listed = _jobs(state)
        total = len(listed)
        if total > STATUS_JOBS_LIMIT:
            listed.sort(key=lambda j: (_STATE_ORDER[j["state"]], j["job_id"]))
            del listed[STATUS_JOBS_LIMIT:]
        return {
            "now": state.now(), "policy": state.opt.policy, "rounds": state.rounds.count,
            "counts": state.jobs.status_counts(),
            "agents": {name: {"online": True, "gpus": list(a.gpus),
                              "last_heartbeat_s": wall - a.last_seen,
                              **({"gpu_mem_gb": a.gpu_mem_gb} if a.gpu_mem_gb else {}),
                              **({"gpu_type": a.gpu_type} if a.gpu_type else {})}
                       for name, a in sorted(state.agents.items())},
            "offline": [node_name(n) for n in sorted(state.core.cluster.offline)],
            "refused": state.refusals.counts(), "round_failures": state.rounds.failures,
            "transitions_refused": dict(state.jobs.refused),
            **({"jobs": listed, "jobs_truncated": total > len(listed)} if jobs else {}),
        }


def _jobs(state: LiveState) -> list[dict[str, Any]]:
    """Every job's line: those of this run from the core and the ledger, those that ended
    before it from the journal."""
    listed = []
    # position and expected start of each pending job: O(jobs log jobs), per query only
    queue = projection(state.core, state.opt.time_scale, state.nodes.gpus_of)
    for job_id, job in state.core.jobs.items():
        where = state.ledger.placed.get(job_id)
        listed.append({
            "job_id": job_id, "state": state.jobs.status_of(job_id),
            "iterations_done": job.record.iterations - job.remaining,
            "iterations": job.record.iterations, "num_gpu": job.num_gpu,
            "nodes": [node_name(n) for n in where.nodes] if where else [],
            "group": list(where.group) if where else [],
            "preemptions": job.preemptions,
        })
        if job_id in queue:
            listed[-1]["position"], listed[-1]["expected_start"] = queue[job_id]
    for job_id, entry in state.jobs.past.items():
        listed.append({
            "job_id": job_id, "state": state.jobs.status_of(job_id),
            "iterations_done": entry.iterations_done,
            "iterations": entry.record.iterations, "num_gpu": entry.record.num_gpu,
            "nodes": [], "group": [], "preemptions": entry.preemptions,
        })
    return listed
