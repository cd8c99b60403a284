"""The GPU types a job accepts (`gpu_type`, `T` or `T|T...`): an optional column that reads
back as written; a bad cell, or a job no pool of a pooled spec can hold, is one line naming
file, line and field; the openb importer fills types and memory shares; interlace-submit
states them. Expected messages and figures are worked out here from each test's own data."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specs.fit import pools_for
from specs.spec import load_spec
from traces import read_trace, write_trace
from traces.cli import main as trace_main
from traces.errors import TraceError
from traces.muri_csv import TraceWriter
from traces.validate import validate
from tests.helpers import job, spec

POOL_HEAD = "pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node"
# 16 T4 GPUs of 16 GB (4 nodes of 4), 8 V100M32 of 32 GB (one node), 2 CPU-only nodes
MIXED = f"{POOL_HEAD}\nt4,4,4,T4,16,64,256\nv32,1,8,V100M32,32,64,256\ncpu,2,0,,,64,256\n"


def typed(job_id: int, types: tuple[str, ...] = (), gb: float = 0.0, gpus: int = 1):
    return dataclasses.replace(job(job_id, num_gpu=gpus), gpu_types=types, gpu_mem_gb=gb)


def mixed_spec(tmp_path: Path):
    path = tmp_path / "mixed.csv"
    path.write_text(MIXED)
    return load_spec(path)


def one_row(tmp_path: Path, cell: str) -> Path:
    """A one-job trace whose gpu_type cell is `cell`."""
    path = tmp_path / "t.csv"
    write_trace(path, [typed(0, ("T4",))])
    lines = path.read_text().splitlines()
    assert lines[0].endswith(",gpu_type") and lines[1].endswith(",T4")
    lines[1] = lines[1].rsplit(",", 1)[0] + "," + cell
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the column -------------------------------------------------------------------------------
def test_types_read_back_and_a_trace_without_them_has_no_column(tmp_path):
    write_trace(tmp_path / "plain.csv", [job(0), job(1)])
    assert "gpu_type" not in (tmp_path / "plain.csv").read_text().splitlines()[0]
    stated = [typed(0, ("V100M16", "V100M32")), typed(1), typed(2, ("T4",), 7.5)]
    write_trace(tmp_path / "t.csv", stated)
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0].endswith(",priority,gpu_mem_gb,gpu_type")
    assert lines[1].endswith(",,V100M16|V100M32")  # no memory, two types
    assert lines[2].endswith(",,")  # job 1: any type, no memory
    assert lines[3].endswith(",7.5,T4")
    assert read_trace(tmp_path / "t.csv") == stated


def test_a_cell_in_the_openb_form_folds_repeats_and_keeps_order(tmp_path):
    path = one_row(tmp_path, " V100M32|V100M16|V100M32 ")
    assert read_trace(path)[0].gpu_types == ("V100M32", "V100M16")
    assert read_trace(one_row(tmp_path, ""))[0].gpu_types == ()  # empty: any type


@pytest.mark.parametrize("cell,why", [
    ("A 100", "'A 100' is not a GPU type name"),
    ("T4|", "has an empty type in 'T4|'"),
    ("|", "has an empty type in '|'"),
    ("-T4", "'-T4' is not a GPU type name"),
    ("|".join(f"t{i}" for i in range(65)), "names more than 64 GPU types"),
])
def test_a_bad_type_cell_is_one_line_naming_the_line_and_field(tmp_path, cell, why):
    path = one_row(tmp_path, cell)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert len(str(err.value).splitlines()) == 1
    assert str(err.value).startswith(f"{path}:2: gpu_type: {why}")


def test_the_writer_refuses_types_in_a_trace_without_the_column(tmp_path):
    with open(tmp_path / "t.csv", "w") as out:
        writer = TraceWriter(out)
        writer.write(job(0))
        with pytest.raises(ValueError, match="job 1: GPU types in a trace without gpu_type"):
            writer.write(typed(1, ("T4",)))


@pytest.mark.parametrize("value,why", [
    ("T4", "must be a list of GPU type names, got 'T4'"),
    (("T4", "T4"), "names 'T4' twice"),
    (("T4", "x y"), "'x y' is not a GPU type name"),
    (("",), "'' is not a GPU type name"),
    ((7,), "7 is not a GPU type name"),
    (tuple(f"t{i}" for i in range(65)), "names 65 GPU types; at most 64"),
])
def test_records_with_bad_types_are_one_problem(value, why):
    [problem] = validate([typed(0, value)])
    assert (problem.line, problem.field) == (1, "gpu_types")
    assert problem.message.startswith(why)


# -- fit against the spec -------------------------------------------------------------------
def test_the_pools_that_hold_a_job(tmp_path):
    cluster = mixed_spec(tmp_path)  # pools 0 t4, 1 v32, 2 cpu
    assert pools_for(1, (), 0.0, cluster) == [0, 1]  # never the CPU-only pool
    assert pools_for(16, (), 0.0, cluster) == [0]
    assert pools_for(8, (), 20.0, cluster) == [1]
    assert pools_for(1, ("V100M32", "A100"), 0.0, cluster) == [1]
    assert pools_for(9, ("V100M32",), 0.0, cluster) == []  # its pool has 8
    assert pools_for(1, ("T4",), 17.0, cluster) == []
    assert pools_for(1, ("A100",), 0.0, cluster) == []


# job, field, message: worked out from MIXED (T4 pool 16 GPUs of 16 GB, V100M32 pool 8 of 32)
REFUSED = [
    (typed(1, ("A100",)), "gpu_type", "job asks for 'A100' but the cluster has T4, V100M32"),
    (typed(2, ("A100", "H100")), "gpu_type",
     "job asks for 'A100|H100' but the cluster has T4, V100M32"),
    (typed(3, ("T4",), gpus=24), "num_gpu",
     "job needs 24 GPUs of type T4 but the largest pool of that type has 16"),
    (typed(8, ("V100M32",), gpus=12), "num_gpu",  # a larger pool of another type
     "job needs 12 GPUs of type V100M32 but the largest pool of that type has 8"),
    (typed(4, ("T4",), 30.0), "gpu_mem_gb",
     "job needs '30.0' GB on each GPU but the GPUs of its types hold at most 16 GB"),
    (typed(5, (), 40.0), "gpu_mem_gb",
     "job needs '40.0' GB on each GPU but the cluster's GPUs hold at most 32 GB"),
    (typed(6, (), 20.0, gpus=12), "num_gpu",
     "job needs 12 GPUs with '20.0' GB each but the largest such pool has 8"),
    (typed(7, ("T4", "V100M32"), 20.0, gpus=12), "num_gpu",
     "job needs 12 GPUs of types T4|V100M32 with '20.0' GB each but the largest such pool "
     "has 8"),
]
FITS = [typed(10, ("T4",), 16.0, gpus=16), typed(11, ("V100M32", "T4"), 32.0, gpus=8),
        typed(12), typed(13, ("A100", "T4"))]


@pytest.mark.parametrize("record,field,message", REFUSED, ids=[str(r[0].job_id) for r in REFUSED])
def test_a_job_no_pool_holds_is_one_line_naming_field_and_reason(tmp_path, record, field,
                                                                 message):
    cluster = mixed_spec(tmp_path)
    path = tmp_path / "t.csv"
    write_trace(path, [*FITS, record])
    with pytest.raises(TraceError) as err:
        read_trace(path, spec=cluster)
    assert str(err.value) == f"{path}:6: {field}: {message}"
    # records (the live submit path) are checked by the same rule
    [problem] = validate([record], spec=cluster)
    assert problem.field == ("gpu_types" if field == "gpu_type" else field)
    # a record's memory is shown as its value, a file's as its cell
    assert problem.message == message.replace(f"'{record.gpu_mem_gb}'", f"{record.gpu_mem_gb}")


def test_jobs_too_large_for_every_pool_are_one_line(tmp_path):
    cluster = mixed_spec(tmp_path)
    path = tmp_path / "t.csv"
    write_trace(path, [*FITS, typed(20, gpus=20), typed(21, gpus=17), typed(22, gpus=30)])
    assert validate(path, spec=cluster)[0].line == 6
    assert [str(p) for p in validate(path, spec=cluster)] == [
        f"{path}:6: num_gpu: 3 jobs need more GPUs than the cluster's largest pool holds (16; "
        "up to 30, the first here): give --spec a pool of at least 30 GPUs, or make the trace "
        "for this cluster (interlace-trace generate --max-gpus 16)"]
    assert validate(FITS, spec=cluster) == []
    assert read_trace(path) == [*FITS, typed(20, gpus=20), typed(21, gpus=17),
                                typed(22, gpus=30)]  # no spec: nothing to fit


def test_a_muri_spec_and_a_pool_of_unstated_type_take_any_type(tmp_path):
    asks = [typed(0, ("A100",)), typed(1, ("T4", "G3"), gpus=4)]
    write_trace(tmp_path / "t.csv", asks)
    assert read_trace(tmp_path / "t.csv", spec=spec(nodes=1, gpus=4)) == asks
    muri = tmp_path / "muri.csv"
    muri.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    "1,1,4,64,256\n")
    assert validate(tmp_path / "t.csv", spec=load_spec(muri)) == []
    pooled = tmp_path / "p.csv"
    pooled.write_text(f"{POOL_HEAD}\nt4,1,8,T4,16,64,256\nother,1,4,,,64,256\n")
    assert validate(tmp_path / "t.csv", spec=load_spec(pooled)) == []
    assert pools_for(1, ("A100",), 0.0, load_spec(pooled)) == [1]
    # Muri's own wording stays for its specs: the cluster's total, and its GPUs' memory
    [big] = validate([typed(2, ("A100",), gpus=5)], spec=spec(nodes=1, gpus=4))
    assert big.message.startswith("a job needs more GPUs than the cluster's 4 (up to 5")


# -- openb import ---------------------------------------------------------------------------
OPENB_HEAD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time")
PODS = [
    "p1,8000,30720,1,1000,V100M16|V100M32|V100M32,LS,Succeeded,100,3700,100",  # types only
    "p2,4000,15360,1,500,,LS,Succeeded,200,3800,200",  # half of any: 0.5 x 16 = 8.0
    "p3,4000,15360,1,460,G2,LS,Succeeded,300,3900,300",  # 0.46 x 24 (assumed) = 11.04
    # G3 and V100M32 both 32 GB: 0.25 x 32 = 8.0, V100M32's (disclosed) figure, not G3's
    "p4,4000,15360,1,250,G3|V100M32,LS,Succeeded,400,4000,400",
    "p5,8000,30720,2,1000,A10|T4,LS,Succeeded,500,4100,500",  # whole GPUs: no memory
    "p6,4000,15360,1,300,A100,LS,Succeeded,600,4200,600",  # A100's memory unknown: none
    "p7,4000,15360,1,810,T4|P100,LS,Succeeded,700,4300,700",  # 0.81 x 16 = 12.96 of T4
    "p8,4000,15360,1,1000,V100 M16,LS,Succeeded,800,4400,800",  # not a type: malformed
]


def test_openb_import_fills_types_and_memory_shares(tmp_path, capsys):
    src, out = tmp_path / "openb_pod_list_x.csv", tmp_path / "o.csv"
    src.write_text(OPENB_HEAD + "\n" + "\n".join(PODS) + "\n")
    assert trace_main(["import", "openb", str(src), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    records = read_trace(out)
    assert [r.gpu_types for r in records] == [
        ("V100M16", "V100M32"), (), ("G2",), ("G3", "V100M32"), ("A10", "T4"), ("A100",),
        ("T4", "P100")]
    assert [r.gpu_mem_gb for r in records] == [0.0, 8.0, 11.04, 8.0, 0.0, 0.0, 12.96]
    assert [r.num_gpu for r in records] == [1, 1, 1, 1, 2, 1, 1]
    gpu = json.loads((tmp_path / "o.csv.summary.json").read_text())["gpu"]
    assert gpu["jobs_with_types"] == 6 and gpu["jobs_with_memory_from_share"] == 4
    assert gpu["shares_of"] == {"any": {"jobs": 1, "gb": 16.0},
                                "G2": {"jobs": 1, "gb": 24.0, "assumed": True},
                                "T4": {"jobs": 1, "gb": 16.0},
                                "V100M32": {"jobs": 1, "gb": 32.0}}
    assert gpu["jobs_on_assumed_memory"] == 1  # p3's G2
    assert gpu["assumed_gb"] == {"G2": 24.0, "G3": 32.0}
    assert "whole-GPU pod states no memory" in gpu["facts"]
    assert f"{'jobs with GPU types':<30}{6:>10}" in err
    assert f"{'jobs with memory from a share':<30}{4:>10}" in err
    assert "G2 24 GB, G3 32 GB" in err
    assert "gpu_spec: 'V100 M16' is not a GPU type name" in \
        json.dumps(json.loads((tmp_path / "o.csv.summary.json").read_text())["examples"])


def test_other_formats_say_they_state_no_type_or_memory(tmp_path, capsys):
    data = Path(__file__).resolve().parents[1] / "data" / "imports" / "helios_cluster_log.csv"
    out = tmp_path / "h.csv"
    assert trace_main(["import", "helios", str(data), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    gpu = json.loads((tmp_path / "h.csv.summary.json").read_text())["gpu"]
    assert gpu["jobs_with_types"] == 0 and gpu["jobs_with_memory_from_share"] == 0
    assert "no GPU type or memory" in gpu["facts"] and "no GPU type or memory" in err
    header = out.read_text().splitlines()[0]
    assert "gpu_type" not in header and "gpu_mem_gb" not in header


# -- interlace-submit -----------------------------------------------------------------------
def test_interlace_submit_states_the_jobs_gpu_types(capsys):
    from scheduler.tools.jobs import _submit_parser, make_record

    base = ["--gpus", "2", "--iterations", "10"]
    args = _submit_parser().parse_args(base + ["--gpu-type", "V100M16|V100M32|V100M16"])
    assert make_record(args, 7, [], "").gpu_types == ("V100M16", "V100M32")
    assert make_record(_submit_parser().parse_args(base), 7, [], "").gpu_types == ()
    for bad, why in (("A 100", "'A 100' is not a GPU type name"),
                     ("T4|", "has an empty type in 'T4|'")):
        with pytest.raises(SystemExit) as exit_:
            _submit_parser().parse_args(base + ["--gpu-type", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and len(err) == 1
        assert "--gpu-type" in err[0] and why in err[0]


def test_openb_import_drops_pods_no_pool_of_the_spec_holds_and_says_why(tmp_path, capsys):
    """Against MIXED (16 T4s in nodes of 4, 8 V100M32s on one node, 24 GPUs): a pod of a
    type the cluster lacks, or more GPUs of its types than their largest pool, is dropped
    with its reason, so that interlace-sim takes the trace the import wrote."""
    spec = tmp_path / "mixed.csv"
    spec.write_text(MIXED)
    more = ["q1,8000,30720,12,1000,V100M32,LS,Succeeded,900,4500,900",  # 12 > the 8 V100M32
            "q2,8000,30720,32,1000,,LS,Succeeded,950,4600,950"]  # 32 > the cluster's 24
    src, out = tmp_path / "openb_pod_list_x.csv", tmp_path / "o.csv"
    src.write_text(OPENB_HEAD + "\n" + "\n".join(PODS[:7] + more) + "\n")
    assert trace_main(["import", "openb", str(src), "--out", str(out), "--spec",
                       str(spec)]) == 0
    capsys.readouterr()
    kept = [r.gpu_types for r in read_trace(out, spec=load_spec(spec))]
    assert kept == [("V100M16", "V100M32"), (), ("G3", "V100M32"), ("A10", "T4"),
                    ("T4", "P100")]  # p1, p2, p4, p5, p7
    summary = json.loads((tmp_path / "o.csv.summary.json").read_text())
    assert summary["dropped"]["no_pool"] == 2  # p3 (G2), p6 (A100)
    assert summary["dropped"]["too_many_gpus"] == 2  # q1, q2
    shown = json.dumps(summary["examples"])
    assert "job asks for 'A100' but the cluster has T4, V100M32" in shown
    assert "job needs 12 GPUs of type V100M32 but the largest pool of that type has 8" in shown
