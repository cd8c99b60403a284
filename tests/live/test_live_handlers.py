"""The live scheduler's request handlers (scheduler/live/handlers.py) without a broker: real
state (core, journal in tmp_path, ledger), real messages, no sockets. Also the refusals the
scheduler and the agents share (broker/refusal.py)."""
from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from broker.messages import make
from broker.refusal import Refusal, as_handler, running_list
from node_agent import checks
from scheduler.live.handlers import Handlers
from scheduler.live.ledger import Placed
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from scheduler.core.state import NodeSlice, Status
from tests.helpers import Log, job, settle, spec
from trainer import checkpoint
from traces.record import record_to_map

_ids = itertools.count()


@pytest.fixture
def live(tmp_path):
    state = LiveState(Options(spec=spec(nodes=2, gpus=4), policy="fifo", run_dir=tmp_path),
                      Log(), time.monotonic)
    yield state, Handlers(state)
    state.journal.close()


def say(handlers: Handlers, type_: str, **fields: Any) -> dict:
    """A request answered, then the loop's next turn (what it asked of the core, applied)
    and the view it leaves for readers."""
    try:
        return handlers.handle(make(type_, "test", f"t-{next(_ids)}", **fields))
    finally:
        settle(handlers.state)
        handlers.state.publish_view()


def register(handlers: Handlers, node: str = "n0", **extra: Any) -> dict:
    return say(handlers, "agent.register", node=node, gpus=[0, 1, 2, 3], cpus=8, mem=64.0,
               **{"running": [], **extra})


def refused(handlers: Handlers, type_: str, **fields: Any) -> str:
    with pytest.raises(Refusal) as info:
        say(handlers, type_, **fields)
    return info.value.code


def test_submit_journals_then_queues_and_a_duplicate_is_not_accepted(live):
    state, h = live
    assert say(h, "job.submit", job=record_to_map(job(1))) == {"accepted": True, "job_id": 1}
    assert state.journal.get(1) is not None and 1 in state.core.jobs
    assert "arrival" in state.rounds.reasons
    again = say(h, "job.submit", job=record_to_map(job(1)))
    assert again == {"accepted": False, "job_id": 1, "reason": "duplicate"}


def test_submit_refuses_what_the_cluster_cannot_run_or_is_no_job(live):
    _, h = live
    assert refused(h, "job.submit", job=record_to_map(job(2, num_gpu=64))) == "bad_job"
    assert refused(h, "job.submit", job={"job_id": 3}) == "bad_job"


def test_nodes_outside_the_spec_and_unknown_types_are_refused(live):
    _, h = live
    assert refused(h, "agent.register", node="n2", gpus=[0], cpus=1, mem=1.0) == "unknown_node"
    assert refused(h, "agent.register", node="n01", gpus=[0], cpus=1, mem=1.0) == "unknown_node"
    assert refused(h, "agent.heartbeat", node="n0") == "unknown_agent"  # not registered
    with pytest.raises(Refusal) as info:
        h.handle(make("job.launch", "test", "x", job_id=1, gpus=[0], group=[1], slot=0,
                      workload={}, start_iteration=0.0))
    assert info.value.code == "unsupported"


def test_register_brings_the_node_online_and_names_strays(live):
    state, h = live
    state.core.set_node_online(0, False)
    reply = register(h, running=[{"job_id": 7, "iterations": 3.0}])
    # and the lease its trainers run on: 0.6 of the agent timeout (10 s), so they have
    # stopped before the scheduler would run their jobs elsewhere (node_agent/lease.py)
    assert reply == {"registered": True, "node": "n0", "strays": [7], "lease_s": 6.0}
    assert 0 not in state.core.cluster.offline
    assert state.ledger.strays == [(7, "n0")]


