"""The node agent as a real process, with a real broker (in a thread) and a fake scheduler.

The fake scheduler is a `Service` named "scheduler" that records every request the agent
sends; tests wait for records with deadlines (a condition variable), never for fixed times.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.broker import Broker
from broker.client import HandlerError, Requester, RequestFailed, Service, Subscriber
from trainer import checkpoint
from tests.live_system import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 15.0  # generous: a loaded 2-core machine can stall a process for seconds
HEARTBEAT_S = 0.2
NODE = "n0"


class FakeScheduler:
    """Records the agent's requests; can pretend to have forgotten the agent once."""

    def __init__(self, endpoints):
        self.records: list = []
        self.forget_once = False
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(endpoints,), daemon=True)
        self._thread.start()

    def _serve(self, endpoints) -> None:
        service = Service(endpoints, "scheduler", self._handle, heartbeat=HEARTBEAT_S)
        try:
            service.serve(self._stop)
        finally:
            service.close()

    def _handle(self, msg):
        with self._cond:
            if msg.type == "agent.heartbeat" and self.forget_once:
                self.forget_once = False
                raise HandlerError("unknown_agent", "who are you?")
            self.records.append(msg)
            self._cond.notify_all()
        return {"accepted": True}

    def of(self, type_: str | None, job_id: int | None = None) -> list:
        """Records of one type (None: all), in the order they arrived."""
        with self._cond:
            return [m for m in self.records if type_ in (None, m.type)
                    and (job_id is None or m.get("job_id") == job_id)]

    def wait(self, pred, what: str, deadline: float = DEADLINE_S):
        """The first value of pred() that is truthy, re-evaluated on every new record."""
        end = time.monotonic() + deadline
        with self._cond:
            while True:
                value = pred()
                if value:
                    return value
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {deadline}s waiting for {what}")
                self._cond.wait(left)

    def wait_heartbeats(self, n: int, after: int | None = None) -> list:
        """n heartbeats after the record count `after` (default: now)."""
        start = len(self.records) if after is None else after
        return self.wait(lambda: (hb := [m for m in self.records[start:]
                                         if m.type == "agent.heartbeat"])[n - 1:] and hb,
                         f"{n} heartbeats")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def agent_command(endpoints_file: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "node_agent.agent", "--node", NODE, "--gpus", "0,1",
            "--cpus", "4", "--mem", "16", "--gpu-mem", "24", "--gpu-type", "A10",
            "--endpoints", str(endpoints_file),
            "--run-dir", str(run_dir), "--time-scale", "1000", "--heartbeat",
            str(HEARTBEAT_S), "--report-every", "0.05", "--stop-timeout", "5", *extra]


