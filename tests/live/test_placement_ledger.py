"""The live scheduler's placement ledger (scheduler/live/ledger.py), on its own: no clock, no
sockets, no scheduler. Each test states one rule of where jobs run and what becomes a stray."""
from __future__ import annotations

from scheduler.live.ledger import Ledger, Placed, node_name
from scheduler.core.state import NodeSlice


def on(*nodes: int, group: tuple[int, ...] = (1,)) -> Placed:
    return Placed(group, 0.5, tuple(NodeSlice(n, (0,)) for n in nodes))


def test_place_and_unplace_keep_the_node_index_in_step():
    ledger = Ledger()
    where = on(0, 2)
    ledger.place(1, where, {0: ("a", 3)})
    assert ledger.placed == {1: where}
    assert ledger.on(0) == {1: ("a", 3)} and ledger.on(2) == {1: None}  # node 2 did not say
    assert ledger.runs_on(1, "n2") and not ledger.runs_on(1, "n1")
    assert ledger.unplace(1) is where
    assert ledger.placed == {} and ledger.on(0) == {} and ledger.on(2) == {}
    assert ledger.unplace(1) is None


def test_release_of_a_placed_job_makes_strays_of_its_other_nodes_only():
    ledger = Ledger()
    ledger.place(1, on(0, 1, 2), {})
    where = ledger.release(1, keep="n1")  # n1 reported the end: its trainer is gone already
    assert where == on(0, 1, 2)
    assert ledger.strays == [(1, "n0"), (1, "n2")]
    assert ledger.placed == {} and ledger.launching == {}


def test_release_during_a_launch_ends_it_and_strays_every_node():
    ledger = Ledger()
    ledger.begin_launch(4, on(0, 1, group=(4,)))
    assert ledger.where(4) == on(0, 1, group=(4,))
    assert ledger.release(4, keep=None) == on(0, 1, group=(4,))
    assert ledger.strays == [(4, "n0"), (4, "n1")]
    assert ledger.where(4) is None  # the launch, once answered, learns it from the job's phase
    ledger.end_launch(4)
    assert ledger.where(4) is None and ledger.launching == {}


def test_release_of_an_unknown_job_changes_nothing():
    ledger = Ledger()
    assert ledger.release(9, keep="n0") is None
    assert ledger.strays == [] and ledger.placed == {} and ledger.launching == {}


def test_take_strays_dedups_keeps_order_and_adopts_what_was_placed_since():
    ledger = Ledger()
    ledger.strays += [(5, "n1"), (2, "n0"), (5, "n1"), (7, "n3")]
    ledger.place(7, on(3, group=(7,)), {})  # launched on n3 since it was found there
    strays, adopted = ledger.take_strays()
    assert strays == [(5, "n1"), (2, "n0")]
    assert adopted == [(7, "n3")]
    assert ledger.strays == []


def test_node_names():
    assert [node_name(i) for i in (0, 7, 12)] == ["n0", "n7", "n12"]
    assert on(4, 1).nodes == (4, 1) and on(4).key == ((1,), (NodeSlice(4, (0,)),))
