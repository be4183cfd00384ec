"""A token bucket shared by every call plane-sync makes to Plane.

Plane limits each API key (60 requests a minute by default); one bucket per process keeps all
writers under it, and a 429 empties the bucket until Plane's reset time, so the next call waits
instead of being refused again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved; `acquire` waits for one."""

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._blocked_until = 0.0
        self._lock = asyncio.Lock()
        self.waited = 0.0  # seconds callers spent waiting (metrics, bench)

    def _refill(self, now: float) -> None:
        if now > self._last:  # _last may be in the future: the end of a 429 block
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now

    def delay(self) -> float:
        """Seconds until a token is free (0: now)."""
        now = self._clock()
        self._refill(now)
        if now < self._blocked_until:
            return self._blocked_until - now
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    async def acquire(self) -> None:
        """Take one token, waiting as long as needed (callers are served in order)."""
        async with self._lock:
            while (wait := self.delay()) > 0:
                self.waited += wait
                await asyncio.sleep(wait)
            self._tokens -= 1

    def block_for(self, seconds: float) -> None:
        """Plane said 429: no token for `seconds`; at the reset one call may go, then the rate."""
        now = self._clock()
        self._blocked_until = max(self._blocked_until, now + max(seconds, 0.0))
        self._tokens = 1.0
        self._last = max(self._last, self._blocked_until)