class Cluster:
    def __init__(self, tmp_path: Path, endpoints_first: bool = True):
        self.broker = Broker(host="127.0.0.1")
        self._broker_stop = threading.Event()
        self._broker_thread = threading.Thread(target=self.broker.run, args=(self._broker_stop,),
                                               daemon=True)
        self._broker_thread.start()
        self.endpoints = self.broker.endpoints
        self.endpoints_file = tmp_path / "endpoints.json"
        if endpoints_first:
            self.endpoints.save(self.endpoints_file)
        self.run_dir = tmp_path / "run"
        self.sched = FakeScheduler(self.endpoints)
        self.req = Requester(self.endpoints, "scheduler", timeout=2.0, retries=3)
        self.agent = self._start_agent()

    def _start_agent(self) -> subprocess.Popen:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(self.run_dir / "agent.stderr", "ab") as err:
            return subprocess.Popen(agent_command(self.endpoints_file, self.run_dir), cwd=ROOT,
                                    env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err)

    def to_agent(self, type_: str, **fields):
        """A request to the agent; waits (bounded) for its service to reach the broker."""
        end = time.monotonic() + DEADLINE_S
        while True:
            try:
                return self.req.request(f"agent.{NODE}", type_, **fields)
            except RequestFailed as err:
                if err.code != "no_service" or time.monotonic() > end:
                    raise
            time.sleep(0.05)  # polling interval of a deadline wait

    def launch(self, job_id: int, total: float, start: float = 0.0, gpus=(0, 1), **workload):
        w = {"kind": "emulated", "iterations": total, "iteration_time": 10.0,
             "stages": [2.0, 5.0, 3.0], **workload}
        return self.to_agent("job.launch", job_id=job_id, gpus=list(gpus), group=[job_id],
                             slot=0, workload=w, start_iteration=start)

    def wait_running(self, job_id: int, deadline: float = DEADLINE_S) -> float:
        """Until a heartbeat shows the job with some progress; returns those iterations."""
        def seen():
            for m in reversed(self.sched.of("agent.heartbeat")):
                for r in m.get("running", []):
                    if r["job_id"] == job_id and r["iterations"] > 0:
                        return r["iterations"]
            return None
        return self.sched.wait(seen, f"job {job_id} running", deadline)

    def stop_agent(self) -> int:
        if self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
        try:
            return self.agent.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            self.agent.wait()
            raise

    def close(self) -> None:
        try:
            self.stop_agent()
        finally:
            self.req.close()
            self.sched.close()
            self._broker_stop.set()
            self.broker.close()
            self._broker_thread.join(5)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.sched.wait(lambda: c.sched.of("agent.register"), "the agent to register")
    yield c
    c.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_registers_then_heartbeats(cluster):
    reg = cluster.sched.of("agent.register")[0]
    assert (reg["node"], reg["gpus"], reg["cpus"], reg["mem"]) == (NODE, [0, 1], 4, 16)
    assert reg["gpu_mem_gb"] == 24  # as told (--gpu-mem): no nvidia-smi to ask here
    assert reg["gpu_type"] == "A10"  # as told (--gpu-type)
    assert reg["running"] == []
    assert reg.sender == f"agent.{NODE}"
    beats = cluster.sched.wait_heartbeats(2, after=0)
    assert all(b["node"] == NODE and b["running"] == [] for b in beats)


def test_launch_runs_to_one_finished_with_telemetry(cluster):
    sub = Subscriber(cluster.endpoints, ("event.",))
    try:
        # the subscription must reach the bus before the trainer publishes: wait for one event
        # of our own that makes the round trip (bounded), then launch
        from broker.client import Publisher
        probe = Publisher(cluster.endpoints, "probe")
        end = time.monotonic() + DEADLINE_S
        while True:
            probe.publish("event.progress", job_id=0, iterations=0.0)
            if sub.recv(0.05) is not None or time.monotonic() > end:
                break
        probe.close()

        # declared GPU memory: the emulated trainer reports it as it is
        body = cluster.launch(11, total=100, gpu_mem_gb=12.5)["body"]  # 1 s of wall at 1000x
        assert body["launched"] is True and body["gpus"] == [0, 1]
        again = cluster.launch(11, total=100)["body"]
        assert again["launched"] is False and again["already_running"] is True
        assert again["pid"] == body["pid"]
        cluster.wait_running(11)
        done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 11), "job.finished")[0]
        assert (done["ok"], done["iterations"], done["node"]) == (True, 100, NODE)
        assert gone(body["pid"])

        events = []
        while (m := sub.recv(0.2)) is not None:
            if m.get("job_id") == 11:
                events.append(m)
    finally:
        sub.close()
    timing = [e for e in events if e.type == "event.timing"]
    progress = [e["iterations"] for e in events if e.type == "event.progress"]
    assert timing and timing[-1]["stages"] == {"data": 2.0, "gpu": 5.0, "net": 3.0}
    assert timing[-1]["iteration_time"] == 10.0 and timing[-1].sender == "trainer.11"
    assert {e["gpu_mem_gb"] for e in timing} == {12.5}
    assert progress and progress == sorted(progress) and progress[-1] == 100

    mark = len(cluster.sched.records)
    beats = cluster.sched.wait_heartbeats(3, after=mark)
    assert all(b["running"] == [] for b in beats)
    assert len(cluster.sched.of("job.finished", 11)) == 1


