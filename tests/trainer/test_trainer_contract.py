"""One trainer contract: the emulated trainer, the torch trainer and a user's own script, each
started, preempted by SIGTERM, relaunched and run to its end as real processes, leave the
same trace where the agent, the scheduler and the ledger verdict look: exit statuses, the
progress record, the node's ledger and the telemetry on a real broker.

Each kind's trace is written with symbols for its numbers ("0", "k" for where the stop left
the job, "total") and compared with one expected trace: resume at 0, periodic checkpoints,
the stop's checkpoint at k and its report, exit 3; resume at k, checkpoints, the final one at
the total with done=true and its report, exit 0. The torch trainer and the script keep
training state besides (the emulated one keeps none): the stop's is at the record's
iteration. Nothing is mocked.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker.client import Publisher, Subscriber
from broker.testing import broker_thread
from tests.live_system import ROOT, trainer_env, wait_for
from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
from trainer.ledger import ledger_path, read_ledgers, verdict
from trainer.stores import FileStore, TorchStore

DEADLINE_S = 120.0  # torch start-up on a loaded 2-core machine takes seconds
KINDS = ("emulated", "torch", "user")
TOTAL = {"emulated": 500, "torch": 600, "user": 3000}  # seconds of work: SIGTERM comes first
PREEMPT_AFTER = 40  # iterations checkpointed before the SIGTERM
TINY_BERT = {"seq_len": 16, "d_model": 32, "layers": 1, "heads": 2, "ff": 64}

EXPECTED = [
    ("start", "0"), ("checkpoints", "rising"), ("end", "stopped", "k"),
    ("exit", EXIT_STOPPED), ("record", "k", False), ("reported", "k", "k"),
    ("start", "k"), ("checkpoints", "rising"), ("end", "finished", "total"),
    ("exit", EXIT_FINISHED), ("record", "total", True), ("reported", "total", "total"),
]


def command(kind: str, job_id: int, tmp: Path, endpoints: Path) -> tuple[list[str], dict]:
    """The command line and environment of one launch: a packaged trainer the way the agent
    starts it (node_agent/launcher.py), or the user's script with the INTERLACE_* variables
    (node_agent/user_command.py) and INTERLACE_LEDGER."""
    env = trainer_env()
    if kind == "user":
        env.update(INTERLACE_JOB_ID=str(job_id), INTERLACE_ITERATIONS=str(TOTAL[kind]),
                   INTERLACE_CHECKPOINT_DIR=str(tmp / "ck" / f"job-{job_id}"),
                   INTERLACE_ENDPOINTS=str(endpoints), INTERLACE_NODE="n0",
                   INTERLACE_LEDGER=str(ledger_path(tmp / "run", "n0")))
        return [sys.executable, "examples/user-script/train.py", "--checkpoint-every", "20"], env
    cmd = [sys.executable, "-m", "trainer.run", "--job-id", str(job_id), "--node", "n0",
           "--endpoints", str(endpoints), "--checkpoint-dir", str(tmp / "ck"),
           "--iterations", str(TOTAL[kind]), "--run-dir", str(tmp / "run"),
           "--report-every", "0.1"]
    if kind == "emulated":  # 10 ms per iteration
        return cmd + ["--iteration-time", "10", "--stages", "2,5,3", "--time-scale", "1000"], env
    return cmd + ["--workload", "bert", "--workload-config", json.dumps(TINY_BERT),
                  "--device", "cpu", "--checkpoint-every", "20",
                  "--data-dir", str(tmp / "data")], env


def launch(kind: str, job_id: int, tmp: Path, endpoints: Path, preempt: bool) -> int:
    """One launch to its exit status; with `preempt`, SIGTERM once PREEMPT_AFTER iterations
    are checkpointed (the progress record says so)."""
    cmd, env = command(kind, job_id, tmp, endpoints)
    with open(tmp / f"{kind}.out", "ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        if preempt:
            wait_for(lambda: proc.poll() is not None
                     or checkpoint.iterations(tmp / "ck", job_id) >= PREEMPT_AFTER,
                     DEADLINE_S, f"{kind} to checkpoint {PREEMPT_AFTER} iterations", every=0.01)
            proc.send_signal(signal.SIGTERM)
        return proc.wait(DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def drain(sub: Subscriber, job_id: int) -> list:
    """The job's events that reached the bus (its process has exited: all are sent)."""
    events = []
    while (msg := sub.recv(0.5)) is not None:
        if msg.sender == f"trainer.{job_id}":
            events.append(msg)
    return events


