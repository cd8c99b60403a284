"""One job's life in the live scheduler: its phases, the transitions allowed between them, and
one function per transition.

    (submit) -> queued -> launching -> running -> stopping -> queued -> ...
                any phase but an ended one -> finished | cancelled | failed

Why one module: a job's fate is kept in three stores that must agree: the journal (what
survives a crash), the core (what is planned) and the ledger (where trainers run). Each
transition writes them in that order, journal first, so the durable record never lags a
change another store already acted on: the core by an event for the loop's next turn
(scheduler/events.py; the loop is the core's only writer), then it logs and queues its
event for subscribers. Nothing else changes a job's phase, and no transition is written
out anywhere else. A transition the
table does not allow is refused: logged (`transition_refused`), counted, never applied.

The journal keeps every transition (the phase entered), so the phases are what replaying it
gives (`replay`, used by recovery.py), and status replies and metrics read them from here.
"""
from __future__ import annotations

from collections import Counter
from enum import Enum
from types import MappingProxyType
from typing import Any, Iterable, Mapping, NamedTuple

from scheduler.events import Checkpointed, Finished, Requeued, RunFailed, Submitted
from scheduler.live.failures import Failure, from_detail
from scheduler.live.ledger import Launch, Placed, node_name
from scheduler.live.progress import ProgressGuard
from trainer import checkpoint
from trainer.ledger import LEDGER_DIR, read_ledgers


class Phase(str, Enum):
    QUEUED = "queued"  # waiting for a round (planned but not launched yet counts here too)
    LAUNCHING = "launching"  # job.launch requests are out
    RUNNING = "running"  # every slice's agent answered: its trainers run
    STOPPING = "stopping"  # a round stopped it and awaits its agents' reports
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"  # its program failed too often in a row (failures.py): never run again


QUEUED, LAUNCHING, RUNNING = Phase.QUEUED, Phase.LAUNCHING, Phase.RUNNING
STOPPING, FINISHED, CANCELLED = Phase.STOPPING, Phase.FINISHED, Phase.CANCELLED
FAILED = Phase.FAILED

LIVE = frozenset({QUEUED, LAUNCHING, RUNNING, STOPPING})
OUT = frozenset({LAUNCHING, RUNNING, STOPPING})  # its trainers may run somewhere
ENDED = frozenset({FINISHED, CANCELLED, FAILED})


class Move(NamedTuple):
    """One transition: the phases it leaves, the one it enters, the journal event that
    records it, and whether that commit waits for the disk. Not durable: a transition that
    recovery treats like the phase before it (trainers may run either way), so a power loss
    that takes it back changes nothing; the next durable commit makes it durable too."""

    sources: frozenset[Phase | None]
    target: Phase
    kind: str
    durable: bool = True


#: The transitions, by the name of the Lifecycle method that makes each.
MOVES: Mapping[str, Move] = MappingProxyType({
    "submit": Move(frozenset({None}), QUEUED, "submitted"),
    "launch": Move(frozenset({QUEUED}), LAUNCHING, "started"),
    "launched": Move(frozenset({LAUNCHING}), RUNNING, "launched", durable=False),
    "launch_failed": Move(frozenset({LAUNCHING}), QUEUED, "stopped"),
    "stopping": Move(frozenset({RUNNING}), STOPPING, "stopping", durable=False),
    "stopped": Move(frozenset({STOPPING}), QUEUED, "stopped"),
    "regrouped": Move(frozenset({RUNNING}), RUNNING, "regrouped", durable=False),
    "requeue": Move(OUT, QUEUED, "stopped"),
    "checkpointed": Move(frozenset({QUEUED}), QUEUED, "stopped"),
    "finish": Move(LIVE, FINISHED, "finished"),
    "cancel": Move(LIVE, CANCELLED, "cancelled"),
    "fail": Move(LIVE, FAILED, "failed"),
})
#: phase -> the phases it may enter (None: not submitted yet), all transitions together: what
#: a replay of the journal, and the journal itself, check
ALLOWED: Mapping[Phase | None, frozenset[Phase]] = MappingProxyType({
    before: frozenset(m.target for m in MOVES.values() if before in m.sources)
    for before in (None, *Phase)})
#: what a status reply calls each phase (a launch not yet answered is still pending there)
STATUS: Mapping[Phase, str] = MappingProxyType({
    QUEUED: "pending", LAUNCHING: "pending", RUNNING: "running", STOPPING: "running",
    FINISHED: "finished", CANCELLED: "cancelled", FAILED: "failed"})
