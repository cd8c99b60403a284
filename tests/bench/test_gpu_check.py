"""bench/gpu_check.py: without CUDA it says so (stdout and --out) and exits 0 (CI has no GPU);
the CUDA path's logic that runs on a CPU: where members, peers and the all-reduce go, its
arguments, its job settings, and what it hands the real-stage benchmark."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


def test_without_cuda_it_says_so_and_exits_cleanly(tmp_path):
    out_file = tmp_path / "gpu.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "bench/gpu_check.py", "--out", str(out_file)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["cuda"] is False and line["reason"]
    assert json.loads(out_file.read_text()) == [line]


def test_two_gpus_put_the_peer_on_the_second_and_use_nccl():
    assert gpu_check.plan(2)["backend"] == "nccl"
    assert gpu_check.plan(2)["device"] != gpu_check.plan(2)["peer_device"]
    assert gpu_check.plan(8)["peer_device"] == "cuda:1"


def test_one_gpu_falls_back_to_gloo_and_says_why():
    one = gpu_check.plan(1)
    assert one["backend"] == "gloo" and one["device"] == one["peer_device"] == "cuda:0"
    assert "NCCL" in one["note"]
    with pytest.raises(ValueError):
        gpu_check.plan(0)


def test_arguments():
    assert gpu_check.parse([]).iterations == 20
    assert gpu_check.parse(["--iterations", "9", "--out", "x.json"]).out == "x.json"
    with pytest.raises(SystemExit):
        gpu_check.parse(["--iterations", "3"])


def test_the_gpu_jobs_are_valid_real_workloads():
    pytest.importorskip("torch", reason="the train extra (torch) is not installed")
    from workloads import registry

    for cfg in gpu_check.GPU_JOBS.values():
        registry.make("real", **cfg)  # settings accepted; nothing read until the first load
    import interleave_real

    assert {k for _c, pair in interleave_real.CASES for k in pair} <= set(gpu_check.GPU_JOBS)


def test_the_cuda_run_hands_the_benchmark_the_gpu_settings(monkeypatch):
    """Only the two calls that need a GPU are replaced: NCCL's self-test and the run itself."""
    import interleave_real

    calls = []
    monkeypatch.setattr(gpu_check, "nccl_selftest", lambda: {"all_reduce_ok": True})
    monkeypatch.setattr(interleave_real, "run", lambda emit, **kw: calls.append(kw))
    rows = []
    gpu_check.run_cuda(rows.append, 12, 2, "H200")
    assert rows[0]["cuda"] is True and rows[0]["backend"] == "nccl"
    (kw,) = calls
    assert kw["device"] == "cuda:0" and kw["peer_device"] == "cuda:1"
    assert kw["backend"] == "nccl" and kw["pin"] is False and kw["iterations"] == 12
    assert kw["jobs"] is gpu_check.GPU_JOBS
