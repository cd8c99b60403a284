"""Interleaving measured on real resources: solo profiles, the model's prediction, and the
group run through the stage gate, with the gate off, and one job after the other.

Used by `bench/bench_interleave.py --real` and `bench/gpu_check.py`. Every member is a real
trainer loop (trainer.stages.StageLoop) over `workloads.real.RealStages`: `io` reads its batch
file from disk with the page cache defeated, `cpu` decodes and augments on one core, `gpu` is
a conv net's forward/backward, `net` an all-reduce of the gradients with a second rank (a peer
process that contributes zeros, so the all-reduce is real but the peer costs no compute).

Per job kind, one solo run: its steady stage means are the profile, its steady iteration time
the sequential baseline (running jobs one after another is running each alone). Per case (a
pair of kinds): the model's TT from the solo profiles only (scheduler.core.interleave.best_order,
whose order then gives the gate's slots), then the group through a StageGate, then the group
with the gate off (both at once, no turns: plain co-location). Iteration times are steady
state: the first and last SKIP iterations of each member are left out, and a group's figures
count only the time when both members were running (`overlap_iterations`).

What a 2-core VM can and cannot show (the dev machine; figures in the rows it emits):
* io overlaps with compute only because the read blocks: with O_DIRECT the device writes into
  the buffer and the reading thread sleeps; `io_cpu_fraction` (the thread's CPU time over the
  stage's wall time, ~0.1 here) says how far that holds. The disk is a virtio block device,
  itself likely cached by the host: `disk` rows compare a cold read with a cached one (a few
  times slower cold), so io is real but faster than a remote store would be.
* There is no accelerator: the `gpu` stage is one core. Pinned (the default on a CPU), cpu
  stages share core 1 and gpu stages core 0, as two jobs would share a node's decoder core
  and its one accelerator. Unpinned (`--no-pin`), two same-shape jobs with the gate off just
  run on the two cores at once, which says nothing about sharing one device.
* `net` over loopback is a memory copy by the kernel: it uses CPU on both ranks, not a NIC;
  the models here are small, so it stays a light stage.
* Everything else on the machine (other processes) takes cores from both stages; the figures
  move with the load average, reported at the start and the end. Under heavy load (load
  average 10-16 from other work) the gated members' stages ran faster than the same stages
  alone, so speed-ups measured then overstate; the cause is not pinned down (a job that
  sleeps before each gpu stage, as a gated member does, showed no such gain).
  `gated_over_solo_work` (a member's stage time per iteration in the group over its solo
  profile) shows it: near 1 when the load is steady, well below 1 when the speed-ups overstate.
  `on_cpu` gives the share of a cpu or gpu stage's wall time its thread was running.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from typing import Any, Callable, Sequence

from node_agent.gate import StageGate
from scheduler.core.interleave import best_order

STAGES = ("io", "cpu", "gpu", "net")
SKIP = 2
#: Job kinds: workloads.real settings. Heavy stages take ~50-100 ms on the 2-core dev VM.
JOBS = {
    "io-heavy": {"side": 1024, "codec": "raw", "blur": 0, "width": 8, "depth": 1},
    "cpu-heavy": {"side": 224, "codec": "zlib", "blur": 1, "width": 8, "depth": 1},
    "gpu-heavy": {"side": 64, "codec": "zlib", "blur": 0, "width": 20, "depth": 2},
}
#: (case, kinds). "compute-heavy" in the issue's sense is gpu-heavy (forward/backward).
CASES = (
    ("complementary io+cpu", ("io-heavy", "cpu-heavy")),
    ("complementary io+gpu", ("io-heavy", "gpu-heavy")),
    ("same-shape gpu+gpu", ("gpu-heavy", "gpu-heavy")),
)
#: Cores the `cpu` and `gpu` stages are pinned to on a CPU-only machine (see workloads.real).
CPU_PIN = {"cpu": 1, "gpu": 0}


# -- processes (spawned: top-level functions only) -------------------------------------------

def _torch_setup(device: str) -> Any:
    import torch

    torch.set_num_threads(1)
    return torch.device(device)


def peer(port: int, config: dict, backend: str, device: str, out) -> None:
    """Rank 1 of a member's job: joins every all-reduce with zeros until the stop vote."""
    import torch

    from trainer import distributed
    from workloads import registry

    dev = _torch_setup(device)
    distributed.init("127.0.0.1", port, 2, 1, backend=backend, device=dev)
    model = registry.make("real", device=device, **config).model
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    buf = torch.zeros(n + 1, device=dev)  # + the stop vote, as GradientReducer sends it
    checksums, cpu0 = [], time.process_time()
    while True:
        buf.zero_()
        distributed.dist.all_reduce(buf)
        checksums.append(float(buf[:-1].double().sum().item()) / 2)  # member divides by 2
        if buf[-1].item() > 0:
            break
    distributed.shutdown()
    out.put(("peer", port, {"checksums": checksums, "cpu_s": time.process_time() - cpu0}))


