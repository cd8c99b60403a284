"""The Prometheus metrics of the scheduler (scheduler/live/metrics.py) and of an agent
(node_agent/metrics.py), as exposed: real state (core, journal in tmp_path, ledger), real
messages, a real stage gate with real clients; each value is checked against what the state
says (the status.query reply) or against what the test itself did."""
from __future__ import annotations

import io
import itertools
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client import generate_latest, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from broker.curve import InsecureBind
from broker.messages import make
from broker.metrics_http import MetricsServer, MetricsUnavailable, guarded, parse_address
from scheduler.core.interleave import efficiency
from scheduler.live import status, telemetry
from scheduler.live.handlers import Handlers
from scheduler.live.ledger import Placed
from scheduler.live.metrics import SchedulerMetrics
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from tests.helpers import job, settle, spec
from traces.record import record_to_map

_ids = itertools.count()


class Log:
    def __getattr__(self, level: str):
        return lambda event, **kw: None


def scrape(registry: Any) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value} of every sample in the exposition text."""
    out: dict[str, dict[tuple, float]] = {}
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def say(h: Handlers, type_: str, **fields: Any) -> dict:
    return h.handle(make(type_, "test", f"t-{next(_ids)}", **fields))


@pytest.fixture
def live(tmp_path):
    state = LiveState(Options(spec=spec(nodes=2, gpus=2), policy="muri-s", run_dir=tmp_path),
                      Log(), time.monotonic)
    metrics = SchedulerMetrics(state)
    state.metrics = metrics
    state.journal.on_write = metrics.journal_write
    yield state, Handlers(state), metrics
    state.journal.close()


def place_plan(state: LiveState) -> list:
    """Plan a round and launch its groups (what the launcher does on success), and leave
    the view readers read, as the loop does."""
    settle(state)
    plan = state.core.round(state.now())
    for group in plan.groups:
        for j in group.jobs:
            where = Placed(group.jobs, group.tt, group.placement)
            assert state.jobs.launch(j, where, 0.0) and state.jobs.launched(j, where, {}, {}, 0.0)
    state.publish_view()
    return list(plan.groups)


def test_scheduler_gauges_match_the_status_reply_and_the_plan(live):
    state, h, metrics = live
    for node in ("n0", "n1"):
        say(h, "agent.register", node=node, gpus=[0, 1], cpus=8, mem=64.0, running=[])
    for i in range(7):  # 7 one-GPU jobs on 4 GPUs: muri-s interleaves some in pairs (data-
        # and gpu-heavy in turn: such pairs pay even with the interference factor)
        stages = (0.3, 0.05 + i / 100, 0.05) if i % 2 else (0.05, 0.3 + i / 100, 0.05)
        say(h, "job.submit", job=record_to_map(job(i, stages=stages)))
    groups = place_plan(state)
    state.jobs.finish(groups[0].jobs[0], state.now() + 50.0, 100.0, "n0")
    say(h, "job.submit", job=record_to_map(job(7)))  # cancelled: not finished
    say(h, "job.cancel", job_id=7)
    state.refusals.refuse("job.submit:bad_job", "tester", "for the test")
    state.refusals.refuse("job.submit:bad_job", "tester", "again")
    got = scrape(metrics.registry)
    counts = status.status(state, jobs=False)["counts"]
    assert sum(counts.values()) == 8 and counts["finished"] == 1 and counts["running"] > 0
    assert (counts["cancelled"], counts["failed"]) == (1, 0)
    for name, value in counts.items():
        assert got["interlace_jobs"][(("state", name),)] == value
    assert got["interlace_job_completion_seconds_count"][()] == 1  # the finished job's JCT
    assert got["interlace_queue_length"][()] == counts["pending"]
    # a group counts as launched while any member runs (a finished job's partner keeps the
    # group's pace until the next round)
    done = groups[0].jobs[0]
    live_groups = [g for g in groups if set(g.jobs) - {done}]
    sizes: dict[str, int] = {}
    for g in live_groups:
        sizes[str(len(g.jobs))] = sizes.get(str(len(g.jobs)), 0) + 1
    assert {k[0][1]: v for k, v in got["interlace_groups"].items()} == sizes
    assert any(int(size) > 1 for size in sizes), "the plan should interleave some jobs"
    assert got["interlace_gpus"][()] == 4
    assert got["interlace_gpus_allocated"][()] == sum(
        len(s.gpus) for g in live_groups for s in g.placement)
    pairs = [efficiency([state.core.jobs[j].profile for j in g.jobs], g.tt)
             for g in live_groups if len(g.jobs) == 2]
    want = sum(pairs) / len(pairs)
    assert got["interlace_group_predicted_efficiency_ratio"][(("size", "2"),)] == \
        pytest.approx(want)
    assert 0 < got["interlace_gpu_utilisation_ratio"][()] <= 1
    assert got["interlace_agents_alive"][()] == 2
    assert got["interlace_messages_refused_total"][(("reason", "job.submit:bad_job"),)] == 2
    # journal: 7 submits + 1 finish (registrations log events too), each one transaction
    assert got["interlace_journal_write_seconds_count"][()] >= 8
    assert got["interlace_job_completion_seconds_count"][()] == 1
    entry = state.journal.get(groups[0].jobs[0])
    assert got["interlace_job_completion_seconds_sum"][()] == pytest.approx(
        entry.finish_trace - entry.submit_trace)


def test_round_latency_and_measured_stage_times_are_observed_where_they_happen(live):
    state, h, metrics = live
    metrics.round_planned(0.002)
    metrics.round_done(0.3)
    say(h, "job.submit", job=record_to_map(job(1)))
    place_plan(state)
    msg = make("event.timing", "trainer.1", "x", seq=1, job_id=1, iteration_time=0.064,
               iterations=5.0,
               stages={"io": 0.01, "cpu": 0.02, "gpu": 0.03, "net": 0.004})
    telemetry.note_timing(state, msg)
    got = scrape(metrics.registry)
    assert got["interlace_round_planning_seconds_count"][()] == 1
    assert got["interlace_round_planning_seconds_sum"][()] == pytest.approx(0.002)
    assert got["interlace_round_seconds_sum"][()] == pytest.approx(0.3)
    assert got["interlace_round_seconds_bucket"][(("le", "0.25"),)] == 0
    assert got["interlace_round_seconds_bucket"][(("le", "0.5"),)] == 1
    for resource, seconds in {"io": 0.01, "cpu": 0.02, "gpu": 0.03, "net": 0.004}.items():
        assert got["interlace_measured_stage_seconds_sum"][(("resource", resource),)] == \
            pytest.approx(seconds)


def test_agent_exposes_trainers_gpus_and_gate_holds_per_resource(tmp_path):
    from node_agent.config import AgentConfig
    from node_agent.jobs import Job, JobTable
    from node_agent.metrics import AgentMetrics
    from trainer.gate_client import GateClient

    cfg = AgentConfig(node="n3", gpus=(0, 1, 2), cpus=4, mem=8.0, endpoints_file="unused",
                      run_dir=tmp_path)
    table = JobTable(cfg, Log())
    metrics = AgentMetrics(cfg.node, cfg.gpus, table)
    table.gates.on_event = metrics.gate_event
    gate = table.gates.for_group((1, 2), {"kind": "torch"})
    table.jobs[1] = Job(job_id=1, procs=[], gpus=(0, 1), total=10, group=[1, 2], gate=(1, 2))
    table.jobs[2] = Job(job_id=2, procs=[], gpus=(0, 1), total=10, group=[1, 2], slot=1,
                        gate=(1, 2))
    first, second = GateClient(gate.endpoint, 1), GateClient(gate.endpoint, 2)
    try:
        held_for = {}
        with first.turn("gpu"):
            began = time.perf_counter()
            now = scrape(metrics.registry)  # the grant was counted before it was answered
            assert now["interlace_gate_held"][(("node", "n3"), ("resource", "gpu"))] == 1
            sum(i * i for i in range(200_000))  # some work while holding the GPU
            held_for["gpu"] = time.perf_counter() - began
        with second.turn("gpu"):
            pass
        with first.turn("io"):
            held_for["io"] = 0.0
        got = scrape(metrics.registry)
    finally:
        first.close()
        second.close()
        gate.close()
    node = ("node", "n3")
    assert got["interlace_gate_hold_seconds_count"][(node, ("resource", "gpu"))] == 2
    assert got["interlace_gate_hold_seconds_count"][(node, ("resource", "io"))] == 1
    assert got["interlace_gate_held_seconds_total"][(node, ("resource", "gpu"))] >= held_for["gpu"]
    assert got["interlace_gate_held"][(node, ("resource", "gpu"))] == 0
    assert got["interlace_agent_trainers"][(node,)] == 2
    assert got["interlace_agent_gpus"][(node,)] == 3
    assert got["interlace_agent_gpus_allocated"][(node,)] == 2
    assert got["interlace_gates"][(node,)] == 1


def test_a_gate_hold_is_its_release_time_less_its_grant_time(tmp_path):
    """Holds closed by a release and by the member being dropped, at given gate times."""
    from node_agent.config import AgentConfig
    from node_agent.jobs import JobTable
    from node_agent.metrics import AgentMetrics

    cfg = AgentConfig(node="n3", gpus=(0,), cpus=4, mem=8.0, endpoints_file="unused",
                      run_dir=tmp_path)
    metrics = AgentMetrics(cfg.node, cfg.gpus, JobTable(cfg, Log()))
    for gate, event in [("g", {"event": "grant", "stage": "gpu", "job": 1, "t": 1.0}),
                        ("g", {"event": "release", "stage": "gpu", "job": 1, "t": 4.0}),
                        ("g", {"event": "grant", "stage": "io", "job": 2, "t": 2.0}),
                        ("g", {"event": "dropped", "job": 2, "t": 7.5})]:
        metrics.gate_event(gate, event)
    got = scrape(metrics.registry)
    node = ("node", "n3")
    assert got["interlace_gate_held_seconds_total"][(node, ("resource", "gpu"))] == 3.0
    assert got["interlace_gate_held_seconds_total"][(node, ("resource", "io"))] == 5.5
    assert got["interlace_gate_hold_seconds_sum"][(node, ("resource", "gpu"))] == 3.0
    assert got["interlace_gate_held"][(node, ("resource", "io"))] == 0


def test_metrics_are_served_over_http_on_loopback(live):
    state, h, metrics = live
    say(h, "job.submit", job=record_to_map(job(1)))
    server = MetricsServer(metrics.registry, "127.0.0.1", 0)
    try:
        host, port = server.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        server.close()
    assert 'interlace_jobs{state="pending"} 1.0' in text
    assert "# TYPE interlace_round_seconds histogram" in text


def test_a_taken_metrics_port_is_one_line_naming_the_address(live):
    _, _, metrics = live
    first = MetricsServer(metrics.registry, "127.0.0.1", 0)
    try:
        host, port = first.address
        with pytest.raises(MetricsUnavailable) as taken:
            MetricsServer(metrics.registry, host, port)
    finally:
        first.close()
    text = str(taken.value)
    assert text.startswith(f"--metrics 127.0.0.1:{port}: cannot listen") and "\n" not in text


def test_a_non_loopback_metrics_address_needs_a_key_or_insecure(live):
    _, _, metrics = live
    with pytest.raises(InsecureBind):
        MetricsServer(metrics.registry, "0.0.0.0", 0)
    assert parse_address("9100") == ("127.0.0.1", 9100)
    assert parse_address("[::1]:9100") == ("::1", 9100)
    assert parse_address("10.0.0.5:0") == ("10.0.0.5", 0)
    for bad in ("host:port", "127.0.0.1:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_with_a_key_non_loopback_scrapers_must_send_it_and_loopback_ones_need_not(live):
    _, _, metrics = live
    app = guarded(make_wsgi_app(metrics.registry), "s3cret")

    def get(remote: str, auth: str | None = None) -> tuple[str, bytes]:
        said = []
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "",
                   "REMOTE_ADDR": remote, "wsgi.input": io.BytesIO()}
        if auth is not None:
            environ["HTTP_AUTHORIZATION"] = auth
        body = b"".join(app(environ, lambda status, headers: said.append(status)))
        return said[0], body

    assert get("10.1.2.3")[0].startswith("401")
    assert get("10.1.2.3", "Bearer wrong")[0].startswith("401")
    status, body = get("10.1.2.3", "Bearer s3cret")
    assert status.startswith("200") and b"interlace_jobs" in body
    assert get("127.0.0.1")[0].startswith("200")


@pytest.mark.real
def test_a_non_loopback_scraper_needs_the_key_through_the_real_server(live, netns_peer):
    """The server bound on the host side of a veth pair, scraped from the network namespace
    at its other end: a peer that is not loopback, as the server reads it off its socket."""
    _, _, metrics = live
    server = MetricsServer(metrics.registry, netns_peer.host, 0, key="s3cret")
    try:
        url = "http://%s:%d/metrics" % server.address
        assert netns_peer.get(url)[0] == 401
        assert netns_peer.get(url, {"Authorization": "Bearer wrong"})[0] == 401
        code, body = netns_peer.get(url, {"Authorization": "Bearer s3cret"})
        assert code == 200 and b"interlace_jobs" in body
    finally:
        server.close()


@pytest.mark.parametrize("module", ["scheduler", "agent"])
def test_the_command_lines_refuse_a_non_loopback_metrics_host_without_key_or_insecure(
        module, capsys, tmp_path):
    if module == "scheduler":
        from scheduler.live.cli import parse_args
        base = ["--spec", "n2g8", "--endpoints", "e.json", "--run-dir", "r"]
    else:
        from node_agent.cli import parse_args
        base = ["--node", "n0", "--gpus", "0", "--endpoints", "e.json", "--run-dir", "r"]
    with pytest.raises(SystemExit) as exit_:
        parse_args([*base, "--metrics", "0.0.0.0:9100"])
    assert exit_.value.code == 2 and "--insecure" in capsys.readouterr().err
    parsed = parse_args([*base, "--metrics", "0.0.0.0:9100", "--metrics-insecure"])[0]
    assert parsed.metrics == ("0.0.0.0", 9100)
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    parsed = parse_args([*base, "--metrics", "0.0.0.0:9100", "--metrics-key", str(key)])[0]
    assert parsed.metrics_key == "s3cret" and not parsed.metrics_key_always
    assert parse_args([*base, "--metrics", "9100", "--metrics-key", str(key),
                       "--metrics-key-always"])[0].metrics_key_always
    (tmp_path / "empty").write_text("")
    for bad in (["--metrics", "0.0.0.0:1", "--metrics-key", str(tmp_path / "empty")],
                ["--metrics-insecure"], ["--metrics", "9100", "--metrics-key-always"]):
        with pytest.raises(SystemExit):
            parse_args([*base, *bad])
    assert parse_args([*base, "--metrics", "9100"])[0].metrics == ("127.0.0.1", 9100)
