"""`interlace-sim --tenants` and `interlace-trace generate --tenants`, as a user runs them."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

from scheduler.sim.cli import main
from traces.cli import main as trace_main
from traces.muri_csv import read_trace, write_trace
from tests.helpers import job

TENANTS = """default = "b"
[tenants.a]
quota = 4
borrow_limit = 4
[tenants.b]
quota = 4
borrow_limit = 0
"""


def trace_of(path, jobs):
    write_trace(path, jobs)
    return str(path)


def test_json_and_out_carry_each_tenants_figures(tmp_path, capsys):
    (tmp_path / "t.toml").write_text(TENANTS)
    jobs = [replace(job(i, iterations=2000, submit=10.0 * i), tenant="a" if i < 6 else "")
            for i in range(10)]
    trace = trace_of(tmp_path / "trace.csv", jobs)
    assert main(["--trace", trace, "--spec", "n2g8", "--policy", "srsf", "--tenants",
                 str(tmp_path / "t.toml"), "--json", "--out", str(tmp_path / "out")]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    by = line["tenants"]["by_tenant"]
    assert (by["a"]["jobs"], by["b"]["jobs"]) == (6, 4)  # b: the default for jobs naming none
    assert by["a"]["peak_gpus"] <= 8 and by["b"]["peak_gpus"] <= 4
    assert by["a"]["borrowed_gpu_hours"] > 0  # 6 one-GPU jobs on a quota of 4, cluster idle
    with open(tmp_path / "out" / "srsf-tenants.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["tenant"] for r in rows} == {"a", "b"}
    assert all(int(r["gpus"]) <= int(r["quota"]) + int(r["borrow_limit"]) for r in rows)
    assert max(int(r["gpus"]) for r in rows if r["tenant"] == "a") == 6


def test_jobs_the_tenants_file_cannot_take_are_refused_before_any_run(tmp_path, capsys):
    (tmp_path / "t.toml").write_text(TENANTS.replace('default = "b"\n', ""))
    jobs = [replace(job(i), tenant=t) for i, t in enumerate(["a", "zz", "", "a"])]
    jobs.append(replace(job(9, num_gpu=9), tenant="a"))
    trace = trace_of(tmp_path / "trace.csv", jobs)
    assert main(["--trace", trace, "--spec", "n2g8", "--policy", "srsf,tests.helpers:KeepsItsJobs",
                 "--tenants", str(tmp_path / "t.toml")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines() == [
        f"interlace-sim: {trace}: job 1: tenant 'zz' is not in the tenants file",
        f"interlace-sim: {trace}: job 2 names no tenant and the tenants file has no default",
        f"interlace-sim: {trace}: job 9 needs 9 GPUs; tenant 'a' may hold at most 8 (quota 4 "
        f"+ borrow_limit 4)",
        "interlace-sim: --tenants: policy 'tests.helpers:KeepsItsJobs' cannot plan for "
        "tenants (it keeps its own jobs running whatever the round's queue)"]


def test_generate_spreads_jobs_over_the_tenants_that_may_hold_them(tmp_path, capsys):
    (tmp_path / "t.toml").write_text(TENANTS)
    out = tmp_path / "g.csv"
    assert trace_main(["generate", "--jobs", "300", "--seed", "3", "--max-gpus", "8",
                       "--out", str(out), "--tenants", str(tmp_path / "t.toml")]) == 0
    records = read_trace(out)
    by = {}
    for r in records:
        by.setdefault(r.tenant, []).append(r.num_gpu)
    assert set(by) == {"a", "b"}
    assert max(by["b"]) <= 4 and len(by["a"]) > len(by["b"])  # a: 8 of 12 GPUs' weight
    again = tmp_path / "again.csv"
    trace_main(["generate", "--jobs", "300", "--seed", "3", "--max-gpus", "8",
                "--out", str(again), "--tenants", str(tmp_path / "t.toml")])
    assert again.read_text() == out.read_text()


def test_generate_says_which_job_no_tenant_may_hold(tmp_path, capsys):
    (tmp_path / "t.toml").write_text("[tenants.a]\nquota = 1\n")
    assert trace_main(["generate", "--jobs", "200", "--seed", "1", "--max-gpus", "8",
                       "--out", str(tmp_path / "g.csv"), "--tenants",
                       str(tmp_path / "t.toml")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "GPUs; no tenant may hold more than 1" in err


def test_a_job_of_a_class_the_file_lacks_is_refused_before_any_run(tmp_path, capsys):
    (tmp_path / "t.toml").write_text('default_class = "batch"\n[classes.batch]\n'
                                     '[tenants.a]\nquota = 4\n')
    trace = trace_of(tmp_path / "trace.csv", [replace(job(0), tenant="a", priority_class="zz"),
                                              replace(job(1), tenant="a")])
    assert main(["--trace", trace, "--spec", "n2g8", "--policy", "fifo",
                 "--tenants", str(tmp_path / "t.toml")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"interlace-sim: {trace}: job 0: priority class 'zz' is not in the tenants file"]