def test_heartbeats_say_which_launches_their_snapshot_has_seen(cluster):
    """A heartbeat may lack a job the scheduler placed only if the job's launch came after
    the heartbeat's snapshot, or the job's end was reported before it."""
    reg = cluster.sched.of("agent.register")[0]
    first = cluster.launch(21, total=100)["body"]  # about 1 s of wall time at 1000x
    assert first["incarnation"] == reg["incarnation"]
    assert first["launch_seq"] == reg["launches"] + 1
    assert cluster.launch(21, total=100)["body"]["launch_seq"] == first["launch_seq"]
    cluster.wait_running(21)
    cluster.sched.wait(lambda: cluster.sched.of("job.finished", 21), "job.finished")
    cluster.sched.wait_heartbeats(2)
    records = [m for m in cluster.sched.of(None)  # in the order they arrived
               if m.type == "agent.heartbeat" or m.get("job_id") == 21]
    reported = next(i for i, m in enumerate(records) if m.type == "job.finished")
    showed = False
    for i, m in enumerate(records):
        if m.type != "agent.heartbeat":
            continue
        assert m["incarnation"] == reg["incarnation"]
        has = any(r["job_id"] == 21 for r in m["running"])
        showed |= has
        if not has and m["launches"] >= first["launch_seq"]:
            assert i > reported, "a heartbeat lacked job 21 before its end was reported"
    assert showed


def test_stop_replies_with_iterations_and_relaunch_resumes(cluster):
    pid = cluster.launch(12, total=10**6)["body"]["pid"]
    cluster.wait_running(12)
    reply = cluster.to_agent("job.stop", job_id=12)["body"]
    assert reply["stopping"] is True and reply["was_running"] is True
    # the stop's end comes as a report, retried until the scheduler acknowledges it
    body = cluster.sched.wait(lambda: cluster.sched.of("job.stopped", 12), "job.stopped")[0]
    assert body["requested"] is True and body["finished"] is False and body["exit_code"] == 3
    assert 0 < body["iterations"] < 10**6
    assert body["iterations"] == checkpoint.iterations(cluster.run_dir / "checkpoints", 12)
    assert gone(pid)

    unknown = cluster.to_agent("job.stop", job_id=999)["body"]
    assert unknown["was_running"] is False and unknown["iterations"] == 0.0

    # resumes from where it stopped: 20 more iterations (0.2 s) to a new total
    total = body["iterations"] + 20
    cluster.launch(12, total=total, start=body["iterations"])
    done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 12), "job.finished")[0]
    assert done["ok"] is True and done["iterations"] == total
    assert len(cluster.sched.of("job.stopped", 12)) == 1  # the requested stop's, only


BAD_LAUNCHES = [
    (dict(workload={"kind": "tensorflow", "iterations": 5, "iteration_time": 1,
                    "stages": [1, 1, 1]}), "unsupported_workload"),
    (dict(workload={"kind": "torch", "iterations": 5}), "bad_workload"),  # no model
    (dict(workload={"kind": "torch", "iterations": 5, "model": "alexnet"}), "bad_workload"),
    (dict(workload={"kind": "torch", "iterations": 0, "model": "bert"}), "bad_workload"),
    (dict(rank=2, world_size=2), "bad_request"),
    (dict(workload={"kind": "torch", "iterations": 5, "model": "bert"}, rank=1, world_size=2),
     "bad_request"),  # rank > 0 without rank 0's rendezvous
    (dict(workload={"kind": "emulated", "iterations": 5, "stages": [1, 1, 1]}), "bad_workload"),
    (dict(workload={"kind": "emulated", "iterations": "x", "iteration_time": 1,
                    "stages": [1, 1, 1]}), "bad_workload"),
    (dict(workload={"kind": "emulated", "iterations": 5, "iteration_time": 1, "stages": [1, 1]}),
     "bad_workload"),
    (dict(workload={"kind": "emulated", "iterations": -5, "iteration_time": 1,
                    "stages": [1, 1, 1]}), "bad_workload"),
    (dict(gpus=[7]), "bad_gpus"),
    (dict(gpus=["a"]), "bad_request"),
    (dict(gpus=[]), "bad_request"),
    (dict(gpus=[0, 0]), "bad_request"),
    (dict(start_iteration=-1), "bad_request"),
    (dict(workload={"kind": "emulated", "iterations": 5, "iteration_time": 1.0,
                    "stages": [1, 1, 1], "gpu_mem_gb": -1}), "bad_workload"),
    (dict(workload={"kind": "emulated", "iterations": 5, "iteration_time": 1.0,
                    "stages": [1, 1, 1], "gpu_mem_gb": "lots"}), "bad_workload"),
]


