"""Jobs by hand, in parts: `job.cancel` on the scheduler's real state, command job records,
the queue view's position and expected start, a user command's environment as the agent
starts it, and trainer/api.py with a real stage gate and real checkpoint files.
(tests/e2e/test_user_script_live.py runs them all together on a live cluster.)"""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import sys
import threading
import time
from dataclasses import replace

import pytest

from broker.client import Publisher, Subscriber
from broker.refusal import Refusal
from broker.testing import broker_thread
from node_agent import user_command
from node_agent.config import AgentConfig
from node_agent.gate import StageGate
from scheduler.core.engine import Core
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from scheduler.core.state import Status
from scheduler.live.queue_view import pending_order, projection
from scheduler.tools.jobs import format_job
from tests.helpers import job, spec
from tests.live_system import wait_for
from tests.agent.test_agent import cluster  # noqa: F401  (a real agent process, a fake scheduler)
from tests.live.test_live_handlers import _job_placed_on_n0, live, refused, say  # noqa: F401
from trainer import api, checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
from trainer.stages import STAGES
from traces.record import record_from_map, record_to_map


# -- job.cancel --------------------------------------------------------------------------------
def test_a_queued_job_cancelled_leaves_the_queue_journaled_and_once(live):
    state, h = live
    say(h, "job.submit", job=record_to_map(job(1)))
    say(h, "job.submit", job=record_to_map(job(2)))
    assert say(h, "job.cancel", job_id=1) == {"cancelled": True, "job_id": 1, "was": "pending"}
    assert state.core.jobs[1].status is Status.DONE
    assert [j.id for j in state.core.queue] == [2]
    jobs = {j["job_id"]: j for j in say(h, "status.query")["jobs"]}
    assert jobs[1]["state"] == "cancelled" and "position" not in jobs[1]
    assert jobs[2]["position"] == 1
    assert say(h, "job.cancel", job_id=1)["reason"] == "already cancelled"
    assert refused(h, "job.cancel", job_id=7) == "unknown_job"
    with sqlite3.connect(state.opt.journal_path) as db:
        assert db.execute("SELECT job_id FROM events WHERE kind='cancelled'").fetchall() == [(1,)]
        assert db.execute("SELECT state FROM jobs WHERE job_id=1").fetchone() == ("finished",)
    assert [kw["job_id"] for kw in state.log.of("job_cancelled")] == [1]


