"""The paper preset reproduces the published artifact's numbers (Fig. 9/10 data).

Reads the artifact's traces from ../shared/reference/ (never committed here); skips with a
reason where that folder is absent, as on a user's fresh clone.
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from scheduler.presets import get_preset
from scheduler.simulator import simulate
from specs import load_spec
from traces import read_trace

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"

pytestmark = pytest.mark.skipif(
    not (REFERENCE / "published_results.csv").is_file(),
    reason=f"reference data not found at {REFERENCE} (the artifact's traces are not shipped)")


def _published() -> dict[tuple[str, str], dict[str, float]]:
    if not (REFERENCE / "published_results.csv").is_file():
        return {}
    with open(REFERENCE / "published_results.csv") as fh:
        return {(r["trace"], r["policy"]): {k: float(v) for k, v in r.items()
                                             if k.endswith("_s")}
                for r in csv.DictReader(fh)}


PUBLISHED = _published()
EXACT = ["srtf", "srsf", "tiresias", "antman", "muri-s", "muri-l"]
TRACES = ["trace3", "trace3_pr"]
_cache: dict[str, list] = {}


def _run(trace: str, policy: str):
    if trace not in _cache:
        _cache[trace] = read_trace(REFERENCE / f"{trace}.csv")
    spec = load_spec(REFERENCE / "n8g8.csv")
    return simulate(_cache[trace], spec, policy, get_preset("paper")).summary


def _errors(trace: str, policy: str) -> dict[str, float]:
    got = _run(trace, policy)
    want = PUBLISHED[(trace, policy)]
    return {
        "avg_jct": got.avg_jct / want["avg_jct_s"] - 1,
        "makespan": got.makespan / want["makespan_s"] - 1,
        "p99_jct": got.p99_jct / want["p99_jct_s"] - 1,
    }


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("policy", EXACT)
def test_within_one_percent_of_published(trace, policy):
    errors = _errors(trace, policy)
    assert all(abs(e) <= 0.01 for e in errors.values()), errors


THEMIS_BACKLOG_GAP = (
    "On the trace3_pr backlog Themis re-solves a 990-job program at each event and starts "
    "never-run jobs in order of near-tied allocations; the artifact's ECOS solves are "
    "inexact there (allocations ~6% off the optimum this solver finds exactly), and the "
    "outcome is chaotic in that order: the artifact itself gives avg JCT 1.81e6 s, 21% "
    "above the published 1.50e6 s. Not reproducible without replaying ECOS round-off.")


@pytest.mark.parametrize("trace", [
    "trace3", pytest.param("trace3_pr", marks=pytest.mark.xfail(reason=THEMIS_BACKLOG_GAP))])
def test_themis_within_ten_percent_of_published(trace):
    errors = _errors(trace, "themis")
    assert abs(errors["avg_jct"]) <= 0.10, errors
    assert abs(errors["makespan"]) <= 0.10, errors


def test_themis_tail_is_reported_honestly():
    """The artifact's own Themis run gives p99 4.27e6 s on trace3 (published 2.97e6): the
    published tail is not reproducible from the artifact; ours stays within 10% of the
    artifact's own run rather than of the paper."""
    got = _run("trace3", "themis")
    artifact_own_p99 = 4272231.25
    assert abs(got.p99_jct / artifact_own_p99 - 1) <= 0.10


def test_every_job_completes_exactly_once():
    records = read_trace(REFERENCE / "trace3.csv")
    spec = load_spec(REFERENCE / "n8g8.csv")
    result = simulate(records, spec, "muri-l", get_preset("paper"))
    ids = [o.job_id for o in result.outcomes if o.end is not None]
    assert sorted(ids) == sorted(r.job_id for r in records)
    assert all(o.end >= o.submit for o in result.outcomes)
