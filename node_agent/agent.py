"""The node agent: `python -m node_agent.agent --node NAME --gpus 0,1,2,3 --endpoints FILE ...`.

One per node. It registers with the scheduler and heartbeats, serves `job.launch` / `job.stop`
/ `job.regroup` as service `agent.<NAME>`, runs the trainers of each job (one process for an
emulated job, one rank per GPU for a torch job), runs a stage gate for every group that
shares its GPUs, and tells the scheduler how each trainer ended. State changes travel
request/reply and are retried until acknowledged (`job.finished`, `job.stopped`); only
telemetry goes over the lossy bus (from the trainers).

With keys, it obeys only requests sent under the scheduler's key (specs/keyroles.py), and
the broker lets only the key agent-NAME serve `agent.<NAME>`.

This module holds the request rules (`Agent`) and the loop that wires the parts:
checks.py (what a request must satisfy), launcher.py (processes), jobs.py (the job table and
its outbox), gates.py (stage gates), link.py (register, heartbeat, deliver), cli.py.

Threads: the service thread answers requests (launch/stop touch the job table under its
lock) and never waits on a trainer: a stop is answered at once (`stopping`) and carried out
by a thread of its own, which reports its end as `job.stopped` (`requested`) through the
outbox. The main thread registers, heartbeats, reaps exited trainers and delivers the outbox.
Each zmq socket is used by the one thread that created it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from broker.refusal import Refusal, as_handler, bounded_strings
from node_agent import checks, launcher, user_command
from node_agent.config import AgentConfig
from node_agent.gates import takes_turns
from node_agent.jobs import Job, JobTable
from node_agent.link import Link
from specs.keyroles import orders_refusal
from trainer import checkpoint, pace
from trainer.exits import EXIT_FINISHED


class Agent:
    """The rules for launching, stopping and regrouping trainers, over the job table."""

    def __init__(self, cfg: AgentConfig, log: Any):
        self.cfg = cfg
        self.log = log
        self.table = JobTable(cfg, log)
        self._stoppers: dict[int, threading.Thread] = {}  # job -> the thread stopping it
        # on a keyed broker every request names its key, and only the scheduler's is obeyed:
        # a tenant's key would otherwise launch any command here as this agent's user
        self.keyed = cfg.client_key is not None

    # -- requests from the scheduler (service thread) ---------------------------------------
    def handle(self, msg: Any) -> dict[str, Any]:
        """Answer one request; raises Refusal for anything it will not do."""
        if self.keyed or msg.caller is not None:
            refusal = orders_refusal(msg.caller or "", self.cfg.node, msg.type)
            if refusal is not None:
                raise Refusal("forbidden", refusal)
        bounded_strings(msg.fields, checks.STRING_LIMITS)  # before anything is read or kept
        if msg.type == "job.launch":
            return self._launch(msg)
        if msg.type == "job.stop":
            return self._stop(int(msg["job_id"]))
        if msg.type == "job.regroup":
            return self._regroup(msg)
        if msg.type == "status.query":
            return {"node": self.cfg.node, "gpus": list(self.cfg.gpus), "running": self.table.running()}
        raise Refusal("unsupported", f"agent {self.cfg.node} does not handle {msg.type!r}")

    def _launch(self, msg: Any) -> dict[str, Any]:
        job_id = int(msg["job_id"])
        gpus = checks.gpus(msg["gpus"], self.cfg.node, self.cfg.gpus)
        workload = checks.workload(msg["workload"])
        total = workload["iterations"]
        rank, world = checks.ranks(msg)
        start = checks.start_iteration(msg)
        table = self.table
        with table.lock:
            table.collect_locked()
            job = table.jobs.get(job_id)
            if job is not None and job.stopping:
                raise Refusal("busy", f"job {job_id} is being stopped; retry after the stop")
            if job is not None:
                return {"launched": False, "already_running": True, "pid": job.proc.pid,
                        "gpus": list(job.gpus), "incarnation": table.incarnation,
                        "launch_seq": table.launches}
            group = tuple(int(j) for j in msg["group"])
            rendezvous = {}
            if workload["kind"] in ("torch", "command") and world > 1:
                port = msg.get("master_port") or (launcher.free_port() if rank == 0 else None)
                if not port:
                    raise Refusal("bad_request", "rank > 0 needs rank 0's master_port")
                rendezvous = {"master_addr": msg.get("master_addr") or self.cfg.address,
                              "master_port": int(port)}
            gate = table.gates.for_group(group, workload) if len(group) > 1 else None
            pace_file = self.cfg.trainer_dir / f"{job_id}.pace" \
                if workload["kind"] == "emulated" else None
            procs = launcher.spawn(self.cfg, job_id, gpus, workload, start, rank, world,
                                   rendezvous, gate, pace_file)
            progress = user_command.progress_path(self.cfg, job_id, workload) \
                if workload["kind"] == "command" else None
            table.jobs[job_id] = Job(job_id=job_id, procs=procs, gpus=gpus, total=total,
                                     group=list(group), slot=int(msg["slot"]), start=start,
                                     gate=group if gate is not None else (),
                                     takes_turns=takes_turns(workload), pace_file=pace_file,
                                     progress_file=progress, seq=table.launches + 1)
            table.launches += 1
            seq = table.launches
        self.log.info("job_launched", job=job_id, pids=[p.pid for p in procs], gpus=list(gpus),
                      total=total, kind=workload["kind"], start_iteration=start, rank=rank,
                      world_size=world, gate=gate.endpoint if gate is not None else None,
                      **rendezvous)
        return {"launched": True, "already_running": False, "pid": procs[0].pid,
                "gpus": list(gpus), "incarnation": table.incarnation, "launch_seq": seq,
                **rendezvous}

    def _regroup(self, msg: Any) -> dict[str, Any]:
        """The job goes on, on the same GPUs, with other group members, without a restart:
        an emulated trainer takes the group's new pace from its pace file; a trainer that
        takes turns keeps its stage gate, which takes the new members and slot order; a
        program that takes no turns goes on at its own pace. One that takes turns but ran
        alone here holds no gate: `unsupported`, and the scheduler restarts it instead (the
        core knows: CostModel.regroup_in_gate)."""
        job_id, tt, group = checks.regroup(msg)
        table = self.table
        with table.lock:
            table.collect_locked()
            job = table.jobs.get(job_id)
            if job is None or job.stopping:
                raise Refusal("not_running", f"job {job_id} does not run on {self.cfg.node}")
            if job.pace_file is not None:
                pace.write(job.pace_file, tt)
            elif job.takes_turns and not table.gates.regroup(job, tuple(int(j) for j in group)):
                raise Refusal("unsupported", f"job {job_id}'s trainer runs alone here, with "
                                             "no stage gate to regroup in place")
            job.group, job.slot = group, int(msg["slot"])
        its = self.table.iterations(job)
        self.log.info("job_regrouped", job=job_id, group=group, iteration_time=tt,
                      iterations=its, gate=bool(job.gate))
        return {"regrouped": True, "iterations": its}

    def _stop(self, job_id: int) -> dict[str, Any]:
        """Answered at once: a running job is SIGTERMed and reported `stopping`; the wait for
        its checkpoint runs on a thread of its own (`_finish_stop`), so this service thread
        answers other requests meanwhile and the scheduler's request never waits on a trainer.
        A repeated stop answers `stopping` again; a job not running here, its checkpoint."""
        with self.table.lock:
            self.table.collect_locked()
            job = self.table.jobs.get(job_id)
            again = job is not None and job.stopping
            if job is not None and not again:
                job.stopping = True
                launcher.sigterm(job.procs)  # before the reply: the stop is under way once answered
                stopper = threading.Thread(target=self._finish_stop, args=(job,),
                                           name=f"agent-stop-{job_id}", daemon=True)
                self._stoppers[job_id] = stopper
                stopper.start()  # under the lock: stop_all never finds it unstarted
        if job is None:  # a trainer that exited before the stop came may have finished
            ckpt = checkpoint.read(self.cfg.checkpoint_dir, job_id)
            return {"iterations": ckpt.iterations if ckpt is not None else 0.0,
                    "was_running": False, "finished": bool(ckpt is not None and ckpt.done),
                    "exit_code": None}
        its = self.table.iterations(job)
        if not again:
            self.log.info("job_stopping", job=job_id, pids=[p.pid for p in job.procs],
                          iterations=its)
        return {"stopping": True, "iterations": its, "was_running": True, "finished": False,
                "exit_code": None}

    def _finish_stop(self, job: Job) -> None:
        """A stop thread: wait for the trainer's checkpoint (SIGKILL after the stop timeout),
        then drop the job and queue its `job.stopped` report as one step, so a heartbeat never
        shows the job gone before the report of how it ended."""
        rc = None
        try:
            rc = self._terminate(job)
        except Exception:  # never leave the job stuck in `stopping`
            self.log.exception("stop_failed", job=job.job_id)
        its = self.table.iterations(job)
        finished = self.ended_finished(job.job_id, rc)  # it completed as the stop arrived
        report = {"job_id": job.job_id, "node": self.cfg.node, "iterations": its,
                  "requested": True, "finished": finished, **self.table.token(job)}
        if rc is not None:
            report["exit_code"] = rc
        with self.table.lock:
            if self.table.jobs.get(job.job_id) is job:
                del self.table.jobs[job.job_id]
            self._stoppers.pop(job.job_id, None)
            self.table.outbox.append(("job.stopped", report))
        self.table.reported.set()  # a round waits on this report: no tick's delay
        self.log.info("job_stopped", job=job.job_id, iterations=its, exit=rc, finished=finished)

    def ended_finished(self, job_id: int, rc: int | None) -> bool:
        """Whether a stopped trainer had in fact finished: exit 0, or its final checkpoint
        (done) is written. A trainer that finished just as a SIGTERM came can die of it in
        its interpreter's teardown (default handlers again) after writing that checkpoint;
        reported `stopped`, the job ran a second time, from its end (found under Slurm)."""
        if rc == EXIT_FINISHED:
            return True
        ckpt = checkpoint.read(self.cfg.checkpoint_dir, job_id)
        return bool(ckpt is not None and ckpt.done)

    def shutdown_report(self, job: Job, rc: int | None) -> tuple[str, dict[str, Any]]:
        """The report of a job stopped because the agent is shutting down."""
        fields = {"job_id": job.job_id, "node": self.cfg.node,
                  "iterations": self.table.iterations(job), **self.table.token(job)}
        if self.ended_finished(job.job_id, rc):
            return "job.finished", dict(fields, ok=True)
        return "job.stopped", fields

    def _terminate(self, job: Job) -> int:
        """SIGTERM every rank, wait (bounded), SIGKILL; returns the lead's exit status."""
        rc = launcher.terminate(self.cfg, job.job_id, job.procs, self.log)
        with self.table.lock:
            self.table.release_gate(job)
        return rc

    def stop_all(self) -> list[tuple[Job, int]]:
        """Stop every trainer (SIGTERM all first, then wait each); returns (job, exit status)
        of those not already being stopped on request, whose threads queue their own reports
        and are waited for here."""
        with self.table.lock:
            jobs = [job for job in self.table.jobs.values() if not job.stopping]
            for job in jobs:
                job.stopping = True
            stoppers = list(self._stoppers.values())
        for job in jobs:
            launcher.sigterm(job.procs)
        out = [(job, self._terminate(job)) for job in jobs]
        with self.table.lock:
            for job in jobs:
                self.table.jobs.pop(job.job_id, None)
        for stopper in stoppers:
            stopper.join(self.cfg.stop_timeout + 5.0)
        return out


