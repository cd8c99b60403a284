"""How long the web view takes to load with a long queue, against a short one in the same run.

    python bench/webview_load.py [--queued 1300] [--base 13] [--loads 3]

Light agents (bench_service's: real broker services, nothing run) stand in for 64 nodes of
8 GPUs; long 4-GPU jobs are submitted in one backlog, so with 1,300 at least 1,000 queue. The
page times itself: navigation start to the first full render of /api/status
(performance.now(), written into the DOM as #load-ms). Each case loads the page `loads + 1`
times in a real chromium and drops the first (a cold browser). Prints both cases and the
ratio of their medians: the figure to compare between commits, since the machine's pace
moves both. tests/live/test_webview.py runs `page_loads` for what the page shows, not how
fast.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import socket
import statistics
import tempfile
import threading
import urllib.request
from pathlib import Path

from bench.bench_service import LightAgent, heartbeats
from broker.client import Requester
from broker.endpoints import Endpoints
from tests.browser import Browser
from tests.live_system import LiveCluster, wait_for
from traces.feeder import job_map
from traces.generate import generate

NODES = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> dict:
    with urllib.request.urlopen(url + "api/status", timeout=10) as r:
        return json.loads(r.read())


def page_loads(run: Path, jobs: int, loads: int = 3) -> dict:
    """The scenario above with `jobs` jobs: the status the API gave, the queue rows the page
    rendered and its load times in ms (`cold`: the first)."""
    run.mkdir(parents=True)
    spec = run / "spec.csv"
    spec.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    f"1,{NODES},8,32,256\n")
    port = _free_port()
    live = LiveCluster(run, spec=str(spec), nodes=0, gpus_per_node=8, time_scale=1.0,
                       scheduler_args=["--http", f"127.0.0.1:{port}", "--round", "60"])
    agents, stop = [], threading.Event()
    try:
        live.start_broker()
        live.start_scheduler()
        endpoints = Endpoints.load(live.endpoints_file)
        agents = [LightAgent(endpoints, f"n{i}", 2.0, []) for i in range(NODES)]
        for a in agents:
            a.thread.start()
        errors: list[str] = []
        threading.Thread(target=heartbeats, args=(agents, stop, errors), daemon=True).start()
        wait_for(lambda: all(a.registered for a in agents), 90, f"{NODES} agents to register")
        # 4-GPU jobs: two slices per node (an 8-GPU job needs more CPUs than a node of the
        # bench's 32 has), grouped by up to 4
        records = [dataclasses.replace(r, num_gpu=4) for r in generate(
            jobs, 11, max_gpus=8, backlog=True, median_duration=10 * 86400.0,
            min_duration=86400.0)]
        feeder = Requester(endpoints, "test-feeder", timeout=10.0, retries=5)
        for rec in records:
            feeder.request("scheduler", "job.submit", job=job_map(rec))
        feeder.close()
        url = f"http://127.0.0.1:{port}/"
        wait_for(lambda: _status(url)["counts"]["running"] > 0, 120, "the backlog's first round")
        status = _status(url)
        times, rows, cold = [], 0, None
        with Browser() as browser:
            for attempt in range(loads + 1):
                browser.open(url)
                ms = browser.wait_for("document.body && document.body.dataset.rendered && "
                                      "document.getElementById('load-ms').dataset.ms", 30)
                rows = browser.evaluate("document.querySelectorAll('#queue-table tr[data-job]')"
                                        ".length")
                if attempt:
                    times.append(float(ms))
                else:
                    cold = float(ms)
        return {"status": status, "rows": rows, "times_ms": times, "cold_ms": cold}
    finally:
        stop.set()
        for a in agents:
            a.stop.set()
        live.stop_all()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queued", type=int, default=1300, help="jobs in the long case")
    ap.add_argument("--base", type=int, default=13, help="jobs in the short case (baseline)")
    ap.add_argument("--loads", type=int, default=3)
    args = ap.parse_args(argv)
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        ap.error("needs chromium on PATH")
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, jobs in (("base", args.base), ("queued", args.queued)):
            got = page_loads(Path(tmp) / name, jobs, args.loads)
            medians[name] = statistics.median(got["times_ms"])
            print(f"{jobs} jobs ({got['status']['counts']['pending']} queued, "
                  f"{len(got['status']['agents'])} agents, {got['rows']} rows): "
                  f"{got['times_ms']} ms (cold {got['cold_ms']} ms)", flush=True)
    print(f"long queue / short queue, median load: {medians['queued'] / medians['base']:.2f}x "
          f"({medians['queued']:.0f} ms against {medians['base']:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
