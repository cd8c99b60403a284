"""The stage gate: cyclic turns per stage, exclusive stages, dropping members that leave or
stall, surviving bad input, client timeouts; and the gated emulated stage loop."""
from __future__ import annotations

import threading
import time

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import zmq

from node_agent.gate import StageGate
from node_agent.gate_turns import TurnTable
from scheduler.core.interleave import cyclic_tt
from trainer.gate_client import GateClient, GateUnavailable, NullGate
from workloads.emulated import run_gated

STAGES = ("io", "cpu", "gpu", "net")
DEADLINE_S = 20.0  # generous: a loaded 2-core machine can stall a thread for a while


class Recorder:
    """Gate events as the gate emitted them, and what each client saw, for the assertions."""

    def __init__(self):
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.spans: list[tuple[str, object, float, float]] = []  # (stage, job, in, out)

    def __call__(self, event: dict) -> None:
        with self.lock:
            self.events.append(dict(event))

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]


class SpanGate:
    """A GateClient that also records, on the client side, when it held each stage."""

    def __init__(self, client: GateClient, rec: Recorder):
        self.client, self.rec = client, rec

    def turn(self, stage):
        outer = self.client.turn(stage)

        class _Span:
            def __enter__(inner):
                outer.__enter__()
                inner.t_in = time.monotonic()

            def __exit__(inner, *exc):
                t_out = time.monotonic()
                with self.rec.lock:
                    self.rec.spans.append((stage, self.client.job_id, inner.t_in, t_out))
                return outer.__exit__(*exc)

        return _Span()