def test_bad_launches_get_errors(cluster):
    # one agent for all cases (an agent per case would triple the test time)
    for change, code in BAD_LAUNCHES:
        fields = dict(job_id=21, gpus=[0], group=[21], slot=0, start_iteration=0,
                      workload={"kind": "emulated", "iterations": 5, "iteration_time": 1.0,
                                "stages": [1, 1, 1]})
        fields.update(change)
        with pytest.raises(RequestFailed) as err:
            cluster.to_agent("job.launch", **fields)
        assert err.value.code == code, change
    assert cluster.to_agent("status.query")["body"]["running"] == []
    assert not cluster.sched.of("job.finished") and cluster.agent.poll() is None


def test_unknown_requests_get_errors_and_the_agent_keeps_serving(cluster):
    with pytest.raises(RequestFailed) as err:
        cluster.to_agent("job.submit", job={"job_id": 1})
    assert err.value.code == "unsupported"
    with pytest.raises(RequestFailed) as err:
        cluster.to_agent("agent.heartbeat", node="x")
    assert err.value.code == "unsupported"
    status = cluster.to_agent("status.query")["body"]
    assert status["node"] == NODE and status["running"] == []
    cluster.launch(22, total=20)
    done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 22), "job.finished")[0]
    assert done["ok"] is True and cluster.agent.poll() is None


def test_a_trainer_out_of_gpu_memory_is_reported_as_such(cluster):
    """A program that exits EXIT_OOM (a stand-in for a torch trainer that caught
    torch.cuda.OutOfMemoryError: no GPU here) is reported failed with `oom`, which the
    scheduler takes as: run alone from now on."""
    from trainer.exits import EXIT_OOM

    w = {"kind": "command", "iterations": 10,
         "argv": [sys.executable, "-c", f"import sys; sys.exit({EXIT_OOM})"]}
    cluster.to_agent("job.launch", job_id=14, gpus=[0], group=[14], slot=0, workload=w,
                     start_iteration=0)
    done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 14), "job.finished")[0]
    assert done["ok"] is False and done["oom"] is True
    assert done["detail"].startswith("out of GPU memory (exit status 4)")
    cluster.launch(15, total=10)  # an ordinary end says nothing of memory
    done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 15), "job.finished")[0]
    assert done["ok"] is True and "oom" not in done.fields


def test_a_failed_program_is_reported_with_the_last_lines_of_its_output(cluster):
    """The scheduler shows a failed job with how it ended and its output's end: the report's
    first line says the exit and the last line, the lines after it are the last 20."""
    w = {"kind": "command", "iterations": 10,
         "argv": [sys.executable, "-c", "for i in range(30): print('line', i)\n"
                                        "raise SystemExit('boom: no such flag')"]}
    cluster.to_agent("job.launch", job_id=16, gpus=[0], group=[16], slot=0, workload=w,
                     start_iteration=0)
    done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 16), "job.finished")[0]
    first, *lines = done["detail"].splitlines()
    assert done["ok"] is False and "oom" in done.fields and not done["oom"]
    assert first == "exit status 1: boom: no such flag"
    assert lines == [f"line {i}" for i in range(11, 30)] + ["boom: no such flag"]


def test_killed_trainer_reports_failure(cluster):
    pid = cluster.launch(13, total=10**6)["body"]["pid"]
    cluster.wait_running(13)
    os.kill(pid, signal.SIGKILL)
    done = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 13), "job.finished")[0]
    assert done["ok"] is False and "SIGKILL" in done["detail"]
    assert 0 < done["iterations"] < 10**6


def test_forgotten_agent_registers_again_with_its_jobs(cluster):
    cluster.launch(14, total=10**6)
    cluster.wait_running(14)
    cluster.sched.forget_once = True
    regs = cluster.sched.wait(lambda: (r := cluster.sched.of("agent.register"))[1:] and r,
                              "a second agent.register")
    running = regs[1]["running"]
    assert [r["job_id"] for r in running] == [14] and running[0]["iterations"] > 0


