"""The live scheduler service against a real broker (in a thread) and fake agents.

Fake agents are real `agent.<node>` services that record launches and answer stops; they
register and heartbeat like the node agent does. Every wait is for a condition with a
deadline (a launch arriving, a status turning), never a fixed sleep.
"""
from __future__ import annotations

import queue
from dataclasses import replace
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from broker.testing import wait_until

from broker.broker import Broker
from broker.client import HandlerError, RequestFailed, Requester, Service
from trainer import checkpoint
from scheduler.live.journal import Journal
from scheduler.live.launches import stage_list
from scheduler.live.options import Options
from scheduler.live.service import SchedulerService
from tests.helpers import job, settle, spec
from traces.record import record_to_map

DEADLINE = 20.0  # seconds any single expected thing may take on a loaded 2-core machine


def wait_for(what: Callable[[], Any], timeout: float = DEADLINE, step: float = 0.02) -> Any:
    """Poll a condition until it holds; the value it returned, or an assertion error."""
    return wait_until(what, timeout, step)


class FakeAgent:
    """An `agent.<node>` service that records launches and stops; it registers and heartbeats."""

    def __init__(self, endpoints: Any, node: str, gpus=(0, 1, 2, 3), heartbeat: float = 0.1,
                 snapshots: bool = False, regroups: bool = False,
                 service_delay: float | None = None):
        self.endpoints, self.node, self.gpus, self.heartbeat = endpoints, node, gpus, heartbeat
        # like the node agent with emulated trainers: a job can change group where it runs
        self.regroups: queue.Queue | None = queue.Queue() if regroups else None
        # like the node agent: heartbeats carry (incarnation, launches) with `running`
        self.snapshots = snapshots
        self.incarnation, self.launch_count = f"fake-{node}", 0
        self.launches: queue.Queue = queue.Queue()
        self.stops: queue.Queue = queue.Queue()
        self.running: dict[int, float] = {}  # job_id -> iterations
        self.registrations = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beating = threading.Event()
        self._beating.set()
        self._routed = threading.Event()
        # like a restarted node agent: its registration may reach the scheduler before the
        # broker knows its service worker (two connections); None: the service comes first
        self.service_delay = service_delay
        self._registered = threading.Event()
        if service_delay is not None:
            self._routed.set()
        self._threads = [threading.Thread(target=self._serve, daemon=True),
                         threading.Thread(target=self._link, daemon=True)]
        for t in self._threads:
            t.start()

    def _handle(self, msg):
        with self._lock:
            if msg.type == "status.query":
                return {"node": self.node}
            if msg.type == "job.launch":
                self.running[msg["job_id"]] = float(msg["start_iteration"])
                self.launch_count += 1
                self.launches.put(dict(msg.fields))
                seq = {"incarnation": self.incarnation, "launch_seq": self.launch_count}
                return {"launched": True, "already_running": False,
                        **(seq if self.snapshots else {})}
            if msg.type == "job.regroup" and self.regroups is not None:
                if msg["job_id"] not in self.running:
                    raise HandlerError("not_running", str(msg["job_id"]))
                self.regroups.put(dict(msg.fields))
                return {"regrouped": True, "iterations": self.running[msg["job_id"]]}
            if msg.type == "job.stop":
                its = self.running.pop(msg["job_id"], None)
                self.stops.put(msg["job_id"])
                return {"iterations": its or 0.0, "was_running": its is not None,
                        "finished": False}
        raise HandlerError("unsupported", msg.type)

    def _serve(self) -> None:
        if self.service_delay is not None:
            self._registered.wait()
            if self._stop.wait(self.service_delay):
                return
        service = Service(self.endpoints, f"agent.{self.node}", self._handle, heartbeat=0.2)
        try:
            service.serve(self._stop)
        finally:
            service.close()

    def _link(self) -> None:
        req = Requester(self.endpoints, f"agent.{self.node}", timeout=1.0, retries=2)
        registered = False
        try:
            while not self._stop.is_set():
                try:
                    if not self._routed.is_set():  # the broker routes to our service first
                        req.request(f"agent.{self.node}", "status.query")
                        self._routed.set()
                    if not self._beating.is_set():
                        registered = False
                    elif not registered:
                        req.request("scheduler", "agent.register", node=self.node,
                                    gpus=list(self.gpus), cpus=32, mem=256.0, **self.snapshot())
                        registered = True
                        self.registrations += 1
                        self._registered.set()
                    elif self.snapshots:
                        req.request("scheduler", "agent.heartbeat", node=self.node,
                                    **self.snapshot())
                    else:
                        req.request("scheduler", "agent.heartbeat", node=self.node)
                except RequestFailed as err:
                    if err.code == "unknown_agent":
                        registered = False
                except Exception:  # timeouts while things start or stop: try again
                    pass
                self._stop.wait(self.heartbeat)
        finally:
            req.close()

    def snapshot(self) -> dict:
        with self._lock:
            beat = {"running": [{"job_id": j, "iterations": i} for j, i in self.running.items()]}
            if self.snapshots:
                beat.update(incarnation=self.incarnation, launches=self.launch_count)
            return beat

    def vanish(self, job_id: int) -> None:
        """The job's trainer is gone and nobody says so (a stop or exit lost in a race)."""
        with self._lock:
            del self.running[job_id]

    def pause(self) -> None:
        """Stop heartbeating (the scheduler should declare this agent dead)."""
        self._beating.clear()

    def resume(self) -> None:
        self._beating.set()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def next_launch(self, timeout: float = DEADLINE) -> dict:
        return self.launches.get(timeout=timeout)


