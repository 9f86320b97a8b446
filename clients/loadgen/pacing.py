"""Pacing writers at a target rate with a token bucket (one sleep per batch, not one per event).

Tokens accrue at ``rate`` per second up to a burst of ``burst_seconds`` worth; a writer
takes as many whole tokens as there are (up to its batch size) and writes that many
events back to back, sleeping only when the bucket is empty. A writer that falls behind
(its writes were held up) catches up by at most one burst: what it missed beyond that
is not made up, so the achieved rate shows the shortfall honestly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """Hands out permits to write at ``rate`` events per second on average."""

    def __init__(self, rate: float, burst_seconds: float = 0.1, clock: Callable[[], float] = time.monotonic):

        if rate <= 0:
            raise ValueError("a token bucket needs a positive rate")
        self.rate = rate
        self.capacity = max(1.0, rate * burst_seconds)
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Starts the schedule now (with one token: the first event goes at once)."""
        self._tokens = 1.0
        self._last = self._clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def available(self, most: int) -> int:
        """Takes and returns the whole tokens there are now, at most ``most`` (may be 0)."""
        self._refill()
        count = min(most, int(self._tokens))
        self._tokens -= count
        return count

    async def take(self, most: int) -> int:
        """Waits until at least one token is there; takes and returns up to ``most`` of them."""
        while True:
            count = self.available(most)
            if count:
                return count
            await asyncio.sleep((1.0 - self._tokens) / self.rate)


__all__ = ["TokenBucket"]