def _serve(cfg: AgentConfig, endpoints: Any, agent: Agent, stop: threading.Event,
           log: Any) -> None:
    """The service thread: answers requests until `stop`; refusals become error replies."""
    from broker.client import Service

    service = Service(endpoints, cfg.name, as_handler(agent.handle, log, log_refusals=True),
                      heartbeat=cfg.heartbeat)
    try:
        service.serve(stop, every=max(cfg.tick, 0.1))
    finally:
        service.close()


def _serve_metrics(cfg: AgentConfig, agent: Agent, log: Any) -> Any:
    """The agent's /metrics server when --metrics asked for one (None otherwise)."""
    if cfg.metrics is None:
        return None
    from broker.metrics_http import MetricsServer, MetricsUnavailable
    from node_agent.metrics import AgentMetrics

    metrics = AgentMetrics(cfg.node, cfg.gpus, agent.table)
    agent.table.gates.on_event = metrics.gate_event
    try:
        return MetricsServer(metrics.registry, *cfg.metrics, key=cfg.metrics_key,
                             insecure=cfg.metrics_insecure, log=log,
                             key_always=cfg.metrics_key_always)
    except MetricsUnavailable as err:
        log.error("metrics_unavailable", detail=str(err))
        raise SystemExit(f"node-agent {cfg.node}: {err}") from None