class Harness:
    """A broker, a scheduler service and a client, all on 127.0.0.1 free ports."""

    def __init__(self, run_dir: Path, **options: Any):
        self.run_dir = run_dir
        self.broker = Broker("127.0.0.1", (0, 0, 0),
                             startup_grace=options.pop("startup_grace", None))
        self.endpoints = self.broker.endpoints
        self._broker_stop = threading.Event()
        self._broker_thread = threading.Thread(target=self.broker.run,
                                               args=(self._broker_stop,), daemon=True)
        self._broker_thread.start()
        self.client = Requester(self.endpoints, "test", timeout=2.0, retries=5)
        self.agents: list[FakeAgent] = []
        self.scheduler: SchedulerService | None = None
        self.options = options

    def start_scheduler(self) -> SchedulerService:
        opts = dict(spec=spec(nodes=2, gpus=4), policy="srsf", run_dir=self.run_dir,
                    time_scale=1.0, round_s=0.2, agent_timeout=30.0,
                    agent_request_timeout=1.0, agent_request_retries=2)
        opts.update(self.options)
        self.scheduler = SchedulerService(self.endpoints, Options(**opts))
        self._stop = threading.Event()
        ready = threading.Event()
        self._thread = threading.Thread(target=self.scheduler.run, args=(self._stop, ready),
                                        daemon=True)
        self._thread.start()
        assert ready.wait(DEADLINE)
        wait_for(self._answers)
        return self.scheduler

    def _answers(self) -> bool:
        try:
            self.client.request("scheduler", "status.query", what="summary")
            return True
        except RequestFailed as err:  # not routed yet
            assert err.code == "no_service"
            return False

    def stop_scheduler(self) -> None:
        self._stop.set()
        self._thread.join(timeout=DEADLINE)
        assert not self._thread.is_alive()
        self.scheduler.close()

    def agent(self, node: str, **kw: Any) -> FakeAgent:
        agent = FakeAgent(self.endpoints, node, **kw)
        self.agents.append(agent)
        return agent

    def request(self, type_: str, **fields: Any) -> dict:
        return dict(self.client.request("scheduler", type_, **fields)["body"])

    def submit(self, record) -> dict:
        return self.request("job.submit", job=record_to_map(record))

    def status(self) -> dict:
        return self.request("status.query")

    def job(self, job_id: int) -> dict:
        return next(j for j in self.status()["jobs"] if j["job_id"] == job_id)

    def wait_online(self, *nodes: str) -> None:
        wait_for(lambda: set(nodes) <= set(self.status()["agents"]))

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        if self.scheduler is not None and self._thread.is_alive():
            self.stop_scheduler()
        self.client.close()
        self._broker_stop.set()
        self._broker_thread.join(timeout=5)
        self.broker.close()


