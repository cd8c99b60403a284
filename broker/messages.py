"""The message schema: every message on the wire, its fields and their types, in one place.

A message is a msgpack map with an envelope (`type`, `v`, `id`, `sender`, `ts`) and typed
fields. `decode` turns bytes into a validated `Message` or raises `MessageError` saying what
is wrong; nothing malformed gets past it, so handlers can trust what they receive.
"""
from __future__ import annotations

import itertools
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import msgpack

VERSION = 1
MAX_MESSAGE_BYTES = 256 * 1024  # larger frames are refused before decoding

# field name -> (allowed python types, required)
_INT, _NUM, _STR, _BOOL = (int,), (int, float), (str,), (bool,)
_LIST, _MAP = (list, tuple), (dict,)
_ANY = (int, float, str, bool, list, tuple, dict, type(None))

# type -> {field: (types, required)}. Requests are answered by `reply` or `error`.
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    # -- replies ------------------------------------------------------------------------
    "reply": {"re": (_STR, True), "ok": (_BOOL, True), "body": (_MAP, False)},
    "error": {"re": (_STR, False), "code": (_STR, True), "reason": (_STR, True)},
    # -- broker control (a service behind the router) ------------------------------------
    "service.register": {"service": (_STR, True)},
    "service.heartbeat": {"service": (_STR, True)},
    "service.unregister": {"service": (_STR, True)},
    # -- feeder -> scheduler -------------------------------------------------------------
    # a trace record as a map (traces.record fields); `new_id`: the scheduler gives the id;
    # `submission`: the submitter's key for this submission (any retry of it names the same
    # one, and is answered with the job it made)
    "job.submit": {"job": (_MAP, True), "new_id": (_BOOL, False), "submission": (_STR, False)},
    # -- a user (interlace-cancel) -> scheduler -------------------------------------------
    "job.cancel": {"job_id": (_INT, True)},
    # -- agent -> scheduler ------------------------------------------------------------------
    # `incarnation` names the agent process; `launches` counts the launches it had carried
    # out when `running` was taken (a launch reply carries its own number, `launch_seq`)
    "agent.register": {"node": (_STR, True), "gpus": (_LIST, True), "cpus": (_INT, True),
                       "mem": (_NUM, True), "running": (_LIST, False),
                       "incarnation": (_STR, False), "launches": (_INT, False),
                       "gpu_mem_gb": (_NUM, False),  # each GPU's memory, where known
                       "gpu_type": (_STR, False)},  # its GPUs' type as specs name it, if known
    "agent.heartbeat": {"node": (_STR, True), "running": (_LIST, False),
                        "incarnation": (_STR, False), "launches": (_INT, False),
                        "gate_spans": (_LIST, False)},
    "job.finished": {"job_id": (_INT, True), "node": (_STR, True), "iterations": (_NUM, True),
                     "ok": (_BOOL, True), "detail": (_STR, False),
                     # the trainer ran out of GPU memory (exit EXIT_OOM)
                     "oom": (_BOOL, False),
                     # which launch it reports of: the agent's incarnation and launch_seq
                     "incarnation": (_STR, False), "launch_seq": (_INT, False)},
    # `requested`: the end of a job.stop the scheduler sent (answered `stopping` at once):
    # whether the trainer completed instead (`finished`) and its exit status; without it,
    # the agent stopped the trainer on its own (shutdown)
    "job.stopped": {"job_id": (_INT, True), "node": (_STR, True), "iterations": (_NUM, True),
                    "requested": (_BOOL, False), "finished": (_BOOL, False),
                    "exit_code": (_INT, False),
                    "incarnation": (_STR, False), "launch_seq": (_INT, False)},
    # -- scheduler -> agent --------------------------------------------------------------
    "job.launch": {"job_id": (_INT, True), "gpus": (_LIST, True), "group": (_LIST, True),
                   "slot": (_INT, True), "workload": (_MAP, True), "start_iteration": (_NUM, True),
                   # a job on several GPUs runs one rank per GPU; this slice's first rank, the
                   # job's world size, and rank 0's rendezvous (chosen by rank 0's agent)
                   "rank": (_INT, False), "world_size": (_INT, False),
                   "master_addr": (_STR, False), "master_port": (_INT, False)},
    "job.stop": {"job_id": (_INT, True)},
    # the job stays on its GPUs with other members: its new slot order and pace (trace s)
    "job.regroup": {"job_id": (_INT, True), "group": (_LIST, True), "slot": (_INT, True),
                    "iteration_time": (_NUM, True)},
    # -- status queries ----------------------------------------------------------------------
    "status.query": {"what": (_STR, False)},
    # -- events (pub/sub; telemetry only, never the only carrier of state) -------------------
    "event.timing": {"job_id": (_INT, True), "stages": (_MAP, True), "iteration_time": (_NUM, True),
                     "iterations": (_NUM, True),
                     # trace seconds from process start to the first iteration after a launch
                     "restart_overhead": (_NUM, False),
                     # GB of GPU memory the job holds on each GPU (measured peak, or declared)
                     "gpu_mem_gb": (_NUM, False)},
    "event.progress": {"job_id": (_INT, True), "iterations": (_NUM, True)},
    "event.job": {"job_id": (_INT, True), "state": (_STR, True), "detail": (_MAP, False)},
    "event.agent": {"node": (_STR, True), "state": (_STR, True)},
    "event.round": {"groups": (_LIST, True), "latency_ms": (_NUM, True)},
    "event.log": {"record": (_MAP, True)},
}