def _job_placed_on_n0(state: LiveState, h: Handlers, launch: tuple[str, int]) -> None:
    say(h, "job.submit", job=record_to_map(job(1, num_gpu=4, iterations=1000)))
    register(h, incarnation=launch[0])
    state.core.round(state.now())  # fifo places job 1 on n0
    assert state.core.jobs[1].status is Status.RUNNING
    where = Placed((1,), 0.3, (NodeSlice(0, (0, 1, 2, 3)),))
    assert state.jobs.launch(1, where, 0.0)  # what the launcher does, its requests answered
    assert state.jobs.launched(1, where, {0: launch}, {0: [0, 1, 2, 3]}, 0.0)


def test_heartbeat_of_a_restarted_agent_is_refused(live):
    state, h = live
    register(h, incarnation="a")
    assert refused(h, "agent.heartbeat", node="n0", incarnation="b", launches=0) == "unknown_agent"
    assert say(h, "agent.heartbeat", node="n0", incarnation="a", launches=0) == {}


def test_heartbeat_requeues_a_job_that_vanished_before_its_snapshot(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    say(h, "agent.heartbeat", node="n0", running=[], incarnation="a", launches=1)
    assert 1 not in state.ledger.placed
    assert state.core.jobs[1].status is Status.PENDING
    assert [kw["job_id"] for kw in state.log.of("job_vanished")] == [1]


def test_heartbeat_leaves_a_job_launched_after_its_snapshot(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 2))
    say(h, "agent.heartbeat", node="n0", running=[], incarnation="a", launches=1)
    assert 1 in state.ledger.placed and state.log.of("job_vanished") == []


@pytest.mark.parametrize("checkpointed, finished", [(1000.0, True), (400.0, False)])
def test_a_restarted_agent_without_the_job_finishes_it_when_its_checkpoint_is_complete(
        live, checkpointed, finished):
    """Found by a chaos run: a trainer checkpointed its last iteration and ended while its
    agent was down; the restarted agent no longer ran the job, which was then launched once
    more from its total, a second finish in the trainers' ledger. A job whose checkpoint
    holds every iteration is finished; one short of it goes back to the queue from there."""
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    # the trainer runs on unheard, long enough to do its work (1000 iterations of 0.3 s): a
    # checkpoint further ahead than the time allows would be refused (ProgressGuard)
    state.trace.offset += 400.0
    checkpoint.write(state.opt.checkpoints, checkpoint.Checkpoint(1, checkpointed, 1000.0, "n0"))
    register(h, incarnation="b")  # the agent is back, running nothing
    job_1 = state.core.jobs[1]
    assert 1 not in state.ledger.placed
    if finished:
        assert job_1.status is Status.DONE and state.journal.get(1).state == "finished"
        assert [kw["job_id"] for kw in state.log.of("job_finished_unheard")] == [1]
        assert all(1 not in g.jobs for g in state.core.round(state.now()).groups)
    else:
        assert job_1.status is Status.PENDING and job_1.remaining == 600.0
        assert state.journal.get(1).state != "finished"
        assert state.log.of("job_finished_unheard") == []