@pytest.fixture
def harness(tmp_path):
    made: list[Harness] = []

    def make(**options: Any) -> Harness:
        h = Harness(tmp_path, **options)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_submit_launches_on_the_right_node_then_finishes(harness):
    h = harness()
    h.start_scheduler()
    n0, n1 = h.agent("n0", gpus=(4, 5, 6, 7)), h.agent("n1")
    h.wait_online("n0", "n1")
    first = job(1, num_gpu=4, stages=(0.1, 0.2, 0.3), iterations=100)
    assert h.submit(first) == {"accepted": True, "job_id": 1}
    launch = n0.next_launch()
    assert launch["job_id"] == 1 and launch["gpus"] == [4, 5, 6, 7]  # the agent's own GPU ids
    assert launch["group"] == [1] and launch["slot"] == 0 and launch["start_iteration"] == 0
    workload = launch["workload"]
    assert workload["kind"] == "emulated" and workload["iterations"] == 100
    assert workload["iteration_time"] == pytest.approx(0.6)
    assert sum(workload["stages"]) == pytest.approx(0.6)
    wait_for(lambda: h.job(1)["state"] == "running")
    assert h.job(1)["nodes"] == ["n0"]

    h.submit(job(2, num_gpu=4, iterations=1000))  # longer: srsf keeps job 1 first
    assert n1.next_launch()["job_id"] == 2  # n0 is full

    h.client.request("scheduler", "job.finished", job_id=1, node="n0", iterations=100, ok=True)
    status = h.status()
    assert h.job(1)["state"] == "finished"
    assert status["counts"]["finished"] == 1 and status["counts"]["running"] == 1
    again = h.client.request("scheduler", "job.finished", job_id=1, node="n0",
                             iterations=100, ok=True)
    assert again["body"]["already"] is True
    log = Journal(h.run_dir / "journal.db")
    try:
        entry = log.get(1)
        assert entry.state == "finished" and entry.finish_trace >= entry.first_start_trace
    finally:
        log.close()


def test_a_group_is_launched_with_its_slots(harness):
    h = harness(policy="muri-s", spec=spec(nodes=1, gpus=4))
    h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, stages=(0.3, 0.05, 0.05)))
    assert n0.next_launch()["group"] == [1]
    h.submit(job(2, num_gpu=4, stages=(0.05, 0.3, 0.05)))
    # job 1 is stopped and relaunched with its partner on the same GPUs
    assert n0.stops.get(timeout=DEADLINE) == 1
    launches = {}
    while len(launches) < 2:
        launch = n0.next_launch()
        launches[launch["job_id"]] = launch
    group = launches[1]["group"]
    assert sorted(group) == [1, 2] and launches[2]["group"] == group
    assert {launches[j]["slot"] for j in (1, 2)} == {0, 1}
    assert launches[1]["slot"] == group.index(1)
    assert launches[1]["workload"]["iteration_time"] == launches[2]["workload"]["iteration_time"]
    # stopped to regroup, not preempted: the count the simulator would report for it
    wait_for(lambda: h.job(1)["state"] == "running" and h.job(1)["group"] == group)
    with Journal(h.run_dir / "journal.db") as log:
        assert log.get(1).preemptions == 0 and log.get(1).state == "running"


def test_a_job_that_keeps_its_gpus_is_regrouped_in_place(harness):
    h = harness(policy="muri-s", spec=spec(nodes=1, gpus=4))
    h.start_scheduler()
    n0 = h.agent("n0", regroups=True)
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, stages=(0.3, 0.05, 0.05)))
    first = n0.next_launch()
    assert first["group"] == [1]
    h.submit(job(2, num_gpu=4, stages=(0.05, 0.3, 0.05)))
    # job 2 joins job 1 on its GPUs: job 1 is told its group and pace, not restarted
    second = n0.next_launch()
    assert second["job_id"] == 2
    group = second["group"]
    told = n0.regroups.get(timeout=DEADLINE)
    assert told["job_id"] == 1 and told["group"] == group and sorted(group) == [1, 2]
    assert told["slot"] == group.index(1) and second["slot"] == group.index(2)
    assert told["iteration_time"] == pytest.approx(second["workload"]["iteration_time"])
    wait_for(lambda: h.job(1)["group"] == group and h.job(2)["state"] == "running")
    assert n0.stops.empty() and n0.launches.empty()
    with Journal(h.run_dir / "journal.db") as log:
        assert log.get(1).state == "running" and log.get(1).preemptions == 0
        assert [e[1] for e in log.events(1)] == ["submitted", "started"]


