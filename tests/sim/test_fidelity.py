"""The paper preset reproduces the published artifact's numbers (Fig. 9/10 data).

Reads the artifact's traces from ../shared/reference/ (never committed here); the runs skip
with a reason where that folder is absent, as on a user's fresh clone.

Where the replay is exact every figure must match to a relative 1e-6 (the README's
"0.0001%"). Each exception is pinned at the gap measured with `python bench/fidelity.py`,
so a change that moves it either way fails here and the README's figure is updated with it.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs import load_spec, spec_path
from traces import read_trace, write_trace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import fidelity  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"

EXACT = ["srtf", "srsf", "tiresias", "antman", "muri-s", "muri-l"]
TRACES = ["trace3", "trace3_pr"]
# Themis's program solved by ECOS on the backlog trace: about 20 CPU s (trace3: 6)
THEMIS_TRACES = ["trace3", pytest.param("trace3_pr", marks=pytest.mark.slow)]
METRICS = {"avg_jct": "avg_jct_s", "makespan": "makespan_s", "p99_jct": "p99_jct_s"}
EXACT_TOLERANCE = 1e-6  # relative: the README's "0.0001%"
# A measured gap is pinned to within 0.01 percentage point of the figure the README states.
GAP_TOLERANCE = 1e-4
# (trace, policy, metric) -> relative error against the published figure, measured with
# `python bench/fidelity.py` (paper preset, n8g8). Everything of EXACT not listed here is exact.
MEASURED_GAPS = {
    # +0.38%; p99 and makespan exact: the published average comes from a run with
    # auto-unpack on (exact there, test_trace3_muri_l_average_was_published_with_auto_unpack)
    ("trace3", "muri-l", "avg_jct"): +0.003814,
    # Themis replays the artifact's own runs exactly (see ARTIFACT_OWN); these are the gaps
    # between those runs and the published figures, which the artifact no longer reproduces.
    ("trace3", "themis", "avg_jct"): +0.037069,   # +3.71%
    ("trace3", "themis", "makespan"): +0.000249,  # +0.025%
    ("trace3", "themis", "p99_jct"): +0.439754,   # +44.0%
    ("trace3_pr", "themis", "avg_jct"): +0.206498,  # +20.6%
    ("trace3_pr", "themis", "makespan"): +0.013781,  # +1.38%
    ("trace3_pr", "themis", "p99_jct"): +0.016310,   # +1.63%
}


def _published() -> dict[tuple[str, str], dict[str, float]]:
    if not (REFERENCE / "published_results.csv").is_file():
        return {}
    with open(REFERENCE / "published_results.csv") as fh:
        return {(r["trace"], r["policy"]): {k: float(v) for k, v in r.items()
                                             if k.endswith("_s")}
                for r in csv.DictReader(fh)}


PUBLISHED = _published()


@pytest.fixture(scope="module")
def run():
    """Simulate (trace, policy) once per module: several tests read the same run."""
    if not (REFERENCE / "published_results.csv").is_file():
        pytest.skip(f"reference data not found at {REFERENCE} (the artifact's traces are not "
                    "shipped)")
    spec = load_spec(REFERENCE / "n8g8.csv")
    traces: dict[str, list] = {}
    results: dict[tuple[str, str], object] = {}

    def _run(trace: str, policy: str):
        if (trace, policy) not in results:
            if trace not in traces:
                traces[trace] = read_trace(REFERENCE / f"{trace}.csv")
            results[trace, policy] = simulate(traces[trace], spec, policy, get_preset("paper"))
        return results[trace, policy]
    return _run


def _errors(result, trace: str, policy: str) -> dict[str, float]:
    want = PUBLISHED[(trace, policy)]
    return {m: getattr(result.summary, m) / want[col] - 1 for m, col in METRICS.items()}


def _assert_pinned(errors: dict[str, float], trace: str, policy: str) -> None:
    for metric, err in errors.items():
        gap = MEASURED_GAPS.get((trace, policy, metric))
        if gap is None:
            assert abs(err) <= EXACT_TOLERANCE, (metric, errors)
        else:
            assert abs(err - gap) <= GAP_TOLERANCE, (metric, err, "measured", gap)


def _assert_complete(result, trace: str) -> None:
    """Every job of the trace ends exactly once, after its submission."""
    ids = [o.job_id for o in result.outcomes if o.end is not None]
    assert sorted(ids) == sorted(r.job_id for r in read_trace(REFERENCE / f"{trace}.csv"))
    assert all(o.end >= o.submit for o in result.outcomes)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("policy", EXACT)
def test_matches_published_to_one_in_a_million(run, trace, policy):
    _assert_pinned(_errors(run(trace, policy), trace, policy), trace, policy)


def test_trace3_muri_l_average_was_published_with_auto_unpack(run):
    """The published trace3 Muri-L figures come from two runs: the average JCT from one with
    the artifact's --autopack on (its default, and the setting of its Fig. 13, whose
    job_type_4 is trace3), the p99 from one with it off (the paper preset's)."""
    run("trace3", "muri-l")  # skips where the reference data is absent
    result = simulate(read_trace(REFERENCE / "trace3.csv"), load_spec(REFERENCE / "n8g8.csv"),
                      "muri-l", get_preset("paper", muri_auto_unpack=True))
    errors = _errors(result, "trace3", "muri-l")
    assert abs(errors["avg_jct"]) <= EXACT_TOLERANCE and abs(errors["makespan"]) <= EXACT_TOLERANCE
    assert abs(errors["p99_jct"]) > 1e-4  # that figure is the other run's


# The artifact's own Themis figures: its simulator/ folder (Rivendile/Muri, commit
# 4e69a78ce75f), the Themis command of its sim_fig10.sh, run from simulator/ (Python 3.11,
# numpy 2.4.6, cvxpy 1.9.3, ecos 2.0.14; 5.5 min for trace3, 23 min for trace3_pr on this
# 2-core machine):
#   python run_sim.py --cluster_spec=cluster_spec/n8g8.csv --print --scheme=yarn \
#       --trace_file=trace-data/trace3.csv --schedule=themis \
#       --log_path=results/n8g8jtrace3/themis-yarn --multi_resource 4
#   python calc.py results/n8g8jtrace3/themis-yarn
# (trace3_pr: trace-data/trace3_pr.csv and results/n8g8jtrace3_pr/themis-yarn), which printed
#   trace3:    Total jobs: 992, avg JCT: 411777.344018, makespan: 8174135.280030,
#              99th JCT: 4272231.252262
#   trace3_pr: Total jobs: 992, avg JCT: 1813086.814519, makespan: 6853199.052240,
#              99th JCT: 6602148.118457
ARTIFACT_OWN = {
    "trace3": {"avg_jct": 411777.344018, "makespan": 8174135.280030, "p99_jct": 4272231.252262},
    "trace3_pr": {"avg_jct": 1813086.814519, "makespan": 6853199.052240,
                  "p99_jct": 6602148.118457},
}

THEMIS_PUBLISHED_GAP = (
    "Themis replays the artifact's own run to the last printed digit (ECOS's optimum of the "
    "same program, bit for bit), but that run is not the published one: on trace3_pr the "
    "artifact itself gives avg JCT 1.81e6 s, +20.6% from the published 1.50e6 s (trace3: "
    "+3.7% avg, +44% p99). The program has many optima and the run is chaotic in which one "
    "the solver returns; the published figures presumably came from other cvxpy/ECOS "
    "versions, which state or solve the program differently in the last bits.")


@pytest.mark.parametrize("trace", THEMIS_TRACES)
def test_themis_replays_the_artifacts_own_run(run, trace):
    """Every figure equals the artifact's own output (printed to 6 decimals)."""
    got = run(trace, "themis").summary
    for metric, want in ARTIFACT_OWN[trace].items():
        assert abs(getattr(got, metric) - want) <= 1e-6 * 0.5 + 1e-12 * want, (metric, want)


@pytest.mark.parametrize("trace", THEMIS_TRACES)
def test_themis_is_at_the_artifacts_gap_from_published(run, trace):
    """The gap to the published figures is the artifact's own (pinned above), all jobs end."""
    result = run(trace, "themis")
    _assert_complete(result, trace)
    _assert_pinned(_errors(result, trace, "themis"), trace, "themis")


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=THEMIS_PUBLISHED_GAP)
def test_themis_backlog_within_ten_percent_of_published(run):
    """Known gap, kept visible: a crash or an unfinished run fails this test (it is not an
    AssertionError); only the distance from the published figures is expected to fail."""
    result = run("trace3_pr", "themis")
    ended = {o.job_id for o in result.outcomes if o.end is not None}
    jobs = {r.job_id for r in read_trace(REFERENCE / "trace3_pr.csv")}
    if ended != jobs:
        pytest.fail(f"the run did not complete: {len(ended & jobs)} of {len(jobs)} jobs ended")
    errors = _errors(result, "trace3_pr", "themis")
    assert abs(errors["avg_jct"]) <= 0.10, errors
    assert abs(errors["makespan"]) <= 0.10, errors


