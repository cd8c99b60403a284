"""Torch trainers as real processes: 2-rank gloo training, agreed stops, exact stop/resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the train extra (torch) is not installed")

from trainer import checkpoint  # noqa: E402
from trainer.checkpoint import torch_state as torch_checkpoint  # noqa: E402
from trainer.distributed import free_port  # noqa: E402
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 90.0  # torch start-up on a loaded 2-core machine takes seconds
GPT2 = ("--workload", "gpt2", "--batch-size", "8", "--device", "cpu")


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def start(cmd: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "wb")
    try:
        return subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()  # the child holds its own copy


def finish(proc: subprocess.Popen, log_path: Path) -> int:
    try:
        rc = proc.wait(DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"trainer did not end; output:\n{log_path.read_text()[-3000:]}")
    return rc


def wait_for(pred, what: str, procs=(), deadline: float = DEADLINE_S):
    """Poll `pred` until true; fail early if a watched process ends first."""
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"a process ended while waiting for {what}")
        time.sleep(0.01)  # polling interval of a deadline wait, not synchronisation
    raise AssertionError(f"timed out after {deadline}s waiting for {what}")


def trainer_cmd(ckdir: Path, data_dir: Path, total: int, job_id: int = 1,
                extra: tuple = ()) -> list[str]:
    return [sys.executable, "-m", "trainer.run", "--job-id", str(job_id), "--node", "n0",
            "--checkpoint-dir", str(ckdir), "--iterations", str(total), "--data-dir",
            str(data_dir), "--run-dir", str(ckdir / "logs"), *GPT2, *extra]


def log_events(ckdir: Path, job_id: int, event: str) -> list[dict]:
    path = ckdir / "logs" / f"trainer-{job_id}.log"
    if not path.exists():
        return []
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [x for x in lines if x.get("event") == event]


def final_model(ckdir: Path, job_id: int = 1) -> tuple[int, dict]:
    it, path = torch_checkpoint.latest(ckdir, job_id)
    return it, torch_checkpoint.read(path)["model"]


# -- two ranks --------------------------------------------------------------------------------
RANK_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import torch
    torch.set_num_threads(1)
    from trainer import distributed
    from trainer.stages import StageLoop
    from workloads import registry

    port, rank, data_dir, out, steps = sys.argv[1:6]
    rank, steps = int(rank), int(steps)
    distributed.init("127.0.0.1", int(port), 2, rank, timeout=60)
    w = registry.make("gpt2", data_dir=data_dir, batch_size=8, rank=rank, world_size=2,
                      seed=rank)  # different initial weights: the broadcast must fix them
    distributed.broadcast_model(w.model)
    loop = StageLoop(w, reduce=distributed.GradientReducer(2))
    rows = []
    for step in range(steps):
        it = loop.run(step)
        flat = torch.cat([p.detach().reshape(-1) for p in w.model.parameters()])
        rows.append({"step": step, "loss": it.loss, "stop": it.stop,
                     "params": hashlib.sha256(flat.numpy().tobytes()).hexdigest()})
    stop = loop.run(steps, stop_vote=rank == 1).stop  # one rank votes: every rank must stop
    rows.append({"step": steps, "agreed_stop": stop})
    distributed.shutdown()
    print("left the process group", file=sys.stderr, flush=True)  # where a crash came from
    with open(out, "w") as fh:
        json.dump(rows, fh)
    print("wrote the result", file=sys.stderr, flush=True)
""")


