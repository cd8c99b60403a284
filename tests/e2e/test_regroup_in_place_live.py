"""Two users' programs that take turns share one GPU on a real live cluster (broker,
scheduler, one agent as processes on loopback), under Muri-S with the paper preset (no
hysteresis: the planner takes the best slot order every round).

tests/e2e/scripts/alternating.py swaps which stage leads every few iterations, in opposite
phase for the two jobs, so the best slot order of their group flips as their measured
profiles do. Each flip is the stage gate's business: the agent regroups the gate in place
and neither program is stopped or launched again for it (the agents' own records), and
`interlace-status` and `interlace-report` show the regroups apart from preemptions. A plain
program (no trainer API) grouped with an adapted one never enters their gate's rotation, so
the adapted one is never held up behind it.
"""
from __future__ import annotations

import json
import sys

import pytest

from scheduler.tools.jobs import status_main, submit_main
from scheduler.tools.report import main as report_main
from tests.live_system import ROOT, LiveCluster, log_records, wait_for, write_spec

SCRIPT = "tests/e2e/scripts/alternating.py"
ITERATIONS, FLIP = 240, 40  # ~0.1 s an iteration alone: 6 turns of the lead in ~25-40 s


def _records(cluster: LiveCluster, event: str, job_id: int, source: str | None = None) -> list:
    key = "job" if source == "agent" else "job_id"
    args = (source,) if source else ()
    return [r for r in log_records(cluster.run_dir, event, *args) if r.get(key) == job_id]


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """One GPU, Muri-S with the paper preset (no hysteresis), started; stopped after."""
    monkeypatch.chdir(ROOT)
    live = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 1, 1)),
                       nodes=1, gpus_per_node=1, policy="muri-s", time_scale=10.0,
                       scheduler_args=["--preset", "paper"])
    try:
        yield live.start()
    finally:
        live.stop_all()


def _submit(cluster: LiveCluster, job_id: int, iterations: int, *command: str) -> None:
    assert submit_main(["--endpoints", str(cluster.endpoints_file), "--gpus", "1", "--job-id",
                        str(job_id), "--iterations", str(iterations), "--", sys.executable,
                        *command]) == 0


def test_slot_order_flips_are_regroups_in_place_never_restarts(cluster, capsys):
    ep = str(cluster.endpoints_file)
    for job_id, lead in ((1, "io"), (2, "gpu")):
        _submit(cluster, job_id, ITERATIONS, SCRIPT, lead, str(FLIP))
    wait_for(lambda: all(_records(cluster, "job_finished", j) for j in (1, 2)), 150,
             "both jobs to finish")

    regrouped = log_records(cluster.run_dir, "job_regrouped")
    orders = {tuple(r["group"]) for r in regrouped}
    assert {(1, 2), (2, 1)} <= orders | {tuple(r["group"]) for r in
                                         log_records(cluster.run_dir, "job_started")}, \
        f"the slot order never flipped: {orders}"
    assert regrouped, "no regroup in place"
    # from the agent's records: once the pair ran together, no member was launched again
    # or stopped before its end
    grouped = max(min(r["ts"] for r in _records(cluster, "job_launched", j, "agent")
                      if r.get("gate")) for j in (1, 2))  # both launched into the pair
    for job_id in (1, 2):
        later = [r for r in _records(cluster, "job_launched", job_id, "agent")
                 if r["ts"] > grouped]
        stops = [r for r in _records(cluster, "job_stopping", job_id, "agent")
                 if r["ts"] > grouped]
        assert not later and not stops, (job_id, later, stops)
    assert log_records(cluster.run_dir, "gate_regrouped", "agent")

    capsys.readouterr()
    assert status_main(["--endpoints", ep, "--json"]) == 0
    jobs = {j["job_id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert sum(jobs[j]["regroups"] for j in (1, 2)) == len(regrouped)
    assert all(jobs[j]["preemptions"] == 0 for j in (1, 2))
    cluster.stop_all()  # the report reads the log the scheduler leaves at exit
    assert report_main([str(cluster.run_dir)]) == 0
    assert f"regroups: {len(regrouped)} in place" in capsys.readouterr().out


PLAIN = "import time\nfor _ in range(600):\n    time.sleep(0.05)\n"  # ~30 s; no API, no turns


def test_a_plain_job_grouped_with_an_adapted_one_holds_up_nothing(cluster):
    """A plain program (no trainer API) and an adapted one in one group on one GPU: the plain
    one never takes a turn, so the gate never counts it in its rotation; the adapted one
    takes every turn without waiting for it (the agent's gate would wait 30 s for a member
    in its rotation that does not ask), and nothing is dropped or restarted."""
    _submit(cluster, 1, 150, SCRIPT, "io", "1000")
    _submit(cluster, 2, 600, "-c", PLAIN)
    wait_for(lambda: all(_records(cluster, "job_finished", j) for j in (1, 2)), 120,
             "both jobs to finish")
    together = [r for r in log_records(cluster.run_dir, "job_launched", "agent")
                if r.get("gate")]
    assert {r["job"] for r in together} == {1, 2}, "the two jobs never shared a gate"
    assert not log_records(cluster.run_dir, "gate_member_dropped", "agent")
    # the adapted job (~14 s of turns) was never held up behind the plain one (~30 s)
    ended = {j: _records(cluster, "job_finished", j)[0]["ts"] for j in (1, 2)}
    assert ended[1] < ended[2], ended
    joined = {r["job"] for r in log_records(cluster.run_dir, "gate_member_join", "agent")}
    assert 1 in joined and 2 not in joined  # the plain one never entered the rotation
