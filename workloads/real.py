"""A workload whose four stages each occupy the real resource they are named after.

Why: an interleaving measurement is only as honest as its stages. The emulated workload holds
each stage with a sleep, which measures the gate's turn-taking and nothing else. Here:

* `io` (load) reads one batch file whole from local disk, with O_DIRECT where the filesystem
  allows it, and the file's pages dropped from the page cache before and after the read
  (`posix_fadvise(DONTNEED)`), so the bytes come from the block device and the read blocks
  in the kernel instead of spinning a core. The workload counts the bytes read.
* `cpu` (prepare) decodes the records (zlib, or raw arrays) and augments them with numpy on the
  calling thread: `blur` separable box-blur passes at stored resolution, a nearest-neighbour
  downsample to the model's input, a random flip and crop.
* `gpu` (compute) is a small conv net's forward and backward (one torch thread on a CPU).
* `net` is the trainer's reducer (a gloo or NCCL all-reduce when the job has two ranks) and
  the optimizer step.

Knobs make a job io-heavy (large raw images: many bytes, trivial decode), cpu-heavy (zlib
images and blur passes) or compute-heavy (conv `width`, `depth`). `pin={"cpu": c, "gpu": g}`
moves the calling thread onto core c for `prepare` and core g for `compute` (and back), so that
on a small machine two jobs' stages contend for the one core each stage is given, as two jobs'
decoders would for a node's CPU and their kernels for its accelerator.

Batch files are made at first use in `<data_dir>/real/` (seeded, nothing downloaded), written
atomically, `files` of them per shape; rank r reads file (step * world_size + r) mod `files`.
The batch read is a view into one reused buffer: a batch must be prepared before the next load.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from workloads.base import Common, Workload, reject_unknown, seeded, torch_device
from workloads.data import _atomic_write

CODECS = ("raw", "zlib")
NUM_CLASSES = 10
_HEADER = np.dtype("<u8")
#: Version of make_batch_file's content, in the file names: a changed maker makes new files.
FORMAT = 1
_ALIGN = mmap.PAGESIZE  # O_DIRECT wants buffer, offset and length aligned


def make_batch_file(side: int, batch: int, codec: str, seed: int) -> bytes:
    """`batch` images of side x side x 3 (flat blocks, 10% speckled: zlib gets ~3x).

    Layout: u64 count, u64 payload length per record, u8 label per record, payloads.
    """
    rng = np.random.default_rng(seed)
    coarse = max(1, side // 8)
    low = rng.integers(0, 240, (batch, coarse, coarse, 3), dtype=np.uint8)
    reps = -(-side // coarse)
    images = np.repeat(np.repeat(low, reps, axis=1), reps, axis=2)[:, :side, :side]
    speckle = rng.random(images.shape) < 0.1
    images = images + speckle * rng.integers(0, 16, images.shape, dtype=np.uint8)
    payloads = [img.tobytes() if codec == "raw" else zlib.compress(img.tobytes(), 6)
                for img in images]
    labels = rng.integers(0, NUM_CLASSES, batch, dtype=np.uint8)
    head = np.array([batch, *map(len, payloads)], dtype=_HEADER).tobytes()
    return head + labels.tobytes() + b"".join(payloads)


def batch_file_name(config: dict, index: int) -> str:
    """File `index` of the batch files for a config's codec, side and batch size."""
    return (f"v{FORMAT}-{config.get('codec', 'zlib')}-{config.get('side', 64)}-"
            f"{config.get('batch_size') or 32}-{index}.bin")


def parse_batch_file(data: bytes | memoryview) -> tuple[np.ndarray, list[memoryview]]:
    """Labels and the record payloads (views into `data`, no copy)."""
    view = memoryview(data)
    n = int(np.frombuffer(view[:8], dtype=_HEADER)[0])
    lengths = np.frombuffer(view[8:8 * (n + 1)], dtype=_HEADER)
    at = 8 * (n + 1)
    labels = np.frombuffer(view[at:at + n], dtype=np.uint8)
    at += n
    payloads = []
    for length in lengths.tolist():
        payloads.append(view[at:at + length])
        at += length
    if at != len(view):
        raise ValueError(f"batch file has {len(view)} bytes, its header says {at}")
    return labels, payloads