def _rest(stop: threading.Event, woken: threading.Event, tick: float) -> None:
    """Until `tick` s passed, a report was queued (`woken`) or `stop` is set; `stop` looked
    at every half second at most, so an agent stops that soon whatever its tick."""
    end = time.monotonic() + tick
    while not stop.is_set():
        left = end - time.monotonic()
        if left <= 0 or woken.wait(min(left, 0.5)):
            return


def run(cfg: AgentConfig, stop: threading.Event, log: Any) -> int:
    """Serve until `stop` is set, then stop all trainers (checkpointing) and say so."""
    from broker.curve import component_endpoints

    endpoints = component_endpoints(f"node-agent {cfg.node}", cfg.endpoints_file,
                                    cfg.wait_endpoints, cfg.client_key, stop, log)
    if endpoints is None:
        return 1
    agent = Agent(cfg, log)
    metrics_server = _serve_metrics(cfg, agent, log)
    svc_stop = threading.Event()
    svc = threading.Thread(target=_serve, args=(cfg, endpoints, agent, svc_stop, log),
                           name="agent-service", daemon=True)
    svc.start()
    link = Link(cfg, endpoints, agent.table, log)
    tick = min(cfg.tick, cfg.heartbeat / 4)
    log.info("agent_start", node=cfg.node, gpus=list(cfg.gpus), cpus=cfg.cpus, mem=cfg.mem,
             pid=os.getpid(), time_scale=cfg.time_scale)
    try:
        while not stop.is_set():
            agent.table.reported.clear()  # what is queued from here on is delivered next pass
            agent.table.collect()
            try:
                link.step()
            except Exception:  # a bug in one exchange must not take the node's trainers down
                log.exception("link_step_failed")
                link.retry_at = time.monotonic() + cfg.heartbeat
            if not svc.is_alive():
                log.error("service_thread_died")
                return 1
            _rest(stop, agent.table.reported, tick)
    finally:
        svc_stop.set()  # no launches from here on
        svc.join(timeout=5.0)
        for job, rc in agent.stop_all():
            agent.table.outbox.append(agent.shutdown_report(job, rc))
        agent.table.collect()
        link.deliver(once=True)
        link.req.close()
        if metrics_server is not None:
            metrics_server.close()
        log.info("agent_exit", node=cfg.node)
    return 0


if __name__ == "__main__":
    from node_agent.cli import start

    sys.exit(run(*start()))
