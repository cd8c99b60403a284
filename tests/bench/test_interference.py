"""bench/interference.py: the ratios it prints are each model's Muri over the base policy (the
factors change no SRSF or Tiresias run: those form no groups), and a small run gives them all."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import interference  # noqa: E402
from traces import write_trace  # noqa: E402
from traces.generate import generate  # noqa: E402


def test_ratios_divide_each_models_muri_by_its_base_policy():
    jct = {("default, no slowdown", "muri-s"): 50.0, ("default, no slowdown", "srsf"): 100.0,
           ("default, no slowdown", "muri-l"): 30.0, ("default, no slowdown", "tiresias"): 120.0,
           ("default, shipped factors", "muri-s"): 80.0,
           ("default, shipped factors", "muri-l"): 60.0,
           ("paper", "muri-s"): 70.0, ("paper", "srsf"): 140.0, ("paper", "muri-l"): 45.0,
           ("paper", "tiresias"): 90.0}
    rows = [{"trace": "trace3", "model": m, "policy": p, "avg_jct": v}
            for (m, p), v in jct.items()]
    got = {r["model"]: (r["muri-s/srsf"], r["muri-l/tiresias"])
           for r in interference.ratios(rows)}
    # the shipped factors' Muri against the same SRSF and Tiresias runs as without them
    assert got == {"default, no slowdown": (0.5, 0.25), "default, shipped factors": (0.8, 0.5),
                   "paper": (0.5, 0.5)}


def test_a_small_trace_runs_every_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(interference, "REFERENCE", tmp_path / "none")  # this trace only
    write_trace(tmp_path / "trace3.csv", generate(40, 3, mean_interarrival=60, max_gpus=8))
    out = tmp_path / "runs.json"
    assert interference.main(["--trace-dir", str(tmp_path), "--workers", "1",
                              "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    runs = {(r["model"], r["policy"]): r["avg_jct"] for r in data["runs"]
            if r["trace"] == "trace3"}
    assert len(runs) == 10  # 4 + 2 + 4: SRSF and Tiresias run once under default
    assert all(v > 0 for v in runs.values())
    assert [r["model"] for r in data["ratios"]] == [m for m, _, _ in interference.MODELS]
    printed = capsys.readouterr().out
    assert "trace3" in printed and "Muri-S/SRSF" in printed