# -- value bounds ---------------------------------------------------------------------------
# Types are not enough: msgpack carries inf, nan and 1e300 as floats, and one of them in a
# measurement reaches the planner's arithmetic (a weight of inf stops every later round).
# So every number that senders measure or count is checked here, where it enters, against
# bounds no honest sender comes near. A violation is a MessageError("bad_value").
# times, iterations, ids, an agent's CPUs and memory: specs.limits, shared with the traces
from specs.limits import (MAX_CPUS, MAX_ENVELOPE_ID_CHARS, MAX_GPU_MEM_GB,  # noqa: E402
                          MAX_ID, MAX_ITERATIONS, MAX_MEM, MAX_SECONDS, MAX_SENDER_CHARS)
from specs.pools import NAME  # noqa: E402  (pool names and GPU types)
MAX_GPU_ID = 65_535  # a device index an agent may announce
MAX_STAGES = 16  # stage names in one timing map (real trainers send 3 or 4)

_Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it, or None


def _number(lo: float, hi: float) -> _Check:
    """A finite number within [lo, hi]; other types are the type check's (or handler's)."""
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be finite, got {value!r}"
        if not lo <= value <= hi:
            return f"must be in [{lo:g}, {hi:g}], got {value!r}"
        return None
    return check


def _name(value: Any) -> str | None:
    """A name as a spec's pools and GPU types are written (specs.pools.NAME): bounded, so a
    name from the wire is safe to log, label a metric with and compare."""
    if isinstance(value, str) and not NAME.fullmatch(value):
        return ("must be 1-64 letters, digits or _.+- starting with a letter or digit, "
                f"got {value[:80]!r}")
    return None


def _items(check: _Check) -> _Check:
    """Every element of a list."""
    def each(value: Any) -> str | None:
        for i, item in enumerate(value if isinstance(value, (list, tuple)) else ()):
            problem = check(item)
            if problem:
                return f"[{i}] {problem}"
        return None
    return each


def _entries(key: str, check: _Check) -> _Check:
    """Field `key` of every map in a list (e.g. `running`: {job_id, iterations} each)."""
    def each(value: Any) -> str | None:
        for i, item in enumerate(value if isinstance(value, (list, tuple)) else ()):
            problem = check(item.get(key)) if isinstance(item, dict) else None
            if problem:
                return f"[{i}][{key!r}] {problem}"
        return None
    return each


def _stage_map(value: Any) -> str | None:
    """A timing's stages: at most MAX_STAGES names, each a number of seconds."""
    if len(value) > MAX_STAGES:
        return f"has {len(value)} stages, at most {MAX_STAGES}"
    seconds = _number(0.0, MAX_SECONDS)
    for name, time_ in value.items():
        if not isinstance(name, str) or isinstance(time_, bool) \
                or not isinstance(time_, (int, float)):
            return f"must map stage names to numbers, got {name!r}: {time_!r}"
        problem = seconds(time_)
        if problem:
            return f"[{name!r}] {problem}"
    return None


MAX_SPAN_GATES = 64  # gates in one heartbeat's gate_spans
MAX_GROUP = 16  # members of one gate's group
MAX_GATE_SPANS = 256  # spans per gate there
MAX_BEAT_SPANS = 2048  # spans in one heartbeat (~70 KB, well under MAX_MESSAGE_BYTES)
MAX_SPAN_AGE = 60.0  # seconds before the heartbeat a span may lie (agents send 10 s)


