"""Real torch trainers in the live system: broker, scheduler (--workload torch), node agents.

A 2-GPU job on two 1-GPU nodes runs as two ranks on two agents, which arrange the gloo
rendezvous between them (rank 0's agent picks a free port); two 1-GPU jobs on one GPU form a
group whose members take turns through the node's stage gate. Every job must finish once.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import job
from tests.live_system import LiveCluster, log_records
from traces.muri_csv import write_trace

pytest.importorskip("torch", reason="the torch trainers need the train extra")

TORCH_CONFIG = json.dumps({"seq_len": 16, "d_model": 32, "layers": 1, "heads": 2, "ff": 64})


def start(tmp_path: Path, nodes: int, gpus: int, jobs: list) -> LiveCluster:
    spec = tmp_path / "spec.csv"
    spec.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    f"1,{nodes},{gpus},8,64\n")
    trace = tmp_path / "trace.csv"
    write_trace(trace, jobs)
    cluster = LiveCluster(tmp_path / "run", str(spec), nodes=nodes, gpus_per_node=gpus,
                          time_scale=1.0, scheduler_args=["--workload", "torch",
                                                          "--torch-config", TORCH_CONFIG])
    cluster.start()
    cluster.feed(trace)
    return cluster


def test_two_rank_job_across_two_agents(tmp_path):
    cluster = start(tmp_path, nodes=2, gpus=1,
                    jobs=[job(0, num_gpu=2, iterations=40, model="bert",
                              stages=(0.01, 0.01, 0.01))])
    try:
        cluster.wait_finished(1, 240)
        launched = log_records(cluster.run_dir, "job_launched", "agent")
        assert sorted(r["rank"] for r in launched) == [0, 1]
        assert {r["world_size"] for r in launched} == {2}
        ports = {r["master_port"] for r in launched}
        assert len(ports) == 1 and ports.pop() > 0  # one rendezvous, picked by rank 0's agent
        assert {r["node"] for r in launched} == {"n0", "n1"}
        finished = log_records(cluster.run_dir, "trainer_finished", "trainer")
        assert sorted(r.get("rank", 0) for r in finished) == [0, 1]
        digests = {r["params_digest"] for r in finished}
        assert len(digests) == 1  # the two ranks ended with identical parameters
        assert [e["job_id"] for e in cluster.finished_events()] == [0]
    finally:
        cluster.stop_all()


def test_group_members_take_turns_through_the_gate(tmp_path):
    cluster = start(tmp_path, nodes=1, gpus=1,
                    jobs=[job(1, iterations=60, model="bert", stages=(0.01, 0.02, 0.0)),
                          job(2, iterations=60, model="gpt2", stages=(0.02, 0.01, 0.0))])
    try:
        status = cluster.wait_finished(2, 240)
        assert status["counts"]["finished"] == 2
        launched = log_records(cluster.run_dir, "job_launched", "agent")
        grouped = [r for r in launched if r.get("gate")]
        assert {r["job"] for r in grouped} == {1, 2}  # both ran as one group, gated
        assert len({r["gate"] for r in grouped}) >= 1
        assert sorted(e["job_id"] for e in cluster.finished_events()) == [1, 2]
    finally:
        cluster.stop_all()
