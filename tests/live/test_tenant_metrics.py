"""Per-tenant gauges, from a core driven by hand: the figures are worked out from the case."""
from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from scheduler.core.engine import Core
from scheduler.live.tenant_metrics import families, snapshot
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from specs.tenants import tenancy_of
from tests.helpers import job, spec


class _Collect(Collector):
    def __init__(self, core):
        self.core = core

    def collect(self):
        return families(snapshot(self.core))


def _samples(core) -> dict:
    reg = CollectorRegistry()
    reg.register(_Collect(core))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for m in reg.collect() for s in m.samples}


def test_borrowed_lent_pending_and_reclaim_stops_per_tenant():
    """8 GPUs: owner owed 6, b owed 2 and may borrow 6. b fills the cluster (6 borrowed,
    all of owner's idle quota lent). The owner's 4 jobs arrive, guarded out for 100 s by
    b's minimum run: they wait for reclaim. At 100 s b's 4 longest go back (reclaim): its
    jobs differ in length, and SRSF keeps the shortest."""
    tenancy = tenancy_of({"default_class": "batch", "classes": {"batch": {"min_run_s": 100}},
                          "tenants": {"owner": {"quota": 6},
                                      "b": {"quota": 2, "borrow_limit": 6}}})
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=4), make_policy("srsf", preset), preset.model, tenancy)
    for i in range(8):
        core.submit(replace(job(i, iterations=10**6 + 1000 * i), tenant="b"), 0.0)
    core.round(0.0)
    got = _samples(core)
    assert got["interlace_tenant_gpus_in_use", (("tenant", "b"),)] == 8
    assert got["interlace_tenant_gpus_borrowed", (("tenant", "b"),)] == 6
    assert got["interlace_tenant_gpus_lent", (("tenant", "owner"),)] == 6
    assert got["interlace_tenant_quota_gpus", (("tenant", "owner"),)] == 6
    for i in range(10, 14):
        core.submit(replace(job(i, iterations=10**6), tenant="owner"), 10.0)
    core.advance(10.0)
    core.round(10.0)
    got = _samples(core)
    assert got["interlace_tenant_pending_jobs",
               (("reason", "waiting_for_reclaim"), ("tenant", "owner"))] == 4
    core.advance(100.0)
    core.round(100.0)
    got = _samples(core)
    assert got["interlace_tenant_gpus_in_use", (("tenant", "owner"),)] == 4
    assert got["interlace_tenant_gpus_in_use", (("tenant", "b"),)] == 4
    assert got["interlace_tenant_gpus_lent", (("tenant", "owner"),)] == 2
    assert got["interlace_tenant_preemptions_total",
               (("cause", "reclaim"), ("tenant", "b"))] == 4
    assert {j.id for j in core.running_jobs()} == {0, 1, 2, 3, 10, 11, 12, 13}
    core.stop(10, 101.0)  # outside a plan: its node lost
    assert _samples(core)["interlace_tenant_preemptions_total",
                          (("cause", "lost"), ("tenant", "owner"))] == 1