def test_duplicate_submit_is_not_duplicated(harness):
    h = harness()
    h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    record = job(5, num_gpu=2)
    assert h.submit(record)["accepted"] is True
    assert h.submit(record)["accepted"] is False
    assert n0.next_launch()["job_id"] == 5
    assert h.submit(job(5, num_gpu=1, iterations=7))["accepted"] is False  # same id, new body
    jobs = h.status()["jobs"]
    assert [j["job_id"] for j in jobs] == [5] and jobs[0]["num_gpu"] == 2
    assert n0.launches.empty()


def test_malformed_requests_are_refused_and_the_service_keeps_serving(harness):
    h = harness()
    h.start_scheduler()
    good = record_to_map(job(9))

    def refused(type_: str, **fields: Any) -> str:
        with pytest.raises(RequestFailed) as info:
            h.client.request("scheduler", type_, **fields)
        return info.value.code

    assert refused("job.submit", job={"job_id": 1}) == "bad_job"  # fields missing
    assert refused("job.submit", job={**good, "colour": "red"}) == "bad_job"
    assert refused("job.submit", job={**good, "num_gpu": 100}) == "bad_job"  # cluster has 8
    assert refused("job.submit", job={**good, "job_id": -1}) == "bad_job"
    assert refused("job.submit", job={**good, "iteration_time": 0}) == "bad_job"
    assert refused("job.submit", job={**good, "stage_times": [0.1]}) == "bad_job"
    assert refused("job.submit", job={**good, "stage_times": "abc"}) == "bad_job"
    assert refused("agent.heartbeat", node="n1") == "unknown_agent"  # never registered
    assert refused("agent.heartbeat", node="n7") == "unknown_node"  # not in the spec
    assert refused("agent.register", node="x", gpus=[0], cpus=1, mem=1.0) == "unknown_node"
    assert refused("agent.register", node="n0", gpus=["a"], cpus=1, mem=1.0) == "bad_request"
    assert refused("agent.register", node="n0", gpus=[0], cpus=1, mem=1.0,
                   running=[{"job_id": "x"}]) == "bad_request"
    assert refused("job.finished", job_id=77, node="n0", iterations=1, ok=True) == "unknown_job"
    assert refused("job.launch", job_id=1, gpus=[0], group=[1], slot=0, workload={},
                   start_iteration=0) == "unsupported"
    assert refused("status.query", what="everything") == "bad_request"
    assert h.submit(job(9))["accepted"] is True
    assert h.status()["counts"]["pending"] == 1


def test_dead_agent_job_is_relaunched_on_another_agent(harness):
    h = harness(agent_timeout=1.0, failure_backoff=0.2)
    h.start_scheduler()
    n0, n1 = h.agent("n0"), h.agent("n1")
    h.wait_online("n0", "n1")
    h.submit(job(1, num_gpu=4, iterations=100))
    assert n0.next_launch()["job_id"] == 1
    # the trainer checkpointed 40 iterations, then the node went silent
    checkpoint.write(h.run_dir / "checkpoints", checkpoint.Checkpoint(1, 40.0, 100.0, "n0"))
    n0.pause()
    launch = n1.next_launch()
    assert launch["job_id"] == 1 and launch["start_iteration"] == 40
    status = h.status()
    assert "n0" not in status["agents"] and "n0" in status["offline"]
    wait_for(lambda: h.job(1)["nodes"] == ["n1"])
    assert h.job(1)["preemptions"] == 1
    # requeued as n0 was declared dead (journaled so), not on n1 by any other path
    state = h.scheduler.state
    with state.lock:
        events = state.journal.events()
    dead = [detail for _, kind, _, node, detail in events if kind == "agent_dead"]
    assert [(d["requeued"], d["reason"] != "") for d in dead] == [([1], True)]
    stops = [(node, detail["reason"]) for _, kind, job_id, node, detail in events
             if kind == "stopped" and job_id == 1]
    assert len(stops) == 1 and stops[0][1].startswith("agent n0 lost: "), (stops, events)

    # n0 comes back still claiming job 1: it gets a stop, the job stays on n1
    n0.resume()
    assert n0.stops.get(timeout=DEADLINE) == 1
    h.wait_online("n0", "n1")
    assert h.job(1)["nodes"] == ["n1"]

    # the trainer on n1 crashes: the job runs again from its checkpoint after its backoff
    checkpoint.write(h.run_dir / "checkpoints", checkpoint.Checkpoint(1, 60.0, 100.0, "n1"))
    h.client.request("scheduler", "job.finished", job_id=1, node="n1", iterations=60,
                     ok=False, detail="exit status 1")
    relaunch = wait_for(lambda: _any_launch(n0, n1))
    assert relaunch["job_id"] == 1 and relaunch["start_iteration"] == 60


