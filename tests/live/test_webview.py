"""The live web view (`--http`): who may see it, what the page shows in a real headless
chromium while a live cluster runs, and how fast it loads with 1,000 queued jobs and 64 agents.

Real parts: the scheduler, broker and agents are processes (tests/live_system.py); the page is
loaded by the distribution's chromium (skipped, with the reason, where it is absent). The
screenshot lands in the test's tmp dir (its path is printed) for a person to look at."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from broker.curve import InsecureBind
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from scheduler.live.webdata import STAGES, Snapshot, occupancy, period
from scheduler.live.webview import WebView, admits, parse_address
from specs import spec_path
from specs.spec import load_spec
from tests.live_system import LiveCluster, wait_for
from traces import write_trace
from traces.generate import generate

import structlog

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_no_chromium = pytest.mark.skipif(CHROMIUM is None,
                                  reason="no chromium on PATH (.ci/run installs it)")


def needs_chromium(test):
    """A test that drives a real chromium: marked `real`, and skipped where there is none."""
    return pytest.mark.real(_no_chromium(test))


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _state(tmp_path: Path) -> LiveState:
    opt = Options(spec=load_spec(spec_path("n3g4")), run_dir=tmp_path)
    return LiveState(opt, structlog.get_logger("test"), time.monotonic)


# -- who may see it ----------------------------------------------------------------------------
def test_admits_loopback_always_others_only_with_the_key_or_insecure():
    for peer in ("127.0.0.1", "::1", "127.3.4.5"):
        assert admits(peer, None, None, False)
    for peer in ("192.0.2.7", "10.0.0.1", "2001:db8::1"):
        assert not admits(peer, None, None, False)
        assert not admits(peer, None, "s3cret", False)
        assert not admits(peer, "Bearer wrong", "s3cret", False)
        assert not admits(peer, "s3cret", "s3cret", False)  # not a bearer header
        assert not admits(peer, "Bearer s3cret", None, False)  # no key set: a header is nothing
        assert admits(peer, "Bearer s3cret", "s3cret", False)
        assert admits(peer, None, None, True)


def test_parse_address():
    assert parse_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_address(":0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9") == ("::1", 9)
    for bad in ("8080", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_a_non_loopback_bind_needs_a_key_or_insecure(tmp_path):
    state = _state(tmp_path)
    with pytest.raises(InsecureBind):
        WebView(state, "0.0.0.0", 0)
    for kwargs in ({"key": "k"}, {"insecure": True}):
        view = WebView(state, "0.0.0.0", 0, **kwargs)
        view.close()


@pytest.mark.real
def test_a_non_loopback_client_gets_nothing_through_the_real_server(tmp_path, netns_peer):
    """One real request per case through the running server, bound on the host side of a
    veth pair and reached from the network namespace at its other end: the peer the server
    reads off its socket is not loopback, so without the key it gets nothing."""
    state = _state(tmp_path)
    view = WebView(state, netns_peer.host, 0, key="s3cret").start()
    try:
        for path in ("/", "/app.js", "/api/status", "/api/jobs/1"):
            code, body = netns_peer.get(view.url + path.lstrip("/"))
            assert (code, body) == (403, b""), path
        code, body = netns_peer.get(view.url + "api/status", {"Authorization": "Bearer s3cret"})
        assert code == 200 and json.loads(body)["counts"] == {
            "pending": 0, "running": 0, "finished": 0, "cancelled": 0, "failed": 0}
        assert view.refused == 4
    finally:
        view.close()


def test_a_loopback_client_needs_no_key(tmp_path):
    open_view = WebView(_state(tmp_path), "127.0.0.1", 0).start()
    try:
        code, body = _get(open_view.url)
        assert code == 200 and b"<title>Interlace" in body
        assert _get(open_view.url + "api/jobs/12345")[0] == 404
    finally:
        open_view.close()


def test_the_scheduler_refuses_a_non_loopback_http_without_key_or_insecure(tmp_path):
    """The scheduler's own command line: exit 2 and one line, before it waits for a broker."""
    import subprocess as sp
    import sys

    from tests.live_system import ROOT, trainer_env

    def run(*extra):
        return sp.run([sys.executable, "-m", "scheduler.live", "--spec", "n3g4", "--endpoints",
                       str(tmp_path / "none.json"), "--run-dir", str(tmp_path / "run"),
                       "--wait-endpoints", "0.1", *extra], cwd=ROOT, env=trainer_env(),
                      capture_output=True, text=True, timeout=60)
    refused = run("--http", "0.0.0.0:0")
    assert refused.returncode == 2 and "--http: refusing to bind 0.0.0.0" in refused.stderr
    assert run("--http", "nonsense").returncode == 2
    assert run("--http-insecure").returncode == 2  # without --http: a mistake, said so
    always = run("--http", "127.0.0.1:0", "--http-key-always")
    assert always.returncode == 2 and "--http-key-always needs --http-key" in always.stderr
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    for ok in (["--http", "0.0.0.0:0", "--http-insecure"], ["--http", "0.0.0.0:0",
                                                             "--http-key", str(key)]):
        done = run(*ok)  # past the flags: it stops only for want of the broker's endpoints
        assert done.returncode == 1 and "--http" not in done.stderr, done.stderr


