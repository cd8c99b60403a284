"""interlace-sweep --tenants, as a user runs it: a tiny trace where tenant b's one job waits
behind a's backlog with one queue and not with quotas (numbers worked out by hand), the
CSVs' exact keys, resume, the per-tenant plot, and bad input as one line before any run."""
from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.sim import cli as sim_cli
from scheduler.tools import sweep
from scheduler.tools.sweep_store import COLUMNS, TENANT_COLUMNS
from tests.helpers import job
from traces import write_trace

QUOTAS = "[tenants.a]\nquota = 8\nborrow_limit = 8\n[tenants.b]\nquota = 8\n"
PER_TENANT = ["trace", "policy", "preset", "seed", "tenants", "tenant", "jobs", "finished",
              "avg_jct_s", "avg_queueing_s", "gpu_hours", "quota_gpu_hours",
              "borrowed_gpu_hours", "reclaims", "reclaimed_gpu_hours", "peak_gpus", "quota",
              "borrow_limit"]


def backlog(folder: Path) -> tuple[str, str]:
    """On n2g8 (16 GPUs, 26.3 s per start): a's four 8-GPU jobs of 3000 s at 0, b's one of
    300 s at 10; a owed 8 and may borrow 8, b owed 8. The trace and the tenants file."""
    jobs = [replace(job(i, num_gpu=8, iterations=10000), tenant="a") for i in range(4)]
    jobs.append(replace(job(4, num_gpu=8, iterations=1000, submit=10.0), tenant="b"))
    write_trace(folder / "backlog.csv", jobs)
    (folder / "quotas.toml").write_text(QUOTAS)
    return str(folder / "backlog.csv"), str(folder / "quotas.toml")