def _any_launch(*agents: FakeAgent) -> dict | None:
    for agent in agents:
        try:
            return agent.launches.get_nowait()
        except queue.Empty:
            pass
    return None


def test_restart_recovers_the_queue_from_the_journal(harness):
    h = harness()
    h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    for i in (1, 2, 3):
        h.submit(job(i, num_gpu=4, iterations=50))
    assert n0.next_launch()["job_id"] == 1
    h.client.request("scheduler", "job.finished", job_id=1, node="n0", iterations=50, ok=True)
    assert n0.next_launch()["job_id"] == 2
    checkpoint.write(h.run_dir / "checkpoints", checkpoint.Checkpoint(2, 20.0, 50.0, "n0"))
    clock = h.status()["now"]
    n0.close()
    h.stop_scheduler()

    h.start_scheduler()
    status = h.status()
    assert status["now"] >= clock
    assert status["counts"] == {"pending": 2, "running": 0, "finished": 1, "cancelled": 0,
                                "failed": 0}
    assert {j["job_id"]: j["state"] for j in status["jobs"]} == {
        1: "finished", 2: "pending", 3: "pending"}
    assert status["offline"] == ["n0", "n1"]  # until agents speak
    late = h.client.request("scheduler", "job.finished", job_id=1, node="n0", iterations=50,
                            ok=True)  # a report repeated after the restart
    assert late["body"]["already"] is True
    n0 = h.agent("n0")
    launch = n0.next_launch()
    assert launch["job_id"] == 2 and launch["start_iteration"] == 20


def test_stage_list_folds_four_stages():
    assert stage_list((0.1, 0.2, 0.3)) == [0.1, 0.2, 0.3]
    assert stage_list((0.1, 0.2, 0.3, 0.4)) == pytest.approx([0.3, 0.3, 0.4])


def test_status_lists_running_jobs_first_when_cut(tmp_path, monkeypatch):
    """No broker needed: the handler and the status body are plain methods."""
    from broker.messages import make
    import scheduler.live.status as status
    from scheduler.core.state import NodeSlice
    from scheduler.live.ledger import Placed

    monkeypatch.setattr(status, "STATUS_JOBS_LIMIT", 2)
    svc = SchedulerService(None, Options(spec=spec(nodes=1, gpus=4), policy="fifo",
                                         run_dir=tmp_path))
    try:
        for i in (1, 2, 3):
            msg = make("job.submit", "test", f"id{i}", job=record_to_map(job(i)))
            assert svc.handle(msg) == {"accepted": True, "job_id": i}
        with svc.state.lock:  # job 3 launched (by hand: no agent here)
            where = Placed((3,), 0.3, (NodeSlice(0, (0,)),))
            svc.state.jobs.launch(3, where, 0.0)
            svc.state.jobs.launched(3, where, {}, {}, 0.0)
        body = svc.status()
        assert body["counts"] == {"pending": 2, "running": 1, "finished": 0, "cancelled": 0,
                                  "failed": 0}
        assert [j["job_id"] for j in body["jobs"]] == [3, 1] and body["jobs_truncated"] is True
        assert "jobs" not in svc.status(jobs=False)
    finally:
        svc.close()


