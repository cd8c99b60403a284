"""`interlace-trace import gavel`: Gavel's tab-separated traces, a file per virtual cluster,
with quotas from the VCs' real sizes. Expected figures are worked out here from the rows
the tests write and from Gavel's published step rates, not by running the importer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from scheduler.sim.cli import main as sim_main  # noqa: E402
from specs.tenants import load_tenants  # noqa: E402
from traces import read_trace  # noqa: E402
from traces.cli import main  # noqa: E402
from traces.importers.quotas import quotas  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference" / "philly-vc"
CMD = "cd %s/x && python3 train.py"


def line(job_type: str, steps: float, arrival: float, gpus: object) -> str:
    return "\t".join([job_type, CMD, "-step", "1", str(steps), f"{arrival:.6f}", str(gpus)])


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return code, out, err


def write_vcs(folder: Path) -> Path:
    folder.mkdir()
    # Gavel's V100 rates: ResNet-18 bs 32 29.95 steps/s, Transformer bs 64 8.618, A3C 7.176
    (folder / "vcA.trace").write_text("\n".join([
        line("ResNet-18 (batch size 32)", 29950, 0, 1),       # 1000 s
        line("Transformer (batch size 64)", 86180, 60, 4),   # 10000 s
        line("A3C", 7176, 120, 1),                            # 1000 s
    ]) + "\n")
    (folder / "vcB.trace").write_text("\n".join([
        line("Recommendation (batch size 512)", 23320, 0, 8),  # 1000 s
        line("LM (batch size 20)", 64740, 30, 2),              # 1000 s
    ]) + "\n")
    return folder


def test_a_folder_of_vcs_imports_each_file_as_a_tenant(capsys, tmp_path):
    src = write_vcs(tmp_path / "vcs")
    out = tmp_path / "t.csv"
    code, stdout, err = run(capsys, "import", "gavel", src, "--out", out)
    assert code == 0, err
    summary = json.loads((tmp_path / "t.csv.summary.json").read_text())
    assert summary["rows_read"] == 5 and summary["kept"] == 5
    assert {t: v["jobs"] for t, v in summary["tenants"].items()} == {"vcA": 3, "vcB": 2}
    # GPU-hours: vcA 1000 + 4 x 10000 + 1000 s; vcB 8 x 1000 + 2 x 1000 s
    assert summary["tenants"]["vcA"]["gpu_hours"] == pytest.approx(42000 / 3600, rel=1e-3)
    assert summary["tenants"]["vcB"]["gpu_hours"] == pytest.approx(10000 / 3600, rel=1e-3)
    assert summary["notes"]["models"]["Transformer"].startswith("bert")
    assert "clock" in summary["notes"] and "models: ResNet-18 -> resnet18" in err
    records = read_trace(out)
    by_source = {}
    for record, row in zip(records, _rows(out)):
        by_source[row["source_id"]] = (record, row)
    want = {"vcA:1": ("resnet18", 1000, 1, 0), "vcA:2": ("bert", 10000, 4, 60),
            "vcA:3": ("a2c", 1000, 1, 120), "vcB:1": ("dqn", 1000, 8, 0),
            "vcB:2": ("gpt2", 1000, 2, 30)}
    assert set(by_source) == set(want)
    for source, (model, seconds, gpus, arrival) in want.items():
        record, row = by_source[source]
        assert (record.model_name, record.num_gpu) == (model, gpus)
        assert record.submit_time == pytest.approx(arrival)  # every VC's clock starts at 0
        assert abs(record.duration - seconds) <= record.iteration_time / 2 + 1e-6
        assert row["tenant"] == source.split(":")[0]


def _rows(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_gavels_later_ten_field_form(capsys, tmp_path):
    src = tmp_path / "one.trace"
    # job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
    # scale_factor, priority_weight, SLO, arrival_time
    src.write_text("\t".join(["A3C", CMD, "dir", "-step", "0", "71760", "2", "1.0", "-1",
                              "300.5"]) + "\n" + line("A3C", 7176, 0, 1) + "\n")
    code, _, err = run(capsys, "import", "gavel", src, "--out", tmp_path / "t.csv")
    assert code == 0, err
    first, second = read_trace(tmp_path / "t.csv")
    assert (first.num_gpu, first.submit_time) == (1, 0)
    assert (second.num_gpu, second.submit_time) == (2, pytest.approx(300.5))
    assert abs(second.duration - 10000) <= second.iteration_time / 2 + 1e-6  # 71760 / 7.176


def test_one_file_names_no_tenant(capsys, tmp_path):
    src = write_vcs(tmp_path / "vcs") / "vcA.trace"
    code, _, err = run(capsys, "import", "gavel", src, "--out", tmp_path / "t.csv")
    assert code == 0, err
    summary = json.loads((tmp_path / "t.csv.summary.json").read_text())
    assert summary["tenants"] == {"": {"jobs": 3, "gpu_hours": pytest.approx(42000 / 3600,
                                                                             rel=1e-3)}}


@pytest.mark.parametrize("bad, needle", [
    ("ResNet-18 (batch size 32)\tcmd\t-step\t1\t100", "expected 7 tab-separated fields"),
    (line("ResNet-18 (batch size 32)", "many", 5, 1), "total_steps: not a number"),
    (line("ResNet-18 (batch size 32)", 100, 5, "x"), "scale_factor: not a number"),
    (line("ResNet-18 (batch size 32)", 100, 5, -2), "scale_factor: a GPU count below zero"),
    (line("ResNet-18 (batch size 32)", 100, -5, 1), "arrival_time: must be in"),
    (line("AlexNet (batch size 32)", 100, 5, 1), "job_type: unknown Gavel model 'AlexNet"),
])
def test_bad_rows_are_one_line_naming_file_line_and_field(capsys, tmp_path, bad, needle):
    src = tmp_path / "vc.trace"
    src.write_text(line("A3C", 7176, 0, 1) + "\n" + bad + "\n")
    code, _, err = run(capsys, "import", "gavel", src, "--out", tmp_path / "t.csv")
    assert code == 0
    said = [text for text in err.splitlines() if f"{src}:2:" in text]
    assert len(said) == 1 and needle in said[0], err
    summary = json.loads((tmp_path / "t.csv.summary.json").read_text())
    assert summary["kept"] == 1 and summary["dropped"]["malformed"] == 1


def test_quotas_from_real_sizes(capsys, tmp_path):
    src = write_vcs(tmp_path / "vcs")
    (src / "vcC.trace").write_text(line("A3C", 7176, 0, 1) + "\n")
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("vc,node num\nvcA,3\nvcB,1\nvcZ,5\n")
    out, toml = tmp_path / "t.csv", tmp_path / "t.toml"
    code, stdout, err = run(capsys, "import", "gavel", src, "--out", out, "--spec", "n2g8",
                            "--tenants-out", toml, "--vc-sizes", sizes)
    assert code == 0, err
    assert f"wrote 3 tenants to {toml}" in stdout
    tenants = load_tenants(toml)
    # 16 GPUs shared 3:1 between the sized VCs of the trace; vcC has no size
    assert {n: t.quota for n, t in tenants.tenants.items()} == {"vcA": 12, "vcB": 4, "vcC": 0}
    assert all(t.quota + t.borrow_limit == 16 for t in tenants.tenants.values())
    unsized = [text for text in err.splitlines() if "no size" in text]
    assert len(unsized) == 1 and "vcC" in unsized[0] and "1 jobs" in unsized[0]
    assert any("vcZ" in text and "no job" in text for text in err.splitlines())
    code = sim_main(["--trace", str(out), "--spec", "n2g8", "--tenants", str(toml),
                     "--policy", "srsf"])
    assert code == 0


@pytest.mark.parametrize("text, needle", [
    ("vc,nodes\nvcA,3,1\n", ":2: expected 2 fields"),
    ("vc,nodes\nvcA,three\n", ":2: nodes: expected a whole number"),
    ("vc,nodes\nvcA,-1\n", ":2: nodes: expected a whole number"),
    ("vc,nodes\nvc A,1\n", ":2: vc: expected"),
    ("vc,nodes\nvcA,1\nvcA,2\n", ":3: vc: 'vcA' again"),
])
def test_bad_sizes_are_one_line(capsys, tmp_path, text, needle):
    sizes = tmp_path / "sizes.csv"
    sizes.write_text(text)
    code, _, err = run(capsys, "import", "gavel", write_vcs(tmp_path / "vcs"), "--out",
                       tmp_path / "t.csv", "--tenants-out", tmp_path / "t.toml",
                       "--vc-sizes", sizes)
    assert code == 1 and err.strip() == err.strip().splitlines()[0]
    assert err.startswith(f"{sizes}{needle}"), err
    assert not (tmp_path / "t.csv").exists()


def test_tenants_out_needs_sizes(capsys, tmp_path):
    code, _, err = run(capsys, "import", "gavel", write_vcs(tmp_path / "vcs"), "--out",
                       tmp_path / "t.csv", "--tenants-out", tmp_path / "t.toml")
    assert code == 2 and "--vc-sizes" in err and len(err.strip().splitlines()) == 1


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 300), min_size=1),
       st.integers(1, 4096))
def test_quotas_share_the_cluster_by_size(sizes, total):
    names = sorted(sizes) + ["unsized"]
    owed = quotas(sizes, names, total)
    whole = sum(sizes.values())
    assert owed["unsized"] == 0
    assert sum(owed.values()) == (total if whole else 0)
    for name, nodes in sizes.items():
        exact = total * nodes / whole if whole else 0
        assert exact - 1 < owed[name] < exact + 1


@pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"{REFERENCE} absent: Philly's VCs as Gavel "
                    "published them are reference data, not shipped")
def test_philly_vcs_whole(capsys, tmp_path):
    files = sorted((REFERENCE / "seed=0").glob("*.trace"))
    lines = {p.stem: p.read_text().splitlines() for p in files}
    # the oracle: on n2g8 (16 GPUs) exactly the jobs of more than 16 GPUs are dropped
    big = {vc: sum(float(row.split("\t")[6]) > 16 for row in rows) for vc, rows in lines.items()}
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "import", "gavel", REFERENCE / "seed=0", "--out", out,
                       "--spec", "n2g8")
    assert code == 0, err
    summary = json.loads((tmp_path / "p.csv.summary.json").read_text())
    assert summary["rows_read"] == sum(map(len, lines.values())) == 15264
    dropped = {r: n for r, n in summary["dropped"].items() if n}
    assert dropped == {"too_many_gpus": sum(big.values())}
    assert all("GPUs > 16" in e for e in summary["examples"]["too_many_gpus"])
    assert {t: v["jobs"] for t, v in summary["tenants"].items()} == {
        vc: len(rows) - big[vc] for vc, rows in lines.items() if len(rows) > big[vc]}
    assert summary["kept"] + sum(summary["dropped"].values()) == summary["rows_read"]


def test_every_gavel_model_has_a_rate_and_a_catalogue_profile():
    from traces.importers.gavel_models import FAMILIES, STEPS_PER_S, family_of
    from traces.models import MODELS

    assert all(model in MODELS for _, model in FAMILIES.values())
    assert {family_of(job_type)[1] for job_type in STEPS_PER_S} == \
        {model for _, model in FAMILIES.values()}
    assert all(rate > 0 for rate in STEPS_PER_S.values())
