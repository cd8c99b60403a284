"""The agent's job table: the trainers it runs, what they did, and what the scheduler must
hear about them.

Messages to the scheduler wait in `outbox` (type, fields) until the link delivers them; a
heartbeat's snapshot is refused while one waits, so the scheduler never sees a job gone
before the report of how it ended. Each snapshot carries (incarnation, launches), taken with
the table: the scheduler can then tell a job this agent no longer runs from one launched
after the snapshot, and a restarted agent from this one.
"""
from __future__ import annotations

import collections
import math
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node_agent import launcher, progress_file
from node_agent.config import AgentConfig
from node_agent.gates import Gates
from specs.limits import MAX_DETAIL_CHARS
from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_OOM, EXIT_STOPPED


@dataclass
class Job:
    job_id: int
    procs: list  # subprocess.Popen per rank on this node, lowest rank first
    gpus: tuple[int, ...]
    total: float
    group: list = field(default_factory=list)
    slot: int = 0
    start: float = 0.0  # start_iteration of the launch: a floor until the first checkpoint
    stopping: bool = False
    started: float = field(default_factory=time.monotonic)
    gate: tuple = ()  # key of the group's stage gate here, if the job shares its GPUs
    takes_turns: bool = False  # its trainer asks a gate for its stages when it has one
    seq: int = 0  # its launch's number on this agent: with the incarnation, its fencing token
    pace_file: Path | None = None  # emulated: where a regroup in place tells the new pace
    progress_file: Path | None = None  # a command's: where it may write its iterations

    @property
    def proc(self) -> subprocess.Popen:
        """The lead process (lowest rank here): its exit is the job's exit on this node."""
        return self.procs[0]


class JobTable:
    """Jobs by id, their gates, the outbox and the launch count; `lock` guards them all
    (the service thread and the main thread both change them)."""

    def __init__(self, cfg: AgentConfig, log: Any):
        self.cfg, self.log = cfg, log
        self.lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        self.gates = Gates(cfg, log)
        self.outbox: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        # set when a report is queued off the main thread (a stop's end): the main loop
        # delivers it at once instead of at its next look (AgentConfig.tick)
        self.reported = threading.Event()
        self.incarnation = os.urandom(8).hex()
        self.launches = 0
        self.bad_progress: dict[int, str] = {}  # job -> the problem last logged of its file

    def iterations(self, job: Job) -> float:
        """Iterations done: the checkpoint's or a command's progress file's, whichever is
        ahead, never less than where the launch started it (a trainer stopped before its
        first checkpoint must not report its progress lost). A record that is no finite
        count is refused: never a report the schema refuses."""
        done = checkpoint.iterations(self.cfg.checkpoint_dir, job.job_id)
        if not 0 <= done < math.inf:
            self.log.warning("checkpoint_refused", job=job.job_id, claimed=repr(done),
                             reason="not a finite count", resumes_from=job.start)
            done = job.start
        done = max(done, job.start)
        if job.progress_file is None:
            return done
        value, problem = progress_file.read(job.progress_file, job.total)
        if problem is not None and self.bad_progress.get(job.job_id) != problem:
            self.bad_progress[job.job_id] = problem  # logged once, not at every heartbeat
            self.log.warning("progress_file_ignored", job=job.job_id,
                             path=str(job.progress_file), problem=problem)
        return done if value is None else max(done, value)

    def release_gate(self, job: Job) -> None:
        """Called with the lock held."""
        self.gates.release(job, self.jobs.values())

    def collect(self) -> None:
        """Reap exited trainers (not being stopped) and queue what the scheduler must hear."""
        with self.lock:
            self.collect_locked()

    def collect_locked(self) -> None:
        for job_id, job in list(self.jobs.items()):
            if job.stopping:
                continue
            rc = job.proc.poll()
            if rc is None:
                continue
            for rank in job.procs[1:]:  # the lead is done: the other ranks here follow it
                if rank.poll() is None:
                    rank.terminate()
            del self.jobs[job_id]
            self.release_gate(job)
            its = self.iterations(job)
            base = {"job_id": job_id, "node": self.cfg.node, "iterations": its,
                    **self.token(job)}
            if rc == EXIT_FINISHED:
                self.outbox.append(("job.finished", dict(base, ok=True)))
            elif rc == EXIT_STOPPED:  # stopped by someone other than the scheduler
                self.outbox.append(("job.stopped", base))
            else:
                self.outbox.append(("job.finished", dict(base, ok=False,
                                                         detail=self.failure(job_id, rc),
                                                         oom=rc == EXIT_OOM)))
            self.log.info("trainer_exited", job=job_id, exit=rc, iterations=its)

    def token(self, job: Job) -> dict[str, Any]:
        """Which launch a report is of (this agent's incarnation, the launch's number): the
        scheduler refuses a stop or failure of a launch it has since replaced."""
        return {"incarnation": self.incarnation, "launch_seq": job.seq}

    def failure(self, job_id: int, rc: int) -> str:
        """A failed trainer's `job.finished` detail: a first line saying how it ended (with
        its output's last line: a Python crash ends with the exception), then its output's
        last lines, which the scheduler shows with the job."""
        detail = launcher.describe_exit(rc)
        tail = launcher.output_tail(self.cfg.trainer_dir, job_id)
        if not tail:
            return detail
        lines = tail.splitlines()
        if rc > 0:
            detail += ": " + lines[-1][-300:]
        # within what the scheduler takes: a report it refused would be retried for ever
        return (detail + "\n" + "\n".join(lines[-launcher.OUTPUT_LINES:]))[:MAX_DETAIL_CHARS]

    def running(self) -> list[dict[str, Any]]:
        return self.snapshot(reported=False)["running"]

    def snapshot(self, reported: bool = True) -> dict[str, Any] | None:
        """What a heartbeat or registration tells: the jobs running and how many launches
        came before, taken together. With `reported`, None while a report is queued: a job
        that left the table must be reported before a heartbeat may show it missing."""
        with self.lock:
            if reported and self.outbox:
                return None
            jobs = sorted(self.jobs.values(), key=lambda j: j.job_id)
            launches = self.launches
        return {"running": [{"job_id": j.job_id, "iterations": self.iterations(j)}
                            for j in jobs],
                "incarnation": self.incarnation, "launches": launches}
