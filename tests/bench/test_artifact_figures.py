"""Figs. 9-13 from the artifact's draw scripts: which run makes each published value, and
`fidelity.py --all --artifact DIR` holding our runs against them (a made-up artifact here;
the real one is never part of this repository)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import artifact_figures  # noqa: E402
import fidelity  # noqa: E402

from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import generate, read_trace, write_trace  # noqa: E402

FIG11_13 = '''import matplotlib.pyplot as plt
Fig11_Muri_L_w_worstordering_JCT_raw = [1.0, 2.0, 3.0, 4.0]
Fig12_Muri_L_2_Makespan_raw = [5.0, 6.0, 7.0, 8.0]
Fig12_antman_JCT_raw = [9.0, 10.0, 11.0, 12.0]
Fig13_Muri_S_raw = [13.0, 14.0, 15.0, 16.0]
Fig13_SRTF_raw = [{srtf!r}, 1.0, 1.0, 1.0]
Fig13_Tiresias_raw = [{tiresias!r}, 1.0, 1.0, 1.0]
Fig12_Muri_L_2_JCT = [a/b for a,b in zip(Fig12_Muri_L_2_Makespan_raw, Fig12_antman_JCT_raw)]
'''


def write_artifact(root: Path, srtf: float = 1.0, tiresias: float = 1.0) -> Path:
    folder = root / "simulator"
    (folder / "trace-data").mkdir(parents=True)
    (folder / "draw_fig11-13.py").write_text(FIG11_13.format(srtf=srtf, tiresias=tiresias))
    return folder


def test_each_value_names_the_run_that_makes_it(tmp_path):
    write_artifact(tmp_path)
    got = {(v.figure, v.trace, v.policy, v.metric, v.overrides): v.value
           for v in artifact_figures.published(tmp_path)}
    assert got[("11", "trace3", "muri-l-worst", "avg_jct", ())] == 3.0
    assert got[("12", "trace2_pr", "muri-l", "makespan", (("muri_max_group", 2),))] == 6.0
    assert got[("12", "trace4_pr", "antman", "avg_jct", ())] == 12.0
    assert got[("13", "job_type_1", "muri-s", "avg_jct", (("muri_auto_unpack", True),))] == 13.0
    assert len(got) == 6 * 4  # the computed ratio list is not a raw value


def test_fidelity_holds_our_runs_against_the_published_values(tmp_path, capsys):
    records = generate(20, seed=3, max_gpus=8)
    trace = tmp_path / "job_type_1.csv"
    write_trace(trace, records)
    ours = {p: simulate(read_trace(trace), load_spec(spec_path("n8g8")), p,
                        get_preset("paper")).summary.avg_jct for p in ("srtf", "tiresias")}
    folder = write_artifact(tmp_path / "muri", srtf=ours["srtf"], tiresias=ours["tiresias"] * 1.1)
    trace.rename(folder / "trace-data" / "job_type_1.csv")
    assert fidelity.main(["--all", "--artifact", str(tmp_path / "muri"), "--jobs", "1",
                          "--policies", "srtf,tiresias"]) == 0
    out = capsys.readouterr()
    assert "Fig. 13: 2 values, 1 exact (1e-6), 0 within 1%, 1 off by more" in out.out
    assert "-9.0909%" in out.out  # ours / (1.1 x ours) - 1
    assert "job_type_2" in out.err  # traces not there: their values are left out


def test_an_artifact_folder_without_figures_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        fidelity.main(["--all", "--artifact", str(tmp_path)])
    assert "no draw_fig9-10.py or draw_fig11-13.py" in capsys.readouterr().err
