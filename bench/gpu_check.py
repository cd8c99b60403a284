"""GPU check (not part of CI): a two-job interleaved group on CUDA against the same jobs in turn.

    python bench/gpu_check.py [--iterations 200] [--models resnet18,gpt2]

It checks NCCL with a one-rank process group and an all-reduce on the GPU, then runs two
real trainers (trainer.run, --device cuda) one after the other, then both at once as a group
whose members take turns through a node stage gate, and prints the throughput of each way
as JSON lines. Without CUDA it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def nccl_selftest() -> dict:
    import torch
    import torch.distributed as dist

    from trainer.distributed import free_port

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}",
                            world_size=1, rank=0)
    try:
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        return {"nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
                "all_reduce_ok": bool(x[0].item() == 1.0)}
    finally:
        dist.destroy_process_group()


def trainer(job_id: int, model: str, iterations: int, run_dir: Path, gate: str | None,
            config: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trainer.run", "--job-id", str(job_id), "--node", "gpu0",
           "--checkpoint-dir", str(run_dir / f"ck-{job_id}-{time.monotonic_ns()}"),
           "--iterations", str(iterations), "--workload", model, "--device", "cuda",
           "--workload-config", config, "--checkpoint-every", str(10 * iterations)]
    if gate:
        cmd += ["--gate", gate]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen(cmd, cwd=ROOT, env=env)


def timed(procs_of) -> float:
    start = time.perf_counter()
    for batch in procs_of():
        for proc in batch:
            if proc.wait() != 0:
                raise SystemExit(f"a trainer failed with exit status {proc.returncode}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--models", default="resnet18,gpt2")
    ap.add_argument("--config", default='{"input_size": 64}',
                    help="workload settings (JSON) for both jobs")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(json.dumps({"cuda": False, "reason": "torch is not installed (the train extra)"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"cuda": False, "reason": "no CUDA device here; nothing to check"}))
        return 0
    from node_agent.gate import StageGate
    from trainer.stages import STAGES

    print(json.dumps({"cuda": True, "device": torch.cuda.get_device_name(0), **nccl_selftest()}))
    models = args.models.split(",")[:2]
    run_dir = Path(tempfile.mkdtemp(prefix="interlace-gpu-check-"))
    n = args.iterations

    def one_by_one():
        for i, model in enumerate(models):
            yield [trainer(i, model, n, run_dir, None, args.config)]

    sequential = timed(one_by_one)
    with StageGate(list(range(len(models))), STAGES) as gate:
        def together():
            yield [trainer(i, m, n, run_dir, gate.endpoint, args.config)
                   for i, m in enumerate(models)]

        grouped = timed(together)
    both = n * len(models)
    print(json.dumps({"case": f"two jobs ({', '.join(models)}), {n} iterations each, CUDA",
                      "sequential_s": round(sequential, 2), "interleaved_s": round(grouped, 2),
                      "sequential_it_per_s": round(both / sequential, 1),
                      "interleaved_it_per_s": round(both / grouped, 1),
                      "speedup": round(sequential / grouped, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
