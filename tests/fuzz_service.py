"""Fuzzing the live scheduler over real sockets: random and hostile telemetry, heartbeats and
registrations, as a broken trainer, a confused agent or an attacker with a key would send them.

`Fuzzer` builds each message as a plain map (not through `broker.messages.make`, which would
refuse the hostile ones before they leave) and sends it on raw sockets: events on a PUB to the
bus, requests on a DEALER to `scheduler`, each request awaiting its answer. It predicts which
messages the schema refuses from `RULES`, the schema's rules written out here independently of
broker/messages.py (a bound dropped there is then a count that no longer matches), so a run
can be checked against the scheduler's own refusal counts (`status.query` -> `refused`).
Seeded: the same seed sends the
same messages. Used by tests/live/test_service_fuzz.py (in CI, ~1,500 messages against the test
harness) and bench/fuzz_service.py (10,000 against real processes).
"""
from __future__ import annotations

import collections
import itertools
import math
import random
import time
from typing import Any, Sequence

import msgpack
import zmq

from broker.client import Subscriber, _open
from broker.endpoints import Endpoints
from broker.messages import MessageError, decode
from broker.wire import EMPTY, EVENT_HWM, REP, REQ, REQUEST_HWM, SUBSCRIPTION_HWM

KINDS = ("event.timing", "event.progress", "agent.heartbeat", "agent.register")
STAGES = ("data", "io", "cpu", "gpu", "net")
HOSTILE = (float("inf"), float("-inf"), float("nan"), 1e300, -1e300, -1.0, -1e-9, 1e6 + 1,
           2**63, -(2**63), 2**64 - 1, 1e16)
WRONG = (True, False, None, "1.0", "nan", [], {}, b"\x00")


# -- the schema's rules, as the docs state them (docs/architecture.md, docs/security.md) --------
# Written here, not imported: the oracle of what must be refused may not come from the code
# under test. Per type, in the schema's field order: (field, type, required, bound), where a
# bound is (lo, hi) for a number (finite, lo <= x <= hi), or the name of a structural rule.
ID_MAX, SECONDS_MAX, ITERATIONS_MAX = 2**53, 1e6, 1e15
RULES: dict[str, tuple[tuple[str, str, bool, Any], ...]] = {
    "event.timing": (("job_id", "int", True, (0, ID_MAX)), ("stages", "map", True, "stages"),
                     ("iteration_time", "num", True, (0, SECONDS_MAX)),
                     ("iterations", "num", True, (0, ITERATIONS_MAX)),
                     ("restart_overhead", "num", False, (0, SECONDS_MAX))),
    "event.progress": (("job_id", "int", True, (0, ID_MAX)),
                       ("iterations", "num", True, (0, ITERATIONS_MAX))),
    "agent.heartbeat": (("node", "str", True, None), ("running", "list", False, "running"),
                        ("incarnation", "str", False, None),
                        ("launches", "int", False, (0, ID_MAX)),
                        ("gate_spans", "list", False, None)),
    "agent.register": (("node", "str", True, None), ("gpus", "list", True, "gpus"),
                       ("cpus", "int", True, (0, 1_000_000)), ("mem", "num", True, (0, 1e9)),
                       ("running", "list", False, "running"),
                       ("incarnation", "str", False, None),
                       ("launches", "int", False, (0, ID_MAX))),
}
ENVELOPE_RULES = (("type", "str"), ("v", "int"), ("id", "str"), ("sender", "str"), ("ts", "num"))
MAX_STAGE_NAMES = 16


def _of_type(value: Any, kind: str) -> bool:
    """A bool is never a number on the wire; a list may arrive as a tuple."""
    if isinstance(value, bool):
        return False
    return isinstance(value, {"int": int, "num": (int, float), "str": str,
                              "list": (list, tuple), "map": dict}[kind])


