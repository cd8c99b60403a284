"""Where one policy stands against the others (the demo's closing words): each measure
lower or higher than each other policy's, by how much, from the --out summaries."""
from __future__ import annotations

import json

from scheduler.sim.standing import main, standing

H = 3600.0


def _summary(policy, avg, p50, p99, makespan):
    return {"policy": policy, "avg_jct": avg * H, "p50_jct": p50 * H, "p99_jct": p99 * H,
            "makespan": makespan * H}


def test_each_measure_says_lower_or_higher_and_against_which_policy():
    muri = _summary("muri-s", 10.0, 1.0, 200.0, 400.0)
    srsf = _summary("srsf", 12.5, 0.8, 250.0, 500.0)
    tiresias = _summary("tiresias", 8.0, 1.0, 220.0, 380.0)
    lines = standing(muri, [srsf, tiresias])
    # 10 against 12.5: 20% lower; against 8: 25% higher
    assert lines[0] == ("  mean JCT: 10 h under muri-s; 20% lower than srsf's (12.5 h), "
                        "25% higher than tiresias's (8 h)")
    assert lines[1] == ("  median JCT: 1 h under muri-s; 25% higher than srsf's (0.8 h), "
                        "equal to tiresias's")
    # 200 against 250 and 220: 20% and 9% lower
    assert lines[2] == ("  p99 JCT: 200 h under muri-s; 20% lower than srsf's (250 h), "
                        "9% lower than tiresias's (220 h)")
    # the makespan is lower than SRSF's only
    assert lines[3] == ("  makespan: 400 h under muri-s; 20% lower than srsf's (500 h), "
                        "5% higher than tiresias's (380 h)")
    assert lines[4] == "  lower under muri-s than under every other policy: p99 JCT"


def test_it_reads_the_summaries_interlace_sim_writes(tmp_path, capsys):
    from scheduler.sim.cli import main as sim

    assert sim(["--policy", "srsf,muri-s", "--json", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main([str(tmp_path), "muri-s"]) == 0
    out = capsys.readouterr().out.splitlines()
    srsf = json.loads((tmp_path / "srsf-summary.json").read_text())
    assert out[0].startswith("  mean JCT: ") and "than srsf's" in out[0]
    assert f"({srsf['makespan'] / H:.4g} h)" in out[3] or "equal to srsf's" in out[3]
    assert main([str(tmp_path), "fifo"]) == 1
    assert "no summary of 'fifo'" in capsys.readouterr().err
