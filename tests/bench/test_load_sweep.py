"""bench/load_sweep.py on its smallest family: every run of every point, loads that rise
with the arrival rate, the breakdown per run, a JSON line per run and a plot."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import load_sweep  # noqa: E402


def test_the_generated_family_runs_every_policy_at_rising_load(tmp_path, capsys):
    out, plot = tmp_path / "runs.jsonl", tmp_path / "sweep.png"
    assert load_sweep.main(["--families", "generated", "--jobs", "40", "--workers", "1",
                            "--json", str(out), "--plot", str(plot)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    labels = [label for label, _, _ in load_sweep.RUNS]
    points = {}
    for r in rows:
        points.setdefault(r["point"], {})[r["run"]] = r
    assert len(points) == 5 and all(sorted(p) == sorted(labels) for p in points.values())
    loads = [points[f"gap {g} s"]["srsf"]["load"] for g in (4800, 2400, 1200, 800, 600)]
    assert loads == sorted(loads) and loads[0] > 0
    for r in rows:
        assert r["jobs"] == 40 and r["avg_jct"] > 0 and r["wait_s"] >= 0
        if not r["run"].startswith("muri"):
            assert r["slower_s"] <= 1e-9 * r["avg_jct"]  # exclusive policies never share GPUs
    assert plot.stat().st_size > 0
    table = capsys.readouterr().out
    assert "muri-s every merge" in table and "slower s" in table
