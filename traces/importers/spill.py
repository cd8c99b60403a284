"""Sort the kept rows by submit time in bounded memory, and find duplicate ids exactly.

Rows are collected in runs of a fixed size, each sorted and written to a temporary file; the
runs are then merged lazily. Duplicates are found without a set of every id: each row's
64-bit id hash goes into a flat array; only hashes seen twice are then checked against the
ids themselves (a second read of the runs, done only when there are any).
"""

from __future__ import annotations

import heapq
import marshal
import os
import tempfile
from array import array
from typing import BinaryIO, Iterator

import numpy as np

RUN_ROWS = 100_000
BATCH = 2_000

# A spilled row: (submit, seq, dup_key, ...payload). `seq` is the row's place in file order,
# which makes the sort stable and tells which of two duplicates came first.
Spilled = tuple


class Spill:
    def __init__(self, directory: str | None = None, run_rows: int = RUN_ROWS):
        self._dir = tempfile.TemporaryDirectory(prefix="interlace-import-", dir=directory)
        self._run_rows = run_rows
        self._buffer: list[Spilled] = []
        self._runs: list[str] = []
        self._hashes = array("q")
        self.count = 0

    def add(self, submit: float, dup_key: str, payload: tuple) -> None:
        self._buffer.append((submit, self.count, dup_key, *payload))
        self._hashes.append(hash(dup_key))
        self.count += 1
        if len(self._buffer) >= self._run_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        self._buffer.sort()
        path = os.path.join(self._dir.name, f"run{len(self._runs)}")
        with open(path, "wb") as out:
            for start in range(0, len(self._buffer), BATCH):
                blob = marshal.dumps(self._buffer[start:start + BATCH])
                out.write(len(blob).to_bytes(8, "little"))
                out.write(blob)
        self._runs.append(path)
        self._buffer = []

    def duplicates(self) -> np.ndarray:
        """Boolean per seq: True when an earlier row (smaller seq) has the same key."""
        self._flush()
        hashes = np.frombuffer(self._hashes, dtype=np.int64) if self.count else \
            np.zeros(0, dtype=np.int64)
        flags = np.zeros(self.count, dtype=bool)
        if not self.count:
            return flags
        unique, counts = np.unique(hashes, return_counts=True)
        shared = unique[counts > 1]
        if not len(shared):
            return flags
        suspects = set(shared.tolist())
        first: dict[str, int] = {}
        for row in self.merged():
            seq, key = row[1], row[2]
            if int(hashes[seq]) in suspects:
                if key in first:
                    earlier = first[key]
                    flags[max(seq, earlier)] = True
                    first[key] = min(seq, earlier)
                else:
                    first[key] = seq
        return flags

    def merged(self) -> Iterator[Spilled]:
        """Every row, by (submit, seq)."""
        self._flush()
        return heapq.merge(*(_read_run(path) for path in self._runs))

    def close(self) -> None:
        self._dir.cleanup()


def _read_run(path: str) -> Iterator[Spilled]:
    with open(path, "rb") as run:
        yield from _batches(run)


def _batches(run: BinaryIO) -> Iterator[Spilled]:
    # length-prefixed blobs: marshal.load on a file reads it in tiny pieces, loads is fast
    while True:
        size = run.read(8)
        if not size:
            return
        yield from marshal.loads(run.read(int.from_bytes(size, "little")))
