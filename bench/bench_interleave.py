"""Interleaving benchmarks: `--real` measures it on real resources; the default (`--emulated`)
is the gate-latency benchmark, whose members sleep through their stages.

Run from the repository root:
    python bench/bench_interleave.py --real [--iterations 20] [--no-pin] [--cases same-shape]
                                     [--out FILE.json]
    python bench/bench_interleave.py [--emulated] [--iterations 30] [--unit 0.01] [--grants 2000]

`--real` (bench/interleave_real.py): every member is a trainer loop whose io stage reads its
batch from disk with the page cache defeated, cpu stage decodes/augments on one core, gpu stage
runs a conv net's forward/backward (one thread) and net stage all-reduces its gradients over
gloo with a second rank. Each job kind is profiled alone; the interleave model predicts the
group's iteration time from those solo profiles only; then the pair runs through the StageGate,
with the gate off (plain co-location), and the solo runs give the sequential baseline. On a
CPU-only machine the cpu stages are pinned to core 1 and the gpu stages to core 0 (a node's
one CPU and one accelerator, on a 2-core VM); `--no-pin` lets the scheduler spread them.

`--emulated`, the gate-latency benchmark: it measures the stage gate's turn-taking and grant
latency, not whether resources overlap (a sleeping stage overlaps with anything). Targets
(issue "Real trainers"): two complementary jobs run as a group >= 1.6x the combined
throughput of running them one after another, with the measured group iteration time within
15% of the cyclic model's TT for the order used (scheduler.core.interleave.best_order); four
complementary jobs >= 2.8x; an uncontended acquire -> grant round trip, median < 1 ms (p99
reported, next to a bare zmq ROUTER echo measured in the same run for scale).

Emulated mode, how: every job holds each stage for its profiled time (workloads.emulated.run_gated); heavy
stages are 4 units, light ones 1 unit (10 ms by default), so scheduling noise stays small.
The sequential baseline runs each profile alone (NullGate) in the same run. Iteration times
are steady-state: the first and last SKIP iterations of every member are left out (pipeline
fill and drain); `speedup_wall` counts them too. Output: one JSON object per line.

Besides the cyclic model, each group line carries `gate_rule_tt`: the period of the
earliest-start schedule under the gate's own rule (each stage served in slot order, each member
in stage order). The gate never waits for a slot boundary, so that period is at most the
cyclic model's TT, and lower when a member's heavy stage could overlap another's heavy stage
in a different slot; the `io+gpu` pair shows such a case.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack  # noqa: E402
import zmq  # noqa: E402

from broker.logs import configure_logging  # noqa: E402
from node_agent.gate import StageGate  # noqa: E402
from scheduler.core.interleave import best_order  # noqa: E402
from trainer.gate_client import GateClient, NullGate  # noqa: E402
from workloads.emulated import run_gated  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interleave_real import gate_rule_tt  # noqa: E402  (the gate's own schedule)

STAGES = ("io", "cpu", "gpu", "net")
HEAVY, LIGHT = 4, 1
PROFILES = {  # stage times in units
    "io-heavy": (HEAVY, LIGHT, LIGHT, LIGHT),
    "cpu-heavy": (LIGHT, HEAVY, LIGHT, LIGHT),
    "gpu-heavy": (LIGHT, LIGHT, HEAVY, LIGHT),
    "net-heavy": (LIGHT, LIGHT, LIGHT, HEAVY),
}
# (case, members, speedup target, check TT against the cyclic model)
CASES = [
    ("pair", ("io-heavy", "net-heavy"), 1.6, True),
    ("quad", ("io-heavy", "cpu-heavy", "gpu-heavy", "net-heavy"), 2.8, True),
    ("pair io+gpu", ("io-heavy", "gpu-heavy"), 1.6, False),
]
SKIP = 3
MODEL_TOL = 0.15
LATENCY_TARGET_MS = 1.0


# -- member processes (spawned: top-level functions only) ------------------------------------

def member(endpoint: str | None, job: str, profile: dict, iterations: int, ready, go, out) -> None:
    """One emulated trainer: join the gate, wait for the common start, run, report."""
    configure_logging("bench-member", None, "warning")
    gate = GateClient(endpoint, job, timeout_s=30) if endpoint else NullGate()
    try:
        gate.join()
        ready.release()
        go.wait(60)
        result = run_gated(profile, iterations, gate)
    finally:
        gate.close()
    out.put((job, result.started, result.iteration_ends, result.stage_means))


def grant_prober(endpoint: str, n: int, out) -> None:
    """Uncontended acquire -> grant round trips from another process, as a trainer sees them."""
    configure_logging("bench-prober", None, "warning")
    client = GateClient(endpoint, "probe", timeout_s=10)
    client.join()
    for _ in range(200):  # warm-up: connection set up, code paths hot
        client.acquire("gpu")
        client.release("gpu")
    acquire, release = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        client.acquire("gpu")
        t1 = time.perf_counter()
        client.release("gpu")
        acquire.append(t1 - t0)
        release.append(time.perf_counter() - t1)
    client.close()
    out.put((acquire, release))


def raw_prober(endpoint: str, n: int, out) -> None:
    """The same round trips against a bare ROUTER echo: what the machine and zmq cost alone."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    times = []
    for i in range(200 + n):
        t0 = time.perf_counter()
        sock.send(msgpack.packb({"op": "acquire", "job": "probe", "stage": "gpu", "seq": i}))
        sock.recv()
        if i >= 200:
            times.append(time.perf_counter() - t0)
    sock.close(0)
    out.put((times, []))


