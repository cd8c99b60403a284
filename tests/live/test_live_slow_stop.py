"""A busy node is not declared dead: trainers slow to checkpoint are stopped in one round
while the scheduler's agent request timeout is shorter than their stop, and the agent stays
alive, its other jobs untouched, the stopped jobs resuming later from their checkpoints.

Real processes and sockets: a broker (thread), the scheduler service (thread, so that its
agent request timeout can be set short), a node agent process and emulated trainer
processes, made slow to stop by the test knob trainer.run.TEST_SLOW_STOP_ENV.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from broker.broker import Broker
from broker.client import Requester
from trainer import checkpoint
from scheduler.live.options import Options
from scheduler.live.service import SchedulerService
from tests.helpers import job, spec
from tests.live_system import ROOT, log_records, wait_for
from trainer.run import TEST_SLOW_STOP_ENV
from traces.record import record_to_map

SCALE = 100.0  # trace seconds per wall second
SLOW_STOP_S = 2.5  # wall seconds each trainer takes to checkpoint on SIGTERM
REQUEST_TIMEOUT_S = 0.5  # the scheduler's per-try agent request timeout: 2 tries < a stop
DEADLINE_S = 60.0


class RecordingLog:
    """The scheduler's log as records (event plus fields), for asserting what it decided."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _add(self, level: str, event: str, **fields: Any) -> None:
        with self._lock:
            self.records.append(dict(fields, event=event, level=level))

    def debug(self, event: str, **fields: Any) -> None:
        self._add("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._add("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._add("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._add("error", event, **fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._add("error", event, **fields)

    def of(self, event: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.records if r["event"] == event]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def system(tmp_path):
    """Broker, scheduler (srsf, one 4-GPU node) and the node agent n0, all started."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    broker = Broker("127.0.0.1", (0, 0, 0))
    broker_stop = threading.Event()
    broker_thread = threading.Thread(target=broker.run, args=(broker_stop,), daemon=True)
    broker_thread.start()
    endpoints_file = tmp_path / "endpoints.json"
    broker.endpoints.save(endpoints_file)
    log = RecordingLog()
    svc = SchedulerService(broker.endpoints, Options(
        spec=spec(nodes=1, gpus=4), policy="srsf", run_dir=run_dir, time_scale=SCALE,
        round_s=1.0, agent_timeout=10.0, agent_request_timeout=REQUEST_TIMEOUT_S,
        agent_request_retries=1), log=log)
    sched_stop, ready = threading.Event(), threading.Event()
    sched_thread = threading.Thread(target=svc.run, args=(sched_stop, ready), daemon=True)
    sched_thread.start()
    assert ready.wait(DEADLINE_S)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               **{TEST_SLOW_STOP_ENV: str(SLOW_STOP_S)})
    with open(run_dir / "agent.stderr", "ab") as err:
        agent = subprocess.Popen(
            [sys.executable, "-m", "node_agent.agent", "--node", "n0", "--gpus", "0,1,2,3",
             "--cpus", "8", "--mem", "64", "--endpoints", str(endpoints_file), "--run-dir",
             str(run_dir), "--time-scale", str(SCALE), "--heartbeat", "0.2",
             "--report-every", "0.1", "--stop-timeout", "10"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    client = Requester(broker.endpoints, "test", timeout=2.0, retries=5)
    try:
        wait_for(lambda: "n0" in svc.status(jobs=False)["agents"], DEADLINE_S,
                 "n0 to register")
        yield svc, log, agent, client, run_dir
    finally:
        client.close()
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)  # it stops its trainers, with checkpoints
            try:
                agent.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        sched_stop.set()
        sched_thread.join(DEADLINE_S)
        svc.close()
        broker_stop.set()
        broker_thread.join(5)
        broker.close()


def _agent_log(run_dir: Path, event: str) -> list[dict]:
    return log_records(run_dir, event, "agent")


def _wall(record: dict) -> float:
    """A log record's wall time (structlog's ISO `ts`), in epoch seconds."""
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()


def _index(records: list[dict], event: str, job_id: int) -> int:
    """Where in the agent's own log (one process, so in order) the job's event first is."""
    return next(i for i, r in enumerate(records)
                if r["event"] == event and r.get("job") == job_id)


def test_slow_stops_in_one_round_leave_the_agent_alive_and_its_other_jobs_running(system):
    svc, log, agent, client, run_dir = system

    def submit(record) -> None:
        assert client.request("scheduler", "job.submit",
                              job=record_to_map(record))["body"]["accepted"]

    def running(*jobs: int) -> bool:
        return all(svc.job_state(j) == "running" for j in jobs)

    # four long 1-GPU jobs fill the node; 1 and 2 have the most work left
    for job_id, iterations in ((1, 10**6), (2, 10**6), (3, 5 * 10**5), (4, 5 * 10**5)):
        submit(job(job_id, num_gpu=1, iterations=iterations))
    wait_for(lambda: running(1, 2, 3, 4) and len(_agent_log(run_dir, "job_launched")) == 4
             and all(checkpoint.iterations(run_dir / "checkpoints", j) > 0 for j in range(1, 5)),
             DEADLINE_S, "jobs 1-4 running, their trainers making progress")
    pids = {r["job"]: r["pids"][0] for r in _agent_log(run_dir, "job_launched")}
    # a short 2-GPU job arrives: SRSF preempts 1 and 2 (in one round) to run it
    submit(job(5, num_gpu=2, iterations=300))
    wait_for(lambda: svc.job_state(5) == "finished", DEADLINE_S, "job 5 to finish")
    wait_for(lambda: running(1, 2) and len(_agent_log(run_dir, "job_launched")) >= 7,
             DEADLINE_S, "jobs 1 and 2 running again")

    # the agent was never declared dead, and still runs
    assert not log.of("agent_dead"), log.of("agent_dead")
    assert agent.poll() is None and "n0" in svc.status(jobs=False)["agents"]
    # both stops in one round, concurrently: each trainer was told before either ended
    assert [sorted(r["stops"]) for r in log.of("round") if r["stops"]] == [[1, 2]]
    records = _all_agent_records(run_dir)
    stopped_at = [_index(records, "job_stopped", j) for j in (1, 2)]
    assert max(_index(records, "job_stopping", j) for j in (1, 2)) < min(stopped_at)
    # job 5 was launched onto their GPUs only once both trainers had checkpointed and gone
    assert _index(records, "job_launched", 5) > max(stopped_at)
    # jobs 3 and 4 were never touched: launched once, never stopped, same trainers running
    launches = [r["job"] for r in records if r["event"] == "job_launched"]
    assert sorted(launches) == [1, 1, 2, 2, 3, 4, 5]
    assert not [r for r in records if r["event"] in ("job_stopping", "job_stopped")
                and r["job"] in (3, 4)]
    assert not [r for r in log.of("job_stopped") if r["job_id"] in (3, 4)]
    assert alive(pids[3]) and alive(pids[4]) and running(3, 4)
    # 1 and 2 resumed from the checkpoints their stops wrote
    # each trainer checkpointed for longer than the scheduler waits for any one answer
    assert [r["exit"] for r in records if r["event"] == "job_stopped"] == [3, 3]
    for j in (1, 2):
        took = _wall(records[_index(records, "job_stopped", j)]) \
            - _wall(records[_index(records, "job_stopping", j)])
        assert took >= SLOW_STOP_S > REQUEST_TIMEOUT_S * 2, took
    stops = {r["job_id"]: r["iterations"] for r in log.of("job_stopped")}
    assert sorted(stops) == [1, 2] and all(its > 0 for its in stops.values())
    relaunched = {r["job"]: r["start_iteration"] for r in records
                  if r["event"] == "job_launched" and r["job"] in (1, 2)}  # the later wins
    assert relaunched == pytest.approx(stops)
    starts = wait_for(lambda: _resumed(run_dir).keys() == {1, 2} and _resumed(run_dir),
                      DEADLINE_S, "the trainers of 1 and 2 to start from their checkpoints")
    assert starts == pytest.approx(stops)


def _resumed(run_dir: Path) -> dict[int, float]:
    """job -> iterations its trainer started from, for jobs 1 and 2 started from a checkpoint."""
    return {r["job_id"]: r["start"] for r in log_records(run_dir, "trainer_start", "trainer")
            if r.get("job_id") in (1, 2) and r.get("from_checkpoint")}


def _all_agent_records(run_dir: Path) -> list[dict]:
    from scheduler.tools.report import read_records

    return [rec for path in sorted(run_dir.glob("agent*.log")) for rec in read_records(path)[0]]