def test_a_cut_status_of_waiting_jobs_with_long_reasons_fits_one_frame(tmp_path):
    """The longest lines a status lists: waiting jobs of tenants with names of the longest
    allowed, held back with their tenant's quota at the largest bound."""
    from broker.messages import MAX_MESSAGE_BYTES, encode, make
    import scheduler.live.status as status
    from specs.limits import MAX_GPUS
    from specs.tenants import load_tenants

    name = "t" * 64
    tenants = tmp_path / "t.toml"
    tenants.write_text(f"[tenants.{name}]\nquota = 1\nborrow_limit = {MAX_GPUS - 1}\n")
    svc = SchedulerService(None, Options(spec=spec(nodes=1, gpus=1), policy="fifo",
                                         run_dir=tmp_path, tenancy=load_tenants(tenants)))
    try:
        for i in range(status.STATUS_JOBS_LIMIT + 5):
            record = replace(job(10**9 + i), tenant=name)
            msg = make("job.submit", "test", f"id{i}", job=record_to_map(record))
            assert svc.handle(msg)["accepted"]
        settle(svc.state)  # a round with the node up (no agent: nothing launches), and
        svc.state.core.set_node_online(0, True)  # the view it leaves, as the loop does
        svc.state.core.round(svc.now())
        svc.state.publish_view()
        body = svc.status()
        reasons = {j.get("reason") for j in body["jobs"]}
        assert body["jobs_truncated"] and reasons == {"launching", "no_idle_to_borrow"}
        size = len(encode(make("reply", "scheduler", "r" * 64, re="q" * 64, ok=True,
                               body=body)))
        assert size < MAX_MESSAGE_BYTES, size
    finally:
        svc.close()


# -- jobs that end unheard, and strays that race a round ---------------------------------------

def _job_1_running_on_n0(h) -> FakeAgent:
    h.start_scheduler()
    n0 = h.agent("n0", snapshots=True)
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, iterations=100_000))
    assert n0.next_launch()["job_id"] == 1
    wait_for(lambda: h.job(1)["state"] == "running")
    return n0


def test_a_job_gone_from_its_agents_snapshot_is_requeued_and_runs_again(harness):
    h = harness(spec=spec(nodes=1, gpus=4))
    n0 = _job_1_running_on_n0(h)
    n0.vanish(1)  # the trainer ends and no report ever comes
    relaunch = n0.next_launch()
    assert relaunch["job_id"] == 1
    wait_for(lambda: h.job(1)["state"] == "running")
    assert h.job(1)["preemptions"] == 1


def test_an_agent_registered_before_its_worker_is_routed_is_not_declared_dead(harness):
    """The chaos run's race: a restarted agent registers, the round that follows launches on
    it before the broker has its worker; declared dead then, the job it launched would run
    twice (it was relaunched elsewhere while still running there)."""
    # no start-up grace: the broker answers no_service at once for a worker it lacks
    h = harness(spec=spec(nodes=1, gpus=4), startup_grace=0.0)
    h.start_scheduler()
    h.submit(job(1, num_gpu=1, iterations=100_000))  # waits: no agent yet
    n0 = h.agent("n0", service_delay=0.5)
    assert n0.next_launch()["job_id"] == 1
    wait_for(lambda: h.job(1)["state"] == "running")  # the launch's reply was taken
    assert n0.registrations == 1  # never declared dead, so never asked to register again
    assert n0.launches.empty()  # launched once, not again after a requeue


def test_an_agent_whose_worker_the_broker_lacks_past_the_grace_lives_while_it_heartbeats(
        harness):
    """A starved agent's service heartbeats to the broker come late, so the broker answers
    `no_service` for it past the grace, while its heartbeats to the scheduler keep coming:
    that is not a death (the chaos-free 1,024-agent run declared 13 such agents dead)."""
    h = harness(spec=spec(nodes=1, gpus=4), startup_grace=0.0)
    h.start_scheduler()
    h.submit(job(1, num_gpu=1, iterations=100_000))  # waits: no agent yet
    n0 = h.agent("n0", service_delay=2.0 + 1.5)  # routed 1.5 s past NO_SERVICE_GRACE_S
    assert n0.next_launch()["job_id"] == 1
    wait_for(lambda: h.job(1)["state"] == "running")
    with h.scheduler.state.lock:
        dead = [e for e in h.scheduler.state.journal.events() if e[1] == "agent_dead"]
    assert dead == [] and n0.registrations == 1


