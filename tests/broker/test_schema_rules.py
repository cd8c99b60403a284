"""The schema's rules for the messages the service fuzz sends, held against the codec: the
rules table in tests/fuzz_service.py is written from the docs, not read from
broker/messages.py, so a bound dropped from the codec (or one added that the docs do not
state) shows here in a second, and as a count mismatch in tests/live/test_service_fuzz.py."""
from __future__ import annotations

import msgpack
import pytest

from broker.client import refusal_kind
from broker.messages import MessageError, decode
from tests.fuzz_service import RULES, Messages, expected_refusal

# one acceptable message of each kind the fuzz sends
VALID = {
    "event.timing": {"job_id": 1, "stages": {"data": 0.1, "gpu": 0.2, "net": 0.1},
                     "iteration_time": 0.4, "iterations": 10.0, "restart_overhead": 3.0},
    "event.progress": {"job_id": 1, "iterations": 10.0},
    "agent.heartbeat": {"node": "n1", "running": [{"job_id": 1, "iterations": 5.0}],
                        "incarnation": "a", "launches": 2},
    "agent.register": {"node": "n1", "gpus": [0, 1], "cpus": 8, "mem": 64.0,
                       "running": [{"job_id": 1, "iterations": 5.0}], "incarnation": "a",
                       "launches": 0},
}


def _message(kind: str, **fields) -> dict:
    raw = {"type": kind, "v": 1, "id": "t-1", "sender": "t", "ts": 1.0,
           **VALID[kind], **fields}
    if kind.startswith("event."):
        raw["seq"] = 1
    return raw


def _verdict(raw: dict) -> str | None:
    """What the codec under test does with `raw`: None (accepted) or `type:code`."""
    try:
        decode(msgpack.packb(raw, use_bin_type=True))
    except MessageError as err:
        return refusal_kind(err.msg_type, err.code)
    return None


def _bounded():
    """(kind, field, lo, hi) for every numeric bound in the rules table."""
    return [(kind, name, *bound) for kind, rules in RULES.items()
            for name, _, _, bound in rules if isinstance(bound, tuple)]


@pytest.mark.parametrize("kind", sorted(RULES))
def test_a_valid_message_of_each_kind_is_accepted(kind):
    assert expected_refusal(_message(kind)) is None
    assert _verdict(_message(kind)) is None


@pytest.mark.parametrize("kind,name,lo,hi", _bounded())
def test_every_bound_is_enforced_at_its_edges(kind, name, lo, hi):
    """At the edges accepted; just past them, or not finite, refused as bad_value."""
    for inside in (lo, hi):
        assert _verdict(_message(kind, **{name: inside})) is None, (name, inside)
    beyond = [lo - 1, float("inf"), float("nan")]
    beyond.append(hi * 2 + 1 if isinstance(hi, int) else hi * 1.5)
    for outside in beyond:
        if isinstance(lo, int) and isinstance(outside, float) and outside.is_integer():
            outside = int(outside)  # an int field must stay an int to reach its bound
        if isinstance(lo, int) and isinstance(outside, float):
            continue  # a float in an int field is a type error, not a bound (tested below)
        assert _verdict(_message(kind, **{name: outside})) == f"{kind}:bad_value", \
            (name, outside)


def test_structural_bounds_are_enforced():
    stages = {f"s{i}": 0.1 for i in range(17)}
    assert _verdict(_message("event.timing", stages=stages)) == "event.timing:bad_value"
    assert _verdict(_message("event.timing", stages={"gpu": 1e6 + 1})) \
        == "event.timing:bad_value"
    assert _verdict(_message("agent.heartbeat", running=[{"job_id": 1, "iterations": 1e16}])) \
        == "agent.heartbeat:bad_value"
    assert _verdict(_message("agent.register", gpus=[0, 65_536])) == "agent.register:bad_value"
    # an agent's GPU type: a name as specs write one (specs.pools.NAME), 64 characters at most
    for gpu_type in ("V100M32", "NVIDIA-H100-80GB-HBM3", "x" * 64):
        assert _verdict(_message("agent.register", gpu_type=gpu_type)) is None, gpu_type
    for gpu_type in ("", "x" * 65, "V100 M32", "-T4", "T4\n"):
        assert _verdict(_message("agent.register", gpu_type=gpu_type)) \
            == "agent.register:bad_value", gpu_type
    assert _verdict(_message("agent.register", gpu_type=4)) == "agent.register:bad_field"
    assert _verdict(_message("event.progress", job_id=1.0)) == "event.progress:bad_field"
    assert _verdict(_message("event.progress", job_id=True)) == "event.progress:bad_field"


def test_the_codec_refuses_exactly_what_the_rules_say_on_fuzzed_messages():
    """Thousands of the fuzz's own messages: the codec's verdict equals the table's."""
    messages = Messages(seed=20261201)
    disagree, refused = [], 0
    for _ in range(4000):
        _, raw = messages.message()
        try:
            msgpack.packb(raw, use_bin_type=True)
        except (TypeError, ValueError, OverflowError):
            continue  # unsendable; the fuzzer skips it too
        want = expected_refusal(raw)
        refused += want is not None
        got = _verdict(raw)
        if got != want:
            disagree.append((raw, want, got))
    assert refused > 1000
    assert not disagree, f"{len(disagree)} disagree, e.g. {disagree[:3]}"