def test_two_ranks_hold_identical_parameters_after_every_step(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    port, steps = free_port(), 12
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    logs = [tmp_path / f"rank{r}.log" for r in range(2)]
    procs = [start([sys.executable, str(script), str(port), str(r), str(tmp_path / "data"),
                    str(outs[r]), str(steps)], logs[r]) for r in range(2)]
    for p, log in zip(procs, logs):
        assert finish(p, log) == 0, log.read_text()[-3000:]
    a, b = (json.loads(o.read_text()) for o in outs)
    assert [r["params"] for r in a[:-1]] == [r["params"] for r in b[:-1]]
    assert len({r["params"] for r in a[:-1]}) == steps  # and they did change every step
    assert any(x["loss"] != y["loss"] for x, y in zip(a, b)), "ranks should read different data"
    assert not any(r["stop"] for r in a[:-1] + b[:-1])
    assert a[-1]["agreed_stop"] is True and b[-1]["agreed_stop"] is True


def test_sigterm_to_one_rank_stops_both_at_the_same_iteration(tmp_path):
    ckdir, data = tmp_path / "ck", tmp_path / "data"
    port = free_port()
    cmds = [trainer_cmd(ckdir, data, 10**6, extra=(
        "--world-size", "2", "--rank", str(r), "--master-port", str(port),
        "--checkpoint-every", "10")) for r in range(2)]
    cmds[1] = [c if c != str(ckdir / "logs") else str(ckdir / "logs1") for c in cmds[1]]
    logs = [tmp_path / f"rank{r}.out" for r in range(2)]
    procs = [start(cmd, log) for cmd, log in zip(cmds, logs)]
    try:
        wait_for(lambda: torch_checkpoint.latest(ckdir, 1), "a periodic checkpoint", procs)
        procs[1].send_signal(signal.SIGTERM)  # rank 1 only: its vote must stop rank 0 too
        rcs = [finish(p, log) for p, log in zip(procs, logs)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert rcs == [EXIT_STOPPED, EXIT_STOPPED], [log.read_text()[-2000:] for log in logs]
    ck = checkpoint.read(ckdir, 1)
    assert ck is not None and not ck.done and ck.iterations >= 10
    assert torch_checkpoint.latest(ckdir, 1)[0] == ck.iterations  # rank 0 wrote both, agreed
    stopped = [log_events(ckdir, 1, "trainer_stopped"),
               [json.loads(x) for x in (ckdir / "logs1" / "trainer-1.log").read_text()
                .splitlines() if "trainer_stopped" in x]]
    assert [s[0]["iterations"] for s in stopped] == [ck.iterations] * 2


def test_a_killed_rank_ends_its_peer_with_an_error_not_a_hang(tmp_path):
    """The survivor must fail fast (no barrier wait for a peer that will never come) and keep
    its last periodic checkpoint, so the agent can report progress and the job be requeued."""
    ckdir, data = tmp_path / "ck", tmp_path / "data"
    port = free_port()
    cmds = [trainer_cmd(ckdir, data, 10**6, extra=(
        "--world-size", "2", "--rank", str(r), "--master-port", str(port),
        "--checkpoint-every", "10", "--dist-timeout", "600")) for r in range(2)]
    cmds[1] = [c if c != str(ckdir / "logs") else str(ckdir / "logs1") for c in cmds[1]]
    logs = [tmp_path / f"rank{r}.out" for r in range(2)]
    procs = [start(cmd, log) for cmd, log in zip(cmds, logs)]
    try:
        wait_for(lambda: torch_checkpoint.latest(ckdir, 1), "a periodic checkpoint", procs)
        procs[1].kill()
        rc = finish(procs[0], logs[0])  # well before the 600 s collective timeout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert rc not in (EXIT_FINISHED, EXIT_STOPPED), logs[0].read_text()[-2000:]
    ck = checkpoint.read(ckdir, 1)
    assert ck is not None and not ck.done and ck.iterations >= 10
    assert torch_checkpoint.latest(ckdir, 1)[0] >= 10


# -- stop and resume ---------------------------------------------------------------------------
def test_stop_and_relaunch_resume_exactly_like_an_uninterrupted_run(tmp_path):
    data, total = tmp_path / "data", 200
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    # the uninterrupted run goes first; the interrupted one starts while it finishes
    ref = start(trainer_cmd(whole, data, total), tmp_path / "whole.out")
    assert finish(ref, tmp_path / "whole.out") == EXIT_FINISHED

    proc = start(trainer_cmd(parts, data, total, extra=("--checkpoint-every", "20")),
                 tmp_path / "a.out")
    wait_for(lambda: torch_checkpoint.latest(parts, 1), "the first periodic checkpoint", [proc])
    proc.send_signal(signal.SIGTERM)
    assert finish(proc, tmp_path / "a.out") == EXIT_STOPPED
    stopped = checkpoint.read(parts, 1)
    assert stopped is not None and not stopped.done and 20 <= stopped.iterations < total
    k = int(stopped.iterations)
    it, at_stop = final_model(parts)
    assert it == k  # the torch state and the agent's JSON agree on how far the job got

    proc = start(trainer_cmd(parts, data, total), tmp_path / "b.out")
    assert finish(proc, tmp_path / "b.out") == EXIT_FINISHED
    assert [e["iteration"] for e in log_events(parts, 1, "trainer_resumed")] == [k]
    assert [e["start"] for e in log_events(parts, 1, "trainer_start")] == [0, k]
    done = checkpoint.read(parts, 1)
    assert done.done and done.iterations == total

    (it_a, whole_model), (it_b, parts_model) = final_model(whole), final_model(parts)
    assert it_a == it_b == total
    assert whole_model.keys() == parts_model.keys()
    for name in whole_model:
        assert torch.equal(whole_model[name], parts_model[name]), name
    assert any(not torch.equal(at_stop[n], parts_model[n]) for n in at_stop)  # it did train on

    # the restart overhead of each launch is measured and kept with the training state
    overheads = torch_checkpoint.read(torch_checkpoint.latest(parts, 1)[1])["meta"][
        "restart_overheads"]
    firsts = log_events(parts, 1, "trainer_first_iteration")
    assert len(overheads) == 2 and overheads == [e["restart_overhead_s"] for e in firsts]
    assert all(0 < x < DEADLINE_S for x in overheads) and firsts[1]["resumed"] is True


def test_publishes_stage_timings_and_a_done_job_relaunches_to_exit_0(tmp_path):
    """event.timing carries io/cpu/gpu/net means; a finished job's relaunch trains nothing."""
    from broker.client import Publisher, Subscriber
    from broker.testing import broker_thread

    data, ckdir, total = tmp_path / "data", tmp_path / "ck", 60
    with broker_thread() as broker:
        endpoints = tmp_path / "endpoints.json"
        broker.endpoints.save(endpoints)
        sub = Subscriber(broker.endpoints, ("event.",))
        try:
            probe = Publisher(broker.endpoints, "probe")  # our subscription is on the bus
            wait_for(lambda: probe.publish("event.progress", job_id=0, iterations=0.0)
                     or sub.recv(0.05), "the subscription to reach the bus")
            probe.close()
            proc = start(trainer_cmd(ckdir, data, total, extra=(
                "--endpoints", str(endpoints), "--report-every", "0.05")), tmp_path / "a.out")
            assert finish(proc, tmp_path / "a.out") == EXIT_FINISHED
            events = []
            while (m := sub.recv(0.2)) is not None:
                if m.get("job_id") == 1:
                    events.append(m)
        finally:
            sub.close()
    timing = [e for e in events if e.type == "event.timing"]
    progress = [e["iterations"] for e in events if e.type == "event.progress"]
    assert timing and progress == sorted(progress) and progress[-1] == total
    last = timing[-1]
    assert set(last["stages"]) == {"io", "cpu", "gpu", "net"} and last["iterations"] == total
    assert last["iteration_time"] >= sum(last["stages"].values()) > 0
    assert last.sender == "trainer.1"
    summary = log_events(ckdir, 1, "trainer_finished")[0]["timing"]
    assert set(summary["stages"]) == {"io", "cpu", "gpu", "net"}

    proc = start(trainer_cmd(ckdir, data, total), tmp_path / "b.out")
    assert finish(proc, tmp_path / "b.out") == EXIT_FINISHED
    assert len(log_events(ckdir, 1, "trainer_start")) == 1  # the second launch trained nothing
