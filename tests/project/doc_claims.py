"""What each quick block of the docs says its commands give, checked on what they gave.

Why its own module: an exit status of 0 says only that a command ran; the page around a block
says what it prints or writes (a table's rows, files, columns), and that is what a reader
relies on. `CLAIMS` maps (page, the block's first line) to a check of the block's stdout and
its working directory; test_docs runs it after the block and requires one for every block.
The expected values come from the pages' prose and the files they name, not from the code.
"""
from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path
from types import MappingProxyType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TENANTS_FILE = ROOT / "examples" / "tenants.toml"


def _table(out: str, first: str) -> list[list[str]]:
    """The rows (split on whitespace) of the table whose header starts with `first`."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:len(first.split())]
                 == first.split())
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def _sim_default_run(out: str, work: Path) -> None:
    """docs/simulator.md: with no options, 40 jobs under muri-s, srsf and tiresias, a table."""
    rows = _table(out, "policy jobs")
    assert sorted(r[0] for r in rows[:3]) == ["muri-s", "srsf", "tiresias"], rows
    assert all(r[1] == "40" for r in rows[:3]), rows
    assert "--trace" in out and "--explain" in out  # and --help printed the options


def _sim_outputs(out: str, work: Path) -> None:
    """docs/simulator.md: --json a line per policy; --out DIR files per policy; --plot a PNG;
    --explain where the time goes per policy and the groups the interleaving one formed."""
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in runs] == ["srsf", "muri-s"] and all(r["jobs"] == 40
                                                                      for r in runs)
    for policy in ("srsf", "muri-s"):
        assert (work / "out" / f"{policy}-jobs.csv").is_file()
        assert f"{policy}: per job " in out and " waiting" in out
    assert (work / "jct.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "muri-s: " in out and "groups formed" in out


def _sweep_csv(out: str, work: Path) -> None:
    """docs/simulator.md: study/runs.csv, a row per run with the documented columns; no
    report with --no-report."""
    with open(work / "study" / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["trace"], r["policy"], r["seed"]) for r in rows] == [
        ("default", "fifo", "0"), ("default", "srsf", "0")]
    assert {"spec", "jobs", "avg_jct_s", "p99_jct_s", "makespan_s", "gpu_utilisation",
            "preemptions", "mean_group_size", "group_efficiency", "wall_s"} <= set(rows[0])
    assert not (work / "study" / "report").exists()


def _keys(out: str, work: Path) -> None:
    """docs/operations.md: a public key per client in keys/authorized, a key pair in
    keys/clients, the second `generate` adding to the first."""
    names = ["agent-n0", "agent-n1", "feeder", "scheduler"]
    assert sorted(p.name for p in (work / "keys" / "authorized").iterdir()) == [
        f"{n}.key" for n in names]
    clients = {p.name for p in (work / "keys" / "clients").iterdir()}
    assert clients == {f"{n}.key{s}" for n in names for s in ("", "_secret")}


def _small_trace(out: str, work: Path) -> None:
    """docs/traces.md: generate writes N jobs of at most --max-gpus GPUs; validate says the
    trace is usable on the spec; the simulator runs it under each policy."""
    with open(work / "small.csv", newline="") as fh:
        jobs = list(csv.DictReader(fh))
    assert len(jobs) == 50 and all(1 <= int(j["num_gpu"]) <= 8 for j in jobs)
    assert "small.csv: ok" in out
    rows = _table(out, "policy jobs")
    assert [(r[0], r[1]) for r in rows] == [("fifo", "50"), ("srsf", "50")]


def _tenant_table(out: str, work: Path) -> None:
    """docs/tenants.md: after the usual table, a row per policy and tenant: jobs, GPU-hours
    owed as quota x makespan, borrowed, one fairness index per policy."""
    quotas = {name: t["quota"] for name, t in
              tomllib.loads(TENANTS_FILE.read_text())["tenants"].items()}
    makespan = {r[0]: float(r[5]) for r in _table(out, "policy jobs avg JCT")}
    head = "policy tenant jobs avg JCT h waiting h GPU-h used GPU-h owed borrowed peak GPUs fairness"
    rows = _table(out, head)
    assert [(r[0], r[1]) for r in rows] == [(p, t) for p in ("srsf", "muri-s") for t in quotas]
    for policy in ("srsf", "muri-s"):
        mine = [r for r in rows if r[0] == policy]
        assert sum(int(r[2]) for r in mine) == 400  # every generated job, once
        for r in mine:
            assert float(r[6]) == pytest.approx(quotas[r[1]] * makespan[policy], rel=1e-3)
        assert len({r[9] for r in mine}) == 1 and 0 < float(mine[0][9]) <= 1


def _tenant_sweep(out: str, work: Path) -> None:
    """docs/tenants.md: a row per run and tenant in sweep/tenants.csv, runs with one queue
    and with the file's quotas, and the per-tenant figure the page shows."""
    with open(work / "sweep" / "tenants.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    quotas = {name: t["quota"] for name, t in
              tomllib.loads(TENANTS_FILE.read_text())["tenants"].items()}
    runs = [(r["policy"], r["seed"], r["tenants"], r["tenant"]) for r in rows]
    assert sorted(runs) == sorted(
        (p, s, q, t) for p in ("fifo", "srsf", "muri-s") for s in ("0", "1", "2")
        for q in ("none", "examples/tenants.toml") for t in quotas)
    for r in rows:  # the quota is the file's where the run had one, else none
        assert r["quota"] == ("" if r["tenants"] == "none" else str(quotas[r["tenant"]]))
    assert (work / "sweep" / "report" / "tenants_teams_default.png").is_file()


CLAIMS = MappingProxyType({
    ("simulator.md", "interlace-sim"): _sim_default_run,
    ("simulator.md", "interlace-sim --policy srsf,muri-s --json"): _sim_outputs,
    ("simulator.md", "interlace-sweep --traces default --policies fifo,srsf --out study "
                     "--jobs 1 --no-report"): _sweep_csv,
    ("operations.md", "interlace-keys generate keys --clients scheduler,feeder,agent-n0"): _keys,
    ("traces.md", "interlace-trace generate --jobs 50 --seed 3 --out small.csv --max-gpus 8"):
        _small_trace,
    ("tenants.md", "interlace-trace generate --jobs 400 --seed 1 --out t.csv --tenants "
                   "examples/tenants.toml"): _tenant_table,
    ("tenants.md", "interlace-trace generate --jobs 600 --seed 1 --mean-interarrival 600 "
                   "--out teams.csv \\"): _tenant_sweep,
})
