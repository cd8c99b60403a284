"""Checkpoint files: round trip, atomic replacement, and tolerance of missing or broken files."""
from __future__ import annotations

import os

from trainer import checkpoint
from trainer.checkpoint import Checkpoint


def test_round_trip_and_replace(tmp_path):
    d = tmp_path / "ck"  # created on first write
    checkpoint.write(d, Checkpoint(job_id=7, iterations=12.5, total=100, node="n1"))
    first = checkpoint.read(d, 7)
    assert (first.job_id, first.iterations, first.total) == (7, 12.5, 100)
    assert (first.node, first.done) == ("n1", False)
    assert first.ts > 0
    checkpoint.write(d, Checkpoint(job_id=7, iterations=100, total=100, done=True))
    assert checkpoint.read(d, 7).done and checkpoint.iterations(d, 7) == 100
    assert sorted(os.listdir(d)) == ["7.json"]  # the temp file was renamed, not left behind


def test_missing_or_broken_checkpoint_reads_as_none(tmp_path):
    assert checkpoint.read(tmp_path, 1) is None and checkpoint.iterations(tmp_path, 1) == 0.0
    checkpoint.path_for(tmp_path, 2).write_text("{not json")
    checkpoint.path_for(tmp_path, 3).write_text('{"job_id": 3}')
    checkpoint.path_for(tmp_path, 4).write_text('[1, 2]')
    assert [checkpoint.read(tmp_path, j) for j in (2, 3, 4)] == [None, None, None]