def member(job: str, config: dict, port: int, backend: str, device: str, data_dir: str,
           commands, barrier, out) -> None:
    """One trainer rank serving phases: ("run", gate endpoint or None, iterations, together)
    runs that many real iterations and reports them; ("stop",) votes stop and leaves."""
    from broker.logs import configure_logging
    from trainer import distributed
    from workloads import registry

    configure_logging("bench-member", None, "warning")
    dev = _torch_setup(device)
    distributed.init("127.0.0.1", port, 2, 0, backend=backend, device=dev)
    workload = registry.make("real", device=device, data_dir=data_dir, **config)
    workload.batch_paths()  # files made (once) before anyone's clock starts
    reducer = CheckedReducer(distributed.GradientReducer(2))
    out.put((job, "ready", None))
    while True:
        cmd = commands.get()
        if cmd[0] == "stop":
            break
        _op, endpoint, iterations, together = cmd
        out.put((job, "result", run_phase(job, workload, reducer, endpoint, iterations,
                                          barrier if together else None)))
    reducer(workload, True)  # the stop vote: the peer leaves its loop
    distributed.shutdown()
    out.put((job, "done", {"checksums": reducer.checksums}))


def run_phase(job: str, workload: Any, reducer: "CheckedReducer", endpoint: str | None,
              iterations: int, barrier) -> dict:
    from trainer.gate_client import GateClient, NullGate
    from trainer.stages import StageLoop

    gate = GateClient(endpoint, job, timeout_s=120) if endpoint else NullGate()
    io0 = (workload.io_bytes, workload.io_reads, workload.io_cpu_s)
    busy0 = dict(workload.busy)
    try:
        gate.join()
        loop = StageLoop(workload, gate, reducer)
        if barrier is not None:
            barrier.wait(120)
        started, ends, stages = time.monotonic(), [], []
        for step in range(iterations):
            stages.append(loop.run(step).stages)
            ends.append(time.monotonic())
    finally:
        gate.close()
    return {"started": started, "ends": ends, "stages": stages,
            "io_bytes": workload.io_bytes - io0[0], "io_reads": workload.io_reads - io0[1],
            "io_cpu_s": workload.io_cpu_s - io0[2],
            "busy_s": {k: v - busy0[k] for k, v in workload.busy.items()},
            "read_sizes": [p.stat().st_size for p in workload.batch_paths()]}


class CheckedReducer:
    """The gradient all-reduce, keeping a checksum of the averaged gradients after each one."""

    def __init__(self, reduce: Callable[[Any, bool], bool]):
        self.reduce = reduce
        self.checksums: list[float] = []

    def __call__(self, workload: Any, stop_vote: bool) -> bool:
        stop = self.reduce(workload, stop_vote)
        self.checksums.append(float(sum(p.grad.double().sum().item()
                                        for p in workload.model.parameters()
                                        if p.grad is not None)))
        return stop


# -- the parent's side ------------------------------------------------------------------------