# -- what it computes --------------------------------------------------------------------------
def test_occupancy_gives_each_resource_to_one_member_at_a_time_in_slot_order():
    group = {"members": [7, 3, 9], "jobs": {
        "7": {"profile": [0.1, 0.2, 0.5, 0.1]}, "3": {"profile": [0.3, 0.1, 0.4, 0.2]},
        "9": {"profile": [0.2, 0.2, 0.2, 0.2]}}}
    spans = occupancy(group, now=100.0, window=5.0)
    assert spans and all(95.0 <= s["start"] < s["end"] <= 100.0 for s in spans)
    for stage in STAGES:  # never two holders of one resource at once
        held = sorted((s["start"], s["end"]) for s in spans if s["stage"] == stage)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(held, held[1:])), stage
    for job in (7, 3, 9):  # a member holds one resource at a time
        held = sorted((s["start"], s["end"]) for s in spans if s["job_id"] == job)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(held, held[1:])), job
    # as the core's cyclic model: in slot s the member at position i holds stage (s - i) mod
    # 4, so at one instant the three members hold cyclically consecutive stages, backwards
    first = min(s["start"] for s in spans if s["start"] > 95.0)
    now = {s["job_id"]: STAGES.index(s["stage"]) for s in spans if s["start"] == first}
    assert len(now) == 3 and (now[7] - now[3]) % 4 == 1 and (now[3] - now[9]) % 4 == 1
    # the testbed pipeline's three stages (data on io, gpu, net) in four slots, the same way
    three = {"members": [1, 2], "jobs": {"1": {"profile": [0.2, 0.5, 0.1]},
                                         "2": {"profile": [0.3, 0.1, 0.4]}}}
    spans3 = occupancy(three, now=10.0, window=3 * period(three))
    assert {s["stage"] for s in spans3} == {"io", "gpu", "net"}
    for key in [("stage", st) for st in ("io", "gpu", "net")] + [("job_id", 1), ("job_id", 2)]:
        held = sorted((s["start"], s["end"]) for s in spans3 if s[key[0]] == key[1])
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(held, held[1:])), key
    assert occupancy({"members": [1, 2], "jobs": {"1": {"profile": [0.2, 0.5, 0.1]},
                                                 "2": {"profile": [0.1] * 4}}}, 10.0, 5.0) == []
    # one period is the core's iteration time of the group in that order
    from scheduler.core.interleave import cyclic_tt
    profiles = [tuple(group["jobs"][str(j)]["profile"]) for j in group["members"]]
    turns = sorted(s["start"] for s in spans if s["job_id"] == 7 and s["stage"] == "io")
    gaps = [b - a for a, b in zip(turns, turns[1:])]
    assert len(gaps) >= 3 and all(g == pytest.approx(cyclic_tt(profiles), abs=1e-5)
                                  for g in gaps)


