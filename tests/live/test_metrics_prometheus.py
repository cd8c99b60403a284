"""A real Prometheus server scrapes a live scheduler and agent on loopback (tests/live_system.py:
real broker, scheduler, agents, emulated trainers) every second; the test asks Prometheus'
HTTP API and checks what it stored against the scheduler's own status.query reply. Skips,
saying why, where the distribution's `prometheus` binary is absent."""
from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from broker.client import Requester
from broker.endpoints import Endpoints
from tests.helpers import job
from tests.live_system import LiveCluster, wait_for
from traces.record import record_to_map

PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.real, pytest.mark.slow,
              pytest.mark.skipif(PROMETHEUS is None, reason="no `prometheus` binary on PATH "
                                 "(the distribution's prometheus package; .ci/run installs it)")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Prometheus:
    def __init__(self, tmp_path, targets: dict[str, int]):
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        scrape = "\n".join(
            f"  - job_name: {name}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']"
            for name, port in targets.items())
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          f"scrape_configs:\n{scrape}\n")
        self.log = open(tmp_path / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._ready, 60, "prometheus to be ready")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def query(self, expr: str) -> dict[tuple, float]:
        """An instant query: {sorted labels (without __name__): value}."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return {tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")):
                float(r["value"][1]) for r in body["data"]["result"]}

    def one(self, expr: str) -> float | None:
        values = list(self.query(expr).values())
        return values[0] if len(values) == 1 else None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def metered(tmp_path):
    ports = {"scheduler": free_port(), "agent": free_port()}
    live = LiveCluster(tmp_path / "run", spec="n2g8", nodes=2, gpus_per_node=8,
                          time_scale=100.0, extra={
                              "scheduler": ["--metrics", f"127.0.0.1:{ports['scheduler']}"],
                              "agent-n0": ["--metrics", f"127.0.0.1:{ports['agent']}"]})
    prometheus = None
    try:
        live.start()
        prometheus = Prometheus(tmp_path, ports)
        yield live, prometheus
    finally:
        if prometheus is not None:
            prometheus.close()
        for name in ("agent-n0", "agent-n1"):  # agents first: their last reports get through
            if name in live.procs:
                live.kill(name, signal.SIGTERM)
        live.stop_all()


def submit(live: LiveCluster, records) -> None:
    requester = Requester(Endpoints.load(live.endpoints_file), "test", timeout=5.0, retries=2)
    try:
        for record in records:
            body = requester.request("scheduler", "job.submit", job=record_to_map(record))["body"]
            assert body["accepted"], body
    finally:
        requester.close()


def test_prometheus_scrapes_the_scheduler_and_an_agent_and_agrees_with_status(metered):
    live, prom = metered
    wait_for(lambda: prom.one('up{job="scheduler"}') == 1 and prom.one('up{job="agent"}') == 1,
             60, "prometheus to scrape both targets")
    # short jobs that all finish: JCTs and queueing delays observed, one per job
    short = [job(i, num_gpu=1 + i % 2, iterations=600) for i in range(6)]
    submit(live, short)
    live.wait_finished(len(short), 120)
    wait_for(lambda: prom.one('interlace_jobs{state="finished"}') == len(short), 30,
             "prometheus to see every short job finished")
    status = live.status()
    assert prom.one("interlace_job_completion_seconds_count") == len(short)
    assert prom.one("interlace_job_queueing_delay_seconds_count") == len(short)
    assert prom.one("interlace_agents_alive") == len(status["agents"]) == 2
    assert prom.one("interlace_gpus") == 16
    assert prom.one('interlace_gpus_by_type{gpu_type="unstated"}') == 16  # n2g8 names no type
    assert prom.one("interlace_round_seconds_count") >= 1
    assert prom.one("interlace_round_planning_seconds_count") >= 1
    assert prom.one("interlace_journal_write_seconds_count") >= 2 * len(short)
    stages = prom.query("interlace_measured_stage_seconds_count")  # the trainers' timings
    assert stages and all(count > 0 for count in stages.values()), stages
    # long jobs wanting more GPUs than there are: some run, some queue, while Prometheus and
    # status are compared (the state is steady: no job ends for minutes of wall time)
    long = [job(100 + i, num_gpu=8, iterations=10_000_000) for i in range(10)]
    submit(live, long)

    def agree() -> bool:
        counts = (live.status() or {}).get("counts") or {}
        jobs = prom.query("interlace_jobs")
        seen = {dict(k)["state"]: v for k, v in jobs.items()}
        return counts.get("running", 0) > 0 and counts.get("pending", 0) > 0 \
            and seen == {k: float(v) for k, v in counts.items()} \
            and prom.one("interlace_queue_length") == counts["pending"]

    wait_for(agree, 60, "prometheus' job counts to match status with jobs running and queued")
    status = live.status()
    running = [j for j in status["jobs"] if j["state"] == "running"]
    on_n0 = [j for j in running if "n0" in j["nodes"]]
    wait_for(lambda: prom.one('interlace_agent_trainers{node="n0"}') == len(on_n0), 30,
             "the agent's trainer count to match the jobs status places on n0")
    groups = {tuple(j["group"]) for j in running}
    assert prom.one("interlace_gpus_allocated") == sum(
        next(j["num_gpu"] for j in running if j["job_id"] == g[0]) for g in groups)
    assert prom.one('interlace_gpus_busy_by_type{gpu_type="unstated"}') == \
        prom.one("interlace_gpus_allocated")
    sizes = {dict(k)["size"]: v for k, v in prom.query("interlace_groups").items()}
    want = {}
    for g in groups:
        want[str(len(g))] = want.get(str(len(g)), 0) + 1
    assert sizes == want
    assert prom.one('interlace_agent_gpus{node="n0"}') == 8
    assert prom.one('interlace_agent_gpus_allocated{node="n0"}') == (8 if on_n0 else 0)
    # every query of the Grafana dashboard is valid PromQL on this Prometheus, and those on
    # what this run certainly produced return data
    from tests.live.test_dashboard import dashboard_exprs
    answered = {expr: prom.query(expr) for expr in dashboard_exprs()}
    for expr in ("interlace_jobs", "interlace_groups", "interlace_agents_alive",
                 "interlace_agent_trainers", "interlace_gpus_allocated / interlace_gpus"):
        assert answered[expr], f"no data for the dashboard's {expr}"