class Members:
    """The member processes of one case (and their peers), kept across its phases, so the
    solo, gated and gate-off runs share processes and start-up cost is paid once."""

    def __init__(self, spawn, jobs: Sequence[tuple[str, dict]], backend: str, device: str,
                 data_dir: str, peer_device: str | None = None, timeout_s: float = 300):
        from trainer.distributed import free_port

        self.timeout_s = timeout_s
        self.out = spawn.Queue()
        self.barrier = spawn.Barrier(len(jobs))
        self.commands = {job: spawn.Queue() for job, _ in jobs}
        self.ports = {job: free_port() for job, _ in jobs}
        self.procs = []
        for job, config in jobs:
            self.procs.append(spawn.Process(target=peer, args=(
                self.ports[job], config, backend, peer_device or device, self.out)))
            self.procs.append(spawn.Process(target=member, args=(
                job, config, self.ports[job], backend, device, data_dir, self.commands[job],
                self.barrier, self.out)))
        for p in self.procs:
            p.start()
        self._collect("ready", len(jobs))

    def _collect(self, kind: str, n: int) -> dict:
        got: dict = {}
        while len(got) < n:
            who, what, result = self.out.get(timeout=self.timeout_s)
            if what != kind and who != "peer":
                raise RuntimeError(f"expected {kind} from the members, got {what} from {who}")
            got[who if who != "peer" else ("peer", what)] = result
        return got

    def run(self, jobs: Sequence[str], iterations: int, endpoint: str | None = None) -> dict:
        """`jobs` run `iterations` together (started at once), through the gate if given."""
        for job in jobs:
            self.commands[job].put(("run", endpoint, iterations, len(jobs) > 1))
        return self._collect("result", len(jobs))

    def close(self) -> dict:
        """Stop everyone; returns job -> {"member": checksums, "peer": peer result}."""
        try:
            for q in self.commands.values():
                q.put(("stop",))
            got = self._collect("done", 2 * len(self.commands))
            peers = {port: r for key, r in got.items() if isinstance(key, tuple)
                     for port in [key[1]]}
            return {job: {"member": got[job]["checksums"], "peer": peers[port]}
                    for job, port in self.ports.items()}
        finally:
            for p in self.procs:
                p.join(30)
                if p.is_alive():
                    p.kill()


def steady(values: Sequence[float]) -> list:
    return list(values[SKIP:len(values) - SKIP])


def steady_iteration(ends: Sequence[float]) -> float:
    body = steady(ends)
    return (body[-1] - body[0]) / (len(body) - 1)


def overlap_iterations(results: dict[str, dict]) -> dict[str, float]:
    """Each member's iteration time while all members were running (steady parts only): a
    member that finishes first must not leave the other's tail timed as if alone."""
    lo = max(steady(r["ends"])[0] for r in results.values())
    hi = min(steady(r["ends"])[-1] for r in results.values())
    per = {}
    for job, r in results.items():
        inside = [t for t in r["ends"] if lo <= t <= hi]
        per[job] = ((inside[-1] - inside[0]) / (len(inside) - 1) if len(inside) >= 3
                    else steady_iteration(r["ends"]))
    return per


def stage_means(stages: Sequence[dict]) -> dict[str, float]:
    body = steady(stages)
    return {s: statistics.mean(st[s] for st in body) for s in STAGES}


def gate_rule_tt(order: Sequence[Sequence[float]], iterations: int = 40) -> float:
    """Period of the earliest-start schedule under the gate's rule: each stage is served to
    the members in slot order, each member runs its stages in order, nobody waits for a slot
    boundary. At most the cyclic model's TT; lower when heavy stages of different members can
    overlap across slots."""
    m, k = len(order), len(order[0])
    end: dict = {}
    for it in range(iterations):
        for i in range(m):
            for r in range(k):
                own = end[i, it, r - 1] if r else end.get((i, it - 1, k - 1), 0.0)
                prev = end[i - 1, it, r] if i else end.get((m - 1, it - 1, r), 0.0)
                end[i, it, r] = max(own, prev) + order[i][r]
    return (end[0, iterations - 1, k - 1] - end[0, iterations - 11, k - 1]) / 10


def ms(x: float) -> float:
    return round(x * 1e3, 2)