def test_the_snapshot_is_built_once_per_ttl_whoever_asks():
    t = [0.0]
    calls = []
    snap = Snapshot(lambda: calls.append(1) or {"n": len(calls)}, ttl=0.5, clock=lambda: t[0])
    threads = [threading.Thread(target=snap.get) for _ in range(20)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert snap.builds == 1 and json.loads(snap.get()) == {"n": 1}
    t[0] = 0.6
    assert json.loads(snap.get()) == {"n": 2}


# -- in a real browser -------------------------------------------------------------------------
@needs_chromium
def test_the_queue_shows_expected_start_when_the_reply_has_it_and_a_dash_otherwise(tmp_path):
    """The page against a fixed /api/status document (the estimator is another part's): a
    pending job with `expected_start` shows it, one without shows "-", positions follow the
    reply's order when it gives none; a job's reason shows as `reason: why`."""
    view = WebView(_state(tmp_path), "127.0.0.1", 0).start()
    doc = json.loads(view.snapshot.get())
    doc["jobs"] = [
        {"job_id": 5, "state": "pending", "num_gpu": 2, "iterations": 10, "iterations_done": 0,
         "expected_start": 1234.5, "reason": "no_room", "why": "needs 2 GPUs; 0 are free"},
        {"job_id": 9, "state": "running", "num_gpu": 1, "iterations": 10, "iterations_done": 3},
        {"job_id": 7, "state": "pending", "num_gpu": 1, "iterations": 10, "iterations_done": 0},
    ]
    view.snapshot = Snapshot(lambda: doc, ttl=60.0)
    try:
        dom = _dump_dom(view.url)
    finally:
        view.close()
    rows = re.findall(r'<tr data-job="(\d+)">(.*?)</tr>', dom)
    cells = [(job, re.findall(r"<td[^>]*>([^<]*)</td>", row)) for job, row in rows]
    assert cells == [("5", ["1", "5", "2", "0/10", "1234.5 s", "no_room: needs 2 GPUs; 0 are "
                                                              "free"]),
                     ("7", ["2", "7", "1", "0/10", "-", "-"])], cells



@needs_chromium
def test_the_grid_draws_each_node_with_its_own_gpus_and_type(tmp_path):
    """A pooled spec's nodes differ: each row has its own pool's GPU cells, and its GPU type
    where the pool states one."""
    from specs.spec import ClusterSpec, Pool

    pools = (Pool("t4", 2, 4, 32, 128, "T4", 16.0), Pool("v100", 1, 8, 64, 256, "V100M32"),
             Pool("any", 1, 2, 16, 64))
    state = LiveState(Options(spec=ClusterSpec.of_pools(pools), run_dir=tmp_path),
                      structlog.get_logger("test"), time.monotonic)
    view = WebView(state, "127.0.0.1", 0).start()
    try:
        dom = _dump_dom(view.url)
    finally:
        view.close()
    rows = dict(re.findall(r'<div class="node" data-node="(n\d+)"[^>]*>(.*?)</div>(?=<div '
                           r'class="node"|</div>)', dom))
    drawn = {node: (row.count('class="gpu"'), re.findall(r'class="node-type"[^>]*>([^<]*)<', row))
             for node, row in rows.items()}
    assert drawn == {"n0": (4, ["T4"]), "n1": (4, ["T4"]), "n2": (8, ["V100M32"]),
                     "n3": (2, [])}, drawn


def _dump_dom(url: str, budget_ms: int = 8000) -> str:
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _screenshot(url: str, path: Path) -> None:
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", "--window-size=1280,1700",
                          "--virtual-time-budget=8000", f"--screenshot={path}", url],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and path.exists(), out.stderr[-2000:]


def _pending(doc: dict) -> list[int]:
    return [j["job_id"] for j in doc["jobs"] if j["state"] == "pending"]


