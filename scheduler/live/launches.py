"""Launching one planned job on its agents, and undoing a launch that did not take.

A launch is journaled as started when it goes out (a job may finish before the reply is
back) and recorded in the ledger as `launching` until every slice answered. Where a slice
fails, an agent is lost meanwhile, or the job was finished or requeued while launching, the
ranks that did start become strays and the job goes back to the queue.
"""
from __future__ import annotations

from typing import Any, Sequence

from scheduler.live.gateway import AgentGateway
from scheduler.live.ledger import Launch, Placed, node_name
from scheduler.live.state import LiveState
from scheduler.live.status import job_state
from scheduler.core.state import Status


def stage_list(stages: Sequence[float]) -> list[float]:
    """Three stage times (data, gpu, net) for the emulated workload; io+cpu fold into data."""
    values = [float(s) for s in stages]
    if len(values) == 4:
        values = [values[0] + values[1], values[2], values[3]]
    return values


class Launcher:
    def __init__(self, state: LiveState, gateway: AgentGateway):
        self.state, self.gateway = state, gateway

    def workload(self, job: Any, want: Placed) -> dict[str, Any]:
        opt = self.state.opt
        if job.record.command:  # a user's own program, whatever the packaged workload
            # it takes turns at a gate only with members that take turns too (torch trainers,
            # other commands): an emulated member paces itself and never joins a gate
            jobs = self.state.core.jobs
            turns = opt.workload == "torch" or all(
                jobs[j].record.command for j in want.group if j in jobs)
            return {"kind": "command", "iterations": job.record.iterations,
                    "argv": list(job.record.command), "workdir": job.record.workdir,
                    "turns": turns}
        if opt.workload == "torch":
            return {"kind": "torch", "iterations": job.record.iterations, "model": job.model,
                    "batch_size": 0, "config": dict(opt.torch_config)}
        return {"kind": "emulated", "iterations": job.record.iterations,
                "iteration_time": want.tt, "stages": stage_list(job.profile)}

    def launch(self, requester: Any, job_id: int, want: Placed) -> None:
        state = self.state
        with state.lock:
            job = state.core.jobs[job_id]
            plan_now = state.core.plan_now.running().get(job_id)
            offline = [n for n in want.nodes if node_name(n) not in state.agents]
            if job.status is not Status.RUNNING or plan_now is None \
                    or (plan_now.jobs, plan_now.placement) != want.key or offline:
                if offline and job.status is Status.RUNNING:
                    state.core.stop(job_id, state.now())
                    state.wake_reasons.add("launch_skipped")
                return
            start = float(job.record.iterations - job.remaining)
            workload = self.workload(job, want)
            gpus_of = {p.node: self.gateway.gpu_ids(p) for p in want.slices}
            state.ledger.begin_launch(job_id, want)
            # journaled as started when the launch goes out: a job may even finish before
            # the launch reply is back, and its first start must be known for its JCT report
            state.journal.mark_started(job_id, start, state.now(),
                                       node=node_name(want.nodes[0]),
                                       detail={"nodes": [node_name(n) for n in want.nodes]})
        launched, seqs, failed = self._send(requester, job_id, want, workload, gpus_of, start)
        self._settle(job_id, want, start, gpus_of, launched, seqs, failed)

    def _send(self, requester: Any, job_id: int, want: Placed, workload: dict[str, Any],
              gpus_of: dict[int, list[int]], start: float
              ) -> tuple[list[int], dict[int, Launch], str | None]:
        """job.launch to each slice in turn: (nodes launched, their launch numbers, the node
        that failed or None)."""
        launched: list[int] = []
        seqs: dict[int, Launch] = {}
        ranks = {"rank": 0, "world_size": sum(len(g) for g in gpus_of.values())} \
            if workload["kind"] in ("torch", "command") else {}
        for piece in want.slices:
            name = node_name(piece.node)
            reply = self.gateway.request(requester, name, "job.launch", job_id=job_id,
                                         gpus=gpus_of[piece.node], group=list(want.group),
                                         slot=want.group.index(job_id), workload=workload,
                                         start_iteration=start, **ranks)
            if reply is None:
                return launched, seqs, name
            if isinstance(reply.get("launch_seq"), int):
                seqs[piece.node] = (reply.get("incarnation"), reply["launch_seq"])
            if ranks:  # rank 0's agent chose the rendezvous; the other slices join it
                ranks["rank"] += len(gpus_of[piece.node])
                if "master_port" in reply and "master_port" not in ranks:
                    ranks.update(master_addr=str(reply.get("master_addr") or "127.0.0.1"),
                                 master_port=int(reply["master_port"]))
            launched.append(piece.node)
        return launched, seqs, None

    def _settle(self, job_id: int, want: Placed, start: float, gpus_of: dict[int, list[int]],
                launched: list[int], seqs: dict[int, Launch], failed: str | None) -> None:
        state = self.state
        with state.lock:
            aborted = state.ledger.end_launch(job_id)
            job = state.core.jobs[job_id]
            lost = [n for n in want.nodes if node_name(n) not in state.agents]
            if failed is None and not aborted and not lost and job.status is Status.RUNNING:
                state.ledger.place(job_id, want, seqs)
                now = state.now()
                entry = state.journal.get(job_id)
                state.log.info("job_started", job_id=job_id,
                               node=node_name(want.nodes[0]),
                               nodes=[node_name(n) for n in want.nodes],
                               gpus={node_name(n): g for n, g in gpus_of.items()},
                               group=list(want.group), slot=want.group.index(job_id),
                               tt=want.tt, start_iteration=start, now=now,
                               submit=entry.submit_trace, first_start=entry.first_start_trace)
                state.emit_running(job_id, want)
                return
            # undo: ranks that did start must not run on
            for node in launched:
                state.ledger.strays.append((job_id, node_name(node)))
            if aborted or job.status is not Status.RUNNING:  # finished or requeued meanwhile
                state.log.info("launch_aborted", job_id=job_id, state=job_state(state, job_id))
                return
            now = state.now()
            state.core.stop(job_id, now)
            state.journal.mark_stopped(job_id, start, now, node=failed,
                                       detail={"reason": "launch failed"})
            # no immediate round: an agent that refuses would be asked again at once, forever;
            # the next tick retries
            state.log.warning("launch_failed", job_id=job_id, node=failed,
                              lost=[node_name(n) for n in lost])
