"""The scheduler's request handlers: one method per request type, run on the service thread.

Each checks its request (what the schema cannot: node names, job records against the spec,
running lists) and refuses with `Refusal(code, reason)`, then changes the shared state under
its lock; what the core must hear goes to the loop as an event (scheduler/events.py), and
what a reply says of the core comes from its last view (coreview.py). A handler never talks
to an agent, and never waits for a round, so neither delays an acknowledgement.
"""
from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

from broker.refusal import Refusal, all_ints, bounded_strings, running_list
from scheduler.events import NodeOnline
from scheduler.live.access import caller_of, own_max_job_id, owns, submit_as, taken_from_other
from scheduler.live.failures import split_report
from scheduler.live.gateway import AgentSeen
from scheduler.live.ledger import node_name
from scheduler.live.lifecycle import STOPPING
from scheduler.live.state import LiveState
from scheduler.live import status
from specs.limits import (MAX_COMMAND_ARGS, MAX_COMMAND_CHARS, MAX_DETAIL_CHARS,
                          MAX_PATH_CHARS)
from traces.record import JobRecord, record_from_map
from traces.validate import validate

# An agent's GPUs may hold this much less than the spec says and still take work: a card sold
# as 80 GB reports a little less usable memory, which the group reserve (2 GB) covers.
GPU_MEM_SLACK = 0.05


