"""Reclaims as the simulator counts them per tenant: an owner's job arriving takes back the
GPUs a borrower holds, and the borrower's GPU-hours reclaimed are its GPUs times the hours
it then waits to run again."""
from __future__ import annotations

import json
from dataclasses import replace

from scheduler.sim.cli import main
from traces.muri_csv import write_trace
from tests.helpers import job

TENANTS = """[tenants.a]
quota = 8
borrow_limit = 8
[tenants.b]
quota = 8
borrow_limit = 8
"""


def test_an_owner_arriving_reclaims_what_a_borrower_holds(tmp_path, capsys):
    (tmp_path / "t.toml").write_text(TENANTS)
    # a: 16 GPUs for 10 h from 0 (8 of them borrowed); b: 8 GPUs for 1 h from 1 h. With
    # quotas b's job is owed its 8 GPUs, a may then hold only 8 and its job of 16 stops at
    # 1 h and runs again when b's ends: 16 GPUs x 1 h given back, once.
    jobs = [replace(job(0, num_gpu=16, iterations=36000, stages=(0.3, 0.3, 0.4)), tenant="a"),
            replace(job(1, num_gpu=8, submit=3600.0, iterations=3600, stages=(0.3, 0.3, 0.4)),
                    tenant="b")]
    write_trace(tmp_path / "trace.csv", jobs)
    args = ["--trace", str(tmp_path / "trace.csv"), "--spec", "n2g8", "--policy", "srsf",
            "--json"]
    assert main(args + ["--tenants", str(tmp_path / "t.toml")]) == 0
    by = json.loads(capsys.readouterr().out.strip())["tenants"]["by_tenant"]
    assert (by["a"]["reclaims"], by["b"]["reclaims"]) == (1, 0)
    assert 16.0 <= by["a"]["reclaimed_gpu_hours"] <= 16.0 * 1.05
    assert by["b"]["reclaimed_gpu_hours"] == 0