def _gate_spans(value: Any) -> str | None:
    """A heartbeat's recent stage-gate turns (node_agent/gate_spans.py): at most
    MAX_BEAT_SPANS spans in MAX_SPAN_GATES of {"group": [job ids], "spans": [[job, stage, age_start, age_end]]},
    each span a member's turn on a named stage, ages in [0, MAX_SPAN_AGE], start >= end."""
    if len(value) > MAX_SPAN_GATES:
        return f"has {len(value)} gates, at most {MAX_SPAN_GATES}"
    job_id, age = _number(0, MAX_ID), _number(0.0, MAX_SPAN_AGE)
    total = 0
    for i, gate in enumerate(value):
        if not isinstance(gate, dict) or set(gate) != {"group", "spans"}:
            return f"[{i}] must be a map of group and spans"
        group, spans = gate["group"], gate["spans"]
        if not isinstance(group, list) or not 1 <= len(group) <= MAX_GROUP \
                or any(isinstance(j, bool) or not isinstance(j, int) or job_id(j) for j in group):
            return f"[{i}]['group'] must list 1..{MAX_GROUP} job ids"
        if not isinstance(spans, list) or len(spans) > MAX_GATE_SPANS:
            return f"[{i}]['spans'] must list at most {MAX_GATE_SPANS} spans"
        total += len(spans)
        if total > MAX_BEAT_SPANS:
            return f"has more than {MAX_BEAT_SPANS} spans in all"
        for k, span in enumerate(spans):
            ok = isinstance(span, list) and len(span) == 4 and span[0] in group \
                and isinstance(span[1], str) and 0 < len(span[1]) <= 16 \
                and all(not isinstance(a, bool) and isinstance(a, (int, float)) and not age(a)
                        for a in span[2:]) and span[2] >= span[3]
            if not ok:
                return (f"[{i}]['spans'][{k}] must be [member, stage, age_start, age_end], "
                        f"ages in [0, {MAX_SPAN_AGE:g}] s, start no later than end")
    return None


_SECONDS, _ITERATIONS = _number(0.0, MAX_SECONDS), _number(0.0, MAX_ITERATIONS)
_JOB_ID, _COUNT = _number(0, MAX_ID), _number(0, MAX_ID)
_RUNNING = _entries("iterations", _ITERATIONS)
# type -> {field: check}, applied once the field's type is right
BOUNDS: dict[str, dict[str, _Check]] = {
    "agent.register": {"gpus": _items(_number(0, MAX_GPU_ID)), "cpus": _number(0, MAX_CPUS),
                       "mem": _number(0.0, MAX_MEM), "running": _RUNNING, "launches": _COUNT,
                       "gpu_mem_gb": _number(0.0, MAX_GPU_MEM_GB), "gpu_type": _name},
    "agent.heartbeat": {"running": _RUNNING, "launches": _COUNT, "gate_spans": _gate_spans},
    "job.finished": {"job_id": _JOB_ID, "iterations": _ITERATIONS},
    "job.cancel": {"job_id": _JOB_ID},
    "job.stopped": {"job_id": _JOB_ID, "iterations": _ITERATIONS},
    "event.timing": {"job_id": _JOB_ID, "stages": _stage_map, "iteration_time": _SECONDS,
                     "iterations": _ITERATIONS, "restart_overhead": _SECONDS,
                     "gpu_mem_gb": _number(0.0, MAX_GPU_MEM_GB)},
    "event.progress": {"job_id": _JOB_ID, "iterations": _ITERATIONS},
}

ENVELOPE = {"type": _STR, "v": _INT, "id": _STR, "sender": _STR, "ts": _NUM}
EVENT_EXTRA = {"seq": _INT}  # per-sender sequence number, so subscribers can see gaps


class MessageError(ValueError):
    """A frame that is not a valid message. `code` is machine-readable, the text is for people.
    `msg_type` and `sender` say whose message it was, where the frame said (for counting)."""

    msg_type: str | None = None
    sender: str | None = None

    def __init__(self, code: str, reason: str, msg_id: str | None = None):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason, self.msg_id = code, reason, msg_id


@dataclass(frozen=True)
class Message:
    type: str
    id: str
    sender: str
    ts: float
    fields: Mapping[str, Any] = field(default_factory=dict)
    v: int = VERSION
    seq: int | None = None
    # The name of the CURVE key a request came under (authorized/NAME.key), stamped by the
    # broker and set by broker.client.Service; None without keys. Never encoded or decoded,
    # so nothing a sender writes in a message can set it.
    caller: str | None = None

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    @property
    def is_event(self) -> bool:
        return self.type.startswith("event.")


