"""The live scheduler with a pooled spec: each node is its own pool's shape.

Registration goes over real sockets (a real broker, the scheduler service; the test speaks as
an agent), so a refusal is what an agent would be answered. The metrics, the web view's data
and /api/jobs/ID are read from a real LiveState with placements the test builds itself, and
every expected figure comes from POOLS below, not from the code under test.
"""
from __future__ import annotations

import time

import pytest

from broker.client import RequestFailed
from scheduler.core.engine import Core
from scheduler.core.state import NodeSlice
from scheduler.live.ledger import Placed
from scheduler.live.metrics import SchedulerMetrics
from scheduler.live.options import Options
from scheduler.live.queue_view import projection
from scheduler.live.state import LiveState
from scheduler.live.webdata import JournalReader, cluster, job_detail
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from specs.spec import ClusterSpec, Pool
from tests.helpers import Log, job, spec
from tests.live.test_metrics import scrape
from tests.live.test_service import harness, wait_for  # noqa: F401  (the fixture)
from tests.live.test_telemetry_guard import logged  # noqa: F401  (the fixture)

# n0, n1: T4 x4 (16 GB); n2: V100M32 x8 (32 GB); n3: CPU only; n4: 2 GPUs of no stated type
POOLS = (Pool("t4", 2, 4, 32, 128, "T4", 16.0), Pool("v100", 1, 8, 64, 256, "V100M32", 32.0),
         Pool("cpu", 1, 0, 32, 64), Pool("any", 1, 2, 16, 64))
POOLED = ClusterSpec.of_pools(POOLS)


def _register(h, node: str, gpus: int, **told) -> dict:
    return h.request("agent.register", node=node, gpus=list(range(gpus)), cpus=8, mem=64.0,
                     **told)


def _refused(h, node: str, gpus: int, **told) -> RequestFailed:
    with pytest.raises(RequestFailed) as err:
        _register(h, node, gpus, **told)
    return err.value


# -- registration ------------------------------------------------------------------------------
def test_an_agent_is_checked_against_its_own_nodes_pool(logged):  # noqa: F811
    h = logged(spec=POOLED)
    h.start_scheduler()
    # a T4 node has 4 GPUs of 16 GB: 2 GPUs are too few; 4 are enough though the spec's
    # largest node has 8, and 15.6 GB is enough though its largest GPUs hold 32
    short = _refused(h, "n0", 2, gpu_type="T4")
    assert short.code == "short_of_gpus"
    assert "n0 lists 2 of the 4 GPUs pool t4 gives it" in short.reason
    assert _register(h, "n0", 4, gpu_type="T4", gpu_mem_gb=15.6)["registered"] is True
    # the V100 node: its own 8 GPUs and 32 GB
    assert _refused(h, "n2", 4).code == "short_of_gpus"
    small = _refused(h, "n2", 8, gpu_mem_gb=16.0)
    assert small.code == "short_of_gpu_memory"
    assert "n2's GPUs hold 16 GB; the spec plans groups for 32 GB (pool v100)" in small.reason
    # a type the pool does not state: refused, naming the node, the type expected and the
    # one reported; asked again (an agent does, every heartbeat), logged once
    for _ in range(3):
        wrong = _refused(h, "n2", 8, gpu_type="T4", gpu_mem_gb=32.0)
        assert wrong.code == "wrong_gpu_type"
        assert wrong.reason.startswith("n2's GPUs are T4; the spec's pool v100 expects V100M32")
    assert [(e["node"], e["gpu_type"], e["spec_gpu_type"]) for e in
            h.log.of("agent_wrong_gpu_type")] == [("n2", "T4", "V100M32")]
    assert "n2" not in h.status()["agents"]
    assert _register(h, "n2", 8, gpu_type="V100M32", gpu_mem_gb=31.5)["registered"] is True
    # a pool of no stated type takes any; an agent that states none is not checked
    assert _register(h, "n4", 2, gpu_type="A10")["registered"] is True
    assert _register(h, "n1", 4)["registered"] is True
    assert _register(h, "n3", 0)["registered"] is True  # the CPU-only node
    agents = h.status()["agents"]
    assert {n: a.get("gpu_type") for n, a in agents.items()} == {
        "n0": "T4", "n1": None, "n2": "V100M32", "n3": None, "n4": "A10"}
    wait_for(lambda: not h.scheduler.state.view.offline)  # every node took its agent


def test_a_muri_form_spec_states_no_type_and_checks_its_gpu_count(harness):  # noqa: F811
    h = harness(spec=spec(nodes=2, gpus=4))
    h.start_scheduler()
    short = _refused(h, "n0", 3)
    assert short.code == "short_of_gpus" and "n0 lists 3 of the 4 GPUs the spec gives it" \
        in short.reason
    assert _register(h, "n0", 4, gpu_type="T4")["registered"] is True


