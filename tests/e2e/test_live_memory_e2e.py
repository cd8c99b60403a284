"""GPU memory on the whole live system: broker, scheduler, a node agent and emulated trainers as
real processes. Two complementary jobs on a one-GPU node share it while their declared memory
fits the spec's GPU less the reserve, and never run at once where it does not: judged from
the trainers' own ledgers (when each process ran), not from the scheduler."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.helpers import job
from tests.live_system import LiveCluster
from traces import write_trace


def _spec(path: Path) -> Path:
    path.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node,"
                    "gpu_mem_p_gpu\n1,1,1,8,64,80\n")
    return path


def _intervals(records: list[dict]) -> dict[int, list[tuple[float, float]]]:
    """Each job's processes as (began, ended) wall times, from the ledger's start and end."""
    began = {r["pid"]: (r["job"], r["t_begin"]) for r in records if r["kind"] == "start"}
    out: dict[int, list[tuple[float, float]]] = {}
    for r in records:
        if r["kind"] == "end" and r["pid"] in began:
            job_id, t0 = began[r["pid"]]
            out.setdefault(job_id, []).append((t0, r["t"]))
    return out


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)


@pytest.mark.parametrize("gb,together", [(30.0, True), (41.0, False)])
def test_jobs_share_a_gpu_only_where_their_memory_fits(tmp_path, gb, together):
    trace = tmp_path / "pair.csv"
    write_trace(trace, [dataclasses.replace(job(i, stages=stages, iterations=600),
                                            gpu_mem_gb=gb)
                        for i, stages in enumerate([(0.3, 0.05, 0.05), (0.05, 0.3, 0.05)])])
    live = LiveCluster(tmp_path / "run", spec=str(_spec(tmp_path / "spec.csv")), nodes=1,
                       gpus_per_node=1, policy="muri-s", time_scale=200.0,
                       scheduler_args=["--preset", "paper"])
    try:
        live.start()
        live.feed(trace)
        live.wait_finished(2, timeout=180)
        spans = _intervals(live.ledger_records())
    finally:
        live.stop_all()
    assert set(spans) == {0, 1}
    shared = _overlap(spans[0], spans[1])
    if together:
        assert shared > 0.5, spans  # seconds both ran at once: they were a group
    else:
        assert shared == 0.0, spans