def read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def args(trace: str, out: Path, *extra: str, policies: str = "fifo") -> list[str]:
    return ["--traces", trace, "--policies", policies, "--spec", "n2g8", "--out", str(out),
            "--jobs", "1", *extra]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep with and without quotas, run once: (folder, trace, tenants file)."""
    folder = tmp_path_factory.mktemp("tenants")
    trace, quotas = backlog(folder)
    assert sweep.main(args(trace, folder / "out", "--tenants", f"none,{quotas}")) == 0
    return folder / "out", trace, quotas


def test_with_quotas_b_no_longer_waits_behind_a_backlog(swept):
    out, trace, quotas = swept
    rows = read(out / "tenants.csv")
    assert list(rows[0]) == PER_TENANT
    by = {(r["tenants"], r["tenant"]): r for r in rows}
    assert len(rows) == 4 and list(by) == [("none", "a"), ("none", "b"), (quotas, "a"), (quotas, "b")]  # each once
    assert all(r["trace"] == trace and (r["policy"], r["preset"], r["seed"])
               == ("fifo", "default", "0") for r in rows)
    # one queue: b starts when a's first two jobs end, 2 x 3026.3 s, having come at 10
    assert float(by[("none", "b")]["avg_queueing_s"]) == pytest.approx(6042.6)
    assert float(by[("none", "a")]["avg_queueing_s"]) == pytest.approx(3026.3 / 2)
    # quotas: b takes its 8 GPUs back the round it comes
    assert float(by[(quotas, "b")]["avg_queueing_s"]) == 0.0
    assert float(by[(quotas, "b")]["avg_jct_s"]) == pytest.approx(326.3)
    for name, quota, limit in (("a", "8", "8"), ("b", "8", "0")):
        assert (by[(quotas, name)]["quota"], by[(quotas, name)]["borrow_limit"]) == \
            (quota, limit)
        # one queue owes nothing: no quota, owed or borrowed figures; what ran, yes
        none = by[("none", name)]
        assert none["quota"] == none["borrow_limit"] == none["quota_gpu_hours"] == \
            none["borrowed_gpu_hours"] == none["reclaims"] == none["reclaimed_gpu_hours"] == ""
        assert float(none["gpu_hours"]) > 0 and int(none["finished"]) == int(none["jobs"])
    assert by[("none", "a")]["peak_gpus"] == "16" and by[(quotas, "a")]["peak_gpus"] == "16"
    assert float(by[(quotas, "a")]["borrowed_gpu_hours"]) > 0  # a's backlog, until b came
    runs = read(out / "runs.csv")
    assert list(runs[0]) == list(TENANT_COLUMNS)
    assert {r["tenants"]: r["fairness"] for r in runs}["none"] == ""
    assert 0 < float({r["tenants"]: r["fairness"] for r in runs}[quotas]) <= 1
    assert len(runs) == 2


def test_figures_are_what_interlace_sim_reports(swept, capsys):
    out, trace, quotas = swept
    assert sim_cli.main(["--trace", trace, "--spec", "n2g8", "--policy", "fifo",
                         "--tenants", quotas, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["tenants"]
    by = {r["tenant"]: r for r in read(out / "tenants.csv") if r["tenants"] == quotas}
    for name, got in sim["by_tenant"].items():
        for column, field in (("avg_jct_s", "avg_jct"), ("avg_queueing_s", "avg_queueing"),
                              ("gpu_hours", "gpu_hours"), ("quota_gpu_hours", "quota_gpu_hours"),
                              ("borrowed_gpu_hours", "borrowed_gpu_hours"),
                              ("peak_gpus", "peak_gpus"), ("jobs", "jobs")):
            assert float(by[name][column]) == float(got[field]), (name, column)
    run = next(r for r in read(out / "runs.csv") if r["tenants"] == quotas)
    assert float(run["fairness"]) == sim["fairness"]


def test_the_per_tenant_plot_is_drawn(swept):
    out, _, _ = swept
    import matplotlib.image

    report = {p.name for p in (out / "report").glob("*.png")}
    assert "tenants_backlog_default.png" in report
    # the other figures once per tenants file, not pooled over them
    assert {"jct_cdf_backlog_default_none.png", "jct_cdf_backlog_default_quotas.png",
            "avg_jct_default_none.png", "avg_jct_default_quotas.png"} <= report
    image = matplotlib.image.imread(out / "report" / "tenants_backlog_default.png")
    assert image.shape[0] > 400 and (image[..., :3] < 0.5).any(axis=2).mean() > 0.005


def test_a_second_run_runs_nothing_and_rewrites_the_same_rows(swept, capsys):
    out, trace, quotas = swept
    before = {name: (out / name).read_text() for name in ("runs.csv", "tenants.csv")}
    assert sweep.main(args(trace, out, "--tenants", f"none,{quotas}", "--no-report")) == 0
    err = capsys.readouterr().err
    assert "2 runs: 2 already in" in err and "0 to run" in err and "[1/" not in err
    assert {name: (out / name).read_text() for name in before} == before
    # one more policy: only its two runs, and tenants.csv gains their rows
    assert sweep.main(args(trace, out, "--tenants", f"none,{quotas}", "--no-report",
                           policies="fifo,srsf")) == 0
    assert "4 runs: 2 already in" in capsys.readouterr().err
    assert len(read(out / "tenants.csv")) == 8
    assert (out / "runs.csv").read_text().startswith(before["runs.csv"])


def test_without_tenants_nothing_changes_and_folders_do_not_mix(swept, tmp_path, capsys):
    out, trace, quotas = swept
    plain = tmp_path / "plain"
    assert sweep.main(args(trace, plain, "--no-report")) == 0
    assert list(read(plain / "runs.csv")[0]) == list(COLUMNS)
    assert not (plain / "tenants.csv").exists()
    capsys.readouterr()
    assert sweep.main(args(trace, plain, "--tenants", quotas)) == 1
    assert sweep.main(args(trace, out)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"interlace-sweep: {plain}/runs.csv: holds a sweep without --tenants (no per-tenant "
        "figures to compare); use another folder",
        f"interlace-sweep: {out}/runs.csv: holds a sweep with --tenants; give --tenants "
        "(none for one queue) or use another folder"]


@pytest.mark.parametrize("case, policies, expected", [
    ("missing", "fifo", "--tenants {folder}/missing.toml: no such file"),
    ("broken", "fifo", "--tenants {folder}/broken.toml: tenant 'a': quota must be a whole "
                       "number of GPUs in [0, 4194304], got -1"),
    ("unknown", "fifo", "{trace}: job 4: tenant 'b' is not in the tenants file"),
    ("quotas", "fifo,tests.helpers:KeepsItsJobs",
     "--tenants: policy 'tests.helpers:KeepsItsJobs' cannot plan for tenants (it keeps its "
     "own jobs running whatever the round's queue)"),
    ("", "fifo", "--tenants: none given"),
])
def test_bad_tenants_are_one_line_before_any_run(tmp_path, capsys, case, policies, expected):
    trace, _ = backlog(tmp_path)
    (tmp_path / "broken.toml").write_text("[tenants.a]\nquota = -1\n")
    (tmp_path / "unknown.toml").write_text("[tenants.a]\nquota = 8\n")
    value = f"none,{tmp_path}/{case}.toml" if case else ","
    # an empty list is a usage error (2); a file that cannot be used, a run error (1)
    assert sweep.main(args(trace, tmp_path / "out", "--tenants", value,
                           policies=policies)) == (1 if case else 2)
    err = capsys.readouterr().err
    assert err == f"interlace-sweep: {expected.format(folder=tmp_path, trace=trace)}\n"
    assert not (tmp_path / "out").exists()


def test_a_job_of_a_class_the_file_lacks_is_refused_before_any_run(tmp_path, capsys):
    """Not a worker's SchedulingError mid-sweep: the core would refuse the job at its
    submission."""
    write_trace(tmp_path / "classes.csv", [replace(job(0), tenant="a", priority_class="zz"),
                                           replace(job(1), tenant="a")])
    (tmp_path / "t.toml").write_text('default_class = "batch"\n[classes.batch]\n'
                                     '[tenants.a]\nquota = 4\n')
    trace = str(tmp_path / "classes.csv")
    assert sweep.main(args(trace, tmp_path / "out", "--tenants", f"{tmp_path}/t.toml")) == 1
    assert capsys.readouterr().err == \
        f"interlace-sweep: {trace}: job 0: priority class 'zz' is not in the tenants file\n"
    assert not (tmp_path / "out").exists()