def test_sigterm_stops_trainers_with_checkpoints_and_reports_them(cluster):
    pid = cluster.launch(15, total=10**6)["body"]["pid"]
    cluster.wait_running(15)
    assert cluster.stop_agent() == 0
    assert gone(pid)
    stopped = cluster.sched.wait(lambda: cluster.sched.of("job.stopped", 15), "job.stopped")[0]
    assert stopped["iterations"] > 0
    assert stopped["iterations"] == checkpoint.iterations(cluster.run_dir / "checkpoints", 15)
    assert not cluster.sched.of("job.finished", 15)


def test_an_agent_started_before_its_broker_wrote_the_endpoints_waits_for_them(tmp_path):
    # scripts start the broker and its agents together: whichever comes up first, they meet
    c = Cluster(tmp_path, endpoints_first=False)
    try:
        log = c.run_dir / f"agent-{NODE}.log"
        wait_for(lambda: log.exists() and "waiting_for_endpoints" in log.read_text(),
                 DEADLINE_S, "the agent to wait for the endpoints file")
        assert c.agent.poll() is None
        c.endpoints.save(c.endpoints_file)
        reg = c.sched.wait(lambda: c.sched.of("agent.register"), "the agent to register")
        assert reg[0]["node"] == NODE
    finally:
        c.close()


def test_an_agent_without_endpoints_says_so_in_one_line(tmp_path):
    proc = subprocess.run(agent_command(tmp_path / "none.json", tmp_path / "run",
                                        "--wait-endpoints", "0.2"),
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]  # after the JSON log lines, for a person
    assert last.startswith(f"node-agent {NODE}: ") and "none.json" in last
    assert "no such file" in last


def test_a_regroup_gives_the_running_trainer_its_new_pace(cluster):
    reg = cluster.sched.of("agent.register")[0]
    body = cluster.launch(31, total=10**6)["body"]  # 10 trace s per iteration: 100/s at 1000x
    cluster.wait_running(31)
    reply = cluster.to_agent("job.regroup", job_id=31, group=[30, 31], slot=1,
                             iteration_time=1e7)["body"]
    assert reply["regrouped"] is True and reply["iterations"] > 0
    log = cluster.run_dir / "trainer-31.log"
    wait_for(lambda: '"trainer_repaced"' in log.read_text(), DEADLINE_S,
             "the trainer to take the new pace")
    # the same process goes on from where it was, now at 10,000 wall s per iteration
    beats = cluster.sched.wait_heartbeats(4, after=len(cluster.sched.records))
    its = [r["iterations"] for b in beats for r in b["running"] if r["job_id"] == 31]
    assert len(its) == 4 and its[-1] - its[1] < 0.01  # the first may predate the new pace
    assert not gone(body["pid"]) and beats[-1]["launches"] == reg["launches"] + 1
    assert cluster.to_agent("job.stop", job_id=31)["body"]["stopping"] is True
    stop = cluster.sched.wait(lambda: cluster.sched.of("job.stopped", 31), "job.stopped")[0]
    assert stop["exit_code"] == 3 and stop["iterations"] >= its[-1]


@pytest.mark.parametrize("fields, code", [
    (dict(job_id=999, group=[999], slot=0, iteration_time=1.0), "not_running"),
    (dict(job_id=32, group=[1, 2], slot=0, iteration_time=1.0), "bad_request"),
    (dict(job_id=32, group=[32], slot=0, iteration_time=0.0), "bad_request"),
])
def test_bad_regroups_get_errors(cluster, fields, code):
    cluster.launch(32, total=10**6)
    with pytest.raises(RequestFailed) as err:
        cluster.to_agent("job.regroup", **fields)
    assert err.value.code == code
    assert cluster.to_agent("status.query")["body"]["running"]  # still serving, job 32 on


def test_a_stop_for_a_job_that_just_finished_says_finished(cluster):
    """Chaos seed 101 (trainers' ledger): a move's stop reached the agent just after the
    trainer finished; the reply said not finished at the job's total, and the scheduler
    relaunched the job, which then ran a second time."""
    cluster.launch(7, total=5.0)
    cluster.sched.wait(lambda: cluster.sched.of("job.finished", 7), "job 7 to finish")
    body = cluster.to_agent("job.stop", job_id=7)["body"]
    assert body["was_running"] is False
    assert (body["finished"], body["iterations"]) == (True, 5.0)


