"""Real workloads: each trains with finite loss, CV/NLP losses fall, data, throttle, exact state."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the train extra (torch) is not installed")

from trainer.checkpoint import torch_state as torch_checkpoint  # noqa: E402
from trainer.stages import StageLoop  # noqa: E402
from workloads import registry  # noqa: E402
from workloads.cartpole import CartPole  # noqa: E402
from workloads.data import RecordFile, Throttle, read_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# small enough for a shared 2-core CPU; each still the named architecture
SMALL = {
    "resnet18": dict(input_size=16, batch_size=16),
    "vgg16": dict(width=8, batch_size=16),
    "vgg19": dict(width=8, batch_size=16),
    "shufflenet_v2_x1_0": dict(batch_size=16),
    "bert": dict(batch_size=16),
    "gpt2": dict(batch_size=16),
    "dqn": dict(),
    "a2c": dict(),
}
ITERATIONS = 30
SLOW_START = {"vgg16": 60, "vgg19": 60}  # plain deep VGG sits on a plateau for ~40 steps


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def test_registry_names_cover_the_trace_models():
    assert set(SMALL) == set(registry.TORCH_NAMES)
    assert set(registry.NAMES) == set(registry.TORCH_NAMES) | {"emulated", "real"}
    spec = registry.make("emulated", total=10, iteration_time=1.0, stages=(1, 1, 1))
    assert spec.stage_map() == {"data": 1.0, "gpu": 1.0, "net": 1.0}
    with pytest.raises(ValueError, match="unknown workload"):
        registry.make("alexnet")


def test_unknown_settings_are_refused(data_dir):
    with pytest.raises(ValueError, match="unknown settings"):
        registry.make("gpt2", data_dir=str(data_dir), colour="blue")
    with pytest.raises(ValueError):
        registry.make("dqn", colour="blue")


def test_listing_workloads_and_the_trainer_cli_do_not_import_torch():
    code = ("import sys, trainer.run, workloads.registry; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name", list(SMALL))
def test_workload_trains_with_finite_loss(name, data_dir):
    w = registry.make(name, data_dir=str(data_dir), **SMALL[name])
    loop = StageLoop(w)
    losses = [loop.run(step).loss for step in range(SLOW_START.get(name, ITERATIONS))]
    assert all(math.isfinite(x) for x in losses)
    assert all(p.grad is None for p in w.model.parameters())  # apply() cleared them
    if name in registry.CV or name in registry.NLP:
        first, last = np.mean(losses[:5]), np.mean(losses[-5:])
        assert last < first * 0.95, f"{name}: loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize("name", ["bert", "dqn", "a2c", "vgg16"])
def test_checkpoint_restores_a_run_exactly(name, data_dir, tmp_path):
    """Train, checkpoint, train on; a fresh workload restored from the checkpoint matches."""
    cfg = dict(data_dir=str(data_dir), **SMALL[name])
    a = registry.make(name, **cfg)
    for step in range(6):
        a.step(step)
    path = torch_checkpoint.save(tmp_path, 7, 6, a, meta={"x": 1})
    expected = [a.step(step) for step in range(6, 10)]

    b = registry.make(name, **cfg)
    for step in range(3):  # a different state everywhere: the checkpoint must win
        b.step(step)
    with torch.no_grad():
        for p in b.model.parameters():
            p.add_(1.0)
    state = torch_checkpoint.restore(path, b)
    assert state["iteration"] == 6 and state["meta"] == {"x": 1}
    assert [b.step(step) for step in range(6, 10)] == expected
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)


def test_checkpoint_files_are_atomic_pruned_and_the_newest_wins(data_dir, tmp_path):
    w = registry.make("a2c")
    for it in (5, 10, 15):
        torch_checkpoint.save(tmp_path, 3, it, w, keep=2)
    assert torch_checkpoint.latest(tmp_path, 3)[0] == 15
    names = sorted(p.name for p in torch_checkpoint.job_dir(tmp_path, 3).iterdir())
    assert names == ["it-000000000010.pt", "it-000000000015.pt"]  # no temp files, old pruned
    assert torch_checkpoint.latest(tmp_path, 4) is None


def test_rng_state_round_trip():
    import random

    state = torch_checkpoint.rng_state()
    want = (torch.rand(3), np.random.rand(3), random.random())
    torch_checkpoint.set_rng_state(state)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(want[0], got[0]) and np.array_equal(want[1], got[1])
    assert want[2] == got[2]


# -- data -----------------------------------------------------------------------------------
def test_dataset_is_made_once_and_read_with_wraparound(tmp_path):
    calls = []

    def make():
        calls.append(1)
        return np.arange(30, dtype=np.uint8).reshape(10, 3), {"kind": "test"}

    rf = RecordFile.ensure(tmp_path, "t", make)
    again = RecordFile.ensure(tmp_path, "t", make)
    assert calls == [1] and again.count == 10 and again.meta["kind"] == "test"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    data = read_records(rf, 8, 4)
    assert list(data) == [24, 25, 26, 27, 28, 29, 0, 1, 2, 3, 4, 5]
    # ranks read disjoint runs of the same step
    assert {rf.batch_range(2, 2, shard=r, shards=2) for r in range(2)} == {8, 0}


def test_io_throttle_limits_bandwidth(data_dir):
    bandwidth = 40_000.0  # bytes/s
    w = registry.make("gpt2", data_dir=str(data_dir), batch_size=16, io_bandwidth=bandwidth)
    nbytes = len(w.load(0)[1])
    assert nbytes == 16 * 33
    loop = StageLoop(w)
    io_times = [loop.run(step).stages["io"] for step in range(5)]
    assert min(io_times) >= nbytes / bandwidth
    fast = StageLoop(registry.make("gpt2", data_dir=str(data_dir), batch_size=16))
    assert min(fast.run(step).stages["io"] for step in range(5)) < nbytes / bandwidth


def test_throttle_pace_holds_to_the_rate(tmp_path):
    rf = RecordFile.ensure(tmp_path, "big", lambda: (np.zeros((100, 100), np.uint8), {}))
    import time

    t0 = time.monotonic()
    read_records(rf, 0, 100, Throttle(100_000.0))  # 10 kB at 100 kB/s
    assert time.monotonic() - t0 >= 0.1
    assert Throttle(0).bandwidth is None and Throttle(None).bandwidth is None


def test_cv_data_is_real_digits_and_nlp_tokens_in_vocab(data_dir):
    cv = registry.make("resnet18", data_dir=str(data_dir), input_size=16, batch_size=8)
    x, y = cv.prepare(cv.load(0))
    assert x.shape == (8, 3, 16, 16) and y.min() >= 0 and y.max() <= 9
    assert cv.data.meta["source"] == "sklearn.load_digits" and cv.data.count == 1797
    lm = registry.make("bert", data_dir=str(data_dir), batch_size=4)
    inputs, targets = lm.prepare(lm.load(0))
    assert inputs.shape == targets.shape == (4, 32)
    masked = targets != -100
    assert masked.any() and (inputs[~masked] == lm.prepare(lm.load(0))[0][~masked]).all()


# -- the environment --------------------------------------------------------------------------
def test_cartpole_falls_when_always_pushed_one_way_and_resets():
    env = CartPole(3, seed=1)
    for t in range(1, 100):
        _, reward, terminated, truncated = env.step(np.ones(3, dtype=np.int64))
        assert (reward == 1).all() and not truncated.any()
        if terminated[0]:
            break
    assert terminated[0] and t < 100  # pushing one way only tips the pole fast
    assert (np.abs(env.state[0]) <= 0.05).all() and env.steps[0] == 0  # and it started anew
    assert env.finished[0] == t


def test_cartpole_state_round_trip_continues_identically():
    a = CartPole(2, seed=5)
    for _ in range(30):
        a.step(np.array([0, 1]))
    b = CartPole(2, seed=6)
    b.load_state_dict(a.state_dict())
    for _ in range(50):  # crosses episode ends, so the reset generator must match too
        ra, rb = a.step(np.array([1, 1])), b.step(np.array([1, 1]))
        assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
