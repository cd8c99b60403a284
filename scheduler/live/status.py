"""The `status.query` reply: counts, agents, and each job's state, cut to fit one frame."""
from __future__ import annotations

from typing import Any

from scheduler.live.ledger import Placed, node_name  # noqa: F401  (Placed: for callers' tests)
from scheduler.live.queue_view import projection
from scheduler.live.state import LiveState
from scheduler.core.state import Status

# a status reply lists at most this many jobs (~120 bytes each; frames are capped at 256 KiB)
STATUS_JOBS_LIMIT = 1500
# what a cut status list keeps first
_STATE_ORDER = {"running": 0, "pending": 1, "finished": 2, "cancelled": 3}


def job_state(state: LiveState, job_id: int) -> str:
    job = state.core.jobs[job_id]
    if job.status is Status.DONE:
        return "cancelled" if job_id in state.cancelled else "finished"
    return "running" if job_id in state.ledger.placed else "pending"


def status(state: LiveState, jobs: bool = True) -> dict[str, Any]:
    """The status.query reply: counts, agents and (unless a summary) every job's state."""
    with state.lock:
        counts = {"pending": 0, "running": 0, "finished": 0}  # a cancelled job is finished
        listed = []
        wall = state.clock()
        # position and expected start of each pending job: O(jobs log jobs), per query only
        queue = projection(state.core, state.opt.time_scale) if jobs else {}
        for job_id, job in state.core.jobs.items():
            its_state = job_state(state, job_id)
            counts["finished" if its_state == "cancelled" else its_state] += 1
            if jobs:
                where = state.ledger.placed.get(job_id)
                listed.append({
                    "job_id": job_id, "state": its_state,
                    "iterations_done": job.record.iterations - job.remaining,
                    "iterations": job.record.iterations, "num_gpu": job.num_gpu,
                    "nodes": [node_name(n) for n in where.nodes] if where else [],
                    "group": list(where.group) if where else [],
                    "preemptions": job.preemptions,
                })
                if job_id in queue:
                    listed[-1]["position"], listed[-1]["expected_start"] = queue[job_id]
        for job_id, entry in state.finished_before.items():
            counts["finished"] += 1
            if jobs:
                listed.append({
                    "job_id": job_id, "state": "finished",
                    "iterations_done": entry.iterations_done,
                    "iterations": entry.record.iterations, "num_gpu": entry.record.num_gpu,
                    "nodes": [], "group": [], "preemptions": entry.preemptions,
                })
        total = len(listed)
        if total > STATUS_JOBS_LIMIT:
            listed.sort(key=lambda j: (_STATE_ORDER[j["state"]], j["job_id"]))
            del listed[STATUS_JOBS_LIMIT:]
        return {
            "now": state.now(), "policy": state.opt.policy, "rounds": state.rounds,
            "counts": counts,
            "agents": {name: {"online": True, "gpus": list(a.gpus),
                              "last_heartbeat_s": wall - a.last_seen}
                       for name, a in sorted(state.agents.items())},
            "offline": [node_name(n) for n in sorted(state.core.cluster.offline)],
            "refused": state.refusals.counts(), "round_failures": state.round_failures,
            **({"jobs": listed, "jobs_truncated": total > len(listed)} if jobs else {}),
        }