def test_a_running_job_cancelled_is_stopped_on_its_nodes_and_its_stop_report_ignored(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    assert say(h, "job.cancel", job_id=1)["was"] == "running"
    assert 1 not in state.ledger.placed and state.ledger.strays == [(1, "n0")]
    assert say(h, "job.stopped", job_id=1, node="n0", iterations=40.0, requested=True) == \
        {"ignored": True}  # the agent's report of that stop: the job stays cancelled
    assert say(h, "job.finished", job_id=1, node="n0", iterations=40.0, ok=True)["already"]
    assert state.core.jobs[1].status is Status.DONE and state.jobs.status_of(1) == "cancelled"


def test_a_finished_job_is_not_cancelled(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    say(h, "job.finished", job_id=1, node="n0", iterations=1000.0, ok=True)
    assert say(h, "job.cancel", job_id=1) == {"cancelled": False, "job_id": 1,
                                             "reason": "already finished"}


# -- command records ---------------------------------------------------------------------------
def _command_job(command: tuple, workdir: str = "/tmp"):
    return replace(job(5), command=command, workdir=workdir)


def test_command_records_travel_and_packaged_ones_keep_their_wire_form(live):
    record = _command_job(("python", "train.py", "--lr", "0.1"))
    wire = record_to_map(record)
    assert wire["command"] == ["python", "train.py", "--lr", "0.1"] and wire["workdir"] == "/tmp"
    assert record_from_map(json.loads(json.dumps(wire))) == record  # as the journal keeps it
    assert "command" not in record_to_map(job(1)) and "workdir" not in record_to_map(job(1))
    state, h = live
    assert say(h, "job.submit", job=wire)["accepted"]
    assert state.journal.get(5).record.command == record.command


@pytest.mark.parametrize("command,workdir", [(("",), "/tmp"), ((), "/tmp"),
                                             (("x",) * 300, ""), (("a\0b",), "")])
def test_bad_commands_are_refused(live, command, workdir):
    _, h = live
    wire = record_to_map(_command_job(command, workdir))
    wire.setdefault("command", list(command))
    wire.setdefault("workdir", workdir)
    assert refused(h, "job.submit", job=wire) == "bad_job"


def test_a_command_takes_turns_only_in_a_group_whose_members_all_do(live, tmp_path):
    from scheduler.core.state import NodeSlice
    from scheduler.live.launches import Launcher
    from scheduler.live.ledger import Placed
    from node_agent.gates import Gates

    state, h = live
    for record in (_command_job(("a",)), job(6), replace(_command_job(("b",)), job_id=7)):
        say(h, "job.submit", job=record_to_map(record))
    launcher, where = Launcher(state, None), (NodeSlice(0, (0,)),)
    commands = launcher.workload(state.core.jobs[5], Placed((5, 7), 0.3, where))
    mixed = launcher.workload(state.core.jobs[5], Placed((5, 6), 0.3, where))
    assert (commands["kind"], commands["turns"], mixed["turns"]) == ("command", True, False)
    gates = Gates(AgentConfig(node="n0", gpus=(0,), cpus=1, mem=1.0, endpoints_file="",
                              run_dir=tmp_path), state.log)
    assert gates.for_group((5, 6), user_command.check(mixed)) is None
    gate = gates.for_group((5, 7), user_command.check(commands))
    try:
        assert gate is not None and gate.endpoint
    finally:
        gate.close()


# -- queue view --------------------------------------------------------------------------------
def _core(policy: str, nodes: int = 1, gpus: int = 4) -> Core:
    preset = get_preset("default")
    return Core(spec(nodes=nodes, gpus=gpus), make_policy(policy, preset), preset.model)


def test_expected_starts_follow_the_documented_projection():
    core = _core("fifo")
    for j in (job(1, num_gpu=4, iterations=100), job(2, num_gpu=2, iterations=50),
              job(3, num_gpu=4, iterations=10), job(4, num_gpu=1, iterations=5)):
        core.submit(j, 0.0)
    core.round(0.0)
    assert core.jobs[1].status is Status.RUNNING
    first, two, three = core.jobs[1], core.jobs[2], core.jobs[3]
    # 1 frees the 4 GPUs; 2 takes 2 of them; 3 needs all 4: after 2 ends; 4 after 3 ends
    end1 = first.remaining * core.plan_now.running()[1].tt
    start3 = end1 + two.remaining * two.solo_time
    want = {2: (1, end1), 3: (2, start3), 4: (3, start3 + three.remaining * three.solo_time)}
    got = projection(core, time_scale=10.0)
    assert set(got) == {2, 3, 4}
    for job_id, (position, trace_s) in want.items():
        assert got[job_id][0] == position
        assert got[job_id][1] == pytest.approx(trace_s / 10.0)  # wall seconds


def test_a_group_frees_its_gpus_when_its_slowest_member_ends():
    """Muri shares the one GPU between jobs of different lengths (here four, 5 to 30
    iterations): the next job's expected start is when the longest one ends, at the group's
    iteration time."""
    core = _core("muri-s", gpus=1)
    stages = [(0.3, 0.1, 0.1), (0.1, 0.3, 0.1), (0.1, 0.1, 0.3), (0.2, 0.2, 0.2)]
    for i, iterations in ((1, 100), (2, 10), (3, 50), (4, 30), (5, 20), (6, 5)):
        core.submit(job(i, iterations=iterations, stages=stages[(i - 1) % 4]), 0.0)
    core.round(0.0)
    (group,) = core.plan_now.groups
    remaining = sorted(core.jobs[j].remaining for j in group.jobs)
    assert len(remaining) >= 2 and remaining[0] < remaining[-1]
    got = projection(core, time_scale=1.0)
    first = min(got.values())
    assert first == (1, pytest.approx(remaining[-1] * group.tt))


def test_a_job_larger_than_the_online_gpus_and_those_after_it_have_no_expected_start():
    core = _core("fifo", nodes=2, gpus=4)
    core.submit(job(1, num_gpu=8), 0.0)
    core.submit(job(2, num_gpu=1), 0.0)
    core.set_node_online(1, False)
    assert projection(core, 1.0) == {1: (1, None), 2: (2, None)}


def test_positions_follow_the_policys_order():
    core = _core("srsf", gpus=1)
    core.submit(job(1, iterations=10), 0.0)
    core.round(0.0)  # 1 runs; the others wait
    core.submit(job(2, iterations=500), 0.0)
    core.submit(job(3, iterations=20), 0.0)
    assert [j.id for j in pending_order(core)] == [3, 2]  # shortest remaining service first
    got = projection(core, 1.0)
    assert (got[3][0], got[2][0]) == (1, 2) and got[3][1] < got[2][1]
    line = format_job({"job_id": 3, "state": "pending", "num_gpu": 1, "iterations_done": 0,
                       "iterations": 20, "nodes": [], "position": 1, "expected_start": 12.4})
    assert line.endswith("position 1, expected start in 12 s")


@pytest.mark.parametrize("queued", [12, 600])  # 600: Muri keeps its order between rounds
def test_muri_positions_are_its_priority_order_short_queue_or_long(queued):
    core = _core("muri-s", gpus=1)
    core.submit(job(1, iterations=10), 0.0)
    core.round(0.0)
    for k in range(queued):  # submitted longest first: the queue's order is the reverse
        core.submit(job(100 + k, iterations=1000 - k), 0.0)
    core.round(0.0)
    order = [j.id for j in pending_order(core)]  # a group of up to 4 shares the one GPU
    assert len(order) >= queued - 3
    assert order == sorted(order, key=lambda i: core.jobs[i].remaining)


# -- a user command's environment ----------------------------------------------------------------
def _cfg(tmp_path) -> AgentConfig:
    return AgentConfig(node="n3", gpus=(0, 1), cpus=4, mem=8.0, endpoints_file="/e.json",
                       run_dir=tmp_path, time_scale=50.0)


def test_the_documented_environment_is_the_one_a_command_gets(tmp_path):
    cfg = _cfg(tmp_path)
    out = tmp_path / "env.json"
    workload = user_command.check({"kind": "command", "iterations": 300, "workdir": str(tmp_path),
                                   "argv": [sys.executable, "-c", "import json, os, sys; "
                                            "json.dump(dict(os.environ), open(sys.argv[1], 'w'))",
                                            str(out)]})
    gate = type("G", (), {"endpoint": "tcp://127.0.0.1:5"})()
    procs = user_command.spawn(cfg, 9, (1,), workload, 120.0, 2, 4,
                               {"master_addr": "10.0.0.1", "master_port": 29500}, gate)
    assert [p.wait(30) for p in procs] == [0]
    env = json.loads(out.read_text())
    documented = set(re.findall(r"^\s+(INTERLACE_\w+)", user_command.__doc__, re.M))
    inherited = set(os.environ) - documented  # the operator's own (INTERLACE_VENV_CACHE, ...)
    assert documented == {k for k in env if k.startswith("INTERLACE_")} - inherited
    assert {k: env[k] for k in ("INTERLACE_JOB_ID", "INTERLACE_RANK", "INTERLACE_WORLD_SIZE",
                                "INTERLACE_LOCAL_RANK", "INTERLACE_VISIBLE_DEVICES",
                                "INTERLACE_GATE", "INTERLACE_START_ITERATION", "INTERLACE_NODE",
                                "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                "CUDA_VISIBLE_DEVICES")} == {
        "INTERLACE_JOB_ID": "9", "INTERLACE_RANK": "2", "INTERLACE_WORLD_SIZE": "4",
        "INTERLACE_LOCAL_RANK": "0", "INTERLACE_VISIBLE_DEVICES": "1",
        "INTERLACE_GATE": "tcp://127.0.0.1:5", "INTERLACE_START_ITERATION": "120.0",
        "INTERLACE_NODE": "n3", "RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "1"}
    assert env["INTERLACE_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints" / "job-9")


def test_a_command_that_cannot_start_is_refused(tmp_path):
    workload = user_command.check({"kind": "command", "iterations": 1, "argv": ["/no/such"]})
    with pytest.raises(Refusal) as info:
        user_command.spawn(_cfg(tmp_path), 9, (0,), workload, 0.0, 0, 1, {}, None)
    assert info.value.code == "bad_workload"
    for bad in ({"kind": "command", "iterations": 1, "argv": []},
                {"kind": "command", "iterations": 0, "argv": ["x"]},
                {"kind": "command", "iterations": 1, "argv": ["x"], "workdir": "/no/such/dir"}):
        with pytest.raises(Refusal):
            user_command.check(bad)


# -- trainer/api.py ------------------------------------------------------------------------------
def _env(tmp_path, job_id: int, gate: str = "") -> dict:
    return {"INTERLACE_JOB_ID": str(job_id), "INTERLACE_ITERATIONS": "40",
            "INTERLACE_CHECKPOINT_DIR": str(tmp_path / f"job-{job_id}"), "INTERLACE_GATE": gate}


def test_two_scripts_take_turns_at_their_gate(tmp_path):
    gate = StageGate((1, 2), STAGES, name="t").start()
    held: dict[str, list] = {s: [] for s in ("io", "gpu")}
    overlaps: list[str] = []
    lock = threading.Lock()

    def loop(job_id: int) -> None:
        job = api.Job(_env(tmp_path, job_id, gate.endpoint), handle_sigterm=False)
        job.gate.join()
        for _ in range(20):
            for stage in ("io", "gpu"):
                with job.stage(stage):
                    with lock:
                        if held[stage]:
                            overlaps.append(stage)
                        held[stage].append(job_id)
                    time.sleep(0.001)  # work inside the stage (not synchronisation)
                    with lock:
                        held[stage].remove(job_id)
            job.step()
        job.close()

    threads = [threading.Thread(target=loop, args=(j,)) for j in (1, 2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        gate.close()
    assert not any(t.is_alive() for t in threads)
    assert overlaps == []  # never two members in one stage at once


def test_save_resume_stop_and_finish_write_what_the_scheduler_reads(tmp_path):
    job = api.Job(_env(tmp_path, 4), handle_sigterm=False)
    assert job.resume() == (0, None)
    for k in (10, 20, 30):
        job.save(k, {"w": [k]})
    assert sorted(p.name for p in (tmp_path / "job-4").iterdir()) == \
        ["ckpt-20.pt", "ckpt-30.pt"]  # the newest two are kept
    assert checkpoint.read(tmp_path, 4).iterations == 30.0
    again = api.Job(_env(tmp_path, 4), handle_sigterm=False)
    assert again.resume() == (30, {"w": [30]})
    assert again.stop(35, {"w": [35]}) == EXIT_STOPPED
    assert checkpoint.read(tmp_path, 4).iterations == 35 and not checkpoint.read(tmp_path, 4).done
    assert api.Job(_env(tmp_path, 4), handle_sigterm=False).finish(40) == EXIT_FINISHED
    assert checkpoint.read(tmp_path, 4).done


def test_a_short_launch_reports_its_stage_times_before_its_stop(tmp_path):
    """A launch preempted (or finished) within the first report period still tells the
    planner its pace: a first report after FIRST_REPORT_AFTER iterations, another at the stop,
    seen by a subscriber to the scheduler's two topics through a real broker."""
    with broker_thread() as broker:
        endpoints = tmp_path / "endpoints.json"
        broker.endpoints.save(endpoints)
        sub = Subscriber(broker.endpoints, ("event.progress", "event.timing"))
        probe = Publisher(broker.endpoints, "probe")
        try:  # the subscription is at the broker before the trainer connects
            wait_for(lambda: probe.publish("event.progress", job_id=0, iterations=0.0)
                     or sub.recv(0.05) is not None, 10, "the subscription to reach the broker")
            env = dict(_env(tmp_path, 8), INTERLACE_ENDPOINTS=str(endpoints))
            job = api.Job(env, handle_sigterm=False)
            steps = api.FIRST_REPORT_AFTER + 9
            for _ in range(steps):
                with job.stage("gpu"):
                    pass
                job.step()
            assert job.stop(steps) == EXIT_STOPPED
            timings: list[float] = []
            while not timings or timings[-1] < steps:
                msg = sub.recv(10)
                assert msg is not None, f"timing events seen: {timings}"
                if msg.sender == "trainer.8" and msg.type == "event.timing":
                    timings.append(msg["iterations"])
            assert timings[0] <= api.FIRST_REPORT_AFTER + 1 and timings[-1] == steps
        finally:
            probe.close()
            sub.close()


def test_sigterm_asks_the_loop_to_stop(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    try:
        job = api.Job(_env(tmp_path, 6))
        assert not job.should_stop()
        signal.raise_signal(signal.SIGTERM)
        assert job.should_stop()
    finally:
        signal.signal(signal.SIGTERM, before)


# -- a command that never uses the API, on a real agent process ----------------------------------


def _launch_command(cluster, job_id: int, code: str) -> dict:
    work = {"kind": "command", "iterations": 100, "argv": [sys.executable, "-c", code],
            "workdir": str(cluster.run_dir)}
    return cluster.to_agent("job.launch", job_id=job_id, gpus=[0], group=[job_id], slot=0,
                            workload=work, start_iteration=0.0)["body"]


def test_a_command_that_ignores_the_api_runs_and_is_stopped_by_signal(cluster):
    marker = cluster.run_dir / "started"
    reply = _launch_command(cluster, 21, f"import time; open({str(marker)!r}, 'w').close(); "
                                         "time.sleep(600)")
    assert reply["launched"] is True
    wait_for(marker.exists, 30, "the command to start")
    assert cluster.to_agent("job.stop", job_id=21)["body"]["stopping"] is True
    stopped = cluster.sched.wait(lambda: cluster.sched.of("job.stopped", 21), "job.stopped")[0]
    assert stopped["requested"] is True and stopped["exit_code"] == -signal.SIGTERM
    assert stopped["iterations"] == 0.0  # no checkpoint: it resumes from its start

    _launch_command(cluster, 22, "raise SystemExit(0)")
    _launch_command(cluster, 23, "raise SystemExit('bad input')")
    ok = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 22), "job 22")[0]
    bad = cluster.sched.wait(lambda: cluster.sched.of("job.finished", 23), "job 23")[0]
    assert ok["ok"] is True
    assert bad["ok"] is False and "bad input" in bad["detail"]


def test_the_loader_wrapper_yields_every_batch_and_times_each_fetch_as_io(tmp_path):
    job = api.Job(_env(tmp_path, 8), handle_sigterm=False)
    fetched = []

    def batches():
        for k in range(3):
            time.sleep(0.01)  # a slow fetch (the work being timed)
            fetched.append(k)
            yield k

    assert list(job.loader(batches())) == [0, 1, 2] and fetched == [0, 1, 2]
    assert job._times["io"] >= 0.03  # every fetch, and the final empty one, counted as io


def test_a_standalone_run_that_resumes_says_where_from(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no INTERLACE_JOB_ID: checkpoints under ./checkpoints
    job = api.Job(environ={}, handle_sigterm=False)
    assert job.resume() == (0, None)
    job.save(5, {"x": 1})
    job.close()
    assert capsys.readouterr().err == ""  # a first start says nothing
    again = api.Job(environ={}, handle_sigterm=False)
    assert again.resume() == (5, {"x": 1})
    again.close()
    assert capsys.readouterr().err == "resumed from checkpoints at iteration 5\n"