def test_only_a_snapshot_taken_after_the_launch_can_show_a_job_missing(harness):
    h = harness(spec=spec(nodes=1, gpus=4))
    n0 = _job_1_running_on_n0(h)
    n0.pause()  # from here the test speaks for n0 (it stays registered: agent_timeout is 30 s)

    def beat(**fields: Any) -> None:
        h.client.request("scheduler", "agent.heartbeat", node="n0", **fields)

    beat(running=[], incarnation=n0.incarnation, launches=0)  # taken before the launch
    assert h.job(1)["state"] == "running"
    beat(running=[{"job_id": 1, "iterations": 5.0}], incarnation=n0.incarnation, launches=1)
    assert h.job(1)["state"] == "running"
    beat(running=[])  # an agent that does not say when its snapshot was taken
    assert h.job(1)["state"] == "running"
    with pytest.raises(RequestFailed) as refused:  # another process under the same name
        beat(running=[], incarnation="someone-else", launches=7)
    assert refused.value.code == "unknown_agent"
    assert h.job(1)["state"] == "running"
    beat(running=[], incarnation=n0.incarnation, launches=1)  # requeued as the reply went out
    log = Journal(h.run_dir / "journal.db")
    try:
        kinds = [kind for _, kind, *_ in log.events(1)]
        # requeued: stopped after its one start and counted as a preemption; the next round
        # may already have relaunched it (a race with this read), so the journal's history is
        # checked rather than its current state
        assert kinds[:3] == ["submitted", "started", "stopped"], kinds
        assert log.get(1).preemptions == 1
    finally:
        log.close()


def _bare_service(h, tmp_path: Path) -> tuple[SchedulerService, Requester, Callable]:
    """A service whose loop the test drives itself, one step at a time, and a function that
    hands it a request as its service thread would; job 1 already runs on n0."""
    from broker.messages import make

    (tmp_path / "bare").mkdir()
    svc = SchedulerService(h.endpoints, Options(spec=spec(nodes=1, gpus=4), policy="fifo",
                                                run_dir=tmp_path / "bare", time_scale=1.0,
                                                agent_request_timeout=1.0,
                                                agent_request_retries=2))
    ids = iter(range(10**6))

    def say(type_: str, **fields: Any) -> dict:
        return svc.handle(make(type_, "test", f"t-{next(ids)}", **fields))

    req = Requester(h.endpoints, "scheduler-test", timeout=2.0, retries=2)
    say("agent.register", node="n0", gpus=[0, 1, 2, 3], cpus=8, mem=64.0, running=[])
    say("job.submit", job=record_to_map(job(1, num_gpu=4, iterations=100_000)))
    svc.step(req)
    return svc, req, say


def test_a_stray_found_during_a_round_is_stopped_before_that_rounds_launches(harness, tmp_path):
    h = harness()
    n0 = h.agent("n0")  # no scheduler service runs: its link only retries
    wait_for(n0._routed.is_set)
    svc, req, say = _bare_service(h, tmp_path)
    try:
        assert n0.next_launch()["job_id"] == 1
        # the scheduler loses n0, which comes back still running job 1: a stray there now,
        # and the round that follows puts job 1 back on n0
        svc.declare_dead("n0", "test")
        say("agent.register", node="n0", gpus=[0, 1, 2, 3], cpus=8, mem=64.0,
            running=[{"job_id": 1, "iterations": 10.0}])
        svc.round(req)
        assert n0.stops.get_nowait() == 1  # the stray went first...
        assert n0.next_launch()["job_id"] == 1  # ...then the launch
        svc.step(req)
        assert n0.stops.empty() and 1 in n0.running  # nothing stops it afterwards
        assert svc.job_state(1) == "running"
    finally:
        req.close()
        svc.close()