#: the status words, in the order counts list them
WORDS = ("pending", "running", "finished", "cancelled", "failed")


def allowed(before: Phase | None, after: Phase) -> bool:
    return after in ALLOWED[before]


class Transition(NamedTuple):
    """One change of a job's phase as the journal keeps it (`durable`: see Move)."""

    job_id: int
    phase: Phase  # the phase entered
    kind: str  # the journal event: submitted, started, launched, stopping, stopped, ...
    ts: float  # trace seconds
    iterations: float | None = None  # iterations done, where the transition knows them
    node: str | None = None
    detail: Mapping[str, Any] | None = None
    preempted: bool = False  # a stop that counts as a preemption
    durable: bool = True


class History(NamedTuple):
    """What replaying a journal gives: each job's phase, the nodes of its last launch, and
    the transitions the table refused (a journal written by hand or by a version-1 scheduler
    may hold some; they are skipped)."""

    phases: dict[int, Phase]
    launched_on: dict[int, frozenset[str]]
    refused: list[tuple[int, Phase | None, Phase]]
    alone: frozenset[int] = frozenset()  # jobs that ran out of GPU memory beside others
    # each job's last failure of its own (failures.py), as its transition journaled it
    failures: Mapping[int, Failure] = MappingProxyType({})


def replay(rows: Iterable[tuple[int, str, str | None, Mapping[str, Any] | None]]) -> History:
    """Fold (job id, phase entered, node, detail) rows, in journal order, into each job's
    phase. Pure: the live machine and this fold share `ALLOWED`, so a journal the live
    scheduler wrote replays to the phases it had."""
    phases: dict[int, Phase] = {}
    nodes: dict[int, frozenset[str]] = {}
    refused: list[tuple[int, Phase | None, Phase]] = []
    alone: set[int] = set()
    failures: dict[int, Failure] = {}
    for job_id, entered, node, detail in rows:
        after, before = Phase(entered), phases.get(job_id)
        if not allowed(before, after):
            refused.append((job_id, before, after))
            continue
        phases[job_id] = after
        if after is LAUNCHING:
            nodes[job_id] = launch_nodes(node, detail)
        if isinstance(detail, Mapping):
            if detail.get("alone") is True:
                alone.add(job_id)
            failure = from_detail(detail.get("failure"))
            if failure is not None:
                failures[job_id] = failure
    return History(phases, nodes, refused, frozenset(alone), failures)


def launch_nodes(node: str | None, detail: Mapping[str, Any] | None) -> frozenset[str]:
    """The nodes a `started` transition names (its node and its detail's list)."""
    named = detail.get("nodes") if isinstance(detail, Mapping) else None
    names = [n for n in (named if isinstance(named, list) else []) if isinstance(n, str)]
    return frozenset(names + ([node] if node else []))