def io_check(r: dict) -> dict:
    """The io stage read every batch file whole, once per iteration; how much of its time
    was CPU (the rest it spent blocked on the device)."""
    sizes = r["read_sizes"]
    expected = sum(sizes[i % len(sizes)] for i in range(r["io_reads"]))
    return {"io_reads": r["io_reads"], "io_mb_per_read": round(r["io_bytes"] / 1e6
                                                               / max(1, r["io_reads"]), 2),
            "io_bytes_ok": r["io_bytes"] == expected and r["io_reads"] == len(r["ends"]),
            "io_cpu_fraction": round(r["io_cpu_s"] / max(1e-9, sum(s["io"]
                                                                   for s in r["stages"])), 3)}


def on_cpu(r: dict) -> dict:
    """Per compute stage, the share of its wall time its thread was running: below 1, the
    stage waited for its core (held by another member, or by anything else on the machine)."""
    return {s: round(r["busy_s"][s] / max(1e-9, sum(st[s] for st in r["stages"])), 3)
            for s in ("cpu", "gpu")}


def net_check(closed: dict, iterations: int) -> dict:
    """The peer took part in every all-reduce and ended with the member's averaged gradients."""
    out = {}
    for job, c in closed.items():
        mine, theirs = c["member"], c["peer"]["checksums"]
        same = len(mine) == len(theirs) and all(
            abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(mine, theirs))
        out[job] = {"net_reduces": len(theirs), "net_ok": same and len(theirs) == iterations,
                    "peer_cpu_s": round(c["peer"]["cpu_s"], 3)}
    return out


def predict(profiles: Sequence[tuple]) -> tuple[float, float, list[int]]:
    """Model TT, gate-rule TT and slot order (indices into profiles), from solo profiles."""
    tt, order = best_order(list(profiles))
    slots: list[int] = []
    for q in order:  # equal profiles may repeat: match by identity, each index once
        slots.append(next(i for i, p in enumerate(profiles) if p is q and i not in slots))
    return tt, gate_rule_tt([profiles[i] for i in slots]), slots


def bench_case(spawn, case: str, kinds: Sequence[str], jobs: dict, iterations: int,
               **kw) -> dict:
    """One pair: each member alone (its profile, and together the sequential baseline), the
    model's prediction from those solo runs only, then the group gated and with the gate off."""
    ids = [f"{kind}#{n}" for n, kind in enumerate(kinds)]
    members = Members(spawn, [(j, jobs[k]) for j, k in zip(ids, kinds)], **kw)
    try:
        t0 = time.monotonic()
        solo = {j: members.run([j], iterations)[j] for j in ids}
        profiles = [tuple(stage_means(solo[j]["stages"])[s] for s in STAGES) for j in ids]
        tt_model, tt_rule, slots = predict(profiles)
        order = [ids[i] for i in slots]
        with StageGate(order, STAGES, name="real") as gate:
            gated = members.run(order, iterations, gate.endpoint)
        off = members.run(ids, iterations)
        wall = time.monotonic() - t0
    finally:
        closed = members.close()
    seq_sum = sum(steady_iteration(solo[j]["ends"]) for j in ids)
    seq_rate = len(ids) / seq_sum
    g, o = overlap_iterations(gated), overlap_iterations(off)
    g_tt, o_tt = statistics.mean(g.values()), statistics.mean(o.values())
    g_rate, o_rate = sum(1 / t for t in g.values()), sum(1 / t for t in o.values())
    return {
        "bench": "interleave-real", "case": case, "order": order, "iterations": iterations,
        "solo_profile_ms": {j: [ms(t) for t in p] for j, p in zip(ids, profiles)},
        "solo_iteration_ms": {j: ms(steady_iteration(solo[j]["ends"])) for j in ids},
        "sequential_sum_ms": ms(seq_sum),
        "predicted_tt_ms": ms(tt_model), "gate_rule_tt_ms": ms(tt_rule),
        "measured_tt_ms": ms(g_tt),
        "predicted_over_measured": round(tt_model / g_tt, 3),
        "gate_rule_over_measured": round(tt_rule / g_tt, 3),
        "predicted_speedup": round(seq_sum / tt_model, 3),
        "speedup_gated": round(g_rate / seq_rate, 3),
        "gate_off_tt_ms": ms(o_tt),
        "speedup_gate_off": round(o_rate / seq_rate, 3),
        "member_tt_ms": {j: ms(t) for j, t in g.items()},
        "gate_off_member_tt_ms": {j: ms(t) for j, t in o.items()},
        "gated_stage_ms": {j: {s: ms(v) for s, v in stage_means(r["stages"]).items()}
                           for j, r in gated.items()},
        "gated_over_solo_work": {j: round(sum(stage_means(gated[j]["stages"]).values())
                                          / sum(p), 3) for j, p in zip(ids, profiles)},
        "gate_off_stage_ms": {j: {s: ms(v) for s, v in stage_means(r["stages"]).items()}
                              for j, r in off.items()},
        "on_cpu": {"solo": {j: on_cpu(r) for j, r in solo.items()},
                   "gated": {j: on_cpu(r) for j, r in gated.items()},
                   "gate_off": {j: on_cpu(r) for j, r in off.items()}},
        "io": {j: io_check(r) for j, r in solo.items()},
        "net": net_check(closed, 3 * iterations + 1),
        "run_s": round(wall, 1),
    }


