"""Evidence that can fail: a measurement that is inf, nan or absurd is refused where it enters
(schema, profiles, core), a round that raises does not end the scheduler, and a finished
job's profile estimate is dropped.

The service tests run the real scheduler service against a real broker (tests/live/test_service.py
harness) and send hostile events as a broken trainer would: on a raw PUB socket, since
`Publisher` validates (and now refuses) what it sends.
"""
from __future__ import annotations

import functools
import math
import threading
import time
from typing import Any

import msgpack
import pytest
import zmq

import tests.live.test_service as test_service
from broker.client import _open
from broker.messages import Message, MessageError, decode, encode, make
from broker.wire import EVENT_HWM, SUBSCRIPTION_HWM
from scheduler.core.engine import Core, SchedulingError
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from scheduler.core.profiles import ProfileEstimator, as_layout
from scheduler.live.service import SchedulerService
from specs.limits import MAX_SECONDS
from tests.helpers import job, spec
from tests.live.test_service import harness, wait_for  # noqa: F401  (the fixture)

INF, NAN = float("inf"), float("nan")
DEADLINE_S = 20.0  # for one answer on a loaded 2-core machine


class RecordingLog:
    """A structlog stand-in that keeps every record (level, event, fields); thread-safe."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict]] = []
        self._lock = threading.Lock()

    def _add(self, level: str, event: str, **kw: Any) -> None:
        with self._lock:
            self.records.append((level, event, kw))

    def __getattr__(self, level: str):
        if level in ("debug", "info", "warning", "error", "exception", "critical"):
            return functools.partial(self._add, level)
        raise AttributeError(level)

    def of(self, event: str) -> list[dict]:
        with self._lock:
            return [kw for _, e, kw in self.records if e == event]


@pytest.fixture
def logged(harness, monkeypatch):  # noqa: F811  (harness is the fixture)
    """The service harness, its scheduler logging to a RecordingLog (`h.log`)."""
    def make(**options: Any):
        log = RecordingLog()
        monkeypatch.setattr(test_service, "SchedulerService",
                            functools.partial(SchedulerService, log=log))
        h = harness(**options)
        h.log = log
        return h
    return make


class RawPublisher:
    """Publishes events as given, unchecked: what a broken or hostile trainer can send."""

    def __init__(self, endpoints: Any, sender: str):
        self.sender, self.seq = sender, 0
        self._sock = _open(endpoints, zmq.PUB, endpoints.events_in, linger=1000,
                           sndhwm=EVENT_HWM, rcvhwm=SUBSCRIPTION_HWM)

    def publish(self, type_: str, **fields: Any) -> None:
        self.seq += 1
        msg = Message(type=type_, id=f"{self.sender}-{self.seq}", sender=self.sender,
                      ts=time.time(), fields=fields, seq=self.seq)
        self._sock.send_multipart([type_.encode(), encode(msg)])

    def close(self) -> None:
        self._sock.close()


def _timing(job_id: int, **stages: float) -> dict[str, Any]:
    return {"job_id": job_id, "stages": stages, "iteration_time": sum(stages.values()),
            "iterations": 10.0}


# -- (c) the schema ---------------------------------------------------------------------------
def _raw(type_: str, event: bool = True, **fields: Any) -> bytes:
    return msgpack.packb({"type": type_, "v": 1, "id": "x-1", "sender": "trainer.9",
                          "ts": 1.0, **({"seq": 1} if event else {}), **fields},
                         use_bin_type=True)


GOOD_TIMING = {"job_id": 1, "stages": {"data": 0.1, "gpu": 0.2, "net": 0.05},
               "iteration_time": 0.35, "iterations": 10.0, "restart_overhead": 2.0}


@pytest.mark.parametrize("bad", [INF, -INF, NAN, 1e300, -1.0, 1.01e6])
@pytest.mark.parametrize("where", ["stage", "iteration_time", "restart_overhead"])
def test_schema_refuses_timing_that_is_not_a_time(bad, where):
    fields = {**GOOD_TIMING, "stages": dict(GOOD_TIMING["stages"])}
    if where == "stage":
        fields["stages"]["gpu"] = bad
    else:
        fields[where] = bad
    with pytest.raises(MessageError) as info:
        decode(_raw("event.timing", **fields))
    assert info.value.code == "bad_value" and where.split("_")[0] in info.value.reason
    assert info.value.sender == "trainer.9" and info.value.msg_type == "event.timing"
    with pytest.raises(MessageError):  # nor can a sender build one
        make("event.timing", "trainer.9", "x-2", seq=1, **fields)


@pytest.mark.parametrize("type_, fields", [
    ("event.timing", {**GOOD_TIMING, "iterations": INF}),
    ("event.timing", {**GOOD_TIMING, "stages": {"gpu": "fast"}}),
    ("event.timing", {**GOOD_TIMING, "stages": {f"s{i}": 0.1 for i in range(17)}}),
    ("event.timing", {**GOOD_TIMING, "job_id": -1}),
    ("event.progress", {"job_id": 1, "iterations": NAN}),
    ("event.progress", {"job_id": 1, "iterations": 1e300}),
])
def test_schema_refuses_bad_event_numbers(type_, fields):
    with pytest.raises(MessageError) as info:
        decode(_raw(type_, **fields))
    assert info.value.code == "bad_value"


REGISTER = {"node": "n0", "gpus": [0, 1], "cpus": 8, "mem": 64.0,
            "running": [{"job_id": 3, "iterations": 2.5}], "incarnation": "a", "launches": 2}


@pytest.mark.parametrize("type_, change", [
    ("agent.register", {"mem": INF}), ("agent.register", {"mem": NAN}),
    ("agent.register", {"mem": -1.0}), ("agent.register", {"cpus": 10**12}),
    ("agent.register", {"cpus": -4}), ("agent.register", {"gpus": [0, 2**40]}),
    ("agent.register", {"launches": -1}),
    ("agent.register", {"running": [{"job_id": 3, "iterations": INF}]}),
    ("agent.heartbeat", {"running": [{"job_id": 3, "iterations": NAN}]}),
    ("agent.heartbeat", {"running": [{"job_id": 3, "iterations": -5.0}]}),
    ("agent.heartbeat", {"launches": 2**60}),
    ("job.finished", {"iterations": INF}), ("job.stopped", {"iterations": NAN}),
])
def test_schema_refuses_bad_agent_numbers(type_, change):
    base = {"agent.register": REGISTER,
            "agent.heartbeat": {"node": "n0", "running": [], "incarnation": "a", "launches": 1},
            "job.finished": {"job_id": 1, "node": "n0", "iterations": 5.0, "ok": True},
            "job.stopped": {"job_id": 1, "node": "n0", "iterations": 5.0}}[type_]
    decode(_raw(type_, event=False, **base))  # the base is fine
    with pytest.raises(MessageError) as info:
        decode(_raw(type_, event=False, **{**base, **change}))
    assert info.value.code == "bad_value"


def test_schema_takes_the_bounds_themselves_and_leaves_types_to_handlers():
    top = MAX_SECONDS
    edge = {**GOOD_TIMING, "stages": {"data": 0.0, "gpu": top, "net": 0},
            "iteration_time": 0, "restart_overhead": top}
    assert decode(_raw("event.timing", **edge))["stages"]["gpu"] == top
    # a running entry of the wrong shape is the handler's to refuse (with its own code)
    decode(_raw("agent.heartbeat", event=False, node="n0", running=[{"job_id": "x"}]))


# -- (c) profiles and the core ------------------------------------------------------------------
@pytest.mark.parametrize("bad", [INF, NAN, 1e300, 2e6])
def test_as_layout_and_fold_refuse_non_times(bad):
    assert as_layout({"data": 0.1, "gpu": bad, "net": 0.1}, 3) is None
    assert as_layout({"io": bad, "cpu": 0.1, "gpu": 0.1, "net": 0.1}, 3) is None
    est = ProfileEstimator()
    assert est.fold(1, (1.0, 1.0, 1.0), {"data": 0.1, "gpu": bad, "net": 0.1}) is None
    assert est.estimates == {}


def _core_with_job() -> Core:
    preset = get_preset("default")
    core = Core(spec(nodes=1, gpus=4), make_policy("muri-s", preset), preset.model)
    core.submit(job(1, stages=(0.1, 0.2, 0.3)), 0.0)
    return core


@pytest.mark.parametrize("profile, solo", [
    ((0.1, INF, 0.1), None), ((0.1, NAN, 0.1), None), ((-0.1, 0.2, 0.1), None),
    ((0.0, 0.0, 0.0), None), ((0.1, 0.2), None), ((1e308, 1e308, 1e308), None),
    (("a", 0.1, 0.1), None), ((0.1, 0.1, 0.1), INF), ((0.1, 0.1, 0.1), NAN),
    ((0.1, 0.1, 0.1), 0.0), (None, -1.0),
])
def test_core_refuses_a_profile_that_is_not_times(profile, solo):
    core = _core_with_job()
    before = (core.jobs[1].profile, core.jobs[1].solo_time)
    with pytest.raises(SchedulingError):
        core.update_profile(1, profile, solo_time=solo)
    assert (core.jobs[1].profile, core.jobs[1].solo_time) == before  # nothing changed
    core.round(0.0)  # and the planner still plans


@pytest.mark.parametrize("bad", [INF, NAN, -1.0, "x", None])
def test_core_refuses_a_restart_overhead_that_is_not_a_time(bad):
    core = _core_with_job()
    before = core.jobs[1].restart_overhead
    with pytest.raises(SchedulingError):
        core.set_restart_overhead(1, bad)
    assert core.jobs[1].restart_overhead == before
    core.set_restart_overhead(1, 3)
    assert core.jobs[1].restart_overhead == 3.0


def test_refusal_log_counts_every_refusal_and_logs_each_sender_once():
    from broker.client import RefusalLog

    log = RecordingLog()
    refusals = RefusalLog(log, max_logged=3)
    for _ in range(100):
        refusals.refuse("event.timing:bad_value", "trainer.1", "inf")
    refusals.refuse("event.progress:bad_value", "trainer.1", "nan")
    refusals.refuse("event.timing:bad_value", "trainer.2", "inf")
    for i in range(50):  # past max_logged: counted only, and that is said once
        refusals.refuse("event.timing:bad_value", f"spoof{i}", "inf")
    assert refusals.counts() == {"event.progress:bad_value": 1, "event.timing:bad_value": 151}
    logged = [(r["sender"], r["kind"]) for r in log.of("input_refused")]
    assert logged == [("trainer.1", "event.timing:bad_value"),
                      ("trainer.1", "event.progress:bad_value"),
                      ("trainer.2", "event.timing:bad_value")]
    assert len(log.of("input_refused_unlogged")) == 1


# -- (a) a live scheduler fed inf, nan and 1e300 -------------------------------------------------
def test_non_finite_timing_for_a_running_job_is_refused_and_the_scheduler_goes_on(logged):
    h = logged(policy="muri-s", spec=spec(nodes=1, gpus=4))
    svc = h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, stages=(0.3, 0.05, 0.05), iterations=10**6))
    h.submit(job(2, num_gpu=4, stages=(0.05, 0.3, 0.05), iterations=10**6))
    wait_for(lambda: {h.job(1)["state"], h.job(2)["state"]} == {"running"})
    trainer = RawPublisher(h.endpoints, "trainer.1")
    try:
        # the bus is joined once a valid measurement of job 1 has arrived
        def joined() -> bool:
            trainer.publish("event.timing", **_timing(1, data=0.3, gpu=0.05, net=0.05))
            return 1 in svc.state.measured.profiles.estimates
        wait_for(joined, step=0.05)
        rounds = h.status()["rounds"]
        bad = [{"data": INF, "gpu": 0.05, "net": 0.05}, {"data": NAN, "gpu": 0.05, "net": 0.05},
               {"data": 1e300, "gpu": 0.05, "net": 0.05}, {"data": 0.3, "gpu": -INF, "net": 0}]
        for _ in range(25):  # a trainer whose clock broke keeps sending
            for stages in bad:
                trainer.publish("event.timing", job_id=1, stages=stages, iteration_time=INF,
                                iterations=10.0, restart_overhead=INF)
            trainer.publish("event.progress", job_id=1, iterations=NAN)
        trainer.publish("event.progress", job_id=1, iterations=123.0)  # after all of them
        wait_for(lambda: svc.state.measured.progress.get(1) == 123.0)
        # the scheduler is alive and still plans: more rounds, a new job placed
        wait_for(lambda: h.status()["rounds"] >= rounds + 3)
        assert all(math.isfinite(t) for j in (1, 2) for t in svc.state.core.jobs[j].profile)
        assert math.isfinite(svc.state.core.jobs[1].restart_overhead)
        h.request("job.finished", job_id=1, node="n0", iterations=10**6, ok=True)
        wait_for(lambda: h.job(1)["state"] == "finished")
        h.submit(job(3, num_gpu=4, iterations=100))
        wait_for(lambda: h.job(3)["state"] == "running")
        refused = h.status()["refused"]
        assert refused["event.timing:bad_value"] == 100
        assert refused["event.progress:bad_value"] == 25
        # one log line per sender and kind, not one per message
        lines = [r for r in h.log.of("input_refused") if r["sender"] == "trainer.1"]
        assert sorted(r["kind"] for r in lines) == ["event.progress:bad_value",
                                                    "event.timing:bad_value"]
        assert not h.log.of("round_failed")
    finally:
        trainer.close()
    assert 3 in [launch["job_id"] for launch in list(n0.launches.queue)]


# -- (b) a round that raises -------------------------------------------------------------------
class Exploding:
    """Wraps a policy; plan() raises while `broken` is set."""

    def __init__(self, policy: Any):
        self.policy, self.broken, self.calls = policy, threading.Event(), 0
        self.broken.set()

    def plan(self, ctx: Any) -> Any:
        self.calls += 1
        if self.broken.is_set():
            raise ValueError("weights must be finite")
        return self.policy.plan(ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


def test_a_round_that_raises_is_logged_and_the_scheduler_goes_on(logged):
    h = logged(policy="muri-s", spec=spec(nodes=1, gpus=4), round_s=0.3)
    svc = h.start_scheduler()
    with svc.state.lock:
        svc.state.core.policy = exploding = Exploding(svc.state.core.policy)
    n0 = h.agent("n0")
    h.wait_online("n0")
    assert h.submit(job(1, num_gpu=2))["accepted"] is True
    assert h.submit(job(2, num_gpu=2))["accepted"] is True
    failed = wait_for(lambda: [r for r in h.log.of("round_failed") if r["queued"] == [1, 2]])
    assert "ValueError: weights must be finite" in failed[0]["error"]
    assert failed[0]["running"] == []
    # the loop goes on at the round's pace, not in a hot loop: 3 more failures take 2 periods
    start, count = time.monotonic(), h.status()["round_failures"]
    wait_for(lambda: h.status()["round_failures"] >= count + 3)
    assert time.monotonic() - start >= 2 * 0.3 * 0.9
    assert h.status()["counts"]["pending"] == 2 and n0.launches.empty()
    exploding.broken.clear()  # fixed: the next due round places the jobs
    launched = {n0.next_launch()["job_id"], n0.next_launch()["job_id"]}
    assert launched == {1, 2}
    wait_for(lambda: h.status()["counts"]["running"] == 2)
    assert h._thread.is_alive()


def test_a_round_that_raises_once_costs_that_round_only(logged):
    h = logged(policy="srsf", round_s=0.3)
    svc = h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    h.submit(job(1, num_gpu=2))
    assert n0.next_launch()["job_id"] == 1
    with svc.state.lock:
        svc.state.core.policy = exploding = Exploding(svc.state.core.policy)
        calls = exploding.calls

    def heal_after_one(ctx: Any, plan=exploding.plan) -> Any:
        if not any(j.id == 2 for j in ctx.queue):  # rounds before job 2 came: as ever
            return exploding.policy.plan(ctx)
        try:
            return plan(ctx)
        finally:
            exploding.broken.clear()
    exploding.plan = heal_after_one  # type: ignore[method-assign]
    h.submit(job(2, num_gpu=2))
    assert n0.next_launch()["job_id"] == 2
    failed = h.log.of("round_failed")
    assert len(failed) == 1 and failed[0]["running"] == [1] and failed[0]["queued"] == [2]
    assert exploding.calls >= calls + 2 and h.job(1)["state"] == "running"


# -- 2. forget ---------------------------------------------------------------------------------
def test_a_finished_job_leaves_no_profile_estimate_a_requeued_one_keeps_it(harness):  # noqa: F811
    h = harness(policy="srsf")
    svc = h.start_scheduler()
    n0 = h.agent("n0")
    h.wait_online("n0")
    for j in (1, 2):
        h.submit(job(j, num_gpu=2, iterations=10**6))
    assert {n0.next_launch()["job_id"], n0.next_launch()["job_id"]} == {1, 2}
    trainer = RawPublisher(h.endpoints, "trainer.x")
    try:
        def measured() -> bool:
            for j in (1, 2):
                trainer.publish("event.timing", **_timing(j, data=0.2, gpu=0.1, net=0.1))
            return {1, 2} <= set(svc.state.measured.profiles.estimates)
        wait_for(measured, step=0.05)
    finally:
        trainer.close()
    h.request("job.finished", job_id=1, node="n0", iterations=10**6, ok=True)
    # a failed trainer requeues its job: it runs again, its measurement still holds
    h.request("job.finished", job_id=2, node="n0", iterations=5.0, ok=False)
    assert h.job(1)["state"] == "finished"
    assert 1 not in svc.state.measured.profiles.estimates
    assert 2 in svc.state.measured.profiles.estimates


# -- a request with a bad number is answered, never acted on -------------------------------------
def _raw_request(endpoints: Any, type_: str, **fields: Any) -> Message:
    """Send a request unchecked (Requester would refuse to build it) and return the answer."""
    from broker.wire import EMPTY, REP, REQ, REQUEST_HWM

    sock = _open(endpoints, zmq.DEALER, endpoints.requests, sndhwm=REQUEST_HWM,
                 rcvhwm=REQUEST_HWM)
    try:
        msg = Message(type=type_, id=f"raw-{type_}", sender="agent.n1", ts=time.time(),
                      fields=fields)
        sock.send_multipart([EMPTY, REQ, b"scheduler", encode(msg)])
        assert sock.poll(int(DEADLINE_S * 1000)), "no answer"
        empty, rep, payload = sock.recv_multipart()
        assert (empty, rep) == (EMPTY, REP)
        return decode(payload)
    finally:
        sock.close(0)


@pytest.mark.parametrize("fields", [
    {"node": "n1", "gpus": [0, 1, 2, 3], "cpus": 8, "mem": NAN},
    {"node": "n1", "gpus": [0, 1, 2, 3], "cpus": 8, "mem": 64.0,
     "running": [{"job_id": 1, "iterations": INF}]},
])
def test_a_registration_with_a_non_finite_number_is_answered_bad_value(harness, fields):  # noqa: F811
    h = harness(spec=spec(nodes=2, gpus=4))
    h.start_scheduler()
    answer = _raw_request(h.endpoints, "agent.register", **fields)
    assert answer.type == "error" and answer["code"] == "bad_value"
    assert answer["re"] == "raw-agent.register"
    status = h.status()  # nothing registered, and the scheduler still answers
    assert "n1" not in status["agents"]