def test_a_trainer_that_outlives_its_stop_timeout_is_killed_and_its_reap_recorded(
        tmp_path, monkeypatch):
    """The trainers' ledger must stay judgeable when the agent has to SIGKILL a trainer:
    the agent records the reap, an observed bound on the process's death."""
    from trainer.ledger import read_ledgers, verdict

    monkeypatch.setenv("INTERLACE_TEST_SLOW_STOP_S", "60")  # far beyond --stop-timeout 5
    c = Cluster(tmp_path)
    try:
        c.sched.wait(lambda: c.sched.of("agent.register"), "the agent to register")
        pid = c.launch(4, total=1e6)["body"]["pid"]
        c.wait_running(4)
        c.to_agent("job.stop", job_id=4)
        report = c.sched.wait(lambda: c.sched.of("job.stopped", 4), "job 4's stop report")[0]
        assert report["exit_code"] == -signal.SIGKILL and gone(pid)
        records, bad = read_ledgers(c.run_dir)
        assert not bad
        reaped = [r for r in records if r["kind"] == "reaped"]
        assert [(r["job"], r["pid"]) for r in reaped] == [(4, pid)]
        assert not [r for r in records if r["kind"] == "end"]  # it never wrote one
        assert verdict(records, {4: 1e6}).unbounded == 0
    finally:
        c.close()