@needs_chromium
def test_the_page_shows_the_running_groups_and_the_queue_of_a_live_cluster(tmp_path):
    port = _free_port()
    live = LiveCluster(tmp_path / "run", spec="n3g4", nodes=3, gpus_per_node=4,
                       time_scale=250.0, scheduler_args=["--http", f"127.0.0.1:{port}"])
    records = generate(40, 5, max_gpus=4, backlog=True, median_duration=20000,
                       min_duration=5000, max_duration=40000)
    records = [dataclasses.replace(r, gpu_mem_gb=8.0) for r in records]  # shown per group
    trace = tmp_path / "trace.csv"
    write_trace(trace, records)
    url = f"http://127.0.0.1:{port}/"
    try:
        live.start()
        live.feed(trace)

        def busy():
            s = live.status() or {}
            running = [j for j in s.get("jobs", []) if j["state"] == "running"]
            grouped = [j for j in running if len(j["group"]) > 1]
            return s if grouped and s["counts"]["pending"] >= 3 else None

        wait_for(busy, 90, "a running group and a queue of 3")

        def between_two_equal_replies():  # no round changed the queue while the page loaded
            before = json.loads(_get(url + "api/status")[1])
            dom = _dump_dom(url)
            after = json.loads(_get(url + "api/status")[1])
            return (before, dom, after) if _pending(before) == _pending(after) else None

        before, dom, after = wait_for(between_two_equal_replies, 120,
                                      "a page load with no change of the queue around it")
        running_id = after["groups"][0]["members"][0]
        queued_ids = [j["job_id"] for j in after["jobs"] if j["state"] == "pending"]
        one_running = json.loads(_get(url + f"api/jobs/{running_id}")[1])
        one_queued = json.loads(_get(url + f"api/jobs/{queued_ids[-1]}")[1])
        shot = tmp_path / "webview.png"
        _screenshot(url, shot)
        print(f"screenshot: {shot}")
    finally:
        live.stop_all()
    (tmp_path / "dom.html").write_text(dom)
    (tmp_path / "api.json").write_text(json.dumps([before, after]))
    assert 'data-rendered="1"' in dom, dom[-3000:]
    # the page draws the groups the scheduler runs, members in slot order (the page and the
    # two reads around it may straddle a round: what it drew is what one of them showed, and
    # a group both showed is drawn)
    def keys(doc):
        return {"-".join(map(str, g["members"])) for g in doc["groups"]}
    drawn = set(re.findall(r'class="group" data-members="([\d-]+)"', dom))
    assert drawn and drawn <= keys(before) | keys(after), (drawn, keys(before), keys(after))
    assert keys(before) & keys(after) <= drawn
    assert any("-" in k for k in drawn), "a group of two or more is drawn"
    multi = [g for g in before["groups"] + after["groups"] if len(g["members"]) > 1]
    assert multi and all(g["occupancy"] for g in multi)
    # each drawn group of two or more has its occupancy strip, one bar per turn, and says
    # the GPU memory its members hold together (8 GB each)
    for members in (k for k in drawn if "-" in k):
        block = dom.split(f'data-members="{members}"', 1)[1].split('class="group"', 1)[0]
        assert 'class="occupancy"' in block and block.count("<rect") >= 2, members
        assert f"{8.0 * len(members.split('-')):.1f} GB per GPU" in block, block[:500]
    # a group's members run now: none of them is in the queue the same reply shows
    for doc in (before, after):
        queued_ids = {j["job_id"] for j in doc["jobs"] if j["state"] == "pending"}
        assert not any(set(g["members"]) & queued_ids for g in doc["groups"])
    # the queue: one row per pending job, positions 1..n in the reply's order
    rows = re.findall(r'<tr data-job="(\d+)"><td class="num">(\d+)</td>', dom)
    assert rows, dom[-3000:]
    assert [int(p) for _, p in rows] == list(range(1, len(rows) + 1))
    assert [int(j) for j, _ in rows] == _pending(after), (rows, _pending(after))
    # /api/jobs/ID: where a running job runs and with whom; a queued job's place in line
    assert one_running["job_id"] == running_id and one_running["nodes"]
    assert one_running["state"] in ("running", "finished") and one_running["events"]
    if one_queued["state"] == "pending":
        assert 1 <= one_queued["position"] <= len(queued_ids)
    # the cluster grid: every node with its GPUs
    for node in ("n0", "n1", "n2"):
        assert f'data-node="{node}"' in dom
    assert shot.stat().st_size > 10_000


@needs_chromium
def test_the_page_renders_1000_queued_jobs_and_64_agents(tmp_path):
    """Light agents stand in for 64 nodes; 1,300 long 4-GPU jobs leave >= 1,000 queued: the
    page renders a row for each of them and reports its load time. How long that takes is
    bench/webview_load.py's figure (against a short queue in the same run), not a bound here."""
    from bench.webview_load import page_loads

    got = page_loads(tmp_path / "run", 1300)
    assert got["status"]["counts"]["pending"] >= 1000 and len(got["status"]["agents"]) == 64
    assert got["rows"] >= 1000
    assert len(got["times_ms"]) == 3 and all(ms > 0 for ms in got["times_ms"])
