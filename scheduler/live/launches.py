"""Launching one planned job on its agents, and undoing a launch that did not take.

A launch takes the job from queued to launching when it goes out (journaled as started: a
job may finish before the reply is back) and to running once every slice answered. Where a
slice fails or an agent is lost meanwhile, the ranks that did start become strays and the job
goes back to the queue (a `LaunchFailed` outcome, which the loop gives the core); where the
job was finished, requeued or cancelled meanwhile (its phase left launching), those ranks
become strays and nothing else changes. A launch an agent refuses for the job's own program
(`bad_workload`: no such program, no such work dir) is a failure of the job's: it backs off,
and after too many in a row it fails (lifecycle.run_failed), never asked again at once.
"""
from __future__ import annotations

from typing import Any, Sequence

from scheduler.live.gateway import AgentGateway
from scheduler.live.ledger import Launch, Placed, node_name
from scheduler.live.lifecycle import LAUNCHING
from scheduler.live.state import LiveState
from scheduler.core.speed import scaled
from scheduler.core.state import Status
from scheduler.loop import LaunchFailed, Outcome


def stage_list(stages: Sequence[float]) -> list[float]:
    """Three stage times (data, gpu, net) for the emulated workload; io+cpu fold into data."""
    values = [float(s) for s in stages]
    if len(values) == 4:
        values = [values[0] + values[1], values[2], values[3]]
    return values


# the refusal an agent gives a launch for the job's own workload (its program, its work dir)
OWN_FAULT = "bad_workload"


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
                    "turns": turns, "own_workdir": job.record.own_workdir,
                    "progress_file": job.record.progress_file}
        if opt.workload == "torch":
            return {"kind": "torch", "iterations": job.record.iterations, "model": job.model,
                    "batch_size": 0, "config": dict(opt.torch_config),
                    "gpu_mem_gb": job.gpu_mem_gb}
        # an emulated trainer runs its GPU stage at its GPUs' type's pace, as a real one does
        speed = self.state.core.speeds.of(job.model, self.state.nodes.placement_type(want.slices))
        return {"kind": "emulated", "iterations": job.record.iterations,
                "iteration_time": want.tt, "stages": stage_list(scaled(job.profile, speed)),
                "gpu_mem_gb": job.gpu_mem_gb}

    def launch(self, requester: Any, job_id: int, want: Placed,
               outcomes: list[Outcome]) -> None:
        state = self.state
        with state.lock:
            job = state.core.jobs[job_id]
            planned = state.core.placed.get(job_id)
            offline = [n for n in want.nodes if node_name(n) not in state.agents]
            if job.status is not Status.RUNNING or planned is None \
                    or (planned.jobs, planned.placement) != want.key or offline:
                if offline and job.status is Status.RUNNING:
                    outcomes.append(LaunchFailed(job_id, "its node is offline"))
                    state.rounds.wake("launch_skipped")
                return
            # where it resumes: its last stop's checkpoint, which the core hears of at the
            # loop's next turn (a job stopped and started again in one round, a move, has it
            # only here), else the core's count
            start = state.jobs.resume_from(job_id, float(job.record.iterations - job.remaining))
            workload = self.workload(job, want)
            gpus_of = {p.node: self.gateway.gpu_ids(p) for p in want.slices}
            if not state.jobs.launch(job_id, want, start):  # refused: logged and counted
                return
        launched, seqs, failed, why = self._send(requester, job_id, want, workload, gpus_of,
                                                 start)
        self._settle(job_id, want, start, gpus_of, launched, seqs, failed, outcomes, why)

    def _send(self, requester: Any, job_id: int, want: Placed, workload: dict[str, Any],
              gpus_of: dict[int, list[int]], start: float
              ) -> tuple[list[int], dict[int, Launch], str | None, str | None]:
        """job.launch to each slice in turn: (nodes launched, their launch numbers, the node
        that failed or None, and why it refused where that is the job's own program)."""
        launched: list[int] = []
        seqs: dict[int, Launch] = {}
        ranks = {"rank": 0, "world_size": sum(len(g) for g in gpus_of.values())} \
            if workload["kind"] in ("torch", "command") else {}
        for piece in want.slices:
            name = node_name(piece.node)
            reply, _, refusal = self.gateway.exchange(
                requester, name, "job.launch", job_id=job_id, gpus=gpus_of[piece.node],
                group=list(want.group), slot=want.group.index(job_id), workload=workload,
                start_iteration=start, **ranks)
            if reply is None:
                own = refusal is not None and refusal.code == OWN_FAULT
                return launched, seqs, name, refusal.reason if own else None
            if isinstance(reply.get("launch_seq"), int):
                seqs[piece.node] = (reply.get("incarnation"), reply["launch_seq"])
            if ranks:  # rank 0's agent chose the rendezvous; the other slices join it
                ranks["rank"] += len(gpus_of[piece.node])
                if "master_port" in reply and "master_port" not in ranks:
                    ranks.update(master_addr=str(reply.get("master_addr") or "127.0.0.1"),
                                 master_port=int(reply["master_port"]))
            launched.append(piece.node)
        return launched, seqs, None, None

    def _settle(self, job_id: int, want: Placed, start: float, gpus_of: dict[int, list[int]],
                launched: list[int], seqs: dict[int, Launch], failed: str | None,
                outcomes: list[Outcome], why: str | None = None) -> None:
        state = self.state
        with state.lock:
            launching = state.jobs.phase(job_id) is LAUNCHING
            lost = [node_name(n) for n in want.nodes if node_name(n) not in state.agents]
            if failed is None and launching and not lost \
                    and state.core.jobs[job_id].status is Status.RUNNING:
                state.jobs.launched(job_id, want, seqs, gpus_of, start)
                return
            # undo: ranks that did start must not run on
            for node in launched:
                state.ledger.strays.append((job_id, node_name(node)))
            if not launching:  # finished, requeued or cancelled meanwhile
                state.log.info("launch_aborted", job_id=job_id,
                               state=state.jobs.status_of(job_id))
                return
            if why is not None and failed is not None and not lost:  # the job's own fault
                state.jobs.run_failed(job_id, state.now(), failed, f"would not start: {why}")
                return  # the core hears of it as a RunFailed event: no preemption
            if state.jobs.launch_failed(job_id, start, failed, lost):
                outcomes.append(LaunchFailed(job_id, f"launch failed on {failed}"))
