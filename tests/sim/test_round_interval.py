"""interlace-sim --round-interval: a cluster whose scheduler plans on a period. Jobs start
only at its multiples, and only at a round something happened before; a job's end is its
own time; GPUs it frees idle until the next round. Figures worked by hand."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.presets import get_preset
from scheduler.sim import cli
from scheduler.sim.simulator import simulate
from tests.helpers import job, spec

NO_OVERHEAD = get_preset("default", overhead_table={}, overhead_default=0.0)


def test_an_arrival_waits_for_the_next_round_and_ends_at_its_own_time():
    rec = job(0, submit=10.0, iterations=100, stages=(0.5, 0.3, 0.2))  # 1 s an iteration
    out = simulate([rec], spec(nodes=1, gpus=1), "srsf", NO_OVERHEAD,
                   round_interval=360.0).outcomes[0]
    assert out.start == 360.0
    assert out.end == pytest.approx(460.0)  # 100 iterations of 1 s, not rounded up
    assert out.jct == pytest.approx(450.0)


def test_gpus_a_job_frees_idle_until_the_next_round():
    # one GPU: job 0 runs 0..500 s (first round at 0), job 1 waits and starts at the round
    # at 720 s, not at 500 s when the GPU came free
    first = job(0, submit=0.0, iterations=500, stages=(0.5, 0.3, 0.2))
    second = job(1, submit=5.0, iterations=50, stages=(0.5, 0.3, 0.2))
    result = simulate([first, second], spec(nodes=1, gpus=1), "fifo", NO_OVERHEAD,
                      round_interval=360.0)
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id[0].start == 0.0 and by_id[0].end == pytest.approx(500.0)
    assert by_id[1].start == 720.0 and by_id[1].end == pytest.approx(770.0)
    # planning at every event, the second starts when the GPU frees
    eager = {o.job_id: o for o in simulate([first, second], spec(nodes=1, gpus=1), "fifo",
                                           NO_OVERHEAD).outcomes}
    assert eager[1].start == pytest.approx(500.0)


def test_no_round_runs_where_nothing_happened():
    # one job arriving at 0 that runs 10,000 s: rounds at 0 and at the round after its end
    rec = job(0, iterations=10_000, stages=(0.5, 0.3, 0.2))
    result = simulate([rec], spec(nodes=1, gpus=1), "srsf", NO_OVERHEAD, round_interval=60.0)
    assert result.rounds == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2000), st.integers(1, 400), st.sampled_from([1, 2])),
                min_size=1, max_size=8),
       st.sampled_from([30.0, 360.0]), st.sampled_from(["srsf", "tiresias", "muri-s"]))
def test_every_start_is_at_a_round_and_every_job_ends(jobs, period, policy):
    records = [job(i, num_gpu=g, submit=s, iterations=n, stages=(0.2, 0.5, 0.3))
               for i, (s, n, g) in enumerate(jobs)]
    result = simulate(records, spec(nodes=1, gpus=2), policy, get_preset("default"),
                      round_interval=period)
    assert len(result.outcomes) == len(records)
    for o in result.outcomes:
        assert o.end is not None and o.start >= o.submit
        assert o.start / period == pytest.approx(round(o.start / period))


@pytest.mark.parametrize("value", ["-1", "nan", "x"])
def test_a_bad_round_interval_is_one_line(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--round-interval", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--round-interval" in err[0]
