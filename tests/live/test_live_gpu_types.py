"""The live scheduler's job.submit takes a job's GPU types: a list of valid names (at most 64)
that some pool of its spec holds, else refused in one line with the reason. In process: real
handlers and state, no sockets."""
from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

import pytest

from broker.messages import make
from broker.refusal import Refusal
from scheduler.live.handlers import Handlers
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from specs.spec import load_spec
from tests.helpers import Log, job, spec
from traces.record import record_to_map

_ids = itertools.count()
# 8 T4 GPUs of 16 GB (2 nodes of 4) and 8 V100M32 of 32 GB (one node)
POOLS = ("pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node\n"
         "t4,2,4,T4,16,64,256\nv32,1,8,V100M32,32,64,256\n")


def live_state(tmp_path, cluster):
    state = LiveState(Options(spec=cluster, policy="fifo", run_dir=tmp_path), Log(),
                      time.monotonic)
    return state, Handlers(state)


@pytest.fixture
def pooled(tmp_path):
    (tmp_path / "pools.csv").write_text(POOLS)
    (tmp_path / "run").mkdir()
    state, handlers = live_state(tmp_path / "run", load_spec(tmp_path / "pools.csv"))
    yield state, handlers
    state.journal.close()


def submit(handlers: Handlers, data: dict[str, Any]) -> dict:
    return handlers.handle(make("job.submit", "test", f"t-{next(_ids)}", job=data))


def refusal(handlers: Handlers, data: dict[str, Any]) -> str:
    with pytest.raises(Refusal) as info:
        submit(handlers, data)
    assert info.value.code == "bad_job" and "\n" not in info.value.reason
    return info.value.reason


def typed(job_id: int, types: Any, gpus: int = 1, gb: float = 0.0) -> dict[str, Any]:
    return {**record_to_map(dataclasses.replace(job(job_id, num_gpu=gpus), gpu_mem_gb=gb)),
            "gpu_types": types}


def test_a_job_of_types_the_cluster_has_is_queued_with_them(pooled):
    state, h = pooled
    assert submit(h, typed(1, ["V100M32", "T4"], gpus=8, gb=20.0))["accepted"]
    assert state.journal.get(1).record.gpu_types == ("V100M32", "T4")
    assert submit(h, typed(2, ["A100", "T4"]))["accepted"]  # one type it accepts is there


@pytest.mark.parametrize("types,gpus,gb,reason", [
    (["A100"], 1, 0.0, "gpu_types: job asks for 'A100' but the cluster has T4, V100M32"),
    (["T4"], 12, 0.0, "num_gpu: job needs 12 GPUs of type T4 but the largest pool of that "
                      "type has 8"),
    (["T4"], 1, 20.0, "gpu_mem_gb: job needs 20.0 GB on each GPU but the GPUs of its types "
                      "hold at most 16 GB"),
    ("T4", 1, 0.0, "gpu_types: must be a list of GPU type names, got 'T4'"),
    (["T4", "bad name"], 1, 0.0, "gpu_types: 'bad name' is not a GPU type name"),
    (["T4", "T4"], 1, 0.0, "gpu_types: names 'T4' twice"),
    ([f"t{i}" for i in range(65)], 1, 0.0, "gpu_types: names 65 GPU types; at most 64"),
])
def test_a_job_no_pool_holds_or_with_bad_types_is_refused_in_one_line(pooled, types, gpus,
                                                                       gb, reason):
    state, h = pooled
    assert refusal(h, typed(3, types, gpus, gb)).startswith(reason)
    assert state.journal.get(3) is None


def test_a_muri_spec_takes_any_type(tmp_path):
    state, h = live_state(tmp_path, spec(nodes=2, gpus=4))
    assert submit(h, typed(1, ["A100"], gpus=4))["accepted"]
    state.journal.close()
