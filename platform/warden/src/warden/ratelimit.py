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
