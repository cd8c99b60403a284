"""Acting on a plan: make the agents run what the core planned.

The plan comes with its changes against what runs (the core's `Plan.changes`, the same the
simulated cluster acts on): stops and in-place regroups first (a job's GPUs are free only
once it checkpointed), then strays, then launches. Each batch fans out over the gateway's
worker threads, and every request goes out *without* the lock, re-checking afterwards what
changed meanwhile. What did not go as planned comes back as the loop's outcomes.
"""
from __future__ import annotations

from typing import Any, Mapping

from scheduler.core.state import Group, Plan, Status
from scheduler.live.gateway import AgentGateway
from scheduler.live.launches import Launcher
from scheduler.live.ledger import Placed, node_name
from scheduler.live.lifecycle import ENDED, QUEUED, STOPPING
from scheduler.live.state import LiveState
from scheduler.live.stops import Stopper
from scheduler.loop import Outcome, StopTook


def _placed(group: Group) -> Placed:
    return Placed(group.jobs, group.tt, group.placement)


class RoundExecutor:
    def __init__(self, state: LiveState, gateway: AgentGateway):
        self.state, self.gateway = state, gateway
        self.stopper = Stopper(state, gateway)
        self.launcher = Launcher(state, gateway)

    def apply(self, requester: Any, plan: Plan, reasons: list[str],
              planning_s: float) -> list[Outcome]:
        """Make the agents run `plan`: stops and regroups first, then strays, then launches.
        `reasons`: why the round ran; `planning_s`: how long the core took to plan it."""
        state, ledger = self.state, self.state.ledger
        with state.lock:
            latency_ms = planning_s * 1000.0
            state.metrics.round_planned(planning_s)
            state.rounds.count += 1
            state.rounds.last = state.clock()
            state.rounds.planning = planning_s
            state.rounds.wakeup = plan.wakeup
            now = state.core.now
            # each placed job's group (a Placed is made only for the jobs that move: a
            # round at scale keeps thousands running)
            planned = {j: g for g in plan.groups if g.placement for j in g.jobs}
            unplaced = [list(g.jobs) for g in plan.groups if not g.placement]
            if unplaced:  # a policy that plans GPUs without naming them: nothing to launch
                state.log.warning("groups_without_placement", groups=unplaced)
            changes = plan.changes
            stopping, in_place = set(changes.stopping), set(changes.regrouped_in_place)
            starting = [j for j in changes.starting if j in planned]
            self._reconcile(planned, stopping, starting)
            desired = {j: _placed(planned[j]) for j in (*stopping, *in_place, *starting)
                       if j in planned}
            stops = [(j, ledger.placed[j]) for j in stopping if j in ledger.placed]
            regroups = [(j, ledger.placed[j], desired[j]) for j in in_place
                        if j in ledger.placed]
            launches = [(j, desired[j]) for j in starting]
            groups = [g.jobs for g in plan.groups]
            if stops or launches or reasons != ["tick"] or state.rounds.count % 10 == 0:
                state.journal.set_clock(now)  # a restart continues the trace clock from here
            state.log.info("round", now=now, latency_ms=latency_ms, groups=groups,
                           reasons=reasons, stops=[j for j, _ in stops],
                           launches=[j for j, _ in launches],
                           regroups=[j for j, _, _ in regroups],
                           pending=sum(1 for j in state.core.queue
                                       if j.status is Status.PENDING))
            state.outbox.append(("event.round", {"groups": groups, "latency_ms": latency_ms}))
            state.jobs.stopping(j for j, _ in stops)
        # Stops first (a job's GPUs are free only once it checkpointed), then launches; each
        # batch runs concurrently, one requester per worker thread, since every stop or
        # launch waits on a process and a round may move many jobs at once.
        outcomes: list[Outcome] = []
        try:
            self.gateway.concurrently(requester, [
                (self._stop_job, job_id, was, desired.get(job_id), outcomes)
                for job_id, was in stops]
                + [(self._regroup_job, job_id, was, want, outcomes)
                   for job_id, was, want in regroups])
        finally:
            with state.lock:
                # a regroup an agent could not do in place was a stop: launch it again
                launches += [(j, want) for j, _, want in regroups if j not in ledger.placed]
        # strays found by registrations during this round go before the launches, which
        # could otherwise find a stray trainer running and adopt it
        self.stop_strays(requester)
        self.gateway.concurrently(requester, [
            (self.launcher.launch, job_id, want, outcomes) for job_id, want in launches])
        # The round is applied (every stop, regroup and launch it sent is answered or failed):
        # its end, for whole-round latency; apply_ms is the time since planning ended.
        state.log.info("round_done", round=state.rounds.count,
                       apply_ms=(state.clock() - state.rounds.last) * 1000.0)
        return outcomes

    def _reconcile(self, in_plan: Mapping[int, Any], stopping: set[int],
                   starting: list[int]) -> None:
        """What the agents run (the ledger) is what the core last planned, between rounds;
        should they ever part, the plan wins: a job the plan runs that no agent runs is
        launched, one an agent runs that the plan does not is stopped. Logged: it is a bug.
        `in_plan`: the jobs the plan places (its keys)."""
        ledger, planned = self.state.ledger, self.state.core.placed
        # (a job that ended or was requeued since the plan was made runs in neither)
        lost = [j for j in in_plan if j in planned and j not in ledger.placed
                and j not in ledger.launching and j not in starting]
        extra = [j for j in ledger.placed if j not in in_plan and j not in stopping]
        if lost or extra:
            self.state.log.warning("ledger_diverged", unlaunched=lost, unplanned=extra)
            starting.extend(lost)
            stopping.update(extra)

    def _stop_job(self, requester: Any, job_id: int, was: Placed,
                  now_placed: Placed | None, outcomes: list[Outcome]) -> None:
        """Stop the job everywhere it runs and wait until each agent reports its trainer
        gone (or dies) before its GPUs count as free; then settle it from the checkpoint.
        How long that took (trace seconds) is an outcome: it weighs later regroups."""
        state = self.state
        reason = "preempted" if now_placed is None else (
            "moved" if now_placed.slices != was.slices else "regrouped")
        began = state.now()
        replies = [r for r in self.stopper.stop_everywhere(
            requester, job_id, [node_name(piece.node) for piece in was.slices],
            lambda: self._still_stopping(job_id, was)) if r is not None]
        with state.lock:
            if not self._still_stopping(job_id, was):
                return  # finished, requeued or cancelled while we were stopping it
            outcomes.append(StopTook(job_id, max(state.now() - began, 0.0)))
            numbers = [float(r["iterations"]) for r in replies
                       if isinstance(r.get("iterations"), (int, float))]
            its = numbers[0] if numbers else state.jobs.resume_point(job_id)
            state.jobs.stopped(job_id, was, its, any(r.get("finished") for r in replies),
                               reason, preempted=now_placed is None)

    def _still_stopping(self, job_id: int, was: Placed) -> bool:
        """The stop this round began still matters: nothing settled the job meanwhile."""
        state = self.state
        return state.jobs.phase(job_id) is STOPPING and state.ledger.placed.get(job_id) == was

    def _regroup_job(self, requester: Any, job_id: int, was: Placed, want: Placed,
                     outcomes: list[Outcome]) -> None:
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
            if ledger.placed.get(job_id) != was:
                return  # finished or requeued while we asked
            if all(r is not None and r.get("regrouped") for r in replies):
                state.jobs.regrouped(job_id, want)
                return
            state.jobs.stopping([job_id])
        self._stop_job(requester, job_id, was, want, outcomes)

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
        state, jobs = self.state, self.state.jobs
        reply = self.stopper.stop_everywhere(requester, job_id, [name], lambda: True)[0]
        if reply is None:
            return
        with state.lock:
            its = reply.get("iterations")
            if jobs.phase(job_id) is QUEUED and isinstance(its, (int, float)):
                # a waiting job (planned but not launched yet, or queued): the stray's stop
                # checkpoint is the truth; complete, it never launches again
                total = jobs.total(job_id)
                done = max(float(its), jobs.resume_point(job_id))
                if done >= total:
                    jobs.finish(job_id, state.now(), done, name)
                else:
                    jobs.checkpointed(job_id, done, name, "stray stopped")
            if reply.get("finished") and jobs.phase(job_id) not in (None, *ENDED):
                total = jobs.total(job_id)
                jobs.finish(job_id, state.now(), float(its or total), name)
        state.log.info("stray_stopped", job_id=job_id, node=name, iterations=its)
