"""Per-sender token buckets for the broker's request router.

Why: one requester in a loop (a buggy feeder, a compromised key) must not starve the
scheduler of everyone else's requests. Each sender identity gets `burst` requests at once and
`rate` per second after that; the broker answers the excess with `rate_limited` (never a
silent drop, so the sender knows to slow down and retries are not wasted on a timeout).

The table is bounded: past `max_senders` the least recently seen bucket goes. A bucket idle
for burst/rate seconds is full again anyway, so eviction only ever forgets the debt of a
sender that has not been heard from in a while.
"""
from __future__ import annotations

import collections


class TokenBuckets:
    def __init__(self, rate: float, burst: float, max_senders: int = 10_000):
        if rate <= 0 or burst < 1 or max_senders < 1:
            raise ValueError("need rate > 0, burst >= 1 and max_senders >= 1")
        self.rate, self.burst, self.max_senders = float(rate), float(burst), int(max_senders)
        self._buckets: collections.OrderedDict[bytes, list[float]] = collections.OrderedDict()

    def allow(self, sender: bytes, now: float) -> bool:
        """Take one token from `sender`'s bucket; False when it is empty."""
        bucket = self._buckets.get(sender)
        if bucket is None:
            bucket = self._buckets[sender] = [self.burst, now]
            if len(self._buckets) > self.max_senders:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(sender)
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
            bucket[1] = now
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0
            return True
        return False

    def retry_after(self, sender: bytes) -> float:
        """Seconds until `sender` has a token again (0 when it has one now or is unknown)."""
        bucket = self._buckets.get(sender)
        return 0.0 if bucket is None else max(0.0, (1.0 - bucket[0]) / self.rate)

    def __len__(self) -> int:
        return len(self._buckets)