def raw_echo(stop: threading.Event) -> str:
    """A ROUTER on 127.0.0.1 answering every map with {"ok": true} from a thread, like the gate."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")

    def serve() -> None:
        while not stop.is_set():
            if sock.poll(50):
                frames = sock.recv_multipart()
                seq = msgpack.unpackb(frames[-1]).get("seq")
                sock.send_multipart([*frames[:-1], msgpack.packb({"ok": True, "seq": seq})])
        sock.close(0)

    threading.Thread(target=serve, daemon=True).start()
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


# -- runs ---------------------------------------------------------------------------------------

def stage_map(name: str, unit: float) -> dict:
    return {s: t * unit for s, t in zip(STAGES, PROFILES[name])}


def run_members(spawn, jobs: list, unit: float, iterations: int, gated: bool) -> dict:
    """Start one process per job, release them together, collect their measurements."""
    ready, go, out = spawn.Semaphore(0), spawn.Event(), spawn.Queue()
    gate = StageGate(jobs, STAGES, name="bench").start() if gated else None
    procs = [spawn.Process(target=member, args=(gate.endpoint if gate else None, job,
                                                stage_map(job, unit), iterations, ready, go, out))
             for job in jobs]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=60):
                raise RuntimeError("a member process did not start")
        go.set()
        results = {}
        for _ in procs:
            job, started, ends, means = out.get(timeout=60 + 10 * iterations * unit * 16)
            results[job] = (started, ends, means)
        for p in procs:
            p.join(10)
        return results
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        if gate:
            gate.close()


def steady_iteration(ends: tuple) -> float:
    body = ends[SKIP:len(ends) - SKIP]
    return (body[-1] - body[0]) / (len(body) - 1)


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def bench_groups(spawn, unit: float, iterations: int, emit=emit) -> list[dict]:
    solo, solo_wall = {}, {}
    for name in PROFILES:
        (started, ends, means), = run_members(spawn, [name], unit, iterations, False).values()
        solo[name] = steady_iteration(ends)
        solo_wall[name] = (ends[-1] - started) / iterations
        emit({"bench": "interleave", "case": "solo", "job": name,
              "profile_ms": [round(t * unit * 1e3, 3) for t in PROFILES[name]],
              "iteration_ms": round(solo[name] * 1e3, 3),
              "stage_ms": {s: round(v * 1e3, 3) for s, v in means.items()}})
    rows = []
    for case, jobs, target, check_model in CASES:
        profiles = [tuple(t * unit for t in PROFILES[j]) for j in jobs]
        model_tt, order = best_order(profiles)
        slot_jobs = [jobs[next(i for i, p in enumerate(profiles) if p is q)] for q in order]
        t0 = time.monotonic()
        results = run_members(spawn, slot_jobs, unit, iterations, True)
        wall = time.monotonic() - t0
        per_member = {j: steady_iteration(ends) for j, (_s, ends, _m) in results.items()}
        measured_tt = statistics.mean(per_member.values())
        group_rate = sum(1 / t for t in per_member.values())
        seq_rate = len(jobs) / sum(solo[j] for j in jobs)
        first = min(s for s, _e, _m in results.values())
        last = max(e[-1] for _s, e, _m in results.values())
        wall_rate = len(jobs) * iterations / (last - first)
        seq_wall_rate = len(jobs) / sum(solo_wall[j] for j in jobs)
        row = {
            "bench": "interleave", "case": case, "order": slot_jobs,
            "iterations": iterations, "unit_ms": unit * 1e3,
            "model_tt_ms": round(model_tt * 1e3, 3),
            "gate_rule_tt_ms": round(gate_rule_tt(list(order)) * 1e3, 3),
            "measured_tt_ms": round(measured_tt * 1e3, 3),
            "tt_vs_model": round(measured_tt / model_tt, 3),
            "member_tt_ms": {j: round(t * 1e3, 3) for j, t in per_member.items()},
            "sequential_sum_ms": round(sum(solo[j] for j in jobs) * 1e3, 3),
            "speedup": round(group_rate / seq_rate, 3),
            "speedup_wall": round(wall_rate / seq_wall_rate, 3),
            "speedup_target": target,
            "speedup_ok": group_rate / seq_rate >= target,
            "run_s": round(wall, 2),
        }
        if check_model:
            row["tt_within_15pct"] = abs(measured_tt / model_tt - 1) <= MODEL_TOL
        emit(row)
        rows.append(row)
    return rows


def probe(spawn, target, endpoint: str, n: int) -> tuple[list, list]:
    out = spawn.Queue()
    prober = spawn.Process(target=target, args=(endpoint, n, out))
    prober.start()
    try:
        acquire, release = out.get(timeout=120)
    finally:
        prober.join(10)
        if prober.is_alive():
            prober.kill()
    return sorted(acquire), sorted(release)


def pct(xs: list, q: float) -> float:
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3, 4)


def bench_latency(spawn, n: int, emit=emit) -> dict:
    with StageGate(["probe"], STAGES, name="latency") as gate:
        acquire, release = probe(spawn, grant_prober, gate.endpoint, n)
    stop = threading.Event()
    try:
        raw, _ = probe(spawn, raw_prober, raw_echo(stop), n)
    finally:
        stop.set()
    row = {"bench": "interleave", "case": "grant_latency", "transport": "tcp 127.0.0.1",
           "n": n, "median_ms": pct(acquire, 0.5), "p99_ms": pct(acquire, 0.99),
           "max_ms": round(acquire[-1] * 1e3, 4), "release_median_ms": pct(release, 0.5),
           "release_p99_ms": pct(release, 0.99),
           "raw_zmq_echo_median_ms": pct(raw, 0.5), "raw_zmq_echo_p99_ms": pct(raw, 0.99),
           "median_ok": pct(acquire, 0.5) < LATENCY_TARGET_MS}
    emit(row)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true", help="real-resource stages")
    mode.add_argument("--emulated", action="store_true",
                      help="the gate-latency benchmark (sleeping stages; the default)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="iterations per member per run (default: 20 real, 30 emulated)")
    ap.add_argument("--unit", type=float, default=0.01, help="emulated: seconds per unit")
    ap.add_argument("--grants", type=int, default=2000, help="emulated: latency round trips")
    ap.add_argument("--no-pin", action="store_true",
                    help="real: do not pin the cpu/gpu stages to cores 1/0")
    ap.add_argument("--cases", default=None,
                    help="real: only the cases whose name contains one of these (comma list)")
    ap.add_argument("--out", default=None, help="also write all rows to this JSON file")
    args = ap.parse_args(argv)
    iterations = args.iterations or (20 if args.real else 30)
    configure_logging("bench-interleave", None, "warning")
    rows: list[dict] = []

    def keep(row: dict) -> None:
        rows.append(row)
        emit(row)

    if args.real:
        import interleave_real

        if iterations < 2 * interleave_real.SKIP + 3:
            ap.error(f"--iterations must be at least {2 * interleave_real.SKIP + 3}")
        cases = interleave_real.CASES
        if args.cases:
            words = args.cases.split(",")
            cases = tuple(c for c in cases if any(w in c[0] for w in words))
            if not cases:
                ap.error(f"no case matches {args.cases!r}")
        interleave_real.run(keep, iterations=iterations, cases=cases,
                            pin=False if args.no_pin else None)
    else:
        if iterations < 2 * SKIP + 2:
            ap.error(f"--iterations must be at least {2 * SKIP + 2}")
        spawn = mp.get_context("spawn")
        groups = bench_groups(spawn, args.unit, iterations, keep)
        latency = bench_latency(spawn, args.grants, keep)
        ok = all(r["speedup_ok"] and r.get("tt_within_15pct", True) for r in groups) \
            and latency["median_ok"]
        keep({"bench": "interleave", "case": "summary", "all_targets_met": ok})
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