def disk_check(data_dir: str, config: dict) -> dict:
    """Cold (page cache dropped) against cached reads of one batch file, in this process."""
    from workloads.real import aligned_buffer, batch_file_name, read_uncached

    path = os.path.join(data_dir, "real", batch_file_name(config, 0))
    buf = aligned_buffer(os.path.getsize(path))
    cold, cached = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        read_uncached(path, buf)
        cold.append(time.perf_counter() - t0)
        with open(path, "rb", buffering=0) as fh:
            fh.readinto(memoryview(buf)[:os.path.getsize(path)])  # now cached
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as fh:
            fh.readinto(memoryview(buf)[:os.path.getsize(path)])
        cached.append(time.perf_counter() - t0)
    size = os.path.getsize(path)
    return {"bench": "interleave-real", "case": "disk", "file_mb": round(size / 1e6, 1),
            "cold_ms": ms(min(cold)), "cached_ms": ms(min(cached)),
            "cold_mb_s": round(size / min(cold) / 1e6),
            "cached_mb_s": round(size / min(cached) / 1e6),
            "cold_over_cached": round(min(cold) / min(cached), 2)}


def machine(pin: bool, device: str, backend: str) -> dict:
    return {"bench": "interleave-real", "case": "machine", "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "pin": CPU_PIN if pin else None,
            "device": device, "net_backend": backend}


def with_pin(jobs: dict, pin: bool) -> dict:
    return {k: ({**c, "pin": CPU_PIN} if pin else dict(c)) for k, c in jobs.items()}


def run(emit: Callable[[dict], None], iterations: int = 20, cases=CASES, jobs: dict = JOBS,
        device: str = "cpu", backend: str = "gloo", peer_device: str | None = None,
        pin: bool | None = None, data_dir: str | None = None) -> list[dict]:
    """The whole benchmark; emits and returns its rows."""
    from workloads.data import default_data_dir

    if iterations < 2 * SKIP + 3:
        raise ValueError(f"need at least {2 * SKIP + 3} iterations")
    if pin is None:
        pin = device == "cpu" and (os.cpu_count() or 1) >= 2
    spawn = mp.get_context("spawn")
    data_dir = str(data_dir or default_data_dir())
    jobs = with_pin(jobs, pin)
    kw = {"backend": backend, "device": device, "data_dir": data_dir, "peer_device": peer_device}
    t0 = time.monotonic()
    rows = [machine(pin, device, backend)]
    emit(rows[-1])
    for case, pair in cases:
        rows.append(bench_case(spawn, case, pair, jobs, iterations, **kw))
        emit(rows[-1])
    if "io-heavy" in jobs:
        rows.append(disk_check(data_dir, jobs["io-heavy"]))
        emit(rows[-1])
    rows.append({**machine(pin, device, backend), "case": "end",
                 "run_s": round(time.monotonic() - t0, 1)})
    emit(rows[-1])
    return rows
