"""GPU check (not part of CI): the honest interleaving benchmark with `gpu` on CUDA.

    python bench/gpu_check.py [--iterations 20] [--out gpu_check.json]

On a CUDA machine it checks NCCL with a one-rank all-reduce, then runs bench/interleave_real.py's
cases (solo profiles, the model's prediction, the pair through the stage gate, gate off,
sequential) with every member's `gpu` stage on the GPU and its `net` stage on NCCL, the peer
rank on a second GPU. NCCL cannot put two ranks of one job on one device, so with a single GPU
`net` runs gloo over the CUDA tensors, and the JSON says so. The `gpu-heavy` job gets a model
that keeps a GPU busy for tens of milliseconds. All rows go to stdout as JSON lines and, with
`--out`, to one JSON file. Without CUDA it says so (in both places) and exits 0.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

#: Job kinds for a GPU: the compute-heavy model is far wider than on a CPU core.
GPU_JOBS = {
    "io-heavy": {"side": 1024, "codec": "raw", "blur": 0, "width": 8, "depth": 1},
    "cpu-heavy": {"side": 224, "codec": "zlib", "blur": 1, "width": 8, "depth": 1},
    "gpu-heavy": {"side": 256, "codec": "zlib", "blur": 0, "input_side": 128, "width": 256,
                  "depth": 6},
}


def plan(device_count: int) -> dict:
    """Where members, peers and the all-reduce run, given the number of CUDA devices."""
    if device_count < 1:
        raise ValueError("no CUDA device")
    if device_count >= 2:
        return {"device": "cuda:0", "peer_device": "cuda:1", "backend": "nccl",
                "note": "net: NCCL between cuda:0 (member) and cuda:1 (peer)"}
    return {"device": "cuda:0", "peer_device": "cuda:0", "backend": "gloo",
            "note": "one GPU: NCCL needs a device per rank, so net runs gloo on CUDA tensors"}


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


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20, help="per member per phase")
    ap.add_argument("--out", default=None, help="write all rows to this JSON file")
    args = ap.parse_args(argv)
    if args.iterations < 7:
        ap.error("--iterations must be at least 7")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    try:
        try:
            import torch
        except ImportError:
            emit({"cuda": False, "reason": "torch is not installed (the train extra)"})
            return 0
        if not torch.cuda.is_available():
            emit({"cuda": False, "reason": "no CUDA device here; nothing to check"})
            return 0
        run_cuda(emit, args.iterations, torch.cuda.device_count(),
                 torch.cuda.get_device_name(0))
        return 0
    finally:
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


def run_cuda(emit: Callable[[dict], None], iterations: int, device_count: int,
             name: str) -> None:
    import interleave_real

    where = plan(device_count)
    emit({"cuda": True, "device": name, "devices": device_count, **nccl_selftest(), **where})
    interleave_real.run(emit, iterations=iterations, jobs=GPU_JOBS, device=where["device"],
                        backend=where["backend"], peer_device=where["peer_device"], pin=False)


if __name__ == "__main__":
    sys.exit(main())
