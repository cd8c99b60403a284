"""Fuzz the live scheduler: `python bench/fuzz_service.py --messages 10000 [--seed N]`.

Real processes on loopback: a broker, the scheduler (muri-s) and one node agent (n0, emulated
trainers) of a 2-node cluster; three jobs run while tests/fuzz_service.py's `Fuzzer` sends
random and hostile event.timing / event.progress / agent.heartbeat / agent.register messages
(inf, nan, 1e300, negative, wrong types, missing and unknown fields; nodes n1 (no agent), n9
and x, never n0). Then it checks that the scheduler process is alive and answering, that
every event the schema refuses was counted by the scheduler, and that the jobs finish.
Prints one JSON summary: messages sent, refusals by kind (predicted, scheduler, broker log),
log lines about refusals, rounds, jobs finished. Exit status 0 when the scheduler held up.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker.client import Requester  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from traces.record import record_to_map  # noqa: E402
from tests.fuzz_service import Fuzzer  # noqa: E402
from tests.helpers import job  # noqa: E402
from tests.live_system import LiveCluster, log_records, wait_for  # noqa: E402

SPEC = ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
        "1,2,4,32,128\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/fuzz_service.py", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--time-scale", type=float, default=100.0)
    p.add_argument("--iterations", type=int, default=6000,
                   help="per job (0.4 trace s each); at the default scale ~25-50 s of wall time")
    p.add_argument("--run-dir", default=None, help="default: a new temporary directory")
    a = p.parse_args(argv)
    run_dir = Path(a.run_dir or tempfile.mkdtemp(prefix="interlace-fuzz-service-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.csv").write_text(SPEC)
    cluster = LiveCluster(run_dir, str(run_dir / "spec.csv"), nodes=1, gpus_per_node=4,
                          time_scale=a.time_scale)
    out: dict = {"seed": a.seed, "run_dir": str(run_dir)}
    try:
        cluster.run_dir.mkdir(parents=True, exist_ok=True)
        cluster.start_broker()
        cluster.start_scheduler()
        cluster.start_agent(0)
        wait_for(lambda: "n0" in ((cluster.status() or {}).get("agents") or {}), 60,
                 "n0 to register")
        endpoints = Endpoints.load(cluster.endpoints_file)
        client = Requester(endpoints, "fuzz-feeder", timeout=5.0, retries=3)
        try:
            for j in (1, 2, 3):
                client.request("scheduler", "job.submit", job=record_to_map(
                    job(j, num_gpu=2, stages=(0.1 * j, 0.2, 0.1), iterations=a.iterations)))
        finally:
            client.close()
        wait_for(lambda: ((cluster.status() or {}).get("counts") or {}).get("running", 0) >= 2,
                 60, "jobs to run")
        rounds_before = cluster.status()["rounds"]
        fuzzer = Fuzzer(endpoints, a.seed, job_ids=(1, 2, 3), nodes=("n1", "n9", "x"))
        started = time.monotonic()
        try:
            summary = fuzzer.run(a.messages)
        finally:
            fuzzer.close()
        out["fuzz_wall_s"] = round(time.monotonic() - started, 1)
        out.update(summary)
        expected = fuzzer.event_refusals()

        def counted() -> dict | None:
            status = cluster.status()
            refused = (status or {}).get("refused") or {}
            return status if all(refused.get(k, 0) >= n for k, n in expected.items()) else None
        status = wait_for(counted, 60, "the scheduler to count the refused events")
        out["scheduler_alive"] = cluster.procs["scheduler"].poll() is None
        out["scheduler_refused"] = status["refused"]
        out["events_counted_as_predicted"] = all(
            status["refused"].get(k, 0) == n for k, n in expected.items())
        out["rounds_before"], out["rounds_after_fuzz"] = rounds_before, status["rounds"]
        out["round_failures"] = status.get("round_failures")
        final = cluster.wait_finished(3, 300)
        out["jobs_finished"] = final["counts"]["finished"]
        out["rounds_at_end"] = final["rounds"]
        out["scheduler_alive_at_end"] = cluster.procs["scheduler"].poll() is None
        lines = log_records(run_dir, "input_refused")
        out["scheduler_input_refused_log_lines"] = len(lines)
        out["scheduler_round_failed_log_lines"] = len(log_records(run_dir, "round_failed"))
        broker_lines = log_records(run_dir, "input_refused", component="broker")
        out["broker_input_refused_log_lines"] = len(broker_lines)
        out["broker_refused_kinds_logged"] = sorted({r["kind"] for r in broker_lines})
    finally:
        cluster.stop_all()
    print(json.dumps(out, indent=1, sort_keys=True))
    ok = out.get("scheduler_alive_at_end") and out.get("jobs_finished") == 3 \
        and out.get("events_counted_as_predicted")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
