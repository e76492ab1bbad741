"""A token bucket that bounds Warden's API request rate (client-go's QPS and burst)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps, self.burst, self.clock, self.sleep = qps, burst, clock, sleep
        self.tokens, self.last = float(burst), clock()

    def try_take(self) -> bool:
        """One token if there is one now, without waiting (a request refused instead of delayed)."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def take(self) -> float:
        """Wait for one token; returns how long it waited."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        wait = (1 - self.tokens) / self.qps
        self.sleep(wait)
        self.tokens, self.last = 0.0, now + wait
        return wait


class Backoff:
    """Exponential backoff per key (a node): after n failures in a row, wait base * 2**(n-1), at most cap.

    A node whose calls keep failing (a timeout, a dropped connection, a 5xx) is left alone for a while
    instead of costing every round its timeouts; a success forgets the failures.
    """

    def __init__(self, base_s: float = 30, cap_s: float = 600, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_s, self.cap_s, self.clock = base_s, cap_s, clock
        self._failures: dict[str, int] = {}
        self._until: dict[str, float] = {}

    def ready(self, key: str) -> bool:
        return self.clock() >= self._until.get(key, float("-inf"))

    def failed(self, key: str) -> float:
        """Count a failure; returns how long the key now waits."""
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        wait = min(self.cap_s, self.base_s * 2.0 ** min(n - 1, 30))
        self._until[key] = self.clock() + wait
        return wait

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)
        self._until.pop(key, None)

    def waiting(self) -> int:
        now = self.clock()
        return sum(1 for until in self._until.values() if until > now)