def run_members(gate: StageGate, plans: dict, stages: dict, timeout_s: float = 10.0,
                wrap=None) -> dict:
    """Run each job's gated loop in its own thread (its own client); return results by job.

    plans: job -> iterations (then the member leaves), or None for a member that never shows.
    """
    results, failures, threads = {}, [], []

    def member(job, iterations):
        try:
            with GateClient(gate.endpoint, job, timeout_s=timeout_s) as client:
                results[job] = run_gated(stages, iterations, wrap(client) if wrap else client)
        except BaseException as exc:  # surfaced by the assertion below
            failures.append((job, exc))

    for job, iterations in plans.items():
        if iterations is not None:
            threads.append(threading.Thread(target=member, args=(job, iterations)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a member never finished (deadlock?)"
    assert not failures, failures
    return results


def grant_order(rec: Recorder, stage: str) -> list:
    return [e["job"] for e in rec.of("grant") if e["stage"] == stage]


def assert_exclusive(rec: Recorder) -> None:
    """Gate side: grant and release alternate per stage, by the same job; client side: the
    spans during which members held one stage never overlap."""
    holder: dict = {}
    for e in rec.events:
        if e["event"] == "grant":
            assert holder.get(e["stage"]) is None, f"{e['stage']} granted while held: {e}"
            holder[e["stage"]] = e["job"]
        elif e["event"] == "release":
            assert holder.get(e["stage"]) == e["job"], e
            holder[e["stage"]] = None
        elif e["event"] in ("left", "dropped"):
            holder = {s: j for s, j in holder.items() if j != e["job"]}
    for stage in {s for s, *_ in rec.spans}:
        spans = sorted((t_in, t_out) for s, _j, t_in, t_out in rec.spans if s == stage)
        for (_a_in, a_out), (b_in, _b_out) in zip(spans, spans[1:]):
            assert b_in >= a_out, f"{stage} held by two members at once"


@pytest.fixture
def rec():
    return Recorder()


# -- turns ------------------------------------------------------------------------------------

def test_grants_follow_the_cyclic_order_and_stages_are_exclusive(rec):
    stages = {s: 0.002 for s in STAGES}
    with StageGate([10, 11, 12], STAGES, on_event=rec) as gate:
        run_members(gate, {10: 5, 11: 5, 12: 5}, stages, wrap=lambda c: SpanGate(c, rec))
    for stage in STAGES:
        assert grant_order(rec, stage) == [10, 11, 12] * 5
    assert_exclusive(rec)
    assert len(rec.spans) == 3 * 5 * len(STAGES)
    # member i starts i stages behind member 0: its first io comes after the previous one's
    first_io = [next(t for s, j, t, _ in sorted(rec.spans, key=lambda x: x[2])
                     if s == "io" and j == job) for job in (10, 11, 12)]
    assert first_io == sorted(first_io)


def test_a_member_that_leaves_is_dropped_and_the_others_continue(rec):
    stages = {"data": 0.002, "gpu": 0.002, "net": 0.002}
    with StageGate([1, 2, 3], tuple(stages), on_event=rec, stall_timeout=5.0) as gate:
        results = run_members(gate, {1: 6, 2: 2, 3: 6}, stages)
    assert [e["job"] for e in rec.of("left")][0] == 2
    assert not rec.of("dropped")
    assert results[1].iterations == results[3].iterations == 6
    left_at, next_left = rec.of("left")[0]["t"], rec.of("left")[1]["t"]
    for stage in stages:
        after = [e["job"] for e in rec.of("grant") if e["stage"] == stage and e["t"] > left_at]
        assert 2 not in after
        both = [e["job"] for e in rec.of("grant")
                if e["stage"] == stage and left_at < e["t"] < next_left]
        assert all(a != b for a, b in zip(both, both[1:])), both  # 1 and 3 take turns
    assert_exclusive(rec)


def test_a_member_that_never_asks_for_a_turn_is_never_waited_for(rec):
    """A program that does not use the trainer API never joins its gate: the others take
    every turn among themselves from the start, without waiting out a stall timeout (60 s
    here, past the clients' own 10 s: a wait on member 2 would fail the run)."""
    stages = {s: 0.002 for s in STAGES}
    with StageGate([1, 2, 3], STAGES, on_event=rec, stall_timeout=60.0) as gate:
        results = run_members(gate, {1: 4, 2: None, 3: 4}, stages)
    assert not rec.of("dropped")
    assert results[1].iterations == results[3].iterations == 4
    assert {e["job"] for e in rec.of("grant")} == {1, 3}
    assert_exclusive(rec)


def test_a_member_holding_a_stage_too_long_is_dropped_then_rejoins(rec):
    stages = {s: 0.002 for s in STAGES}
    body_done, holding = threading.Event(), threading.Event()
    outcome = {}
    with StageGate([1, 2], STAGES, on_event=rec, stall_timeout=0.2) as gate:
        slow = GateClient(gate.endpoint, 1, timeout_s=10)
        fast = GateClient(gate.endpoint, 2, timeout_s=10)
        slow.join()

        def hog():
            with slow.turn("io"):
                holding.set()
                body_done.wait(DEADLINE_S)  # holds io until the other member got it anyway
            outcome["after"] = run_gated(stages, 3, slow)
            slow.close()

        t = threading.Thread(target=hog)
        t.start()
        try:
            assert holding.wait(DEADLINE_S)  # a member takes turns from its first request
            grant = fast.acquire("io")  # blocked by the hog until it is dropped
            assert grant["grant"] == "io"
            assert not body_done.is_set()  # granted while the hog was still inside its body
        finally:
            body_done.set()
        fast.release("io")
        for stage in STAGES[1:]:
            with fast.turn(stage):
                pass
        run_gated(stages, 3, fast)
        fast.close()
        t.join(DEADLINE_S)
        assert not t.is_alive()
    dropped = rec.of("dropped")
    assert [e["job"] for e in dropped] == [1] and "holds 'io'" in dropped[0]["reason"]
    assert slow.rejoins == 1 and outcome["after"].iterations == 3
    joins = [e["job"] for e in rec.of("join")]  # each member's first turn, and 1's return
    assert sorted(joins) == [1, 1, 2] and joins[-1] == 1
    assert_exclusive(rec)


def test_turn_table_drops_on_its_deadline_with_a_fake_clock():
    events = []
    table = TurnTable(["a", "b"], ("x", "y"), stall_timeout=1.0, emit=events.append)
    assert table.acquire("a", "x", "ta", now=0.0) == [("ta", {"ok": True, "grant": "x", "n": 1})]
    assert table.acquire("b", "x", "tb", now=0.0) == []  # a holds x
    assert table.next_deadline() == 1.0
    assert table.check_stalls(0.99) == []
    replies = table.check_stalls(1.0)
    assert replies == [("tb", {"ok": True, "grant": "x", "n": 2})]
    dropped = [e for e in events if e["event"] == "dropped"]
    assert [e["job"] for e in dropped] == ["a"]
    assert table.acquire("a", "y", "ta", now=1.5)[0][1]["error"] == "not_member"
    assert table.join("a", "ta", now=1.6)[0][1]["ok"]
    assert table.acquire("a", "x", "ta", now=1.7) == []  # b holds x
    assert table.release("b", "x", "tb", now=1.8)[1] == ("ta", {"ok": True, "grant": "x", "n": 3})


def test_a_member_that_never_asked_is_not_waited_for_and_joins_by_asking():
    table = TurnTable(["a", "b"], ("x", "y"), stall_timeout=1.0)
    assert table.acquire("b", "x", "tb", now=0.0)[0][1]["grant"] == "x"  # a never asked
    assert table.next_deadline() is None
    assert table.release("b", "x", "tb", now=0.1)[0][1]["ok"]
    assert table.acquire("a", "x", "ta", now=0.2)[0][1]["grant"] == "x"  # a takes part now
    assert table.acquire("b", "y", "tb", now=0.3)[0][1]["grant"] == "y"
    assert table.release("b", "y", "tb", now=0.4)[0][1]["ok"]
    assert table.acquire("b", "x", "tb", now=0.5) == []  # a holds x: b waits its turn


def test_a_regroup_reorders_turns_in_place_and_drops_those_left_out():
    events = []
    table = TurnTable([1, 2, 3], ("x", "y"), stall_timeout=1.0, emit=events.append)
    assert table.acquire(1, "x", 1, now=0.0)[0][1]["grant"] == "x"
    assert table.acquire(3, "x", 3, now=0.0) == []  # 1 holds x
    replies = table.regroup([3, 4, 1], now=0.1)  # 2 (never asked) leaves, 4 is new
    assert replies == [] and table.slots == (3, 4, 1)
    assert table.holder["x"] == 1  # a holder keeps its stage until it releases
    replies = table.release(1, "x", 1, now=0.2)
    assert replies[1] == (3, {"ok": True, "grant": "x", "n": 2})  # 3 is first now
    assert table.acquire(2, "x", 2, now=0.3)[0][1]["error"] == "unknown_job"
    assert table.acquire(1, "y", 1, now=0.3) == []  # 3's turn on y comes first now
    assert table.release(3, "x", 3, now=0.4)[0][1]["ok"]
    assert table.acquire(3, "y", 3, now=0.5)[0][1]["grant"] == "y"
    assert table.release(3, "y", 3, now=0.6)[1] == (1, {"ok": True, "grant": "y", "n": 2})
    assert table.acquire(4, "x", 4, now=0.7) == []  # 4 joins by asking: slot 1, behind 3
    assert table.acquire(3, "x", 3, now=0.8)[0][1]["grant"] == "x"
    assert table.release(3, "x", 3, now=0.9)[1] == (4, {"ok": True, "grant": "x", "n": 4})
    assert [e["members"] for e in events if e["event"] == "regroup"] == [[3, 4, 1]]
    with pytest.raises(ValueError):
        table.regroup([1, 1], now=0.4)


def test_turn_table_rejects_bad_groups():
    for members, stages in (([], STAGES), ([1, 1], STAGES), ([1], ()), ([1], ("a", "a"))):
        with pytest.raises(ValueError):
            TurnTable(members, stages, 1.0)


# -- bad input and vanished gates ------------------------------------------------------------

def test_malformed_and_unknown_messages_get_errors_and_the_gate_keeps_serving(tmp_path):
    ctx = zmq.Context.instance()
    with StageGate([1, 2], STAGES, ipc_dir=tmp_path) as gate:
        assert gate.endpoint.startswith("ipc://")
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(gate.endpoint)

        def ask(payload: bytes) -> dict:
            raw.send(payload)
            assert raw.poll(5000), "the gate stopped answering"
            return msgpack.unpackb(raw.recv(), raw=False)

        cases = [
            (b"\xc1garbage", "malformed"),
            (msgpack.packb([1, 2, 3]), "malformed"),
            (msgpack.packb({"job": 1}), "unknown_op"),
            (msgpack.packb({"op": "dance", "job": 1}), "unknown_op"),
            (msgpack.packb({"op": "acquire", "stage": "gpu"}), "malformed"),
            (msgpack.packb({"op": "acquire", "job": [1], "stage": "gpu"}), "malformed"),
            (msgpack.packb({"op": "acquire", "job": 1, "stage": 3}), "malformed"),
            (msgpack.packb({"op": "acquire", "job": 1, "stage": "tpu"}), "unknown_stage"),
            (msgpack.packb({"op": "acquire", "job": 99, "stage": "gpu"}), "unknown_job"),
            (msgpack.packb({"op": "release", "job": 1, "stage": "gpu"}), "not_holder"),
            (msgpack.packb({"op": "join", "job": 99}), "unknown_job"),
        ]
        for payload, code in cases:
            reply = ask(payload)
            assert reply["ok"] is False and reply["error"] == code, (payload, reply)
        assert gate.errors == len(cases)
        assert ask(msgpack.packb({"op": "ping", "seq": 5})) == {"ok": True, "pong": True, "seq": 5}
        raw.close(0)

        req = ctx.socket(zmq.REQ)  # REQ's delimiter frame is echoed, so REQ clients work too
        req.setsockopt(zmq.LINGER, 0)
        req.connect(gate.endpoint)
        req.send(msgpack.packb({"op": "acquire", "job": 1, "stage": "io"}))
        assert req.poll(5000)
        assert msgpack.unpackb(req.recv(), raw=False)["grant"] == "io"
        req.close(0)
        with GateClient(gate.endpoint, 2, timeout_s=5) as client:
            assert gate.remove(1)  # frees io, passes the turn on
            with client.turn("io") as grant:
                assert grant["grant"] == "io"


def test_client_times_out_with_a_clear_error_when_the_gate_is_gone():
    gate = StageGate([1], STAGES).start()
    client = GateClient(gate.endpoint, 1, timeout_s=0.3)
    assert client.ping()["pong"]
    gate.close()
    t0 = time.monotonic()
    with pytest.raises(GateUnavailable, match="gone or not serving"):
        with client.turn("gpu"):
            pass
    assert time.monotonic() - t0 < 3.0
    client.close()  # leave goes unanswered: logged, not raised


def test_null_gate_has_the_same_interface():
    gate = NullGate()
    with gate.turn("gpu") as grant:
        assert grant is None
    gate.close()


# -- the gated emulated loop ------------------------------------------------------------------

def test_emulated_stages_take_at_least_the_profile():
    """Each emulated stage lasts its profile's time or more (a busy machine only makes it
    longer: how much longer is bench/bench_interleave.py's figure), and every iteration ends
    once, in order."""
    profile = {"io": 0.04, "cpu": 0.02, "gpu": 0.06, "net": 0.02}
    result = run_gated(profile, 8, NullGate())
    for stage, want in profile.items():
        assert result.stage_means[stage] >= want * (1 - 1e-6), stage
    assert result.iteration_time >= sum(profile.values()) * (1 - 1e-6)
    ends = result.iteration_ends
    assert len(ends) == 8 and list(ends) == sorted(ends) and len(set(ends)) == 8


def test_two_complementary_members_interleave_close_to_the_model():
    # stages of 20 ms and more: a loaded machine oversleeps by a millisecond or so, which
    # must not read as a turn's wait counted into a 5 ms stage
    a = {"io": 0.08, "cpu": 0.02, "gpu": 0.02, "net": 0.02}  # io-heavy
    b = {"io": 0.02, "cpu": 0.02, "gpu": 0.02, "net": 0.08}  # net-heavy: pairs with a's io
    model = cyclic_tt((tuple(a.values()), tuple(b.values())))
    results = {}
    with StageGate(["a", "b"], STAGES) as gate:
        def member(job, profile):
            with GateClient(gate.endpoint, job, timeout_s=10) as client:
                results[job] = run_gated(profile, 12, client)

        threads = [threading.Thread(target=member, args=x) for x in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE_S)
    for job, profile in (("a", a), ("b", b)):
        for stage, want in profile.items():  # waiting for a turn never counts as stage time
            assert results[job].stage_means[stage] == pytest.approx(want, rel=0.10)
        ends = results[job].iteration_ends
        steady = (ends[-1] - ends[1]) / (len(ends) - 2)
        assert steady == pytest.approx(model, rel=0.25)
    assert model < 0.6 * (sum(a.values()) + sum(b.values()))


# -- no deadlock, whatever the timing, leaves and returns ------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(2, 4), st.sampled_from([("d", "g", "n"), STAGES]))
def test_turn_table_never_deadlocks_with_drops_rejoins_and_regroups(data, m, stages):
    """Members step through their stages in any interleaving; some are dropped and come back
    mid-iteration; the group is regrouped in place (a new slot order, a member left out, a
    new one in). Whenever everyone still in is waiting, someone must have been granted."""
    table = TurnTable(list(range(m)), stages, stall_timeout=1.0)
    want = {j: 0 for j in range(m)}  # index of the stage each member asks for next
    state = {j: "idle" for j in range(m)}  # idle | pending | holding | out | gone
    done = {j: 0 for j in range(m)}

    def apply(replies):
        for job, reply in replies:
            if reply.get("grant") is not None:
                state[job] = "holding"
            elif reply.get("error") == "dropped":
                state[job] = "out"

    for _ in range(data.draw(st.integers(20, 150))):
        movers = [j for j in state if state[j] in ("idle", "holding", "out")]
        droppable = [j for j in state if state[j] not in ("out", "gone")]
        kind = data.draw(st.sampled_from(["step"] * 8 + ["drop", "regroup"]))
        if kind == "drop" and len(droppable) > 1:
            job = data.draw(st.sampled_from(droppable))
            if state[job] == "holding":
                want[job] = (want[job] + 1) % len(stages)  # its body ends; the release is refused
            apply(table.remove(job, "dropped", 0.0))
            state[job] = "out"
            continue
        if kind == "regroup":
            order = list(data.draw(st.permutations(table.slots)))
            if len(order) > 2 and data.draw(st.booleans()):
                state[order.pop(data.draw(st.integers(0, len(order) - 1)))] = "gone"
            if len(order) < 4 and data.draw(st.booleans()):
                new = max(state) + 1
                order.insert(data.draw(st.integers(0, len(order))), new)
                want[new], state[new], done[new] = 0, "idle", 0
            apply(table.regroup(order, 0.0))
            continue
        if not movers:
            continue
        job = data.draw(st.sampled_from(movers))
        stage = stages[want[job]]
        if state[job] == "out":
            table.join(job, job, 0.0)
            state[job] = "idle"
        elif state[job] == "idle":
            state[job] = "pending"
            apply(table.acquire(job, stage, job, 0.0))
        else:
            replies = table.release(job, stage, job, 0.0)
            assert replies[0][1]["ok"]
            state[job] = "idle"
            want[job] = (want[job] + 1) % len(stages)
            done[job] += 1
            apply(replies[1:])
        inside = [j for j in state if state[j] not in ("out", "gone")]
        assert not inside or any(state[j] != "pending" for j in inside), \
            f"deadlock: all of {inside} wait, {table._pending}"
    assert sum(done.values()) > 0
