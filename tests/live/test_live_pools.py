"""The live scheduler with a pooled spec: each node is its own pool's shape.

Registration goes over real sockets (a real broker, the scheduler service; the test speaks as
an agent), so a refusal is what an agent would be answered. Every expected figure comes from
POOLS below, not from the code under test.
"""
from __future__ import annotations

import pytest

from broker.client import RequestFailed
from scheduler.core.engine import Core
from scheduler.live.queue_view import projection
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from specs.spec import ClusterSpec, Pool
from tests.helpers import job, spec
from tests.live.test_service import harness  # noqa: F401  (the fixture)
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
    assert not h.scheduler.state.core.cluster.offline  # every node took its agent


def test_a_muri_form_spec_states_no_type_and_checks_its_gpu_count(harness):  # noqa: F811
    h = harness(spec=spec(nodes=2, gpus=4))
    h.start_scheduler()
    short = _refused(h, "n0", 3)
    assert short.code == "short_of_gpus" and "n0 lists 3 of the 4 GPUs the spec gives it" \
        in short.reason
    assert _register(h, "n0", 4, gpu_type="T4")["registered"] is True


# -- what the scheduler shows of the pools -----------------------------------------------------
def test_the_queue_projection_counts_each_online_nodes_own_gpus():
    preset = get_preset("default")
    core = Core(POOLED, make_policy("fifo", preset), preset.model)
    core.submit(job(1, num_gpu=10), 0.0)  # 18 GPUs; 10 once the V100 node (8) is offline
    core.submit(job(2, num_gpu=1), 0.0)
    core.set_node_online(2, False)
    assert projection(core, 1.0)[1] == (1, 0.0)
    core.set_node_online(0, False)  # and a T4 node: 6 GPUs left
    assert projection(core, 1.0) == {1: (1, None), 2: (2, None)}
