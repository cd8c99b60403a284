"""The broker's waiting requests (broker.queues) against a brute-force oracle: a plain list of
everything held, searched afresh for each answer."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from broker.queues import ServiceQueue, Waiting


class Oracle:
    """What waits, as one list in arrival order; the next is found by scanning it."""

    def __init__(self, lane_max: int, total_max: int, total_bytes: int):
        self.lane_max, self.total_max, self.total_bytes = lane_max, total_max, total_bytes
        self.items: list[tuple[bytes | None, Waiting]] = []  # (lane, or None: urgent)
        self.turns: list[bytes] = []  # lanes in the order they are served next

    def push(self, lane: bytes, urgent: bool, item: Waiting) -> bool:
        if any((w.client, w.msg_id) == (item.client, item.msg_id) for _, w in self.items):
            return True
        key = None if urgent else lane
        if sum(1 for k, _ in self.items if k == key) >= self.lane_max \
                or len(self.items) >= self.total_max \
                or sum(len(w.payload) for _, w in self.items) + len(item.payload) > \
                self.total_bytes:
            return False
        if key is not None and key not in self.turns:
            self.turns.append(key)
        self.items.append((key, item))
        return True

    def pop(self) -> Waiting | None:
        for k, w in self.items:
            if k is None:
                self.items.remove((k, w))
                return w
        if not self.turns:
            return None
        lane = self.turns.pop(0)
        k, w = next((k, w) for k, w in self.items if k == lane)
        self.items.remove((k, w))
        if any(k == lane for k, _ in self.items):
            self.turns.append(lane)
        return w

    def expire(self, now: float, wait: float) -> list[Waiting]:
        old = [(k, w) for k, w in self.items if now - w.since >= wait]
        self.items = [x for x in self.items if x not in old]
        self.turns = [t for t in self.turns if any(k == t for k, _ in self.items)]
        return [w for _, w in old]


ops = st.lists(st.one_of(
    st.tuples(st.just("push"), st.sampled_from([b"a", b"b", b"c"]), st.booleans(),
              st.integers(0, 5), st.integers(1, 40)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("expire"), st.floats(0.0, 3.0))), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 4), st.integers(1, 10), st.integers(20, 200))
def test_the_queue_serves_urgent_first_then_lanes_in_turn_within_its_bounds(
        script, lane_max, total_max, total_bytes):
    queue, oracle = ServiceQueue(lane_max, total_max, total_bytes), \
        Oracle(lane_max, total_max, total_bytes)
    clock = 0.0
    for op in script:
        clock += 0.1
        if op[0] == "push":
            _, lane, urgent, n, size = op
            # a lane's client is its name; ids repeat, so resends of what waits occur
            item = Waiting(lane, b"", b"x" * size, f"m{n}", clock)
            assert (queue.push(lane, urgent, item) is None) == oracle.push(lane, urgent, item)
        elif op[0] == "pop":
            want = oracle.pop()
            assert queue.peek() is want
            assert queue.pop() is want
        else:
            # expiry must look past no lane: the oracle scans all, the queue only heads
            assert sorted(id(w) for w in queue.expired(clock, op[1])) == \
                sorted(id(w) for w in oracle.expire(clock, op[1]))
        assert len(queue) == len(oracle.items)
        assert queue.bytes == sum(len(w.payload) for _, w in oracle.items)
    rest = queue.drain()
    assert sorted(id(w) for w in rest) == sorted(id(w) for _, w in oracle.items)
    assert len(queue) == queue.bytes == 0 and queue.pop() is None


def test_a_flooding_lane_waits_behind_itself():
    queue = ServiceQueue()
    for i in range(100):
        assert queue.push(b"flood", False, Waiting(b"flood", b"", b"x", f"f{i}", 0.0)) is None
    assert queue.push(b"op", False, Waiting(b"op", b"", b"x", "q", 0.0)) is None
    assert queue.push(b"agent", True, Waiting(b"agent", b"", b"x", "hb", 0.0)) is None
    order = [queue.pop().msg_id for _ in range(3)]
    assert order == ["hb", "f0", "q"]


def test_bounds_name_the_limit_broken():
    queue = ServiceQueue(lane_max=2, total_max=3, total_bytes=10)
    for i in range(2):
        assert queue.push(b"a", False, Waiting(b"a", b"", b"x", f"{i}", 0.0)) is None
    assert "limit 2" in queue.push(b"a", False, Waiting(b"a", b"", b"x", "2", 0.0))
    assert queue.push(b"b", False, Waiting(b"b", b"", b"x", "0", 0.0)) is None
    assert "limit 3" in queue.push(b"c", False, Waiting(b"c", b"", b"x", "0", 0.0))
    queue.pop()
    assert "limit 10)" in queue.push(b"c", False, Waiting(b"c", b"", b"x" * 9, "0", 0.0))


def test_peek_names_the_head_of_the_lane_whose_turn_it_is():
    queue = ServiceQueue()
    for lane, msg_id in ((b"a", "a0"), (b"a", "a1"), (b"b", "b0")):
        queue.push(lane, False, Waiting(lane, b"", b"x", msg_id, 0.0))
    seen = []
    while (head := queue.peek()) is not None:
        assert queue.pop() is head
        seen.append(head.msg_id)
    assert seen == ["a0", "b0", "a1"]


def test_a_request_that_waited_exactly_the_limit_has_expired():
    queue = ServiceQueue()
    queue.push(b"a", False, Waiting(b"a", b"", b"x", "old", 0.0))
    queue.push(b"a", False, Waiting(b"a", b"", b"x", "young", 0.5))
    assert [w.msg_id for w in queue.expired(1.0, 1.0)] == ["old"]
    assert [w.msg_id for w in queue.expired(1.4, 1.0)] == []
    assert len(queue) == 1


def test_the_default_bounds_are_the_documented_ones():
    """docs/security.md ("Floods") states them; a lane of the default bound fills at 1,000."""
    from pathlib import Path

    from broker.queues import LANE_MAX, MAX_WAIT_S, TOTAL_BYTES, TOTAL_MAX

    assert (LANE_MAX, TOTAL_MAX, TOTAL_BYTES, MAX_WAIT_S) == (1000, 10_000, 32 << 20, 1.0)
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "security.md")
                   .read_text().split())
    assert "At most 1,000 requests per lane, and 10,000 requests or 32 MiB per service" in doc
    assert "`--queue-wait` seconds (default 1)" in doc
    queue = ServiceQueue()
    for i in range(LANE_MAX):
        assert queue.push(b"a", False, Waiting(b"a", b"", b"x", f"{i}", 0.0)) is None
    assert queue.push(b"a", False, Waiting(b"a", b"", b"x", "over", 0.0)) is not None
    for lane in range(1, TOTAL_MAX // LANE_MAX):  # and the service's at 10,000
        for i in range(LANE_MAX):
            assert queue.push(bytes([lane]), False,
                              Waiting(bytes([lane]), b"", b"x", f"{i}", 0.0)) is None
    assert "limit 10000" in queue.push(b"z", False, Waiting(b"z", b"", b"x", "over", 0.0))
