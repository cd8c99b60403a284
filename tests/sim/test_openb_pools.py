"""The real openb cluster and its `gpuspec` pod list, where present: every placement of every
policy's run puts each job only on a GPU type it accepts, its GPUs in one pool. Alibaba's
files are not part of this repository: point INTERLACE_OPENB_NODES at
openb_node_list_all_node.csv and INTERLACE_OPENB_GPUSPEC at a openb_pod_list_gpuspec*.csv."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs import load_spec
from traces import read_trace

NODES = os.environ.get("INTERLACE_OPENB_NODES", "")
PODS = os.environ.get("INTERLACE_OPENB_GPUSPEC", "")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (Path(NODES).is_file() and Path(PODS).is_file()),
                       reason="Alibaba's openb node list and a gpuspec pod list are not here "
                              "(set INTERLACE_OPENB_NODES and INTERLACE_OPENB_GPUSPEC)"),
]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    work = tmp_path_factory.mktemp("openb")
    for argv in (["specs.cli", "import", "openb", NODES, "--out", str(work / "spec.csv")],
                 ["traces.cli", "import", "openb", PODS, "--out", str(work / "trace.csv"),
                  "--spec", str(work / "spec.csv")]):
        subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, check=True,
                       capture_output=True)
    spec = load_spec(work / "spec.csv")
    return spec, read_trace(work / "trace.csv", spec=spec)


@pytest.mark.parametrize("policy", ["fifo", "srtf", "srsf", "tiresias", "themis", "antman",
                                    "muri-s", "muri-l"])
def test_no_job_of_the_gpuspec_run_ever_runs_on_a_type_it_excludes(real, policy):
    spec, records = real
    assert (spec.num_nodes, spec.total_gpus) == (1523, 6212)
    accepted = {r.job_id: set(r.gpu_types) for r in records}
    assert sum(1 for t in accepted.values() if t) > 1000  # a third of the pods name types
    node_type = [p.gpu_type for p in spec.layout for _ in range(p.nodes)]
    node_pool = [i for i, p in enumerate(spec.layout) for _ in range(p.nodes)]
    wrong: list[str] = []
    placements = 0

    def look(now, plan, core):
        nonlocal placements
        for group in plan.groups:
            placements += 1
            if len({node_pool[s.node] for s in group.placement}) != 1:
                wrong.append(f"group {group.jobs} spans pools")
            for job in group.jobs:
                for piece in group.placement:
                    if accepted[job] and node_type[piece.node] not in accepted[job]:
                        wrong.append(f"job {job} on {node_type[piece.node]}")

    result = simulate(records, spec, policy, get_preset("default"), on_round=look)
    assert placements > len(records) and not wrong, wrong[:3]
    assert all(o.end is not None for o in result.outcomes)