def read_uncached(path: Path, buf: mmap.mmap | None = None) -> tuple[memoryview, float]:
    """The whole file, from the device; returns the bytes and this thread's CPU time reading.

    `buf`, when big enough, is read into (a reused buffer spares the page faults of a fresh
    one; the returned view then points into it).

    O_DIRECT where the filesystem allows it (the device writes into the page-aligned buffer,
    no copy through the page cache, so the read blocks without using a core), else a buffered
    read. Either way the file's cached pages are dropped before and after (a cached copy left
    by the maker or another reader would otherwise be served instead of the device).
    """
    cpu0 = time.thread_time()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except (OSError, AttributeError):  # tmpfs and some overlays refuse O_DIRECT
        fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size
        if buf is None or len(buf) < size:
            buf = aligned_buffer(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = os.readv(fd, [view[got:]])  # whole aligned tail: O_DIRECT needs it
            if n == 0:
                raise OSError(f"short read from {path}: {got} of {size} bytes")
            got += n
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return view[:size], time.thread_time() - cpu0


def aligned_buffer(size: int) -> mmap.mmap:
    """A page-aligned buffer of at least `size` bytes, a whole number of pages."""
    return mmap.mmap(-1, max(_ALIGN, -(-size // _ALIGN) * _ALIGN))


def box_blur(x: np.ndarray, passes: int) -> np.ndarray:
    """`passes` separable 3-tap box blurs over axes 1 and 2 of a float32 (n, h, w, c) array."""
    for _ in range(passes):
        y = x.copy()
        y[:, 1:] += x[:, :-1]
        y[:, :-1] += x[:, 1:]
        x = y.copy()
        x[:, :, 1:] += y[:, :, :-1]
        x[:, :, :-1] += y[:, :, 1:]
        x *= 1.0 / 9.0
    return x


@contextlib.contextmanager
def pinned(core: int | None) -> Iterator[None]:
    """Run the body on `core` only (this thread), then restore the thread's former cores."""
    if core is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def conv_net(width: int, depth: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    channels = 3
    for _ in range(depth):
        layers += [torch.nn.Conv2d(channels, width, 3, padding=1), torch.nn.ReLU()]
        channels = width
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
               torch.nn.Linear(channels, NUM_CLASSES)]
    return torch.nn.Sequential(*layers)


class RealStages(Workload):
    """Images from uncached files, numpy decode/augment, a conv net: see the module docstring."""

    name = "real"

    def __init__(self, common: Common, side: int = 64, codec: str = "zlib", blur: int = 0,
                 input_side: int = 32, width: int = 16, depth: int = 2, files: int = 2,
                 pin: dict | None = None):
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
        if not 8 <= input_side <= side:
            raise ValueError(f"need 8 <= input_side <= side, got {input_side}, {side}")
        if min(width, depth, files) < 1 or blur < 0:
            raise ValueError("width, depth and files must be >= 1 and blur >= 0")
        unknown = set(pin or {}) - {"cpu", "gpu"}
        if unknown:
            raise ValueError(f"pin names stages cpu and gpu only, not {sorted(unknown)}")
        self.side, self.codec, self.blur = int(side), codec, int(blur)
        self.input_side, self.files = int(input_side), int(files)
        self.pin = {k: int(v) for k, v in (pin or {}).items()}
        if common.io_bandwidth is not None:
            raise ValueError("the real workload reads the disk at its own speed: no io_bandwidth")
        self.batch_size = common.batch_size or 32
        device = torch_device(common.device)
        if device.type == "cpu":
            torch.set_num_threads(1)  # the gpu stage stands for one device: one core here
        torch.manual_seed(common.seed)
        model = conv_net(int(width), int(depth)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=common.lr if common.lr is not None else 0.01)
        super().__init__(model, opt, device, common)
        self.io_bytes = 0  # totals over this workload's life: what the io stage really read
        self.io_cpu_s = 0.0
        self.io_reads = 0
        #: this thread's CPU seconds in prepare and compute: against a stage's wall time it
        #: says how long the stage waited for its core (other processes on the machine)
        self.busy = {"cpu": 0.0, "gpu": 0.0}
        self._paths: list[Path] | None = None
        self._buf: mmap.mmap | None = None  # reused by every read: one batch in flight

    # -- data ------------------------------------------------------------------------------

    def batch_paths(self) -> list[Path]:
        """The batch files, made on first use (atomically: a concurrent maker is harmless)."""
        if self._paths is None:
            folder = self.common.data_path / "real"
            paths = []
            for i in range(self.files):
                path = folder / batch_file_name({"codec": self.codec, "side": self.side,
                                                 "batch_size": self.batch_size}, i)
                if not path.exists():
                    _atomic_write(path, make_batch_file(self.side, self.batch_size, self.codec,
                                                        seed=1000 + i))
                paths.append(path)
            self._paths = paths
        return self._paths

    # -- stages ----------------------------------------------------------------------------

    def load(self, step: int) -> tuple[int, memoryview]:
        paths = self.batch_paths()
        path = paths[(step * self.common.world_size + self.common.rank) % len(paths)]
        if self._buf is None:
            self._buf = aligned_buffer(max(p.stat().st_size for p in paths))
        data, cpu_s = read_uncached(path, self._buf)
        self.io_bytes += len(data)
        self.io_cpu_s += cpu_s
        self.io_reads += 1
        return step, data

    def prepare(self, raw: tuple[int, memoryview]) -> tuple[torch.Tensor, torch.Tensor]:
        step, data = raw
        with pinned(self.pin.get("cpu")), self._busy("cpu"):
            labels, payloads = parse_batch_file(data)
            s, stride = self.side, self.side // self.input_side
            x = np.stack([self._decode(p, s, stride) for p in payloads])
            g = seeded(self.common.seed, self.common.rank, step)
            flip = torch.rand(len(x), generator=g) < 0.5
            t = torch.from_numpy(x).permute(0, 3, 1, 2).mul_(1.0 / 255.0).sub_(0.5)
            t = torch.where(flip[:, None, None, None], t.flip(3), t)
            dy, dx = torch.randint(0, 5, (2,), generator=g).tolist()
            t = F.pad(t, [2, 2, 2, 2])[:, :, dy:dy + self.input_side, dx:dx + self.input_side]
            return t.contiguous(), torch.from_numpy(labels.astype(np.int64))

    @contextlib.contextmanager
    def _busy(self, stage: str) -> Iterator[None]:
        t0 = time.thread_time()
        try:
            yield
        finally:
            self.busy[stage] += time.thread_time() - t0

    def _decode(self, payload: memoryview, s: int, stride: int) -> np.ndarray:
        """One record: decoded, blurred at stored resolution, downsampled to the input side."""
        img = np.frombuffer(zlib.decompress(payload) if self.codec == "zlib" else payload,
                            dtype=np.uint8).reshape(1, s, s, 3)
        if self.blur:
            img = box_blur(img.astype(np.float32), self.blur)
        n = self.input_side
        return np.asarray(img[0, ::stride, ::stride][:n, :n], dtype=np.float32)

    def compute(self, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        x, y = batch
        with pinned(self.pin.get("gpu")), self._busy("gpu"):
            self.model.train()
            loss = F.cross_entropy(self.model(x.to(self.device)), y.to(self.device))
            loss.backward()
            return float(loss.detach())


def make(**config: Any) -> RealStages:
    common, extra = Common.split(config)
    keys = ("side", "codec", "blur", "input_side", "width", "depth", "files", "pin")
    own = {k: extra.pop(k) for k in keys if k in extra}
    reject_unknown("real", extra)
    return RealStages(common, **own)
