"""A job's GPU memory (`gpu_mem_gb`) and a cluster's (`gpu_mem_p_gpu`): optional columns that
read back as written, and bad values refused in one line naming file, line and field."""
from __future__ import annotations

import dataclasses

import pytest

from specs.spec import SpecError, load_spec
from traces import read_trace, write_trace
from traces.errors import TraceError
from traces.validate import validate
from tests.helpers import job, spec

SPEC_HEAD = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"


def test_memory_reads_back_and_a_trace_without_it_keeps_muris_columns(tmp_path):
    plain = [job(0), job(1)]
    write_trace(tmp_path / "plain.csv", plain)
    assert "gpu_mem_gb" not in (tmp_path / "plain.csv").read_text().splitlines()[0]
    stated = [dataclasses.replace(job(0), gpu_mem_gb=23.5), job(1)]
    write_trace(tmp_path / "mem.csv", stated)
    assert read_trace(tmp_path / "mem.csv") == stated  # job 1's empty cell: not stated
    assert (tmp_path / "mem.csv").read_text().splitlines()[2].endswith(",")


@pytest.mark.parametrize("cell,why", [
    ("-1", "gpu_mem_gb: must be a non-negative number of GB, got '-1'"),
    ("lots", "gpu_mem_gb: must be a number of GB, got 'lots'"),
    ("nan", "gpu_mem_gb: must be a non-negative number of GB, got 'nan'"),
    ("1e9", "gpu_mem_gb: must be at most 100000 GB, got '1e9'"),
])
def test_a_bad_memory_cell_is_one_line_naming_the_line_and_field(tmp_path, cell, why):
    write_trace(tmp_path / "t.csv", [dataclasses.replace(job(0), gpu_mem_gb=1.0)])
    path = tmp_path / "t.csv"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + "," + cell
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert str(err.value) == f"{path}:2: {why}"


def test_a_job_needing_more_than_a_gpu_holds_is_refused_against_the_spec(tmp_path):
    cluster = dataclasses.replace(spec(nodes=1, gpus=4), gpu_mem_gb=80.0)
    big = dataclasses.replace(job(0), gpu_mem_gb=96.0)
    write_trace(tmp_path / "t.csv", [big])
    assert read_trace(tmp_path / "t.csv") == [big]  # no spec: nothing to fit
    with pytest.raises(TraceError, match=r"t.csv:2: gpu_mem_gb: job needs '96.0' GB on each "
                                         r"GPU but the cluster's GPUs hold 80 GB$"):
        read_trace(tmp_path / "t.csv", spec=cluster)
    # the live submit path checks records the same way
    [problem] = validate([big], spec=cluster)
    assert problem.field == "gpu_mem_gb" and "hold 80 GB" in problem.message
    assert validate([dataclasses.replace(big, gpu_mem_gb=80.0)], spec=cluster) == []


def test_a_spec_may_state_each_gpus_memory(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(f"{SPEC_HEAD}\n1,2,8,64,512\n")
    assert load_spec(path).gpu_mem_gb == 0.0  # Muri's five columns: not stated
    path.write_text(f"{SPEC_HEAD},gpu_mem_p_gpu\n1,2,8,64,512,141\n")
    assert load_spec(path).gpu_mem_gb == 141.0
    for cell in ("0", "-8", "big", "inf"):
        path.write_text(f"{SPEC_HEAD},gpu_mem_p_gpu\n1,2,8,64,512,{cell}\n")
        with pytest.raises(SpecError) as err:
            load_spec(path)
        assert str(err.value) == (f"{path}:2: gpu_mem_p_gpu: must be a positive number of "
                                  f"GB, got '{cell}'")


def test_interlace_submit_states_the_jobs_gpu_memory(capsys):
    from scheduler.tools.jobs import _submit_parser, make_record

    args = _submit_parser().parse_args(["--gpus", "2", "--iterations", "10", "--gpu-mem", "30"])
    assert make_record(args, 7, [], "").gpu_mem_gb == 30.0
    args = _submit_parser().parse_args(["--gpus", "2", "--iterations", "10"])
    assert make_record(args, 7, [], "").gpu_mem_gb == 0.0
    with pytest.raises(SystemExit):
        _submit_parser().parse_args(["--gpus", "1", "--iterations", "1", "--gpu-mem", "-2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpu-mem" in err[0] and "[0, 100000] GB" in err[0]
