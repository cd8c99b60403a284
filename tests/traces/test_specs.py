"""Cluster spec files and their loader."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # no conftest or install is assumed
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from specs import ClusterSpec, SpecError, available_specs, load_spec, spec_path  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
HEADER = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "spec.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def spec_error(path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value


@pytest.mark.parametrize(
    "name, nodes, total, shape",
    [
        ("n8g8", 8, 64, (1, 8, 8, 92, 520)),
        ("n2g8", 2, 16, (1, 2, 8, 92, 520)),
        ("n4g4", 4, 16, (1, 4, 4, 48, 256)),
        ("n64g8", 64, 512, (1, 64, 8, 92, 520)),
    ],
)
def test_packaged_specs(name, nodes, total, shape):
    spec = load_spec(spec_path(name))
    assert spec == ClusterSpec(*shape)
    assert (spec.num_nodes, spec.total_gpus) == (nodes, total)
    assert spec_path(name).read_bytes().endswith(b"\n")
    assert name in available_specs()


@pytest.mark.skipif(not (REFERENCE / "n8g8.csv").is_file(),
                    reason="reference spec ../shared/reference/n8g8.csv not present")
def test_reference_spec_matches_packaged_one():
    assert load_spec(REFERENCE / "n8g8.csv") == load_spec(spec_path("n8g8"))


def test_multi_switch_totals():
    spec = ClusterSpec(2, 4, 8, 64, 256)
    assert (spec.num_nodes, spec.total_gpus) == (8, 64)


def test_missing_file(tmp_path):
    err = spec_error(tmp_path / "none.csv")
    assert "none.csv" in str(err) and "no such file" in str(err)
    assert "directory" in str(spec_error(tmp_path))


def test_missing_column(tmp_path):
    path = write(tmp_path, HEADER.replace(",mem_p_node", ""), "1,8,8,92")
    err = spec_error(path)
    assert (err.file, err.line, err.field) == (str(path), 1, "mem_p_node")
    assert str(err) == f"{path}:1: mem_p_node: missing column"


@pytest.mark.parametrize("value", ["eight", "8.5", "", "nan"])
def test_non_integer(tmp_path, value):
    path = write(tmp_path, HEADER, f"1,8,{value},92,520")
    err = spec_error(path)
    assert (err.line, err.field) == (2, "num_gpu_p_node")
    assert str(err).startswith(f"{path}:2: num_gpu_p_node: must be a positive integer")


@pytest.mark.parametrize("value", ["0", "-8"])
def test_non_positive(tmp_path, value):
    err = spec_error(write(tmp_path, HEADER, f"1,{value},8,92,520"))
    assert (err.line, err.field) == (2, "num_node_p_switch")


def test_all_bad_fields_reported(tmp_path):
    err = spec_error(write(tmp_path, HEADER, "0,x,8,92,-1"))
    assert [p.split(": ")[1] for p in err.problems] == [
        "num_switch", "num_node_p_switch", "mem_p_node"
    ]


def test_more_than_one_data_row(tmp_path):
    err = spec_error(write(tmp_path, HEADER, "1,8,8,92,520", "", "1,2,8,92,520"))
    assert err.line == 4 and "more than one data row" in str(err)


def test_empty_header_only_and_ragged(tmp_path):
    assert "empty" in str(spec_error(write(tmp_path, "")))
    err = spec_error(write(tmp_path, HEADER))
    assert err.line == 2 and "no data row" in str(err)
    err = spec_error(write(tmp_path, HEADER, "1,8,8"))
    assert err.line == 2 and "expected 5 fields" in str(err)


def test_unknown_packaged_name():
    with pytest.raises(SpecError, match="no packaged spec"):
        spec_path("n3g3")