class Handlers:
    def __init__(self, state: LiveState):
        self.state = state
        # node -> the reason its agent's registration was last refused for (logged once)
        self._shape_said: dict[str, str] = {}
        self.tenancy = state.opt.tenancy  # never changes: read without the lock

    def handle(self, msg: Any) -> dict[str, Any]:
        """Answer one request; Refusal for anything malformed or not applicable."""
        handler = self._HANDLERS.get(msg.type)
        if handler is None:
            raise Refusal("unsupported", f"the scheduler does not handle {msg.type!r}")
        caller_of(self.tenancy, msg)  # forbidden: a key that may not send this kind
        bounded_strings(msg.fields, STRING_LIMITS)  # before anything is read, logged or kept
        if handler is Handlers.on_submit:  # journals first, then takes the lock
            return handler(self, msg)
        with self.state.lock:
            return handler(self, msg)

    # -- checks ------------------------------------------------------------------------------
    def parse_job(self, data: Any) -> JobRecord:
        try:
            record = record_from_map(data)
        except (TypeError, ValueError) as err:
            raise Refusal("bad_job", f"not a job record: {err}") from None
        problems = validate([record], spec=self.state.opt.spec)
        if problems:
            raise Refusal("bad_job", "; ".join(f"{p.field}: {p.message}" if p.field else p.message
                                               for p in problems))
        if not math.isfinite(record.iterations * record.iteration_time):
            raise Refusal("bad_job", "iterations x iteration_time is not finite")
        problem = command_problem(record)
        if problem:
            raise Refusal("bad_job", problem)
        return record

    def node_index(self, name: Any) -> int:
        nodes = self.state.opt.spec.num_nodes
        if isinstance(name, str) and name.startswith("n") and name[1:].isdigit():
            index = int(name[1:])
            if 0 <= index < nodes and name == node_name(index):
                return index
        raise Refusal("unknown_node", f"{name!r} is not a node of this cluster "
                                      f"(n0..n{nodes - 1})")

    # -- handlers ----------------------------------------------------------------------------
    def on_submit(self, msg: Any) -> dict[str, Any]:
        state = self.state
        caller = caller_of(self.tenancy, msg)
        record = submit_as(caller, self.tenancy, self.parse_job(msg["job"]))
        key = msg.get("submission")
        submission = None if key is None else (msg.caller or "", key)
        if submission is not None:
            if not key:
                raise Refusal("bad_request", "submission must be a non-empty key")
            earlier = state.journal.submitted(*submission)
            if earlier is not None:  # a retry, after any crash: the job it made, never another
                return self._submitted_before(record, earlier, key, bool(msg.get("new_id")))
        if msg.get("new_id"):  # the scheduler gives the id: no submitter has to guess one
            with state.lock:  # only this thread adds ids, so it stays free until accepted
                record = replace(record, job_id=state.jobs.known() + 1)
        problem = state.submit_problem(record)
        if problem:
            raise Refusal("bad_job", problem)
        taken_from_other(state, caller, record.job_id)
        if not state.jobs.accept(record, state.now(), submission):  # durable before the reply
            return {"accepted": False, "job_id": record.job_id, "reason": "duplicate"}
        return {"accepted": True, "job_id": record.job_id}

    def _submitted_before(self, record: JobRecord, job_id: int, key: str,
                          new_id: bool) -> dict[str, Any]:
        """The answer to a submission whose key the journal holds: the job it made, when
        this is the same job again; a key reused for another job is refused."""
        entry = self.state.journal.get(job_id)
        if entry is None or (not new_id and record.job_id != job_id) \
                or replace(entry.record, job_id=0) != replace(record, job_id=0):
            raise Refusal("bad_request", f"submission {key[:64]!r} made job {job_id}, a "
                                         "different job: name each submission by a key of "
                                         "its own")
        return {"accepted": True, "already": True, "job_id": job_id}

    def on_register(self, msg: Any) -> dict[str, Any]:
        state, ledger = self.state, self.state.ledger
        name = msg["node"]
        index = self.node_index(name)
        gpus = msg["gpus"]
        if not all_ints(gpus):
            raise Refusal("bad_request", f"gpus must be a list of ints, got {gpus!r}")
        running = running_list(msg.get("running") or [])
        gpu_mem = float(msg.get("gpu_mem_gb") or 0.0)
        gpu_type = msg.get("gpu_type") or ""
        self._check_node_shape(name, index, len(gpus), gpu_mem, gpu_type)
        was = name in state.agents
        state.rounds.awaiting.discard(name)
        state.agents[name] = AgentSeen(tuple(gpus), msg["cpus"], msg["mem"], state.clock(),
                                       msg.get("incarnation"), gpu_mem, gpu_type)
        state.inbox.put(NodeOnline(index, True))
        now = state.now()
        reported = dict(running)
        kept, strays, lost = [], [], []
        for job_id, done in running:
            where = ledger.where(job_id)
            if where is not None and index in where.nodes:
                kept.append(job_id)
                state.measured.note_progress(job_id, done)
            else:
                strays.append(job_id)
                ledger.strays.append((job_id, name))
        for job_id in list(ledger.on(index)):
            if job_id not in reported:
                lost.append(job_id)  # the agent restarted and no longer runs it
                state.jobs.requeue(job_id, now, f"not running on re-registered {name}",
                                   skip=name)
        state.log.info("agent_registered", node=name, gpus=list(gpus), cpus=msg["cpus"],
                       mem=msg["mem"], again=was, kept=kept, strays=strays, lost=lost,
                       **({"gpu_type": gpu_type} if gpu_type else {}))
        state.outbox.append(("event.agent", {"node": name, "state": "registered"}))
        state.journal.log_event("agent_registered", now, node=name,
                                detail={"gpus": list(gpus), "strays": strays, "lost": lost})
        state.rounds.wake("agent")
        # its trainers stop by themselves after this long unheard: before this scheduler
        # declares the agent dead and runs their jobs elsewhere
        return {"registered": True, "node": name, "strays": strays,
                "lease_s": round(LEASE_SHARE * state.opt.agent_timeout, 3)}

    def _check_node_shape(self, name: str, index: int, gpus: int, gpu_mem: float,
                          gpu_type: str) -> None:
        """Refuse an agent that cannot hold what the spec plans for its node: fewer GPUs than
        the node's pool gives it (a placement there would name GPUs it lacks), GPUs with less
        memory than the pool's (groups planned for that memory would not fit), or GPUs of
        another type than the pool states (jobs that asked for that type would run on
        another). What the agent does not state is not checked. The refused agent asks again
        every heartbeat: its refusal is logged once, until it registers or the reason
        changes."""
        state = self.state
        pool = state.nodes.pool(index)
        # a Muri-form spec is one pool named by no one: name the spec's column instead
        gives, plans = ((f"pool {pool.name}", f"pool {pool.name}") if state.opt.spec.pools
                        else ("the spec", "gpu_mem_p_gpu"))
        refusal = None
        if gpus < pool.gpus_per_node:
            refusal = ("agent_short_of_gpus", {"gpus": gpus, "spec_gpus": pool.gpus_per_node},
                       Refusal("short_of_gpus", f"{name} lists {gpus} of the "
                               f"{pool.gpus_per_node} GPUs {gives} gives it: start it with "
                               "--gpus naming them all"))
        elif gpu_mem and pool.gpu_mem_gb and gpu_mem < pool.gpu_mem_gb * (1 - GPU_MEM_SLACK):
            refusal = ("agent_short_of_gpu_memory",
                       {"gpu_mem_gb": gpu_mem, "spec_gpu_mem_gb": pool.gpu_mem_gb},
                       Refusal("short_of_gpu_memory", f"{name}'s GPUs hold {gpu_mem:g} GB; "
                               f"the spec plans groups for {pool.gpu_mem_gb:g} GB ({plans}): "
                               "start it with a spec that says so"))
        elif gpu_type and pool.gpu_type and gpu_type != pool.gpu_type:
            refusal = ("agent_wrong_gpu_type",
                       {"gpu_type": gpu_type, "spec_gpu_type": pool.gpu_type},
                       Refusal("wrong_gpu_type", f"{name}'s GPUs are {gpu_type}; the spec's "
                               f"pool {pool.name} expects {pool.gpu_type}: start it on a "
                               f"node of {pool.gpu_type}s, or with a spec that says so"))
        if refusal is None:
            self._shape_said.pop(name, None)
            return
        event, detail, err = refusal
        if self._shape_said.get(name) != err.reason:
            self._shape_said[name] = err.reason
            state.log.error(event, node=name, pool=pool.name, reason=err.reason, **detail)
        raise err

    def on_heartbeat(self, msg: Any) -> dict[str, Any]:
        state = self.state
        name = msg["node"]
        index = self.node_index(name)
        agent = state.agents.get(name)
        if agent is None:
            raise Refusal("unknown_agent", f"{name} is not registered (or was declared dead); "
                                           "register again")
        incarnation, launches = msg.get("incarnation"), msg.get("launches")
        if incarnation is not None and agent.incarnation is not None \
                and incarnation != agent.incarnation:
            raise Refusal("unknown_agent", f"{name} restarted since it registered; "
                                           "register again")
        agent.last_seen = state.clock()
        state.gate_feed.note(name, msg.get("gate_spans") or [], state.now(), agent.last_seen,
                             state.opt.time_scale)
        running = running_list(msg.get("running") or [])
        here = state.ledger.on(index)
        for job_id, done in running:
            if job_id in here:
                state.measured.note_progress(job_id, done)
        if incarnation is not None and isinstance(launches, int):
            self._requeue_vanished(name, index, incarnation, launches, {j for j, _ in running})
        return {}

    def _requeue_vanished(self, name: str, index: int, incarnation: str, launches: int,
                          reported: set[int]) -> None:
        """Jobs placed here that the agent's snapshot no longer shows, though it was taken
        after their launch and with no report queued: they ended unheard (a stop or exit
        lost in a race). Left alone they would hold their GPUs forever; requeue them."""
        state = self.state
        for job_id, by in list(state.ledger.on(index).items()):
            if job_id in reported or state.jobs.phase(job_id) is STOPPING:
                continue
            if by is None or (by[0] == incarnation and by[1] > launches):
                continue  # launched after the snapshot (or by a scheduler before this one)
            state.log.warning("job_vanished", job_id=job_id, node=name, launch=by,
                              launches=launches)
            state.jobs.requeue(job_id, state.now(), f"no longer running on {name}", skip=name)

    def on_finished(self, msg: Any) -> dict[str, Any]:
        state, jobs = self.state, self.state.jobs
        job_id, name, its = msg["job_id"], msg["node"], float(msg["iterations"])
        index = self.node_index(name)
        if jobs.ended(job_id):
            return {"finished": True, "already": True}
        if jobs.phase(job_id) is None:
            raise Refusal("unknown_job", f"job {job_id} was never submitted here")
        now = state.now()
        if msg["ok"]:  # a fact whichever launch it ran in: the work is done
            jobs.finish(job_id, now, its, name)
            return {"finished": True, "already": False}
        if self._superseded(job_id, index, msg):
            return {"finished": False, "ignored": True}
        where = state.ledger.where(job_id)
        if where is None or index not in where.nodes:
            state.log.info("stale_report", job_id=job_id, node=name, ok=False)
            return {"finished": False, "ignored": True}
        exit, output = split_report(msg.get("detail") or "")
        if msg.get("oom"):  # out of GPU memory: never again beside others, and no failure
            jobs.requeue(job_id, now, f"trainer failed on {name}: {exit} (runs alone from "
                                      "now on)", skip=name, iterations=its, alone=True)
            return {"finished": False, "requeued": True}
        # its own program failed: it backs off, and fails for good after too many in a row
        jobs.run_failed(job_id, now, name, exit or "failed", output, its)
        return {"finished": False, "requeued": not jobs.ended(job_id)}

    def on_stopped(self, msg: Any) -> dict[str, Any]:
        """A trainer stopped. The end of a stop a round waits for wakes that round (which
        settles the job); one nobody waits for any more (`requested`, e.g. from before a
        scheduler restart) settles it here; any other (its agent shut down) requeues it."""
        state, jobs = self.state, self.state.jobs
        job_id, name = msg["job_id"], msg["node"]
        index = self.node_index(name)
        if job_id in jobs.past:
            return {"ignored": True}
        if jobs.phase(job_id) is None:
            raise Refusal("unknown_job", f"job {job_id} was never submitted here")
        if self._superseded(job_id, index, msg):
            return {"ignored": True}
        if state.stop_waits.report(job_id, name, msg.fields):
            return {"awaited": True}
        if msg.get("requested"):
            return self._settle_unawaited_stop(job_id, name, msg)
        where = state.ledger.where(job_id)
        if jobs.ended(job_id) or where is None or index not in where.nodes:
            return {"ignored": True}
        jobs.requeue(job_id, state.now(), f"stopped by {name}", skip=name,
                     iterations=float(msg["iterations"]))
        return {"requeued": True}

    def _superseded(self, job_id: int, index: int, msg: Any) -> bool:
        """A report of a launch on this node that a later launch there has replaced (its
        fencing token, the agent's incarnation and launch number, is not the placed one's):
        a late stop or failure of the old trainer must not stop, requeue or fail the new."""
        placed = self.state.ledger.on(index).get(job_id)
        token = (msg.get("incarnation"), msg.get("launch_seq"))
        if placed is None or None in token or tuple(placed) == token:
            return False
        self.state.log.info("stale_report", job_id=job_id, node=msg["node"], launch=token,
                            current=list(placed), type=msg.type)
        return True

    def _settle_unawaited_stop(self, job_id: int, name: str, msg: Any) -> dict[str, Any]:
        """The end of a stop that no round waits for: a job that completed is finished; one
        that runs again (placed or launching) is left alone, never run twice; a waiting one
        resumes from the stop's checkpoint when that is ahead of what is known."""
        state, jobs = self.state, self.state.jobs
        its = float(msg["iterations"])
        if jobs.ended(job_id):
            return {"ignored": True}
        if msg.get("finished"):
            jobs.finish(job_id, state.now(), its, name)
            return {"finished": True}
        if state.ledger.where(job_id) is not None:
            state.log.info("stale_stop_report", job_id=job_id, node=name, iterations=its)
            return {"ignored": True}
        if its > jobs.resume_point(job_id):
            jobs.checkpointed(job_id, its, name, "stop reported after its round")
        state.log.info("late_stop_settled", job_id=job_id, node=name, iterations=its)
        return {"settled": True}

    def on_cancel(self, msg: Any) -> dict[str, Any]:
        """A user cancels a job: journaled as cancelled first; a pending job leaves the queue,
        a running one's trainers become strays that the main thread stops through their
        agents (their late reports find the job ended)."""
        state, jobs, job_id = self.state, self.state.jobs, msg["job_id"]
        phase = jobs.phase(job_id)
        caller = caller_of(self.tenancy, msg)
        # a tenant's key learns nothing of other tenants' jobs, not even that they exist
        if not caller.operator and (phase is None or not owns(caller, status.tenant_of(
                state, job_id))):
            raise Refusal("forbidden", f"job {job_id} is not a job of tenant "
                                       f"{caller.tenant!r}")
        if phase is None:
            raise Refusal("unknown_job", f"job {job_id} was never submitted here")
        if jobs.ended(job_id):
            return {"cancelled": False, "job_id": job_id,
                    "reason": f"already {jobs.status_of(job_id)}"}
        was = jobs.cancel(job_id, state.now())
        if was is None:  # refused (logged and counted)
            return {"cancelled": False, "job_id": job_id, "reason": "refused"}
        return {"cancelled": True, "job_id": job_id, "was": was}

    def on_status(self, msg: Any) -> dict[str, Any]:
        what = msg.get("what") or "all"
        if what not in ("all", "summary"):
            raise Refusal("bad_request", f"what must be 'all' or 'summary', got {what!r}")
        caller = caller_of(self.tenancy, msg)
        if caller.operator:
            return status.status(self.state, jobs=what == "all")
        reply = status.status(self.state, jobs=what == "all", tenant=caller.tenant)
        reply["max_job_id"] = own_max_job_id(self.state, caller)
        return reply

    _HANDLERS: Mapping[str, Callable[["Handlers", Any], dict[str, Any]]]
    _HANDLERS = MappingProxyType({
        "job.submit": on_submit,
        "agent.register": on_register,
        "agent.heartbeat": on_heartbeat,
        "job.finished": on_finished,
        "job.stopped": on_stopped,
        "status.query": on_status,
        "job.cancel": on_cancel,
    })