def trace(kind: str, tmp: Path, endpoints: Path, sub: Subscriber, job_id: int) -> list:
    """Both launches, as the contract's acts in order, numbers written as symbols."""
    acts, names = [], {0.0: "0", float(TOTAL[kind]): "total"}
    for preempt in (True, False):
        before = len(read_ledgers(tmp / "run")[0])
        rc = launch(kind, job_id, tmp, endpoints, preempt)
        out = (tmp / f"{kind}.out").read_text()[-3000:]
        records = [r for r in read_ledgers(tmp / "run")[0][before:] if r["job"] == job_id]
        assert [r["kind"] for r in records[:1] + records[-1:]] == ["start", "end"], out
        start, checkpoints, end = records[0], records[1:-1], records[-1]
        if preempt:
            names.setdefault(end["last"], "k")
        its = [r["iteration"] for r in checkpoints]
        rising = bool(its) and its == sorted(its) and its[0] >= start["resumed"] \
            and its[-1] == end["last"] and {r["kind"] for r in checkpoints} == {"checkpoint"}
        record = checkpoint.read(tmp / "ck", job_id)
        if preempt and kind != "emulated":  # stateful: the stop's state is the record's
            store = TorchStore(tmp / "ck", job_id) if kind == "torch" \
                else FileStore(tmp / "ck" / f"job-{job_id}")
            assert store.latest() == record.iterations, kind
        events = drain(sub, job_id)
        progress = [e["iterations"] for e in events if e.type == "event.progress"]
        timing = [e["iterations"] for e in events if e.type == "event.timing"]
        assert progress == sorted(progress), f"{kind}: progress went back: {progress}"
        sym = (lambda x: names.get(float(x), x))
        acts += [("start", sym(start["resumed"])), ("checkpoints", "rising" if rising else its),
                 ("end", end["how"], sym(end["last"])), ("exit", rc),
                 ("record", sym(record.iterations), record.done),
                 ("reported", sym(progress[-1]) if progress else None,
                  sym(timing[-1]) if timing else None)]
    return acts


@pytest.mark.parametrize("kind", KINDS)
def test_each_trainer_keeps_the_one_contract(kind, tmp_path):
    if kind != "emulated":
        pytest.importorskip("torch", reason="the torch trainer and the script need torch")
    if kind == "user":
        pytest.importorskip("sklearn", reason="the example script trains on sklearn's digits")
    job_id = KINDS.index(kind) + 1
    with broker_thread() as broker:
        endpoints = tmp_path / "endpoints.json"
        broker.endpoints.save(endpoints)
        sub = Subscriber(broker.endpoints, ("event.progress", "event.timing"))
        probe = Publisher(broker.endpoints, "probe")
        try:  # the subscription is at the broker before a trainer connects
            wait_for(lambda: probe.publish("event.progress", job_id=0, iterations=0.0)
                     or sub.recv(0.05) is not None, 10, "the subscription to reach the broker")
            acts = trace(kind, tmp_path, endpoints, sub, job_id)
        finally:
            probe.close()
            sub.close()
    assert acts == EXPECTED, (tmp_path / f"{kind}.out").read_text()[-3000:]
    records, bad = read_ledgers(tmp_path / "run")
    judged = verdict(records, {job_id: float(TOTAL[kind])})
    assert not bad and judged.ok, judged.problems
    assert judged.runs == {job_id: 2} and judged.finishes == {job_id: 1}