def test_a_failure_reported_by_a_node_the_job_is_not_on_is_ignored(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    register(h, node="n1")
    reply = say(h, "job.finished", job_id=1, node="n1", iterations=5.0, ok=False)
    assert reply == {"finished": False, "ignored": True} and 1 in state.ledger.placed
    reply = say(h, "job.finished", job_id=1, node="n0", iterations=5.0, ok=False)
    assert reply == {"finished": False, "requeued": True} and 1 not in state.ledger.placed


def test_a_stop_or_failure_of_a_launch_a_later_one_replaced_changes_nothing(live):
    """Each report names its launch (the agent's incarnation and launch number, its fencing
    token): a late stop or failure of an old trainer on the node, where the job now runs in
    a later launch, is refused; the same report of the launch that runs is taken."""
    state, h = live
    _job_placed_on_n0(state, h, ("a", 2))
    for old in (("a", 1), ("b", 2)):
        token = dict(incarnation=old[0], launch_seq=old[1])
        assert say(h, "job.finished", job_id=1, node="n0", iterations=5.0, ok=False,
                   **token) == {"finished": False, "ignored": True}
        assert say(h, "job.stopped", job_id=1, node="n0", iterations=5.0,
                   **token) == {"ignored": True}
    assert 1 in state.ledger.placed and state.jobs.status_of(1) == "running"
    assert [kw["launch"] for kw in state.log.of("stale_report")] == [
        ("a", 1), ("a", 1), ("b", 2), ("b", 2)]
    reply = say(h, "job.finished", job_id=1, node="n0", iterations=5.0, ok=False,
                incarnation="a", launch_seq=2)
    assert reply == {"finished": False, "requeued": True} and 1 not in state.ledger.placed


def test_finished_is_idempotent_and_unknown_jobs_are_refused(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    assert say(h, "job.finished", job_id=1, node="n0", iterations=1000.0, ok=True) == \
        {"finished": True, "already": False}
    assert state.core.jobs[1].status is Status.DONE and state.journal.get(1).state == "finished"
    assert say(h, "job.finished", job_id=1, node="n0", iterations=1000.0, ok=True) == \
        {"finished": True, "already": True}
    assert refused(h, "job.finished", job_id=99, node="n0", iterations=1.0, ok=True) \
        == "unknown_job"


def test_a_stop_report_wakes_the_round_that_waits_for_it(live):
    state, h = live
    _job_placed_on_n0(state, h, ("a", 1))
    wait = state.stop_waits.watch(1, "n0")
    reply = say(h, "job.stopped", job_id=1, node="n0", iterations=40.0, requested=True)
    assert reply == {"awaited": True}
    assert wait.done.is_set() and wait.result["iterations"] == 40.0
    assert 1 in state.ledger.placed  # the round settles it, not the handler


def test_status_query_checks_what_it_is_asked(live):
    _, h = live
    say(h, "job.submit", job=record_to_map(job(1)))
    assert say(h, "status.query", what="summary")["counts"] == \
        {"pending": 1, "running": 0, "finished": 0, "cancelled": 0, "failed": 0}
    assert refused(h, "status.query", what="everything") == "bad_request"


# -- refusals shared with the agent ------------------------------------------------------------
def test_running_lists_are_checked_the_same_way_on_both_sides():
    assert running_list([{"job_id": 3, "iterations": 2}]) == [(3, 2.0)]
    for bad in ([3], [{"job_id": True, "iterations": 1.0}], [{"job_id": 1, "iterations": "x"}]):
        with pytest.raises(Refusal) as info:
            running_list(bad)
        assert info.value.code == "bad_request"


def test_agent_checks_refuse_with_the_shared_refusal():
    with pytest.raises(Refusal) as info:
        checks.gpus([0, 0], "n0", (0, 1))
    assert info.value.code == "bad_request"
    with pytest.raises(Refusal) as info:
        checks.gpus([5], "n0", (0, 1))
    assert info.value.code == "bad_gpus"
    with pytest.raises(Refusal) as info:
        checks.workload({"kind": "emulated", "iterations": 10, "iteration_time": 0.1,
                         "stages": [0.1, 0.1]})
    assert info.value.code == "bad_workload"
    assert checks.gpus([1], "n0", (0, 1)) == (1,)


def test_as_handler_turns_refusals_and_bugs_into_error_replies():
    from broker.client import HandlerError

    def handle(msg: Any) -> dict:
        if msg.type == "status.query":
            raise Refusal("nope", "not today")
        raise KeyError("bug")

    log = Log()
    handler = as_handler(handle, log, log_refusals=True)
    with pytest.raises(HandlerError) as info:
        handler(make("status.query", "test", "a"))
    assert (info.value.code, info.value.reason) == ("nope", "not today")
    assert log.of("request_refused")[0]["code"] == "nope"
    with pytest.raises(HandlerError) as info:
        handler(make("job.stop", "test", "b", job_id=1))
    assert info.value.code == "internal" and "KeyError" in info.value.reason