class IdSource:
    """Unique message ids per sender: a random part per source and a counter (no shared
    state). Random, not the pid and the time: two sources made in one millisecond by threads
    of one process had the same ids, and a service answered one the other's cached reply."""

    def __init__(self, sender: str):
        self._prefix = f"{sender}-{os.getpid()}-{uuid.uuid4().hex[:16]}"
        self._count = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}-{next(self._count)}"


def make(type_: str, sender: str, msg_id: str, seq: int | None = None, **fields: Any) -> Message:
    """Build a message; validated as decode would, so a sender cannot produce garbage."""
    msg = Message(type=type_, id=msg_id, sender=sender, ts=time.time(), fields=fields, seq=seq)
    _validate(_as_map(msg))
    return msg


def _as_map(msg: Message) -> dict[str, Any]:
    out = {"type": msg.type, "v": msg.v, "id": msg.id, "sender": msg.sender, "ts": msg.ts}
    if msg.seq is not None:
        out["seq"] = msg.seq
    out.update(msg.fields)
    return out


def encode(msg: Message) -> bytes:
    data = msgpack.packb(_as_map(msg), use_bin_type=True)
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageError("too_large", f"{len(data)} bytes > {MAX_MESSAGE_BYTES}", msg.id)
    return data


def decode(data: bytes) -> Message:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MessageError("bad_frame", "frame is not bytes")
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageError("too_large", f"{len(data)} bytes > {MAX_MESSAGE_BYTES}")
    try:
        raw = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True)
    except Exception as err:  # msgpack raises several types for garbage
        raise MessageError("bad_encoding", f"not msgpack: {type(err).__name__}") from None
    if not isinstance(raw, dict):
        raise MessageError("bad_frame", "message is not a map")
    try:
        _validate(raw)
    except MessageError as err:  # say whose it was, so refusals can be counted per sender
        err.msg_type = raw["type"] if isinstance(raw.get("type"), str) else None
        err.sender = raw["sender"] if isinstance(raw.get("sender"), str) else None
        raise
    fields = {k: v for k, v in raw.items() if k not in ENVELOPE and k not in EVENT_EXTRA}
    return Message(type=raw["type"], id=raw["id"], sender=raw["sender"], ts=float(raw["ts"]),
                   fields=fields, v=raw["v"], seq=raw.get("seq"))


def _validate(raw: Mapping[str, Any]) -> None:
    msg_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    for name, types in ENVELOPE.items():
        if name not in raw:
            raise MessageError("missing_field", f"envelope field {name!r} is missing", msg_id)
        if not _is(raw[name], types):
            raise MessageError("bad_field", f"{name!r} must be {_names(types)}", msg_id)
    for name, most in (("id", MAX_ENVELOPE_ID_CHARS), ("sender", MAX_SENDER_CHARS)):
        if len(raw[name]) > most:  # an id is remembered, a sender logged: both bounded
            raise MessageError("bad_value", f"{name!r} is {len(raw[name])} characters long, "
                                            f"at most {most}")
    if raw["v"] != VERSION:
        raise MessageError("bad_version", f"version {raw['v']} is not supported (want {VERSION})", msg_id)
    spec = SCHEMA.get(raw["type"])
    if spec is None:
        raise MessageError("unknown_type", f"unknown message type {raw['type']!r}", msg_id)
    if raw["type"].startswith("event.") and not _is(raw.get("seq"), _INT):
        raise MessageError("missing_field", "events need an integer 'seq'", msg_id)
    for name, (types, required) in spec.items():
        if name not in raw:
            if required:
                raise MessageError("missing_field", f"{raw['type']}: field {name!r} is missing", msg_id)
            continue
        if not _is(raw[name], types):
            raise MessageError("bad_field", f"{raw['type']}: {name!r} must be {_names(types)}", msg_id)
    extra = set(raw) - set(spec) - set(ENVELOPE) - set(EVENT_EXTRA)
    if extra:
        raise MessageError("unknown_field", f"{raw['type']}: unknown fields {sorted(extra)}", msg_id)
    for name, check in BOUNDS.get(raw["type"], {}).items():
        problem = check(raw[name]) if name in raw else None
        if problem:
            gap = "" if problem.startswith("[") else " "  # 'stages'['gpu'] must be ...
            raise MessageError("bad_value", f"{raw['type']}: {name!r}{gap}{problem}", msg_id)


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # True is an int to Python, never to us
    return isinstance(value, types)


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)