def test_an_agent_reads_its_gpus_memory_from_nvidia_smi_or_is_told():
    from node_agent.cli import detected_gpu_mem, parse_gpu_mem, parse_args

    rows = "0, 81559\n1, 81559\n2, 40960\n"  # nvidia-smi --query-gpu=index,memory.total (MiB)
    assert parse_gpu_mem(rows, (0, 1)) == 81559 / 1024
    assert parse_gpu_mem(rows, (1, 2)) == 40.0  # the smallest of its GPUs
    assert parse_gpu_mem(rows, (3,)) == 0.0 and parse_gpu_mem("garbage\n", (0,)) == 0.0

    def absent(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    assert detected_gpu_mem((0,), run=absent) == 0.0  # no GPUs here: not stated
    base = ["--node", "n0", "--gpus", "0", "--endpoints", "e.json", "--run-dir", "r"]
    assert parse_args(base + ["--gpu-mem", "80"])[0].gpu_mem_gb == 80.0


# nvidia-smi's (and torch's) device names -> the types a spec's pools name
SMI_NAMES = [("Tesla T4", "T4"), ("Tesla V100-SXM2-32GB", "V100M32"),
             ("Tesla V100-SXM2-16GB", "V100M16"), ("NVIDIA A10", "A10"),
             ("Tesla P100-PCIE-16GB", "P100"), ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
             ("NVIDIA GeForce RTX 3090", "NVIDIA-GeForce-RTX-3090"), ("  Tesla T4 ", "T4"),
             ("GPU (rev/2)", "GPU--rev-2-"), ("", "")]


@pytest.mark.parametrize("device, gpu_type", SMI_NAMES)
def test_a_device_name_becomes_the_type_a_spec_names(device, gpu_type):
    from node_agent.cli import gpu_type_name
    from specs.pools import NAME

    assert gpu_type_name(device) == gpu_type
    assert gpu_type == "" or NAME.fullmatch(gpu_type)  # a spec (and the schema) takes it


def test_an_agent_reads_its_gpus_type_from_nvidia_smi_else_torch_or_is_told(capsys):
    from node_agent.cli import detected_gpu_type, parse_args
    from node_agent.config import AgentConfig
    from node_agent.link import gpus_told

    def smi(text):
        def run(argv, **kwargs):
            assert argv[:2] == ["nvidia-smi", "--query-gpu=index,name"]
            return subprocess.CompletedProcess(argv, 0, stdout=text)
        return run

    def absent(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    def no_torch(gpus):
        raise AssertionError("torch asked though nvidia-smi answered")

    rows = "0, Tesla V100-SXM2-32GB\n1, Tesla V100-SXM2-32GB\n2, Tesla T4\n"
    assert detected_gpu_type((0, 1), run=smi(rows), device_names=no_torch) == "V100M32"
    assert detected_gpu_type((2,), run=smi(rows), device_names=no_torch) == "T4"
    with pytest.raises(ValueError, match="of types T4, V100M32"):
        detected_gpu_type((1, 2), run=smi(rows), device_names=no_torch)
    # no nvidia-smi, or one that does not list the agent's GPUs: torch's names
    assert detected_gpu_type((0,), run=absent, device_names=lambda g: ["NVIDIA A10"]) == "A10"
    assert detected_gpu_type((5,), run=smi(rows), device_names=lambda g: ["Tesla T4"]) == "T4"
    # neither: not stated, and a registration then says nothing of it
    assert detected_gpu_type((0,), run=absent, device_names=lambda g: []) == ""
    cfg = AgentConfig(node="n0", gpus=(0,), cpus=1, mem=1.0, endpoints_file="e",
                      run_dir=Path("r"))
    assert gpus_told(cfg) == {}
    assert gpus_told(dataclasses.replace(cfg, gpu_type="T4", gpu_mem_gb=16.0)) == {
        "gpu_type": "T4", "gpu_mem_gb": 16.0}

    base = ["--node", "n0", "--gpus", "0", "--endpoints", "e.json", "--run-dir", "r"]
    assert parse_args(base + ["--gpu-type", "V100M32"])[0].gpu_type == "V100M32"
    for bad in ("V100 M32", "-T4", "x" * 65, ""):
        with pytest.raises(SystemExit):
            parse_args(base + [f"--gpu-type={bad}"])
        err = capsys.readouterr().err
        assert "argument --gpu-type: must be 1-64 letters" in err and repr(bad) in err


def test_a_stop_s_end_is_reported_at_once_not_at_the_agent_s_next_look(tmp_path, monkeypatch):
    """An agent that looks at its trainers only every 30 s (AgentConfig.tick) still reports a
    stop's end as soon as its trainer is gone: a round waits on that report. The agent's own
    code in this process; its trainer a stand-in (bench/agent_host.py) that exits when told."""
    sys.path.insert(0, str(ROOT / "bench"))
    from agent_host import stand_in_spawn
    from node_agent import agent as node_agent
    from node_agent import launcher
    from node_agent.config import AgentConfig
    import structlog

    monkeypatch.setattr(launcher, "spawn", stand_in_spawn)
    broker = Broker(host="127.0.0.1")
    broker_stop, agent_stop = threading.Event(), threading.Event()
    threading.Thread(target=broker.run, args=(broker_stop,), daemon=True).start()
    endpoints_file = tmp_path / "endpoints.json"
    broker.endpoints.save(endpoints_file)
    sched = FakeScheduler(broker.endpoints)
    req = Requester(broker.endpoints, "scheduler", timeout=2.0, retries=3)
    cfg = AgentConfig(node=NODE, gpus=(0, 1), cpus=4, mem=16.0,
                      endpoints_file=str(endpoints_file), run_dir=tmp_path / "run",
                      heartbeat=120.0, tick=30.0, stop_timeout=5.0)
    thread = threading.Thread(target=node_agent.run,
                              args=(cfg, agent_stop, structlog.get_logger()), daemon=True)
    thread.start()
    try:
        sched.wait(lambda: sched.of("agent.register"), "the agent to register")
        workload = {"kind": "emulated", "iterations": 1000, "iteration_time": 1.0,
                    "stages": [0.2, 0.5, 0.3]}

        def launched():
            try:
                return req.request(f"agent.{NODE}", "job.launch", job_id=3, gpus=[0],
                                   group=[3], slot=0, workload=workload,
                                   start_iteration=0)["body"].get("launched")
            except RequestFailed as err:  # its service not at the broker yet
                if err.code != "no_service":
                    raise
                return False
        wait_for(launched, DEADLINE_S, "the launch")
        assert req.request(f"agent.{NODE}", "job.stop", job_id=3)["body"]["stopping"] is True
        # well before the agent's next look (30 s): only the stop's own wake-up delivers it
        report = sched.wait(lambda: sched.of("job.stopped", 3), "job.stopped")[0]
        assert report["requested"] is True
    finally:
        agent_stop.set()
        thread.join(DEADLINE_S)
        assert not thread.is_alive()  # seen within half a second, whatever the tick
        req.close()
        sched.close()
        broker_stop.set()
        broker.close()


TAKES_TURNS = str(ROOT / "tests" / "agent" / "scripts" / "takes_turns.py")


def _turn_taker(cluster, job_id: int, group: list, slot: int):
    w = {"kind": "command", "iterations": 10**6, "argv": [sys.executable, TAKES_TURNS]}
    return cluster.to_agent("job.launch", job_id=job_id, gpus=[0], group=group, slot=slot,
                            workload=w, start_iteration=0)["body"]


def test_a_new_slot_order_or_member_is_the_gate_s_business_never_a_restart(cluster):
    """Two programs that take turns share GPU 0. The group's slot order flips, then a member
    leaves and a new one joins: each regroup is answered in place, the same processes go on
    taking turns (their progress grows after each), none is launched again."""
    pids = {j: _turn_taker(cluster, j, [40, 41], slot)["pid"] for slot, j in enumerate((40, 41))}
    log = cluster.run_dir / f"agent-{NODE}.log"

    def progress_after(records: int) -> dict:
        """Each job's progress in the heartbeats after `records`, once both have moved on."""
        def moved():
            beats = [m for m in cluster.sched.records[records:] if m.type == "agent.heartbeat"]
            its = {r["job_id"]: r["iterations"] for b in beats[1:] for r in b["running"]}
            return its if len(beats) > 2 and all(its.get(j, 0) > base.get(j, 0)
                                                 for j in jobs) else None
        return cluster.sched.wait(moved, "both jobs to move on")

    jobs, base = (40, 41), {}
    base = progress_after(0)
    for slot, j in enumerate((41, 40)):  # the flip [40, 41] -> [41, 40]
        reply = cluster.to_agent("job.regroup", job_id=j, group=[41, 40], slot=slot,
                                 iteration_time=1.0)["body"]
        assert reply["regrouped"] is True
    base = progress_after(len(cluster.sched.records))
    # 41 leaves (stopped), 42 joins: 40 regroups in place and 42 starts at the same gate
    assert cluster.to_agent("job.stop", job_id=41)["body"]["stopping"] is True
    assert cluster.to_agent("job.regroup", job_id=40, group=[40, 42], slot=0,
                            iteration_time=1.0)["body"]["regrouped"] is True
    _turn_taker(cluster, 42, [40, 42], 1)
    jobs = (40, 42)
    base = {40: base[40]}
    progress_after(len(cluster.sched.records))
    assert not gone(pids[40])
    text = log.read_text()
    assert text.count('"gate_regrouped"') == 2 and text.count('"gate_started"') == 1
    assert text.count('"job_launched"') == 3  # 40, 41 and 42 once each: no relaunch


def test_a_program_that_ran_alone_has_no_gate_to_regroup_at(cluster):
    """A program that takes turns but ran alone was given no gate: joining a group is a
    restart, which the agent says (`unsupported`) rather than let it run ungated."""
    _turn_taker(cluster, 43, [43], 0)
    with pytest.raises(RequestFailed) as err:
        cluster.to_agent("job.regroup", job_id=43, group=[43, 44], slot=0, iteration_time=1.0)
    assert err.value.code == "unsupported" and "no stage gate" in str(err.value)


def test_a_program_that_never_takes_a_turn_holds_up_no_one_at_its_gate(cluster):
    """A plain program (no trainer API) launched in one group with one that takes turns: the
    gate counts it in its rotation only from its first turn, which never comes, so the other
    takes every turn at once (the agent's gate waits 30 s for a stalled member: the wait for
    its progress below is half that)."""
    plain = {"kind": "command", "iterations": 10**6,
             "argv": [sys.executable, "-c", "import time; time.sleep(600)"]}
    cluster.to_agent("job.launch", job_id=45, gpus=[0], group=[45, 46], slot=0,
                     workload=plain, start_iteration=0)
    _turn_taker(cluster, 46, [45, 46], 1)
    cluster.wait_running(46)
    log = (cluster.run_dir / f"agent-{NODE}.log").read_text()
    assert '"gate_member_dropped"' not in log and '"gate_started"' in log