def test_a_stray_placed_on_its_node_since_is_adopted_not_stopped(harness, tmp_path):
    h = harness()
    n0 = h.agent("n0")
    wait_for(n0._routed.is_set)
    svc, req, _ = _bare_service(h, tmp_path)
    try:
        assert n0.next_launch()["job_id"] == 1
        # a registration that reported job 1 while a round was placing it on n0
        svc.state.ledger.strays.append((1, "n0"))
        svc.step(req)
        assert n0.stops.empty() and 1 in n0.running
        assert svc.job_state(1) == "running"
    finally:
        req.close()
        svc.close()


def test_a_scheduler_without_endpoints_says_so_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "scheduler.live", "--spec", "n2g8",
                           "--endpoints", str(tmp_path / "none.json"), "--run-dir",
                           str(tmp_path / "run"), "--wait-endpoints", "0.2"],
                          cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("scheduler: endpoints file ") and "none.json" in last
    log = (tmp_path / "run" / "scheduler.log").read_text()
    assert '"waiting_for_endpoints"' in log and '"no_endpoints"' in log


def test_heartbeats_waiting_unread_are_not_silence(harness):
    """The service thread stalls (as on a starved machine) past the agent timeout while the
    agents go on heartbeating: their heartbeats wait unread, and the main thread's liveness
    check, which runs meanwhile, must not declare them dead."""
    h = harness(agent_timeout=1.0)
    sched = h.start_scheduler()
    n0, n1 = h.agent("n0"), h.agent("n1")
    h.wait_online("n0", "n1")
    state, gateway = sched.state, sched.gateway
    stalled, release, judged = threading.Event(), threading.Event(), threading.Event()
    handle = sched.handlers.handle

    def stalling(msg):
        if msg.type == "agent.heartbeat" and not release.is_set():
            stalled.set()
            release.wait(DEADLINE)
        return handle(msg)

    overdue = gateway.overdue

    def watched(wall):
        found = overdue(wall)
        if stalled.is_set() and wall - stall_began > 2.5 * state.opt.agent_timeout:
            judged.set()  # the main thread judged liveness well past the timeout
        return found

    stall_began = state.clock()
    gateway.overdue = watched
    sched.handlers.handle = stalling
    try:
        assert stalled.wait(DEADLINE) and judged.wait(DEADLINE)
    finally:
        release.set()
    h.wait_online("n0", "n1")
    with state.lock:
        dead = [e for e in state.journal.events() if e[1] == "agent_dead"]
    assert dead == []


class Stalling:
    """Wraps a policy: plan() waits for `release` once `armed` (and says it began)."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.armed, self.planning, self.release = (threading.Event() for _ in range(3))

    def plan(self, ctx: Any) -> Any:
        if self.armed.is_set():
            self.planning.set()
            assert self.release.wait(DEADLINE)
        return self.policy.plan(ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


def test_a_round_that_plans_holds_up_no_submission_and_no_status_query(harness):
    """The loop is the core's only writer and holds no lock while it plans: a submission
    meanwhile is journaled and acknowledged at once, a status query answered at once (it
    lists the job, `arrived`), and the next round launches it."""
    h = harness()
    sched = h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    state = sched.state
    stalling = state.core.policy = Stalling(state.core.policy)
    stalling.armed.set()
    try:
        assert h.submit(job(6, num_gpu=2))["accepted"] is True  # wakes a round: it stalls
        assert stalling.planning.wait(DEADLINE)
        stalling.armed.clear()
        assert h.submit(job(7, num_gpu=2)) == {"accepted": True, "job_id": 7}
        db = sqlite3.connect(f"file:{h.run_dir / 'journal.db'}?mode=ro", uri=True)
        assert db.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall() == [(6,), (7,)]
        db.close()
        lines = {j["job_id"]: j for j in h.status()["jobs"]}
        assert lines[7]["state"] == "pending" and lines[7]["reason"] == "arrived"
        assert not stalling.release.is_set()  # all of it while the round was planning
    finally:
        stalling.release.set()
    assert {n0.next_launch()["job_id"], n0.next_launch()["job_id"]} == {6, 7}
