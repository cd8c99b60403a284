"""The artifact's event folding (scheduler/sim/folding.py) against its definition: each time,
in the order given, joins the first earlier event within relative tolerance (math.isclose)
and takes its time; a time that joins none is an event."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from scheduler.sim.folding import fold, folds


def scan(times, rel):
    """The definition, trying every event so far."""
    if rel <= 0:
        return list(times)
    events, out = [], []
    for t in times:
        for event in events:
            if math.isclose(event, t, rel_tol=rel):
                out.append(event)
                break
        else:
            events.append(t)
            out.append(t)
    return out


BASES = st.sampled_from([0.0, 1.0, 1e3, 12345.678, 1e9])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(-4, 4)), max_size=25), BASES, BASES,
       st.sampled_from([1e-9, 1e-6, 1e-3, 0.1, 0.6]), st.sampled_from([0.3, 0.6, 1.0, 1.7]))
def test_fold_is_the_scan_over_every_event(points, one, two, rel, factor):
    # chains of near-equal times about two times, neighbours within `rel` or just beyond
    step = rel * factor
    times = [(one if first else two) * (1 + k * step) + k * step for first, k in points]
    assert list(fold(times, rel)) == scan(times, rel)
    assert folds(sorted(times), rel) or list(fold(times, rel)) == times


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([1.0, 1.0 + 1e-10, 1.0 + 1.5e-9, 1.0 + 2.2e-9, 2.0,
                                 2.0 + 3e-9, 2.0 - 2e-9, 5.0, 100.0, 0.0, -1.0, -1.0 - 1e-9,
                                 float("inf")]), max_size=14),
       st.sampled_from([0.0, 1e-9, 2e-9, 1e-8, 0.6]))
def test_fold_handles_ties_signs_and_infinity_as_the_scan_does(times, rel):
    assert list(fold(times, rel)) == scan(times, rel)


def test_the_first_event_made_wins_among_several_close_enough():
    # 100.9 is within 1% of both 101.5 and 100.0; 101.5 came first, so 100.9 joins it
    assert list(fold([101.5, 100.0, 100.9], 0.01)) == [101.5, 100.0, 101.5]
    # arrivals in time order: each joins the earliest event it is close to
    assert list(fold([1.0, 1.0 + 1e-10, 1.0 + 0.9e-9, 1.0 + 2e-9], 1e-9)) == [1.0, 1.0, 1.0, 1.0 + 2e-9]


def test_an_end_this_close_to_an_arrival_is_taken_at_the_arrival_late_in_a_trace():
    """The artifact's Muri loop folds an end into the next arrival with math.isclose(...,
    abs_tol=1e-4), whose default rel_tol=1e-9 is the wider one late in a trace: at 4e6 s an
    end 1-2 ms before an arrival is taken at the arrival (trace1's Muri-L met it at
    4,721,245.9993 s, an arrival at 4,721,246 s)."""
    from scheduler.presets import get_preset
    from scheduler.sim.simulator import simulate
    from tests.helpers import job, spec

    cluster, paper = spec(nodes=1, gpus=8), get_preset("paper")
    first = job(0, submit=4_000_000.0, iterations=1000, stages=(0.1, 0.2, 0.0),
                iteration_time=0.3003)
    alone = simulate([first], cluster, "muri-l", paper).outcomes[0].end
    arrival = (math.floor(alone * 1000) + 2) / 1000  # 1-2 ms after that end, on a ms
    assert 1e-4 < arrival - alone < 1e-9 * arrival
    later = job(1, submit=arrival, iterations=10, stages=(0.1, 0.2, 0.0))
    ends = {o.job_id: o.end for o in simulate([first, later], cluster, "muri-l", paper).outcomes}
    assert ends[0] == arrival
    # under the default preset an end is its own event
    default = get_preset("default")
    alone = simulate([first], cluster, "muri-l", default).outcomes[0].end
    arrival = (math.floor(alone * 1000) + 2) / 1000  # as close after its own end
    later = job(1, submit=arrival, iterations=10, stages=(0.1, 0.2, 0.0))
    ends = {o.job_id: o.end for o in simulate([first, later], cluster, "muri-l",
                                              default).outcomes}
    assert ends[0] == alone != arrival
