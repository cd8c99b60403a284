"""workloads/real.py: the io stage reads whole files from the device (page cache dropped),
the cpu stage decodes what was written, pinning restores the thread's cores, settings checked."""
from __future__ import annotations

import ctypes
import math
import mmap
import os
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the train extra (torch) is not installed")

from trainer.stages import StageLoop  # noqa: E402
from workloads import real, registry  # noqa: E402

_libc = ctypes.CDLL(None, use_errno=True)


def resident_pages(path) -> int:
    """Pages of `path` in the page cache now (mincore over a read-only mapping)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)  # nothing touched
        try:
            pages = -(-size // mmap.PAGESIZE)
            vec = (ctypes.c_ubyte * pages)()
            buf = (ctypes.c_char * size).from_buffer(mm)
            addr = ctypes.addressof(buf)
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
                pytest.skip(f"mincore failed: errno {ctypes.get_errno()}")
            del buf
            return sum(v & 1 for v in vec)
        finally:
            mm.close()


def fadvise_works_here(path) -> bool:
    """Does this filesystem drop a file's cached pages on DONTNEED (tmpfs does not)?"""
    with open(path, "rb") as fh:
        fh.read()
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return resident_pages(path) == 0


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_the_io_read_returns_the_whole_file_and_leaves_none_of_it_cached(tmp_path):
    path = tmp_path / "batch.bin"
    data = os.urandom(3 * mmap.PAGESIZE + 123)  # not a whole number of pages
    path.write_bytes(data)
    os.sync()
    if not fadvise_works_here(path):
        pytest.skip("this filesystem keeps pages cached despite DONTNEED (tmpfs?)")
    with open(path, "rb") as fh:  # cache it, so the read below must drop it
        fh.read()
    assert resident_pages(path) > 0
    got, cpu_s = real.read_uncached(path)
    assert bytes(got) == data and cpu_s >= 0
    assert resident_pages(path) == 0
    buf = real.aligned_buffer(len(data))
    again, _ = real.read_uncached(path, buf)
    assert bytes(again) == data
    assert bytes(memoryview(buf)[:len(data)]) == data  # read into the buffer it was given


@pytest.mark.parametrize("codec", real.CODECS)
def test_batch_files_round_trip(codec):
    blob = real.make_batch_file(side=16, batch=5, codec=codec, seed=3)
    labels, payloads = real.parse_batch_file(blob)
    assert len(labels) == 5 and all(0 <= x < real.NUM_CLASSES for x in labels)
    images = [np.frombuffer(zlib.decompress(p) if codec == "zlib" else p, np.uint8)
              for p in payloads]
    assert all(img.size == 16 * 16 * 3 for img in images)
    assert real.make_batch_file(side=16, batch=5, codec=codec, seed=3) == blob  # seeded
    with pytest.raises(ValueError, match="header"):
        real.parse_batch_file(blob + b"x")


def test_a_zlib_batch_is_smaller_than_the_raw_one():
    raw = real.make_batch_file(side=64, batch=4, codec="raw", seed=0)
    packed = real.make_batch_file(side=64, batch=4, codec="zlib", seed=0)
    assert len(packed) < 0.5 * len(raw)  # the cpu stage has real decoding to do


def test_iterations_read_every_batch_file_whole_and_train(tmp_path):
    w = registry.make("real", data_dir=str(tmp_path), side=32, input_side=16, batch_size=8,
                      blur=1, width=4, depth=1, files=2)
    loop = StageLoop(w)
    its = [loop.run(step) for step in range(4)]
    for stage in ("cpu", "gpu"):  # the stage thread's CPU time: some, at most its wall time
        assert 0 < w.busy[stage] <= sum(it.stages[stage] for it in its) + 1e-3
    sizes = [p.stat().st_size for p in w.batch_paths()]
    assert w.io_reads == 4 and w.io_bytes == 2 * sum(sizes)
    assert all(math.isfinite(it.loss) for it in its)
    assert all(set(it.stages) == {"io", "cpu", "gpu", "net"} for it in its)
    x, y = w.prepare(w.load(0))
    assert tuple(x.shape) == (8, 3, 16, 16) and tuple(y.shape) == (8,)
    labels, _ = real.parse_batch_file(real.read_uncached(w.batch_paths()[0])[0])
    assert y.tolist() == labels.tolist()  # the cpu stage decoded what the io stage read


def test_a_pinned_stage_runs_on_its_core_and_gives_the_others_back():
    before = os.sched_getaffinity(0)
    core = min(before)
    with real.pinned(core):
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    with real.pinned(None):
        assert os.sched_getaffinity(0) == before


def test_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match="unknown settings"):
        registry.make("real", data_dir=str(tmp_path), colour="blue")
    with pytest.raises(ValueError, match="codec"):
        registry.make("real", codec="png")
    with pytest.raises(ValueError, match="pin"):
        registry.make("real", pin={"io": 0})
    with pytest.raises(ValueError, match="io_bandwidth"):
        registry.make("real", io_bandwidth=1e6)
    with pytest.raises(ValueError, match="input_side"):
        registry.make("real", side=16, input_side=32)


def test_the_trainer_runs_it_like_any_other_workload(tmp_path):
    """`trainer.run --workload real`: the registry's name reaches the torch trainer."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1",
               INTERLACE_DATA=str(tmp_path / "data"))
    out = subprocess.run(
        [sys.executable, "-m", "trainer.run", "--job-id", "7", "--node", "n0",
         "--checkpoint-dir", str(tmp_path / "ck"), "--iterations", "3", "--workload", "real",
         "--device", "cpu", "--workload-config", json.dumps({"side": 32, "width": 4}),
         "--checkpoint-every", "2"],
        cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "ck" / "7.json").read_text())["iterations"] == 3
    assert list((tmp_path / "data" / "real").glob(f"v{real.FORMAT}-zlib-32-32-*.bin"))  # made at first use