def test_every_job_completes_exactly_once(run):
    _assert_complete(run("trace3", "muri-l"), "trace3")


def test_fidelity_all_starts_the_costliest_runs_first(tmp_path):
    """Longest first, by jobs x the policy's weight (Themis > Muri > the list policies), so
    the last runs to start are short ones and the processes end close together."""
    small, big = tmp_path / "small.csv", tmp_path / "big.csv"
    small.write_text("job_id\n" + "".join(f"{i}\n" for i in range(10)))
    big.write_text("job_id\n" + "".join(f"{i}\n" for i in range(100)))
    tasks = [{"trace_file": str(f), "policy": p, "trace": f.stem}
             for f in (small, big) for p in ("srtf", "muri-s", "themis")]
    order = [(t["trace"], t["policy"]) for t in fidelity.costliest_first(tasks)]
    assert order == [("big", "themis"), ("big", "muri-s"), ("small", "themis"),
                     ("big", "srtf"), ("small", "muri-s"), ("small", "srtf")]
    assert sorted(order) == sorted((t["trace"], t["policy"]) for t in tasks)


def test_fidelity_cpu_total_counts_whole_children_and_capped_runs():
    """Under --all a row has the child's CPU (imports, warm-up: all it cost the machine),
    also where the cap stopped it; in process only the simulation's."""
    rows = [{"child_cpu_s": 2.5, "cpu_s": 2.0}, {"child_cpu_s": 200.0, "error": "> 200 s"},
            {"cpu_s": 0.5}]
    assert fidelity.cpu_seconds(rows) == 2.5 + 200.0 + 0.5
    assert fidelity.cpu_seconds([]) == 0.0


def test_fidelity_runs_themis_with_the_solver_asked_for(tmp_path):
    """--themis-solver reaches every run, in process and in the --all children alike; the
    default is the paper preset's own (ECOS)."""
    spec = load_spec(spec_path("n8g8"))  # the table's cluster
    path = tmp_path / "demo40.csv"
    write_trace(path, read_trace(str(ROOT / "traces" / "data" / "demo.csv"), spec=spec)[:40])
    records = read_trace(path)
    expected = {solver: simulate(records, spec, "themis",
                                 get_preset("paper", themis_solver=solver)).summary.avg_jct
                for solver in ("ecos", "bisection")}
    assert expected["ecos"] != expected["bisection"]  # the check below can tell them apart
    traces = {"demo40": path}
    for solver in (None, "bisection"):
        want = expected[solver or "ecos"]
        [plain] = fidelity.run_in_process(traces, ["themis"], solver)
        [child] = fidelity.run_all(traces, ["themis"], None, 1, progress=False,
                                   themis_solver=solver)
        assert plain["avg_jct"] == want and child["avg_jct"] == want
