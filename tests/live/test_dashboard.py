"""deploy/grafana/interlace.json uses only metrics that exist: every metric name in every
panel's query is checked against a real scrape of a scheduler's and an agent's registries
(families with no samples yet count by their TYPE line), and every exported family is shown
by some panel. tests/live/test_metrics_prometheus.py also runs each query on a real Prometheus."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from prometheus_client import generate_latest

from node_agent.config import AgentConfig
from node_agent.jobs import JobTable
from node_agent.metrics import AgentMetrics
from scheduler.live.metrics import SchedulerMetrics
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from specs.tenants import tenancy_of
from tests.helpers import spec

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "interlace.json"
_SUFFIXES = {"counter": ("",), "histogram": ("_bucket", "_sum", "_count"),
             "gauge": ("",)}


class Log:
    def __getattr__(self, level):
        return lambda event, **kw: None


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", ())]  # a row has none


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\binterlace_[a-z0-9_]+", expr))


def scraped(tmp_path) -> dict[str, str]:
    """Every sample name a real scrape can hold -> its family's TYPE."""
    tenancy = tenancy_of({"tenants": {"a": {"quota": 2}}})  # the tenant families too
    state = LiveState(Options(spec=spec(nodes=1, gpus=2), run_dir=tmp_path, tenancy=tenancy),
                      Log(), time.monotonic)
    cfg = AgentConfig(node="n0", gpus=(0, 1), cpus=1, mem=1.0, endpoints_file="unused",
                      run_dir=tmp_path)
    try:
        texts = [generate_latest(SchedulerMetrics(state).registry),
                 generate_latest(AgentMetrics("n0", (0, 1), JobTable(cfg, Log())).registry)]
    finally:
        state.journal.close()
    names = {}
    for text in texts:
        for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text.decode(), re.M):
            if family.endswith("_created"):  # prometheus_client's creation stamps
                continue
            for suffix in _SUFFIXES[kind]:
                names[family + suffix] = family
    return names


def test_every_metric_a_dashboard_query_names_exists_in_a_real_scrape(tmp_path):
    names = scraped(tmp_path)
    exprs = dashboard_exprs()
    assert exprs, "the dashboard has no queries"
    for expr in exprs:
        used = metric_names(expr)
        assert used, f"a query without an interlace metric: {expr}"
        missing = used - set(names)
        assert not missing, f"{expr}: no such metric {sorted(missing)}"


def test_every_exported_metric_is_on_the_dashboard(tmp_path):
    names = scraped(tmp_path)
    families = set(names.values())
    shown = {names[name] for expr in dashboard_exprs() for name in metric_names(expr)
             if name in names}
    assert families - shown == set(), "exported but on no panel"