def _out_of(value: Any, lo: float, hi: float) -> bool:
    """A number outside [lo, hi] or not finite; other types are another rule's business."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not (math.isfinite(value) and lo <= value <= hi)


def _breaks(rule: Any, value: Any) -> bool:
    if rule is None:
        return False
    if isinstance(rule, tuple):
        return _out_of(value, *rule)
    if rule == "stages":  # names to seconds, a few of them
        return len(value) > MAX_STAGE_NAMES or any(
            not isinstance(k, str) or not _of_type(v, "num") or _out_of(v, 0, SECONDS_MAX)
            for k, v in value.items())
    if rule == "running":  # [{job_id, iterations}], iterations bounded where numeric
        return any(isinstance(e, dict) and _out_of(e.get("iterations"), 0, ITERATIONS_MAX)
                   for e in value)
    if rule == "gpus":  # device indices
        return any(_out_of(g, 0, 65_535) for g in value)
    raise ValueError(f"no rule {rule!r}")


def _string_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _string_keys(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_string_keys(v) for v in value)
    return True


def expected_refusal(raw: dict[str, Any]) -> str | None:
    """`type:code` the receiver must refuse `raw` with, or None if it must accept it.

    Checks in the schema's documented order: codec (a map key that is not a string), the
    envelope, version 1, a known type, an event's `seq`, each field's presence and type,
    unknown fields, then the bounds (every violation is `bad_value`)."""
    kind = raw.get("type") if raw.get("type") in RULES else "unknown"
    if not _string_keys(raw):
        return "unknown:bad_encoding"
    for name, type_ in ENVELOPE_RULES:
        if name not in raw:
            return f"{kind}:missing_field"
        if not _of_type(raw[name], type_):
            return f"{kind}:bad_field"
    if raw["v"] != 1:
        return f"{kind}:bad_version"
    rules = RULES.get(raw["type"])
    if rules is None:
        return f"{kind}:unknown_type"
    if raw["type"].startswith("event.") and not _of_type(raw.get("seq"), "int"):
        return f"{kind}:missing_field"
    for name, type_, required, _ in rules:
        if name not in raw:
            if required:
                return f"{kind}:missing_field"
        elif not _of_type(raw[name], type_):
            return f"{kind}:bad_field"
    known = {name for name, *_ in rules} | {name for name, _ in ENVELOPE_RULES} | {"seq"}
    if set(raw) - known:
        return f"{kind}:unknown_field"
    if any(name in raw and _breaks(bound, raw[name]) for name, _, _, bound in rules):
        return f"{kind}:bad_value"
    return None


class Messages:
    """Seeded random messages of KINDS as plain maps, half of them damaged (no sockets).

    `job_ids` are jobs worth hitting (running ones: their telemetry reaches the core);
    `nodes` are node names to claim; a node with a real agent is best left out, or the fuzz
    hijacks it (its valid registrations would requeue that agent's jobs)."""

    def __init__(self, seed: int, job_ids: Sequence[int] = (1, 2, 3),
                 nodes: Sequence[str] = ("n1", "n9", "x"), senders: int = 6):
        self.rng = random.Random(seed)
        self.job_ids, self.nodes = list(job_ids), list(nodes)
        self.senders = [f"fuzz{i}" for i in range(senders)] + ["trainer.1", "agent.n1"]
        self._ids = itertools.count(1)
        self._seq: dict[str, int] = collections.defaultdict(int)

    # -- values ------------------------------------------------------------------------------
    def number(self, lo: float = 0.0, hi: float = 2.0) -> Any:
        """Half sane (in [lo, hi]), the rest hostile numbers or the wrong type."""
        r = self.rng.random()
        if r < 0.5:
            return self.rng.uniform(lo, hi)
        if r < 0.6:
            return self.rng.randint(int(lo), int(hi))
        if r < 0.92:
            return self.rng.choice(HOSTILE)
        return self.rng.choice(WRONG)

    def count(self) -> Any:
        return self.rng.randint(0, 50) if self.rng.random() < 0.7 else self.number()

    def running(self) -> Any:
        if self.rng.random() < 0.05:
            return self.rng.choice(WRONG)
        return [{"job_id": self.job_id(), "iterations": self.number(0, 1000)}
                for _ in range(self.rng.randint(0, 3))]

    def job_id(self) -> Any:
        r = self.rng.random()
        if r < 0.7:
            return self.rng.choice(self.job_ids)
        return self.rng.choice([self.rng.randint(0, 10**6), -1, 2**63, "1", 1.0, None])

    def stages(self) -> Any:
        if self.rng.random() < 0.03:
            return self.rng.choice(WRONG)
        names = (["data", "gpu", "net"] if self.rng.random() < 0.5
                 else ["io", "cpu", "gpu", "net"])
        out: dict[Any, Any] = {n: self.number(0.0, 1.0) for n in names}
        if self.rng.random() < 0.05:
            out.update({f"s{i}": 0.1 for i in range(20)})  # too many stages
        if self.rng.random() < 0.03:
            out[7] = 0.1  # a key that is not a name
        return out

    # -- messages ------------------------------------------------------------------------------
    def fields(self, kind: str) -> dict[str, Any]:
        if kind == "event.timing":
            out = {"job_id": self.job_id(), "stages": self.stages(),
                   "iteration_time": self.number(0.0, 3.0), "iterations": self.number(0, 1e4)}
            if self.rng.random() < 0.5:
                out["restart_overhead"] = self.number(0.0, 30.0)
            return out
        if kind == "event.progress":
            return {"job_id": self.job_id(), "iterations": self.number(0, 1e4)}
        node = self.rng.choice(self.nodes)
        if kind == "agent.heartbeat":
            out = {"node": node, "running": self.running()}
            if self.rng.random() < 0.5:
                out.update(incarnation=f"fuzz-{self.rng.randint(0, 3)}", launches=self.count())
            return out
        gpus = [self.rng.randint(0, 7) if self.rng.random() < 0.8 else self.number(0, 7)
                for _ in range(self.rng.randint(0, 4))]
        return {"node": node, "gpus": gpus, "cpus": self.count(), "mem": self.number(0, 512),
                "running": self.running()}

    def message(self) -> tuple[str, dict[str, Any]]:
        """(the kind it was made as, the map), damaged or not."""
        kind = self.rng.choice(KINDS)
        sender = self.rng.choice(self.senders)
        raw: dict[str, Any] = {"type": kind, "v": 1, "id": f"{sender}-fz-{next(self._ids)}",
                               "sender": sender, "ts": time.time(), **self.fields(kind)}
        if kind.startswith("event."):
            self._seq[sender] += 1
            raw["seq"] = self._seq[sender]
        r = self.rng.random()
        if r < 0.04:  # structural damage on top: a field gone, one too many, a bad envelope
            raw.pop(self.rng.choice(sorted(raw)))
        elif r < 0.07:
            raw["colour"] = "red"
        elif r < 0.09:
            raw["ts"] = self.rng.choice(HOSTILE)
        return kind, raw



class Fuzzer(Messages):
    """Sends `n` seeded random messages (`Messages`) on raw sockets; counts what it sent,
    what the schema's rules (`expected_refusal`) say must be refused, and what came back."""

    def __init__(self, endpoints: Endpoints, seed: int, job_ids: Sequence[int] = (1, 2, 3),
                 nodes: Sequence[str] = ("n1", "n9", "x"), senders: int = 6,
                 reply_timeout: float = 5.0):
        super().__init__(seed, job_ids, nodes, senders)
        self.reply_timeout = reply_timeout
        self.sent: collections.Counter[str] = collections.Counter()  # by type
        self.schema_refused: collections.Counter[str] = collections.Counter()  # type:code
        self.answers: collections.Counter[str] = collections.Counter()  # ok / error code
        self._endpoints = endpoints
        self._pub = _open(endpoints, zmq.PUB, endpoints.events_in, linger=2000,
                          sndhwm=EVENT_HWM, rcvhwm=SUBSCRIPTION_HWM)
        self._req = _open(endpoints, zmq.DEALER, endpoints.requests, sndhwm=REQUEST_HWM,
                          rcvhwm=REQUEST_HWM)

    # -- sending ---------------------------------------------------------------------------
    def sync(self, timeout: float = 20.0) -> None:
        """Probe the bus until a probe comes back: our PUB then has the bus's subscriptions
        (the scheduler's among them), so no event of the run is lost to the slow joiner."""
        sub = Subscriber(self._endpoints, ["event.log"])
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self._seq["fuzz-sync"] += 1
                probe = {"type": "event.log", "v": 1, "id": f"sync-{self._seq['fuzz-sync']}",
                         "sender": "fuzz-sync", "ts": time.time(),
                         "seq": self._seq["fuzz-sync"], "record": {"probe": True}}
                self._pub.send_multipart([b"event.log", msgpack.packb(probe)])
                msg = sub.recv(0.05)
                while msg is not None:
                    if msg.sender == "fuzz-sync":
                        return
                    msg = sub.recv(0)
            raise AssertionError(f"no probe back through the bus within {timeout}s")
        finally:
            sub.close()

    def send_one(self) -> None:
        kind, raw = self.message()
        try:
            payload = msgpack.packb(raw, use_bin_type=True)
        except (TypeError, ValueError, OverflowError):  # unsendable (e.g. an int > 2**64)
            return
        self.sent[kind] += 1
        refusal = expected_refusal(raw)
        if refusal is not None:  # counted under the kind the receiver will see
            self.schema_refused[refusal] += 1
        if kind.startswith("event."):
            self._pub.send_multipart([kind.encode(), payload])
            return
        self._req.send_multipart([EMPTY, REQ, b"scheduler", payload])
        self.answers[self._answer(raw.get("id"))] += 1

    def _answer(self, msg_id: Any) -> str:
        deadline = time.monotonic() + self.reply_timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self._req.poll(int(left * 1000) + 1):
                continue
            frames = self._req.recv_multipart()
            if len(frames) != 3 or frames[0] != EMPTY or frames[1] != REP:
                return "bad_answer"
            try:
                answer = decode(frames[2])
            except MessageError:
                return "bad_answer"
            if isinstance(msg_id, str) and answer.get("re") not in (msg_id, None):
                continue  # a late answer to an earlier request
            return "ok" if answer.type == "reply" else str(answer.get("code"))
        return "no_answer"

    def run(self, n: int) -> dict[str, Any]:
        self.sync()
        for _ in range(n):
            self.send_one()
        return self.summary()

    def event_refusals(self) -> dict[str, int]:
        """What the scheduler's subscriber should count: the events the schema refuses
        (`unknown:*` aside, which requests share)."""
        return {k: v for k, v in sorted(self.schema_refused.items()) if k.startswith("event.")}

    def summary(self) -> dict[str, Any]:
        return {"sent": sum(self.sent.values()), "by_type": dict(sorted(self.sent.items())),
                "schema_refused": dict(sorted(self.schema_refused.items())),
                "answers": dict(sorted(self.answers.items()))}

    def close(self) -> None:
        self._pub.close()
        self._req.close(0)
