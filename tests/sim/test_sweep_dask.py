"""interlace-sweep --dask against a real Dask cluster on loopback: a `dask scheduler` and two
`dask worker` processes (no nanny, so a killed worker stays dead). The CSV equals the local
sweep's (wall time aside), also when a worker with runs in flight is SIGKILLed mid-sweep."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.sim.test_sweep as base
from scheduler.tools import sweep

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # a cluster of real processes for each test

ROOT = base.ROOT
DASK = [sys.executable, "-m", "dask"]  # the `dask` command of this interpreter


def _wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # poll


class Cluster:
    """A scheduler and named workers, each its own process on 127.0.0.1 with free ports."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs: dict[str, subprocess.Popen] = {}
        info = folder / "scheduler.json"
        self._start("scheduler", [*DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(info)])
        self.address = _wait(lambda: info.exists() and _address(info), "the scheduler")
        for name in ("w1", "w2"):
            self._start(name, [*DASK, "worker", self.address, "--host", "127.0.0.1",
                               "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", name])
        self.client = distributed.Client(self.address, timeout=30)
        self.client.wait_for_workers(2, timeout=60)

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.folder / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(command, cwd=self.folder, env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def worker_names(self) -> dict[str, str]:
        """worker address -> its name"""
        return {a: w["name"] for a, w in self.client.scheduler_info()["workers"].items()}

    def close(self) -> None:
        self.client.close()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def _address(info: Path) -> str | None:
    try:
        return json.loads(info.read_text())["address"]
    except (ValueError, KeyError):
        return None  # still being written


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The same small sweep run locally: (its traces, its rows)."""
    folder = tmp_path_factory.mktemp("local")
    traces = ["default", base.tiny_trace(folder)]
    assert sweep.main(base.sweep_args(traces, folder / "out", "--jobs", "2", "--no-report")) == 0
    return traces, base.read_rows(folder / "out")


def test_dask_sweep_writes_the_local_csv(cluster, local, tmp_path):
    traces, rows = local
    out = tmp_path / "out"
    with distributed.get_task_stream(client=cluster.client) as stream:
        assert sweep.main(base.sweep_args(traces, out, "--dask", cluster.address)) == 0
    assert base.without_wall(base.read_rows(out)) == base.without_wall(rows)
    assert (out / "report" / "avg_jct_default.png").exists()
    ran = [t for t in stream.data if str(t["key"]).startswith("interlace-sweep-")]
    assert len(ran) == len(rows)  # each run once, on the cluster's workers, both of them
    assert {t["worker"] for t in ran} == set(cluster.worker_names())


def test_a_worker_killed_mid_sweep_loses_no_run(cluster, local, tmp_path):
    traces, rows = local
    out = tmp_path / "out"
    # Muri-S on the larger trace first: its runs are the longest, so runs are in flight
    command = [sys.executable, "-m", "scheduler.tools.sweep",
               *base.sweep_args(traces[::-1], out, "--dask", cluster.address, "--no-report",
                                policies=base.POLICIES[::-1])]
    with distributed.get_task_stream(client=cluster.client) as stream:
        run = subprocess.Popen(command, cwd=ROOT, env=cluster.env, stderr=subprocess.PIPE,
                               text=True)
        try:
            name, address, in_flight, done_at_kill = _kill_a_busy_worker(cluster, out)
            _, err = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    total = len(rows)
    ran = [t for t in stream.data if str(t["key"]).startswith("interlace-sweep-")]
    # what was in flight on the killed worker ran to the end on the other one
    survivor = {t["key"] for t in ran if t["worker"] != address}
    assert set(in_flight) & survivor
    assert in_flight and done_at_kill < total, "the worker was not killed mid-sweep"
    assert run.returncode == 0, err
    assert cluster.procs[name].wait(timeout=30) == -signal.SIGKILL
    assert len(cluster.client.scheduler_info()["workers"]) == 1
    assert base.without_wall(base.read_rows(out)) == base.without_wall(rows)  # all, each once
    # (a run that finished on the killed worker just before the kill, its result not yet
    # gathered, is rightly run again elsewhere: Dask's log then says "lose already computed")


def _kill_a_busy_worker(cluster: Cluster, out: Path) -> tuple[str, str, list, int]:
    """Once a row is written, SIGKILL a worker with a run in flight: (its name, address, the
    runs it had, rows written by then)."""
    _wait(lambda: base._lines(out / "runs.csv") >= 2, "a first row", timeout=120)
    names = cluster.worker_names()

    def busy():
        return next(((a, k) for a, k in cluster.client.processing().items() if k), None)

    address, in_flight = _wait(busy, "a worker with a run in flight")
    cluster.procs[names[address]].send_signal(signal.SIGKILL)
    return names[address], address, list(in_flight), base._lines(out / "runs.csv") - 1


def test_an_unreachable_scheduler_is_one_line(tmp_path, capsys):
    with socket.socket() as s:  # a free port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = base.sweep_args(["default"], tmp_path / "out", "--dask", f"tcp://127.0.0.1:{port}",
                           "--dask-timeout", "2", "--no-report", policies=["fifo"])
    assert sweep.main(args) == 1
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # after the line saying what would run
    assert last.startswith(f"interlace-sweep: --dask tcp://127.0.0.1:{port}: cannot connect")
    assert "Traceback" not in err and len(err.splitlines()) == 2
    assert not base.read_rows(tmp_path / "out")


def test_dask_sweep_over_tenants_writes_the_local_csvs(cluster, tmp_path, monkeypatch):
    """A task carries its tenants file's text: the workers read no file of the sweep's (the
    file's name is relative to a folder that is not the workers')."""
    from tests.sim.test_sweep_tenants import backlog, read

    mine = tmp_path / "mine"
    mine.mkdir()
    trace, _ = backlog(mine)
    monkeypatch.chdir(mine)
    common = ["--traces", trace, "--policies", "fifo,srsf", "--spec", "n2g8", "--seeds", "2",
              "--tenants", "none,quotas.toml", "--no-report"]
    assert sweep.main([*common, "--out", str(tmp_path / "local"), "--jobs", "2"]) == 0
    assert sweep.main([*common, "--out", str(tmp_path / "dask"), "--dask", cluster.address]) == 0

    def rows(name):
        return sorted(tuple((k, v) for k, v in r.items() if k != "wall_s")
                      for r in read(tmp_path / name))

    for name in ("runs.csv", "tenants.csv"):
        assert rows(f"local/{name}") == rows(f"dask/{name}")
    assert len(rows("dask/tenants.csv")) == 2 * 2 * 2 * 2  # policies x seeds x files x tenants
