"""The round executor: advance the core, plan, and make the agents run the plan.

The plan is compared with what the ledger says agents run by the core's own comparison
(scheduler/core/plan_changes.py, shared with the simulator); the differences are applied as stops
and in-place regroups first (a job's GPUs are free only once it checkpointed), then strays,
then launches. Each batch fans out over the gateway's worker threads, and every request goes
out *without* the lock, re-checking afterwards what changed meanwhile.
"""
from __future__ import annotations

import time
from typing import Any

from scheduler.core import plan_changes
from scheduler.live.gateway import AgentGateway
from scheduler.live.launches import Launcher
from scheduler.live.ledger import Placed, node_name
from scheduler.live.state import LiveState
from scheduler.live.stops import Stopper
from scheduler.core.state import Status


class RoundExecutor:
    def __init__(self, state: LiveState, gateway: AgentGateway):
        self.state, self.gateway = state, gateway
        self.stopper = Stopper(state, gateway)
        self.launcher = Launcher(state, gateway)

    def round(self, requester: Any) -> None:
        """Advance the core, plan, and make the agents run the plan: stops first, then launches."""
        state, ledger = self.state, self.state.ledger
        began = time.perf_counter()
        with state.lock:
            now = state.now()
            reasons = sorted(state.wake_reasons) or ["tick"]
            state.wake_reasons.clear()
            done = {}
            for job in state.core.running_jobs():
                seen = state.progress.get(job.id)
                if seen is not None:
                    done[job.id] = max(seen - (job.record.iterations - job.remaining), 0.0)
            state.core.advance(now, done)
            started = time.perf_counter()
            plan = state.core.round(now)
            latency_ms = (time.perf_counter() - started) * 1000.0
            state.metrics.round_planned(latency_ms / 1000.0)
            state.rounds += 1
            state.last_round = state.clock()
            state.next_wakeup = plan.wakeup
            desired = {j: Placed(g.jobs, g.tt, g.placement)
                       for g in plan.groups if g.placement for j in g.jobs}
            unplaced = [list(g.jobs) for g in plan.groups if not g.placement]
            if unplaced:  # a policy that plans GPUs without naming them: nothing to launch
                state.log.warning("groups_without_placement", groups=unplaced)
            # one comparison of what agents run with the plan, shared with the simulator: a
            # job that keeps its GPUs and only changes group goes on where it is, at the
            # group's new pace, where the preset says so (see LiveState and _regroup_job)
            changes = plan_changes.compare({j: p.key for j, p in ledger.placed.items()},
                                           {j: d.key for j, d in desired.items()},
                                           state.core.preset)
            stopping, starting = set(changes.stopping), set(changes.starting)
            in_place = set(changes.regrouped_in_place)
            stops = [(j, p) for j, p in ledger.placed.items() if j in stopping]
            regroups = [(j, p, desired[j]) for j, p in ledger.placed.items() if j in in_place]
            launches = [(j, d) for j, d in desired.items() if j in starting]
            groups = [list(g.jobs) for g in plan.groups]
            if stops or launches or reasons != ["tick"] or state.rounds % 10 == 0:
                state.journal.set_clock(now)  # a restart continues the trace clock from here
            state.log.info("round", now=now, latency_ms=latency_ms, groups=groups,
                           reasons=reasons, stops=[j for j, _ in stops],
                           launches=[j for j, _ in launches],
                           regroups=[j for j, _, _ in regroups],
                           pending=sum(1 for j in state.core.queue
                                       if j.status is Status.PENDING))
            state.outbox.append(("event.round", {"groups": groups, "latency_ms": latency_ms}))
            changing = {j for j, _ in stops} | in_place
            ledger.stopping.update(changing)
        # Stops first (a job's GPUs are free only once it checkpointed), then launches; each
        # batch runs concurrently, one requester per worker thread, since every stop or
        # launch waits on a process and a round may move many jobs at once.
        try:
            self.gateway.concurrently(requester, [
                (self._stop_job, job_id, was, desired.get(job_id)) for job_id, was in stops]
                + [(self._regroup_job, job_id, was, want) for job_id, was, want in regroups])
        finally:
            with state.lock:
                ledger.stopping.difference_update(changing)
                # a regroup an agent could not do in place was a stop: launch it again
                launches += [(j, want) for j, _, want in regroups if j not in ledger.placed]
        # strays found by registrations during this round go before the launches, which
        # could otherwise find a stray trainer running and adopt it
        self.stop_strays(requester)
        self.gateway.concurrently(requester, [
            (self.launcher.launch, job_id, want) for job_id, want in launches])
        # The round is applied (every stop, regroup and launch it sent is answered or failed):
        # its end, for whole-round latency; apply_ms is the time since planning ended.
        state.log.info("round_done", round=state.rounds,
                       apply_ms=(state.clock() - state.last_round) * 1000.0)
        state.metrics.round_done(time.perf_counter() - began)

    def _stop_job(self, requester: Any, job_id: int, was: Placed,
                  now_placed: Placed | None) -> None:
        """Stop the job everywhere it runs and wait until each agent reports its trainer
        gone (or dies) before its GPUs count as free; then settle it from the checkpoint."""
        state, ledger = self.state, self.state.ledger
        reason = "preempted" if now_placed is None else (
            "moved" if now_placed.slices != was.slices else "regrouped")
        replies = [r for r in self.stopper.stop_everywhere(
            requester, job_id, [node_name(piece.node) for piece in was.slices],
            lambda: ledger.placed.get(job_id) is was) if r is not None]
        with state.lock:
            job = state.core.jobs[job_id]
            if ledger.placed.get(job_id) is not was:
                return  # finished or requeued while we were stopping it
            ledger.unplace(job_id)
            now = state.now()
            numbers = [float(r["iterations"]) for r in replies
                       if isinstance(r.get("iterations"), (int, float))]
            its = numbers[0] if numbers else state.resume_point(job_id)
            # a trainer that ended on its own just before the stop reached it: done is done,
            # whatever the reply's flag says (a relaunch at its total would run it twice)
            if any(r.get("finished") for r in replies) or its >= job.record.iterations:
                state.finish(job_id, now, its, node_name(was.slices[0].node))
                return
            state.core.set_remaining(job_id, job.record.iterations - its)
            state.progress.pop(job_id, None)
            state.journal.mark_stopped(job_id, its, now, node=node_name(was.slices[0].node),
                                       detail={"reason": reason},
                                       preempted=now_placed is None)
            state.log.info("job_stopped", job_id=job_id, reason=reason, iterations=its,
                           now=now, nodes=[node_name(n) for n in was.nodes])
            state.emit_job(job_id, "stopped", {"reason": reason, "iterations": its})

    def _regroup_job(self, requester: Any, job_id: int, was: Placed, want: Placed) -> None:
        """Tell the job's agents its new group and pace; it keeps running where it is. Where
        that fails (an agent that cannot, or is gone), stop it like any move: the launch
        phase of this round starts it again."""
        state, ledger = self.state, self.state.ledger
        slot = want.group.index(job_id)
        replies = [self.gateway.request(requester, node_name(piece.node), "job.regroup",
                                        job_id=job_id, group=list(want.group), slot=slot,
                                        iteration_time=want.tt)
                   for piece in was.slices]
        with state.lock:
            if ledger.placed.get(job_id) is not was:
                return  # finished or requeued while we asked
            if all(r is not None and r.get("regrouped") for r in replies):
                ledger.placed[job_id] = want  # same slices: the node index stays right
                state.log.info("job_regrouped", job_id=job_id, group=list(want.group),
                               slot=slot, tt=want.tt, now=state.now(),
                               nodes=[node_name(n) for n in want.nodes])
                state.emit_running(job_id, want)
                return
        self._stop_job(requester, job_id, was, want)

    def stop_strays(self, requester: Any) -> None:
        """Stop trainers that run outside any plan, concurrently, each awaited to its end
        (so a launch that follows finds its GPUs free)."""
        with self.state.lock:
            strays, adopted = self.state.ledger.take_strays()
        for job_id, name in adopted:
            self.state.log.info("stray_adopted", job_id=job_id, node=name)
        self.gateway.concurrently(requester, [(self._stop_stray, job_id, name)
                                              for job_id, name in strays])

    def _stop_stray(self, requester: Any, job_id: int, name: str) -> None:
        state, ledger = self.state, self.state.ledger
        reply = self.stopper.stop_everywhere(requester, job_id, [name], lambda: True)[0]
        if reply is None:
            return
        with state.lock:
            job = state.core.jobs.get(job_id)
            its = reply.get("iterations")
            if job is not None and job.status is not Status.DONE \
                    and ledger.where(job_id) is None and isinstance(its, (int, float)):
                # a job the scheduler had lost track of (pending, or planned but not
                # launched yet): its stop checkpoint is the truth
                done = max(float(its), state.resume_point(job_id))
                state.core.set_remaining(job_id, job.record.iterations - done)
                if done >= job.record.iterations and job.status is not Status.DONE:
                    state.finish(job_id, state.now(), done, name)  # never launch it again
            if job is not None and reply.get("finished") and job.status is not Status.DONE:
                state.finish(job_id, state.now(), float(its or job.record.iterations), name)
        state.log.info("stray_stopped", job_id=job_id, node=name, iterations=its)