LEASE_SHARE = 0.6  # of --agent-timeout: an agent's lease (node_agent/lease.py)
# the strings of a request that may be longer than a name (specs.limits.MAX_NAME_CHARS)
STRING_LIMITS = MappingProxyType({"job.workdir": MAX_PATH_CHARS,
                                  "job.progress_file": MAX_PATH_CHARS,
                                  "job.command[]": MAX_COMMAND_CHARS,
                                  "detail": MAX_DETAIL_CHARS})


def command_problem(record: JobRecord) -> str | None:
    """What is wrong with a job's user command (None when fine or when it has none)."""
    command, workdir = record.command, record.workdir
    if not isinstance(workdir, str) or not isinstance(command, tuple):
        return "command must be a list of strings and workdir a string"
    if not isinstance(record.own_workdir, bool):
        return "own_workdir must be true or false"
    progress = record.progress_file
    if not isinstance(progress, str) or len(progress) > MAX_PATH_CHARS or "\0" in progress:
        return f"progress_file must be a path of at most {MAX_PATH_CHARS} characters"
    if not command:
        if record.own_workdir:
            return "own_workdir needs a command"
        if progress:
            return "progress_file needs a command"
        return "a workdir needs a command" if workdir else None
    if not all(isinstance(a, str) for a in command) or not command[0]:
        return "command must be a non-empty list of strings"
    if len(command) > MAX_COMMAND_ARGS or \
            sum(map(len, command)) + len(workdir) > MAX_COMMAND_CHARS:
        return f"command too long (at most {MAX_COMMAND_ARGS} arguments, " \
               f"{MAX_COMMAND_CHARS} characters)"
    if any("\0" in a for a in (*command, workdir)):
        return "command and workdir must not contain NUL"
    return None