# -- what the scheduler shows of the pools -----------------------------------------------------
@pytest.fixture
def pooled(tmp_path):
    state = LiveState(Options(spec=POOLED, policy="srsf", run_dir=tmp_path), Log(),
                      time.monotonic)
    metrics = SchedulerMetrics(state)
    state.metrics = metrics
    yield state, metrics
    state.journal.close()


# (job ids sharing the GPUs, their slices): n0 and n1 are T4, n2 V100M32, n4 unstated
PLACED = [((1, 2), (NodeSlice(0, (0, 1)),)),  # a pair on two T4s: 2 GPUs, not 4
          ((3,), (NodeSlice(0, (2, 3)), NodeSlice(1, (0, 1, 2, 3)))),  # 6 T4s on two nodes
          ((4,), (NodeSlice(2, (0, 1, 2, 3, 4)),)),  # 5 of the V100s
          ((5,), (NodeSlice(4, (1,)),))]  # 1 GPU of no stated type


def test_gpus_and_busy_gpus_by_type_follow_the_pools_and_the_placements(pooled):
    state, metrics = pooled
    for group, slices in PLACED:
        for j in group:
            record = job(j, num_gpu=sum(len(s.gpus) for s in slices))
            assert state.jobs.accept(record, 0.0)
    for group, slices in PLACED:
        where = Placed(group, 1.0, slices)
        for j in group:
            assert state.jobs.launch(j, where, 0.0) and state.jobs.launched(j, where, {}, {},
                                                                            0.0)
    got = scrape(metrics.registry)
    # the spec: T4 2 nodes x 4, V100M32 1 x 8, the CPU pool none, the unstated pool 1 x 2
    assert got["interlace_gpus_by_type"] == {
        (("gpu_type", "T4"),): 8, (("gpu_type", "V100M32"),): 8, (("gpu_type", "unstated"),): 2}
    assert got["interlace_gpus"][()] == 18  # unchanged: every pool's GPUs
    # busy: the pair's 2 T4s once + job 3's 6 T4s; 5 V100s; 1 unstated
    assert got["interlace_gpus_busy_by_type"] == {
        (("gpu_type", "T4"),): 8, (("gpu_type", "V100M32"),): 5, (("gpu_type", "unstated"),): 1}
    # job 4 ends: its type shows 0 busy, still listed
    state.jobs.finish(4, state.now(), 100.0, "n2")
    got = scrape(metrics.registry)
    assert got["interlace_gpus_busy_by_type"][(("gpu_type", "V100M32"),)] == 0
    assert got["interlace_gpus_busy_by_type"][(("gpu_type", "T4"),)] == 8
    # /api/jobs/ID: the type of the pool a running job runs on, where the pool states one
    reader = JournalReader(str(state.opt.journal_path))
    try:
        assert job_detail(state, reader, 3)["gpu_type"] == "T4"
        assert job_detail(state, reader, 1)["gpu_type"] == "T4"
        assert "gpu_type" not in job_detail(state, reader, 5)  # its pool states none
        assert "gpu_type" not in job_detail(state, reader, 4)  # finished: runs nowhere
    finally:
        reader.close()


def test_the_web_views_grid_gives_each_node_its_own_gpus_and_type(pooled, tmp_path):
    state, _ = pooled
    assert cluster(state) == {"nodes": ["n0", "n1", "n2", "n3", "n4"],
                              "node_gpus": [4, 4, 8, 0, 2],
                              "node_types": ["T4", "T4", "V100M32", "", ""]}
    (tmp_path / "muri").mkdir()
    muri = LiveState(Options(spec=spec(nodes=2, gpus=4), run_dir=tmp_path / "muri"), Log(),
                     time.monotonic)
    try:  # a Muri-form spec's nodes are alike: the old key stays
        assert cluster(muri) == {"nodes": ["n0", "n1"], "node_gpus": [4, 4],
                                 "node_types": ["", ""], "gpus_per_node": 4}
    finally:
        muri.journal.close()


def test_the_queue_projection_counts_each_online_nodes_own_gpus():
    preset = get_preset("default")
    core = Core(POOLED, make_policy("fifo", preset), preset.model)
    core.submit(job(1, num_gpu=8), 0.0)  # 18 GPUs; 10 once the V100 node (8) is offline
    core.submit(job(2, num_gpu=1), 0.0)
    core.set_node_online(2, False)
    assert projection(core, 1.0)[1] == (1, 0.0)
    core.set_node_online(0, False)  # and a T4 node: 6 GPUs left
    assert projection(core, 1.0) == {1: (1, None), 2: (2, None)}
