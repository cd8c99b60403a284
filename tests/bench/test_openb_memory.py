"""bench/openb_memory.py: the cluster it sweeps is the real one's mix at a fraction of its
nodes, with memory shipped, halved or unstated; a pod never needs more than the halved GPUs
of its types hold; the gains it prints are 1 - Muri's average JCT over the base policy's."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import openb_memory  # noqa: E402
from specs.spec import ClusterSpec, Pool  # noqa: E402
from tests.helpers import job  # noqa: E402

SPEC = ClusterSpec.of_pools((Pool("t4", 40, 2, 96, 512, "T4", 16.0),
                             Pool("v100", 8, 8, 96, 512, "V100M32", 32.0),
                             Pool("cpu", 30, 0, 32, 256)))


def test_the_cluster_keeps_its_mix_at_a_fraction_of_its_nodes():
    small = openb_memory.scaled(SPEC, 16, 0.5)
    assert [(p.name, p.nodes, p.gpu_mem_gb) for p in small.layout] == \
        [("t4", 2, 8.0), ("v100", 1, 16.0)]  # 40/16 rounds to 2; at least one; no CPU pool
    assert [p.gpu_mem_gb for p in openb_memory.scaled(SPEC, 1, 0.0).layout] == [0.0, 0.0]


def test_a_pod_needs_at_most_what_the_halved_gpus_of_its_types_hold():
    halved = openb_memory.scaled(SPEC, 1, 0.5)
    pods = [replace(job(0), gpu_mem_gb=12.0, gpu_types=("T4",)),
            replace(job(1), gpu_mem_gb=12.0),  # any type: the 8 GB T4s bound it
            replace(job(2), gpu_mem_gb=5.0, gpu_types=("V100M32",))]
    assert [p.gpu_mem_gb for p in openb_memory.clipped(pods, halved)] == [8.0, 8.0, 5.0]


def test_gains_are_one_less_murs_average_jct_over_the_base_policys():
    rows = [{"trace": "t", "policy": p, "memory": m, "avg_jct_s": str(v)}
            for m in ("shipped", "halved", "unlimited")
            for p, v in (("srsf", 3600.0), ("muri-s", 2700.0), ("tiresias", 7200.0),
                         ("muri-l", 7200.0), ("antman", 3600.0))]
    text = openb_memory.table(rows)
    assert "| t | muri-s vs srsf | 25.0% | 25.0% | 25.0% |" in text
    assert "| t | muri-l vs tiresias | 0.0% | 0.0% | 0.0% |" in text
    assert "| t | srsf | 1.00 | 1.00 | 1.00 |" in text