class Lifecycle:
    """Each job's phase and the transitions that change it: the job's fate only (what its
    trainers measured is `state.measured`). Called with the state's lock held. It writes the
    state's journal and ledger, puts the core's events in its inbox and queues subscribers'
    events in its outbox; `past` holds the journal entries of jobs that ended before this
    start (status lists them)."""

    def __init__(self, state: Any):
        self.state = state  # the LiveState that holds this (journal, core, ledger, outputs)
        self._phases: dict[int, Phase] = {}
        self.counts: Counter[Phase] = Counter()
        self.refused: Counter[str] = Counter()  # "name from phase" -> times refused
        self.past: dict[int, Any] = {}
        self.records: dict[int, Any] = {}  # each job of this run's record, by arrival
        # iterations done as the job's last stop, checkpoint or end settled them (what a
        # waiting or ended job's status says, ahead of the core's next view)
        self.settled: dict[int, float] = {}
        self.preemptions: Counter[int] = Counter()  # each job's, as the journal counts them
        # this run's regroups of each job: in place, and by a stop and relaunch (a stop to
        # move or regroup a job the plan keeps running, which is no preemption)
        self.regroups: Counter[int] = Counter()
        self.regroup_stops: Counter[int] = Counter()
        # every count a job would resume from is judged against its last settled one
        self.guard = ProgressGuard(state.log, state.now, self._pace)
        self._tt: dict[int, float] = {}  # the fastest pace each job was launched with
        # the trainers' ledgers' checkpoints by job, and the files' state they were read at
        self._ledgers: tuple[tuple, dict[int, set[float]]] = ((), {})

    # -- what the phases say -----------------------------------------------------------------
    def phase(self, job_id: int) -> Phase | None:
        return self._phases.get(job_id)

    def status_of(self, job_id: int) -> str:
        """The status reply's word for the job (KeyError for a job never submitted)."""
        return STATUS[self._phases[job_id]]

    def status_counts(self) -> dict[str, int]:
        """Jobs per status word (WORDS: a cancelled or failed job is not finished): what
        status replies and metrics count, the jobs that ended before a restart included.
        O(phases)."""
        out = dict.fromkeys(WORDS, 0)
        for phase, n in self.counts.items():
            out[STATUS[phase]] += n
        return out

    def total(self, job_id: int) -> float:
        """The iterations a job of this run runs in all."""
        return self.records[job_id].iterations

    def known(self) -> int:
        """The largest job id known, ended before this start too (0: none)."""
        return max(max(self.records, default=0), max(self.past, default=0))

    def done(self, job_id: int, view: Any) -> float:
        """Iterations a job of this run has done, as far as the scheduler knows for sure: a
        finished job's all of them, a waiting or cancelled one's as its last transition
        settled them, a running one's as the last round's view of the core (`view`:
        coreview.CoreView) has them."""
        phase = self._phases.get(job_id)
        if phase is FINISHED:
            return self.total(job_id)
        if phase in (QUEUED, CANCELLED, FAILED) and job_id in self.settled:
            return self.settled[job_id]
        job = view.jobs.get(job_id)
        return job.iterations - job.remaining if job is not None else 0.0

    def resume_from(self, job_id: int, core_says: float) -> float:
        """Iterations a waiting job's next launch starts from: as its last stop, requeue or
        checkpoint settled them (the core has them only from the loop's next turn), else
        `core_says`."""
        return self.settled.get(job_id, core_says)

    def ended(self, job_id: int) -> bool:
        return self._phases.get(job_id) in ENDED

    def _pace(self, job_id: int) -> float | None:
        """Trace seconds per iteration of a job whose pace the scheduler sets (an emulated
        trainer runs at the pace it is launched with): the fastest it was launched with in
        this run; None before a launch, or for one that runs at its own pace."""
        record, opt = self.records.get(job_id), self.state.opt
        if record is None or record.command or opt.workload != "emulated" \
                or opt.unpaced_trainers:
            return None
        return self._tt.get(job_id)

    def _evidenced(self, job_id: int, claimed: float) -> bool:
        """Whether a trainer of the job logged a checkpoint at `claimed` in the ledgers of
        the run dir (trainer/ledger.py); True where there are none to ask."""
        folder = self.state.opt.run_dir / LEDGER_DIR
        try:
            files = sorted(folder.glob("*.jsonl"))
            signature = tuple((f.name, f.stat().st_size) for f in files)
        except OSError:
            return True
        if not files:
            return True
        if signature != self._ledgers[0]:  # appended to since: read again
            found: dict[int, set[float]] = {}
            for rec in read_ledgers(self.state.opt.run_dir)[0]:
                if rec.get("kind") == "checkpoint" and isinstance(rec.get("job"), int):
                    found.setdefault(rec["job"], set()).add(rec.get("iteration"))
            self._ledgers = (signature, found)
        return claimed in self._ledgers[1].get(job_id, ())

    def _judge(self, job_id: int, claimed: Any, source: str) -> float:
        """A claim of the job's progress as far as it is believable (ProgressGuard)."""
        unpaced = self._pace(job_id) is None
        return self.guard.judge(job_id, claimed, self.total(job_id), source,
                                self._evidenced if unpaced else None)

    def checkpoint_of(self, job_id: int) -> float | None:
        """The job's checkpoint record, as far as it is believable (ProgressGuard: else the
        last good count); None without one."""
        ckpt = checkpoint.read(self.state.opt.checkpoints, job_id)
        if ckpt is None:
            return None
        record = self.records.get(job_id)
        if record is None:  # ended: nothing resumes from it
            return ckpt.iterations
        return self._judge(job_id, ckpt.iterations, "checkpoint file")

    def resume_point(self, job_id: int) -> float:
        """Iterations a waiting job will resume from: its checkpoint, or the last safe stop."""
        entry = self.state.journal.get(job_id)
        known = entry.iterations_done if entry is not None else 0.0
        return max(known, self.checkpoint_of(job_id) or 0.0)

    def restore(self, job_id: int, phase: Phase, entry: Any, done: float = 0.0,
                failure: Failure | None = None) -> None:
        """A job as the journal left it (recovery.py): its replayed phase, no transition, and
        the iterations it resumes from (`done`); an ended job keeps its journal entry for
        status replies. `failure`: its last failure of its own, the count going on from it."""
        self._set(job_id, phase)
        if failure is not None:
            self.state.failures.restore(job_id, failure)
        if phase in ENDED:
            self.past[job_id] = entry
        else:
            self.records[job_id] = entry.record
            self.settled[job_id] = done
            self.preemptions[job_id] = entry.preemptions

    # -- transitions ---------------------------------------------------------------------------
    def accept(self, record: Any, now: float,
               submission: tuple[str, str] | None = None) -> bool:
        """(none) -> queued: journaled, durable before the caller acknowledges (by this
        commit, or by the service's sync before it replies: `sync_before_reply`), and in the
        core from the loop's next turn. False, and no change, for an id the journal holds
        already (a feeder's retry, not a refusal: the journal is what knows every id, the
        ones that ended before this start too). `submission`: (caller, key) the submitter
        named it by, journaled with it."""
        s = self.state
        if not s.journal.submit(record, now, durable=not s.sync_before_reply,
                                submission=submission):
            return False
        with s.lock:
            s.inbox.put(Submitted(record, now))
            self.records[record.job_id] = record
            self._set(record.job_id, QUEUED)
            s.log.info("job_submitted", job_id=record.job_id, num_gpu=record.num_gpu,
                       iterations=record.iterations, model=record.model_name, submit=now,
                       trace_submit=record.submit_time)
            self._emit(record.job_id, "submitted", {"submit": now})
            s.rounds.wake("arrival")
        return True

    def launch(self, job_id: int, want: Placed, start: float) -> bool:
        """queued -> launching: its job.launch requests go out. Journaled as started now: a
        job may finish before the launch is answered, and its JCT needs its first start."""
        names = [node_name(n) for n in want.nodes]
        if self._enter("launch", job_id, iterations=start, node=names[0],
                       detail={"nodes": names}) is None:
            return False
        self._tt[job_id] = min(self._tt.get(job_id, want.tt), want.tt)
        self.state.ledger.begin_launch(job_id, want)
        return True

    def launched(self, job_id: int, want: Placed, seqs: Mapping[int, Launch],
                 gpus_of: Mapping[int, list[int]], start: float) -> bool:
        """launching -> running: every slice's agent answered."""
        s = self.state
        entry = self._enter("launched", job_id)
        if entry is None:
            return False
        s.ledger.end_launch(job_id)
        s.ledger.place(job_id, want, seqs)
        s.log.info("job_started", job_id=job_id, node=node_name(want.nodes[0]),
                   nodes=[node_name(n) for n in want.nodes],
                   gpus={node_name(n): g for n, g in gpus_of.items()},
                   group=list(want.group), slot=want.group.index(job_id), tt=want.tt,
                   start_iteration=start, now=s.now(), submit=entry.submit_trace,
                   first_start=entry.first_start_trace)
        self._emit_running(job_id, want)
        return True

    def launch_failed(self, job_id: int, start: float, node: str | None,
                      lost: list[str]) -> bool:
        """launching -> queued: a slice's launch failed, or an agent was lost meanwhile. The
        core hears of it through the loop (a LaunchFailed outcome); no round at once, or an
        agent that refuses would be asked again at once, forever: the next tick retries.
        (A launch the job's own program made fail is `run_failed`.)"""
        s = self.state
        if self._enter("launch_failed", job_id, iterations=start, node=node,
                       detail={"reason": "launch failed"}, preempted=True) is None:
            return False
        s.ledger.end_launch(job_id)
        s.log.warning("launch_failed", job_id=job_id, node=node, lost=lost)
        return True

    def run_failed(self, job_id: int, now: float, node: str, exit: str,
                   output: Iterable[str] = (), iterations: float | None = None) -> bool:
        """launching, running or stopping -> queued, or -> failed: the job's own program
        failed on `node` (it exited with an error, or would not start: `exit` says how;
        `output`: its last lines). It backs off before it may run again (a RunFailed event:
        no round plans it before then, and it is no preemption); at its failure in a row
        without progress that reaches its bound (failures.py) it has failed for good. Other
        nodes' trainers of it become strays. One whose checkpoint holds every iteration
        finished, whatever its exit."""
        s = self.state
        launching = self._phases.get(job_id) is LAUNCHING
        if not self._may("launch_failed" if launching else "requeue", job_id):
            return False
        done, finished = self._resume_or_finish(job_id, now, iterations, node, exit)
        if finished is not None:
            return finished
        total = self.total(job_id)
        failure = s.failures.note(job_id, self.records[job_id], done, exit, tuple(output), now)
        if failure.not_before is None:
            return self.fail(job_id, now, node, failure)
        reason = f"failed on {node}: {exit}"
        if self._enter("launch_failed" if launching else "requeue", job_id, ts=now,
                       iterations=done, node=node, preempted=False,
                       detail={"reason": reason, "failure": failure.detail()}) is None:
            return False
        s.inbox.put(RunFailed(job_id, now, total - done, failure.not_before))
        self.settled[job_id] = done
        where = s.ledger.release(job_id, keep=node)
        s.measured.stopped(job_id)
        s.log.warning("job_run_failed", job_id=job_id, node=node, exit=exit,
                      failures=failure.count, iterations=done, now=now,
                      not_before=failure.not_before, output=list(failure.output[-3:]))
        s.log.info("job_stopped", job_id=job_id, reason=reason, iterations=done, now=now,
                   nodes=[node_name(n) for n in (where.nodes if where else ())],
                   failure=failure.count)  # no preemption
        self._emit(job_id, "stopped", {"reason": reason, "iterations": done,
                                       "not_before": failure.not_before})
        s.rounds.wake("failure")
        return True

    def fail(self, job_id: int, now: float, node: str | None, failure: Failure) -> bool:
        """Any live phase -> failed: its program failed too often in a row; it is never
        launched again. Its trainers elsewhere than `node` become strays."""
        s = self.state
        if self._enter("fail", job_id, ts=now, iterations=failure.iterations, node=node,
                       detail={"failure": failure.detail()}) is None:
            return False
        s.inbox.put(Finished(job_id, now, failed=True))
        self.settled[job_id] = failure.iterations
        s.ledger.release(job_id, keep=node)
        s.measured.ended(job_id)
        s.log.error("job_failed", job_id=job_id, node=node, exit=failure.exit,
                    failures=failure.count, iterations=failure.iterations, now=now,
                    output=list(failure.output))
        self._emit(job_id, "failed", {"exit": failure.exit, "failures": failure.count,
                                      "iterations": failure.iterations})
        s.rounds.wake("failure")
        return True

    def failure(self, job_id: int) -> Failure | None:
        """The job's last failure of its own, if any (this run's, or replayed)."""
        return self.state.failures.last.get(job_id)

    def stopping(self, job_ids: Iterable[int]) -> None:
        """running -> stopping: a round stops these jobs (one journal transaction for all);
        one already stopping (a round that failed midway) stays so."""
        now = self.state.now()
        moving = [j for j in job_ids if self._phases.get(j) is not STOPPING]
        self._enter_many("stopping", moving, now)

    def stopped(self, job_id: int, was: Placed, iterations: float, finished: bool,
                reason: str, preempted: bool) -> bool:
        """stopping -> queued: the round's stop ended on every node, its checkpoint the truth.
        A trainer that ended on its own just before the stop reached it finished: done is
        done, whatever the reply's flag says (a relaunch at its total would run it twice)."""
        s = self.state
        if not self._may("stopped", job_id):
            return False
        total = self.total(job_id)
        node = node_name(was.slices[0].node)
        now = s.now()
        iterations = self._judge(job_id, iterations, f"stop report from {node}")
        if finished or iterations >= total:
            return self.finish(job_id, now, iterations, node, strays=False)
        if self._enter("stopped", job_id, ts=now, iterations=iterations, node=node,
                       detail={"reason": reason}, preempted=preempted) is None:
            return False
        s.inbox.put(Checkpointed(job_id, total - iterations))
        self.settled[job_id] = iterations
        if not preempted:
            self.regroup_stops[job_id] += 1
        s.ledger.unplace(job_id)
        s.measured.stopped(job_id)
        s.log.info("job_stopped", job_id=job_id, reason=reason, iterations=iterations,
                   now=now, nodes=[node_name(n) for n in was.nodes])
        self._emit(job_id, "stopped", {"reason": reason, "iterations": iterations})
        return True

    def regrouped(self, job_id: int, want: Placed) -> bool:
        """running -> running: its agents took the new group and pace in place."""
        s = self.state
        slot = want.group.index(job_id)
        if self._enter("regrouped", job_id,
                       detail={"group": list(want.group), "tt": want.tt}) is None:
            return False
        s.ledger.regroup(job_id, want)
        self.regroups[job_id] += 1
        self._tt[job_id] = min(self._tt.get(job_id, want.tt), want.tt)
        s.log.info("job_regrouped", job_id=job_id, group=list(want.group), slot=slot,
                   tt=want.tt, now=s.now(), nodes=[node_name(n) for n in want.nodes])
        self._emit_running(job_id, want)
        return True

    def requeue(self, job_id: int, now: float, reason: str, skip: str | None = None,
                iterations: float | None = None, alone: bool = False) -> bool:
        """launching, running or stopping -> queued, outside a plan (an agent lost, a trainer
        failed or vanished, a scheduler restart), resuming from its checkpoint. A job whose
        checkpoint already holds every iteration finished unheard (its agent died before
        passing the trainer's end on): it is finished here, not launched once more. `skip`:
        the node that reported it, where no trainer is left to stop. `alone`: it ran out of
        GPU memory beside others, and runs alone from now on (journaled: a restarted
        scheduler keeps that)."""
        s = self.state
        if not self._may("requeue", job_id):
            return False
        done, finished = self._resume_or_finish(job_id, now, iterations, skip, reason)
        if finished is not None:
            return finished
        total = self.total(job_id)
        detail: dict[str, Any] = {"reason": reason, **({"alone": True} if alone else {})}
        if self._enter("requeue", job_id, ts=now, iterations=done, node=skip,
                       detail=detail, preempted=True) is None:
            return False
        s.inbox.put(Requeued(job_id, now, total - done, alone))
        self.settled[job_id] = done
        where = s.ledger.release(job_id, keep=skip)
        s.measured.stopped(job_id)
        s.log.info("job_stopped", job_id=job_id, reason=reason, iterations=done, now=now,
                   nodes=[node_name(n) for n in (where.nodes if where else ())])
        self._emit(job_id, "stopped", {"reason": reason, "iterations": done})
        s.rounds.wake("requeue")
        return True

    def checkpointed(self, job_id: int, iterations: float, node: str, reason: str) -> bool:
        """queued -> queued: a trainer of a waiting job stopped (a stop reported after its
        round, a stray) with a checkpoint the job now resumes from."""
        s = self.state
        if job_id in self.records:  # else refused below, as any transition of no job
            iterations = self._judge(job_id, iterations, f"{reason} on {node}")
        if self._enter("checkpointed", job_id, iterations=iterations, node=node,
                       detail={"reason": reason}) is None:
            return False
        s.inbox.put(Checkpointed(job_id, self.total(job_id) - iterations))
        self.settled[job_id] = iterations
        return True

    def finish(self, job_id: int, now: float, iterations: float, node: str | None,
               strays: bool = True) -> bool:
        """Any live phase -> finished. Its trainers on other nodes than `node` (the one that
        reported) become strays, unless `strays` is False (a stop ended on every node)."""
        s = self.state
        entry = self._enter("finish", job_id, ts=now, iterations=iterations, node=node)
        if entry is None:
            return False
        s.inbox.put(Finished(job_id, now))
        self.settled[job_id] = iterations
        if strays:
            s.ledger.release(job_id, keep=node)
        else:
            s.ledger.unplace(job_id)
        s.measured.ended(job_id)  # a requeue keeps its estimates: the job runs again
        submit, start = entry.submit_trace, entry.first_start_trace
        queue_delay = None if start is None else start - submit
        s.log.info("job_finished", job_id=job_id, node=node, iterations=iterations,
                   submit=submit, start=start, end=now, jct=now - submit,
                   queue_delay=queue_delay, preemptions=entry.preemptions,
                   model=entry.record.model_name, num_gpu=entry.record.num_gpu,
                   trace_submit=entry.record.submit_time)
        self._emit(job_id, "finished", {"submit": submit, "start": start, "end": now})
        s.metrics.job_finished(now - submit, queue_delay)
        s.rounds.wake("completion")
        return True

    def cancel(self, job_id: int, now: float) -> str | None:
        """Any live phase -> cancelled, by a user: a queued job leaves the queue, a running
        one's trainers become strays the main thread stops (their late reports find it
        ended). Returns what it was (the status reply's word), None when refused."""
        s = self.state
        if not self._may("cancel", job_id):
            return None
        was = self.status_of(job_id)
        done = max(self.resume_point(job_id), s.measured.progress.get(job_id, 0.0))
        if self._enter("cancel", job_id, ts=now, iterations=done) is None:
            return None
        s.inbox.put(Finished(job_id, now, cancelled=True))
        self.settled[job_id] = done
        where = s.ledger.release(job_id, keep=None)
        s.measured.ended(job_id)
        s.log.info("job_cancelled", job_id=job_id, was=was, iterations=done, now=now,
                   nodes=[node_name(n) for n in (where.nodes if where else ())])
        self._emit(job_id, "cancelled", {"was": was, "iterations": done})
        s.rounds.wake("cancel")
        return was

    def _resume_or_finish(self, job_id: int, now: float, iterations: float | None,
                          node: str | None, reason: str) -> tuple[float, bool | None]:
        """The iterations a job stopped outside a plan resumes from (its checkpoint, or the
        reported `iterations` where ahead), and None; or, where they are all of them (it
        finished unheard: its agent died before passing the trainer's end on), the job
        finished here, never launched once more, and that transition's result."""
        done = self.resume_point(job_id)
        if iterations is not None:
            done = max(done, self._judge(job_id, iterations, f"{reason} ({node})"))
        if done < self.total(job_id):
            return done, None
        self.state.log.info("job_finished_unheard", job_id=job_id, reason=reason,
                            iterations=done, node=node)
        return done, self.finish(job_id, now, done, node)

    # -- the one place phases change -----------------------------------------------------------
    def _enter(self, name: str, job_id: int, ts: float | None = None, **fields: Any) -> Any:
        """Transition `name` of MOVES for the job: journaled, then its phase recorded. The
        journal's entry of the job after it, or None when refused."""
        move = MOVES[name]
        if not self._may(name, job_id):
            return None
        before = self._phases.get(job_id)
        entry = self.state.journal.record(Transition(
            job_id, move.target, move.kind, self.state.now() if ts is None else ts,
            durable=move.durable, **fields))
        if entry is None:  # the journal's phase is not ours: the stores disagree
            self._refuse(name, job_id, before, "the journal refused it")
            return None
        if fields.get("iterations") is not None:  # settled: what later claims are judged by
            self.guard.good(job_id, fields["iterations"], ts)
        self._set(job_id, move.target)
        if entry.preemptions:
            self.preemptions[job_id] = entry.preemptions
        return entry

    def _enter_many(self, name: str, job_ids: Iterable[int], ts: float) -> None:
        """`_enter` for each job, in one journal transaction."""
        move = MOVES[name]
        legal = [Transition(job_id, move.target, move.kind, ts, durable=move.durable)
                 for job_id in job_ids if self._may(name, job_id)]
        for change, entry in zip(legal, self.state.journal.record_many(legal)):
            if entry is None:
                self._refuse(name, change.job_id, self._phases.get(change.job_id),
                             "the journal refused it")
            else:
                self._set(change.job_id, move.target)

    def _may(self, name: str, job_id: int) -> bool:
        """Whether transition `name` may leave the job's phase; if not, it is refused."""
        before = self._phases.get(job_id)
        if before in MOVES[name].sources:
            return True
        self._refuse(name, job_id, before, "not allowed from its phase")
        return False

    def _set(self, job_id: int, phase: Phase) -> None:
        before = self._phases.get(job_id)
        if before is not None:
            self.counts[before] -= 1
        self._phases[job_id] = phase
        self.counts[phase] += 1

    def _refuse(self, name: str, job_id: int, before: Phase | None, why: str) -> None:
        key = f"{name} from {before.value if before else 'none'}"
        self.refused[key] += 1
        self.state.log.warning("transition_refused", job_id=job_id, transition=key, why=why,
                               refused=self.refused[key])

    def _emit(self, job_id: int, state: str, detail: dict[str, Any]) -> None:
        self.state.outbox.append(("event.job", {"job_id": job_id, "state": state,
                                                "detail": detail}))

    def _emit_running(self, job_id: int, where: Placed) -> None:
        self._emit(job_id, "running", {"nodes": [node_name(n) for n in where.nodes],
                                       "group": list(where.group), "tt": where.tt})
