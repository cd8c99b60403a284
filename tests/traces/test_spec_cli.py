"""The interlace-spec command: a pooled spec from Alibaba's node list, and `show` of any spec.
Expected figures are counted here from the rows each test writes, not taken from the code."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # no conftest or install is assumed
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

import specs.openb  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from specs.cli import main  # noqa: E402
from specs.gpu_types import GPU_MEM_GB  # noqa: E402

HEADER = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
# (cpu_milli, memory_mib, gpu, model, how many nodes)
MIXED = [
    (104000, 524288, 2, "T4", 3),
    (96000, 393216, 4, "T4", 2),
    (104000, 524288, 4, "T4", 1),  # T4 again, a different GPU count: its own pool
    (96000, 393216, 8, "G2", 4),
    (96000, 786432, 8, "G2", 1),  # G2 again, more memory: its own pool
    (96000, 786432, 8, "V100M32", 2),
    (95500, 1000, 1, "A10", 1),  # 95.5 CPUs and under 1 GB: 95 CPUs, 1 GB
    (32000, 262144, 0, "", 2),
    (64000, 262144, 0, "", 1),
]


def rows_of(spec: list[tuple[int, int, int, str, int]]) -> list[list[str]]:
    rows, n = [], 0
    for cpu, mem, gpus, model, count in spec:
        for _ in range(count):
            rows.append([f"node-{n:04d}", str(cpu), str(mem), str(gpus), model])
            n += 1
    return rows


def write_list(path: Path, rows: list[list[str]], header=HEADER) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def oracle(rows: list[list[str]]):
    """Nodes, GPUs by type and nodes by (GPUs, type, CPUs, GB), counted from the rows."""
    gpus_by_type: Counter[str] = Counter()
    shapes: Counter[tuple[int, str, int, int]] = Counter()
    for _, cpu, mem, gpus, model in rows:
        if int(gpus):
            gpus_by_type[model] += int(gpus)
        shapes[(int(gpus), model if int(gpus) else "", max(1, int(cpu) // 1000),
                max(1, int(mem) // 1024))] += 1
    return len(rows), gpus_by_type, shapes


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def imported(tmp_path, capsys, rows, *extra: str):
    src = write_list(tmp_path / "nodes.csv", rows)
    out = tmp_path / "spec.csv"
    code, stdout, err = run(capsys, "import", "openb", str(src), "--out", str(out), *extra)
    assert (code, err) == (0, ""), err
    return load_spec(out), stdout, out


def test_import_groups_alike_nodes_into_pools(tmp_path, capsys):
    rows = rows_of(MIXED)
    nodes, gpus_by_type, shapes = oracle(rows)
    spec, stdout, _ = imported(tmp_path, capsys, rows)
    pools = spec.pools
    found = Counter({(p.gpus_per_node, p.gpu_type, p.cpus_per_node, p.mem_per_node): p.nodes
                     for p in pools})
    assert len(pools) == len(shapes) == 9
    assert found == shapes
    assert len({p.name for p in pools}) == len(pools)
    assert {"T4-2g-104c-512gb", "cpu-32c-256gb", "A10-1g-95c-1gb"} <= {p.name for p in pools}
    # by type, then GPUs, CPUs and memory; CPU-only pools last
    keys = [(p.gpus_per_node == 0, p.gpu_type, p.gpus_per_node, p.cpus_per_node,
             p.mem_per_node) for p in pools]
    assert keys == sorted(keys)
    assert [p.gpu_type for p in pools] == ["A10", "G2", "G2", "T4", "T4", "T4", "V100M32",
                                           "", ""]
    # the totals, as loaded back and as the summary says them
    assert spec.num_nodes == nodes
    assert spec.total_gpus == sum(gpus_by_type.values())
    loaded_by_type: Counter[str] = Counter()
    for p in pools:
        loaded_by_type[p.gpu_type] += p.gpus
    assert +loaded_by_type == gpus_by_type
    cpu_only = sum(1 for row in rows if row[3] == "0")
    assert f"nodes: {nodes} ({cpu_only} CPU-only)" in stdout
    assert f"GPUs: {sum(gpus_by_type.values())}" in stdout
    for kind, count in gpus_by_type.items():
        assert any(line.split()[:2] == [kind, str(count)] for line in stdout.splitlines())


def test_gpu_memory_from_the_table_and_from_the_option(tmp_path, capsys):
    rows = rows_of(MIXED)
    spec, stdout, _ = imported(tmp_path, capsys, rows)
    for pool in spec.pools:
        assert pool.gpu_mem_gb == (GPU_MEM_GB[pool.gpu_type] if pool.gpus_per_node else 0.0)
    assert "assumed for G2 " in stdout
    assert "(assumed)" in next(line for line in stdout.splitlines() if line.split()[0] == "G2")

    spec, stdout, _ = imported(tmp_path, capsys, rows, "--force", "--gpu-mem", "G2=40",
                               "--gpu-mem", "T4=15.5")
    memory = {p.gpu_type: p.gpu_mem_gb for p in spec.pools if p.gpus_per_node}
    assert memory == {"A10": GPU_MEM_GB["A10"], "G2": 40.0, "T4": 15.5,
                      "V100M32": GPU_MEM_GB["V100M32"]}
    assert "assumed" not in stdout
    assert "given by --gpu-mem for G2, T4" in stdout


def test_a_type_of_no_known_memory_is_left_without_and_named(tmp_path, capsys):
    rows = rows_of([(64000, 262144, 8, "X9", 2), (64000, 262144, 2, "T4", 1)])
    spec, stdout, out = imported(tmp_path, capsys, rows)
    x9 = next(p for p in spec.pools if p.gpu_type == "X9")
    assert (x9.nodes, x9.gpus_per_node, x9.gpu_mem_gb) == (2, 8, 0.0)
    assert "X9-8g-64c-256gb,2,8,X9,,64,256," in out.read_text().splitlines()
    assert "no memory figure for X9" in stdout
    spec, stdout, _ = imported(tmp_path, capsys, rows, "--force", "--gpu-mem", "X9=12")
    assert next(p for p in spec.pools if p.gpu_type == "X9").gpu_mem_gb == 12.0
    assert "no memory figure" not in stdout


def test_show_a_muri_spec(capsys):
    for name in ("n8g8", str(spec_path("n8g8"))):
        code, stdout, err = run(capsys, "show", name)
        assert (code, err) == (0, "")
        assert "nodes: 8 (0 CPU-only)" in stdout and "GPUs: 64" in stdout
        assert "GPUs by type: (unstated) 64" in stdout
    code, stdout, _ = run(capsys, "show", "n8g8", "--json")
    shown = json.loads(stdout)
    assert (code, shown["nodes"], shown["gpus"]) == (0, 8, 64)
    assert shown["gpus_by_type"] == {"(unstated)": 64}
    assert [(p["nodes"], p["gpus_per_node"], p["gpu_type"]) for p in shown["pools"]] == [
        (8, 8, None)]


def test_show_a_pooled_spec(tmp_path, capsys):
    rows = rows_of(MIXED)
    nodes, gpus_by_type, shapes = oracle(rows)
    spec, _, out = imported(tmp_path, capsys, rows)
    code, stdout, err = run(capsys, "show", str(out))
    assert (code, err) == (0, "")
    lines = stdout.splitlines()
    for pool in spec.pools:
        assert any(line.split()[:2] == [pool.name, str(pool.nodes)] for line in lines)
    assert f"nodes: {nodes} ({sum(1 for r in rows if r[3] == '0')} CPU-only)" in lines
    assert f"GPUs: {sum(gpus_by_type.values())}" in lines
    code, stdout, _ = run(capsys, "show", str(out), "--json")
    shown = json.loads(stdout)
    assert (shown["nodes"], shown["gpus"]) == (nodes, sum(gpus_by_type.values()))
    assert shown["gpus_by_type"] == dict(sorted(gpus_by_type.items()))
    assert Counter({(p["gpus_per_node"], p["gpu_type"] or "", p["cpus_per_node"],
                     p["mem_per_node"]): p["nodes"] for p in shown["pools"]}) == shapes


def test_show_a_bad_spec_says_each_fault(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node\n"
                   "a,x,8,T4,16,96,512\nb,2,-1,T4,16,96,512\n", encoding="utf-8")
    code, stdout, err = run(capsys, "show", str(bad))
    assert (code, stdout) == (2, "")
    assert err.splitlines() == [f"{bad}:2: nodes: must be a positive integer, got 'x'",
                                f"{bad}:3: gpus_per_node: must be a non-negative integer, "
                                "got '-1'"]


def test_refuses_to_overwrite_without_force(tmp_path, capsys):
    src = write_list(tmp_path / "nodes.csv", rows_of(MIXED))
    out = tmp_path / "spec.csv"
    out.write_text("keep me\n", encoding="utf-8")
    code, stdout, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    assert (code, stdout) == (2, "")
    assert err.splitlines() == [f"{out}: exists; --force replaces it"]
    assert out.read_text(encoding="utf-8") == "keep me\n"
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out), "--force")
    assert (code, err) == (0, "")
    assert load_spec(out).num_nodes == len(rows_of(MIXED))
    assert sorted(os.listdir(tmp_path)) == ["nodes.csv", "spec.csv"]  # no temporary left
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(src), "--force")
    assert code == 2 and "would destroy it" in err and len(err.splitlines()) == 1


GOOD = ["n1", "96000", "393216", "8", "G2"]


def _text(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _rows(*rows: list[str]) -> bytes:
    return _text(",".join(HEADER), *(",".join(row) for row in rows))


# (content, the line, the field, words in the message); content None: no file at all
BAD_LISTS = {
    "missing": (None, None, None, "no such file"),
    "not utf-8": (_rows(GOOD) + b"n2,96000,393216,8,G\xff2\n", 3, None, "not UTF-8"),
    "missing column": (_text("sn,cpu_milli,memory_mib,gpu", "n1,96000,393216,8"), 1,
                       "model", "missing column"),
    "not an integer": (_rows(GOOD, ["n2", "lots", "393216", "8", "G2"]), 3, "cpu_milli",
                       "non-negative integer, got 'lots'"),
    "a fraction": (_rows(["n1", "96000", "393216", "2.5", "G2"]), 2, "gpu",
                   "non-negative integer, got '2.5'"),
    "negative": (_rows(GOOD, ["n2", "96000", "-1", "8", "G2"]), 3, "memory_mib",
                 "non-negative integer, got '-1'"),
    "too many GPUs": (_rows(["n1", "96000", "393216", "65", "G2"]), 2, "gpu",
                      "at most 64, got '65'"),
    "bad type": (_rows(GOOD, ["n2", "96000", "393216", "8", "G/2"]), 3, "model", "'G/2'"),
    "named twice": (_rows(GOOD, ["n2", "1000", "1024", "1", "T4"], GOOD), 4, "sn",
                    "'n1' named again (first on line 2)"),
    "no GPU": (_rows(["n1", "96000", "393216", "0", ""], ["n2", "96000", "393216", "0", ""]),
               None, "gpu", "no node has a GPU"),
    "fields": (_rows(GOOD, ["n2", "96000", "393216", "8"]), 3, None, "expected 5 fields"),
    "empty": (b"", None, None, "file is empty"),
    "no rows": (_rows(), None, None, "no node row"),
}


@pytest.mark.parametrize("case", sorted(BAD_LISTS))
def test_a_bad_node_list_is_one_line_naming_file_line_and_field(case, tmp_path, capsys):
    content, line, field, words = BAD_LISTS[case]
    src = tmp_path / "nodes.csv"
    if content is not None:
        src.write_bytes(content)
    out = tmp_path / "spec.csv"
    code, stdout, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    assert (code, stdout) == (2, "")
    assert len(err.splitlines()) == 1, err
    where = f"{src}:{line}: " if line else f"{src}: "
    assert err.startswith(where + (f"{field}: " if field else "")), err
    assert words in err
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == (["nodes.csv"] if content is not None else [])


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_node_list_that_is_not_a_file(kind, tmp_path, capsys):
    src = tmp_path / "nodes.csv"
    src.mkdir() if kind == "directory" else os.mkfifo(src)
    out = tmp_path / "spec.csv"
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"{src}: ") and ("directory" in err or "FIFO" in err)
    assert not out.exists()


def test_bounds_on_size_and_nodes(tmp_path, capsys, monkeypatch):
    rows = rows_of([(96000, 393216, 8, "G2", 4)])
    src = write_list(tmp_path / "nodes.csv", rows)
    out = tmp_path / "spec.csv"
    monkeypatch.setattr(specs.openb, "MAX_NODES", 3)
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    assert (code, err) == (2, f"{src}:5: more than 3 nodes; a cluster holds at most 3\n")
    monkeypatch.setattr(specs.openb, "MAX_NODES", 4)
    monkeypatch.setattr(specs.openb, "MAX_BYTES", src.stat().st_size - 1)
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    assert code == 2 and err.startswith(f"{src}: larger than") and len(err.splitlines()) == 1
    assert not out.exists()


def test_many_faults_are_each_a_line_then_a_count(tmp_path, capsys):
    rows = [[f"n{i}", "96000", "393216", "x", "G2"] for i in range(25)]
    src = write_list(tmp_path / "nodes.csv", rows)
    out = tmp_path / "spec.csv"
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    lines = err.splitlines()
    assert code == 2 and len(lines) == 21
    assert lines[:20] == [f"{src}:{i + 2}: gpu: must be a non-negative integer, got 'x'"
                          for i in range(20)]
    assert lines[20] == f"{src}: ... 5 more"
    # several faults in one row: each its own line
    write_list(src, [["", "-5", "1.5", "x", "?"]])
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out))
    assert code == 2
    assert [line.split(": ")[1] for line in err.splitlines()] == [
        "sn", "cpu_milli", "memory_mib", "gpu", "model"]
    assert not out.exists()


@pytest.mark.parametrize("value", ["G2", "G2=abc", "=4", "G2=-1", "G2=0", "a b=4"])
def test_a_bad_gpu_mem_option(value, tmp_path, capsys):
    src = write_list(tmp_path / "nodes.csv", rows_of(MIXED))
    out = tmp_path / "spec.csv"
    code, stdout, err = run(capsys, "import", "openb", str(src), "--out", str(out),
                            "--gpu-mem", value)
    assert (code, stdout) == (2, "")
    assert len(err.splitlines()) == 1 and "--gpu-mem" in err and repr(value) in err
    assert not out.exists()
    code, _, err = run(capsys, "import", "openb", str(src), "--out", str(out),
                       "--gpu-mem", "G2=40", "--gpu-mem", "G2=48")
    assert code == 2 and err == "interlace-spec: error: --gpu-mem: G2 given twice\n"


def test_runs_as_a_module(tmp_path):
    done = subprocess.run([sys.executable, "-m", "specs.cli", "show", "n8g8", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["gpus"] == 64
    done = subprocess.run([sys.executable, "-m", "specs.cli", "import", "openb",
                           str(tmp_path / "none.csv"), "--out", str(tmp_path / "s.csv")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{tmp_path / 'none.csv'}: no such file\n"


REAL_LIST = os.environ.get("INTERLACE_OPENB_NODES", "")


@pytest.mark.skipif(not REAL_LIST or not Path(REAL_LIST).is_file(),
                    reason="set INTERLACE_OPENB_NODES to Alibaba's "
                           "openb_node_list_all_node.csv to run this")
def test_the_real_openb_node_list(tmp_path, capsys):
    with open(REAL_LIST, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        assert tuple(next(reader)) == HEADER
        rows = [row for row in reader if row]
    nodes, gpus_by_type, shapes = oracle(rows)
    assert (nodes, sum(gpus_by_type.values())) == (1523, 6212)
    assert (gpus_by_type["A10"], gpus_by_type["G2"], gpus_by_type["G3"]) == (2, 4392, 312)
    out = tmp_path / "openb.csv"
    code, stdout, err = run(capsys, "import", "openb", REAL_LIST, "--out", str(out))
    assert (code, err) == (0, "")
    spec = load_spec(out)
    assert (spec.num_nodes, spec.total_gpus, len(spec.pools)) == (nodes, 6212, len(shapes))
    loaded: Counter[str] = Counter()
    for pool in spec.pools:
        loaded[pool.gpu_type] += pool.gpus
    assert +loaded == gpus_by_type
    assert "assumed for G2, G3" in stdout


def test_show_says_each_types_speed_and_where_it_comes_from(tmp_path, capsys):
    path = tmp_path / "mix.csv"
    path.write_text("pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node\n"
                    "a,1,8,V100M32,32,96,512\nb,1,4,T4,16,64,256\nc,1,8,P100,16,64,256\n"
                    "d,1,2,G2,24,64,256\n", encoding="utf-8")
    code, stdout, _ = run(capsys, "show", str(path))
    lines = {line.split()[0]: line for line in stdout.splitlines() if line.startswith("  ")}
    assert code == 0
    assert "transformer 0.36" in lines["T4"] and "data sheets" in lines["T4"]
    assert "cnn 0.63" in lines["P100"] and "Gavel" in lines["P100"]
    assert "assumed: undisclosed" in lines["G2"] and "reference" in lines["V100M32"]
    shown = json.loads(run(capsys, "show", str(path), "--json")[1])["gpu_speed"]
    assert shown["P100"]["rl"] == 0.79 and shown["V100M32"]["other"] == 1.0
    assert set(shown) == {"V100M32", "T4", "P100", "G2"}
