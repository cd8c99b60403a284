"""Local datasets for the real workloads: made once at first use, then read batch by batch.

Why files at all: the `io` stage of an iteration must really read the batch's bytes from local
disk (the resource Muri interleaves), optionally throttled to stand in for remote storage. So
each dataset is a flat file of fixed-size records plus a small JSON header; a batch is a
contiguous run of records (wrapping at the end), read with seek+read. Files are written
atomically (tmp + fsync + rename, the header last), so a crashed or concurrent maker never
leaves a half file that a reader would trust. Nothing is downloaded: CV images are
scikit-learn's bundled `load_digits`, the NLP corpus comes from a seeded toy grammar.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ENV_DATA_DIR = "INTERLACE_DATA"


def default_data_dir() -> Path:
    """`$INTERLACE_DATA`, else ~/.cache/interlace/data."""
    env = os.environ.get(ENV_DATA_DIR)
    return Path(env) if env else Path.home() / ".cache" / "interlace" / "data"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class RecordFile:
    """A dataset file of `count` records of `record_bytes` bytes each, described by its header."""

    path: Path
    record_bytes: int
    count: int
    meta: dict

    @staticmethod
    def ensure(directory: str | os.PathLike, name: str,
               make: Callable[[], tuple[np.ndarray, dict]]) -> "RecordFile":
        """Open dataset `name` in `directory`, making it with `make()` first when absent.

        `make` returns a 2-D uint8 array (one row per record) and extra header fields.
        """
        directory = Path(directory)
        data_path, header_path = directory / f"{name}.bin", directory / f"{name}.json"
        if not header_path.exists() or not data_path.exists():
            rows, extra = make()
            rows = np.ascontiguousarray(rows, dtype=np.uint8)
            if rows.ndim != 2 or rows.shape[0] == 0:
                raise ValueError(f"dataset {name}: need a non-empty 2-D array, got {rows.shape}")
            _atomic_write(data_path, rows.tobytes())
            header = {"record_bytes": int(rows.shape[1]), "count": int(rows.shape[0]), **extra}
            _atomic_write(header_path, json.dumps(header).encode())  # last: marks it complete
        header = json.loads(header_path.read_text())
        found = RecordFile(data_path, int(header["record_bytes"]), int(header["count"]), header)
        if data_path.stat().st_size != found.record_bytes * found.count:
            raise ValueError(f"dataset {data_path} has the wrong size for its header")
        return found

    def batch_range(self, step: int, batch: int, shard: int = 0, shards: int = 1) -> int:
        """First record of batch `step` for shard `shard` of `shards` (ranks read disjoint runs)."""
        return ((step * shards + shard) * batch) % self.count


class Throttle:
    """Holds a read to at most `bandwidth` bytes/s (None or <= 0: unthrottled).

    Sleeping here is the point: it stands in for the transfer time of remote storage.
    """

    def __init__(self, bandwidth: float | None):
        self.bandwidth = bandwidth if bandwidth and bandwidth > 0 else None

    def pace(self, nbytes: int, started: float) -> None:
        if self.bandwidth is None:
            return
        left = started + nbytes / self.bandwidth - time.monotonic()
        if left > 0:
            time.sleep(left)


def read_records(rf: RecordFile, first: int, n: int, throttle: Throttle | None = None) -> bytes:
    """Read `n` records from record `first` on, wrapping at the end; seek+read from disk."""
    if n > rf.count:
        raise ValueError(f"batch of {n} records exceeds the dataset ({rf.count})")
    started = time.monotonic()
    first %= rf.count
    head = min(n, rf.count - first)
    with open(rf.path, "rb", buffering=0) as fh:
        fh.seek(first * rf.record_bytes)
        data = fh.read(head * rf.record_bytes)
        if head < n:
            fh.seek(0)
            data += fh.read((n - head) * rf.record_bytes)
    if len(data) != n * rf.record_bytes:
        raise OSError(f"short read from {rf.path}")
    if throttle is not None:
        throttle.pace(len(data), started)
    return data


# -- the datasets --------------------------------------------------------------------------------
def digits_images(size: int, seed: int = 0) -> tuple[np.ndarray, dict]:
    """scikit-learn's 8x8 digits, upsampled (bilinear) to size x size, shuffled; label first.

    Each record is 1 label byte + size*size grey pixels (0..255).
    """
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0  # (n, 8, 8), 0..1
    up = _bilinear(images, size)
    pixels = np.clip(np.rint(up * 255.0), 0, 255).astype(np.uint8).reshape(len(images), -1)
    labels = digits.target.astype(np.uint8)[:, None]
    rows = np.concatenate([labels, pixels], axis=1)
    order = np.random.default_rng(seed).permutation(len(rows))
    return rows[order], {"size": size, "classes": 10, "source": "sklearn.load_digits"}


def _bilinear(images: np.ndarray, size: int) -> np.ndarray:
    """Resize (n, h, w) to (n, size, size) by bilinear interpolation (align-corners)."""
    n, h, w = images.shape
    ys, xs = np.linspace(0, h - 1, size), np.linspace(0, w - 1, size)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    wy, wx = (ys - y0)[None, :, None], (xs - x0)[None, None, :]
    top = images[:, y0][:, :, x0] * (1 - wx) + images[:, y0][:, :, x1] * wx
    bottom = images[:, y1][:, :, x0] * (1 - wx) + images[:, y1][:, :, x1] * wx
    return top * (1 - wy) + bottom * wy


# A toy grammar with learnable structure: agreement between subject and verb, fixed word order,
# and a closing period. A model that learns it predicts the next word far better than chance.
_NOUNS = ["cat", "dog", "bird", "fish", "horse", "mouse", "child", "teacher"]
_VERBS = ["sees", "likes", "follows", "finds", "hears", "chases"]
_ADJS = ["small", "big", "red", "old", "quick", "quiet"]
_DETS = ["the", "a", "every", "some"]
_ADVS = ["today", "again", "slowly", "often"]
SPECIALS = ["<pad>", "<mask>", "."]
VOCAB = SPECIALS + _DETS + _ADJS + _NOUNS + [v[:-1] for v in _VERBS] + _VERBS + _ADVS + ["and"]


def grammar_corpus(tokens: int, seed: int = 0) -> tuple[np.ndarray, dict]:
    """`tokens` token ids (uint8, one record per token) from the seeded toy grammar."""
    rng = np.random.default_rng(seed)
    ids = {w: i for i, w in enumerate(VOCAB)}
    out: list[int] = []
    while len(out) < tokens:
        out.extend(ids[w] for w in _sentence(rng))
    rows = np.asarray(out[:tokens], dtype=np.uint8)[:, None]
    return rows, {"vocab": len(VOCAB), "source": "grammar"}


def _sentence(rng: np.random.Generator) -> list[str]:
    def noun_phrase() -> list[str]:
        words = [_DETS[rng.integers(len(_DETS))]]
        if rng.random() < 0.5:
            words.append(_ADJS[rng.integers(len(_ADJS))])
        return words + [_NOUNS[rng.integers(len(_NOUNS))]]

    verb = _VERBS[rng.integers(len(_VERBS))]
    plural = rng.random() < 0.3
    words = noun_phrase()
    if plural:  # "the cat and a dog see ..." (plural agreement: the verb loses its "s")
        words += ["and"] + noun_phrase()
        verb = verb[:-1]
    words += [verb] + noun_phrase()
    if rng.random() < 0.4:
        words.append(_ADVS[rng.integers(len(_ADVS))])
    return words + ["."]
