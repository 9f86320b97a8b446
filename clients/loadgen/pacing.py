"""Pacing writers at a target rate with a token bucket (one sleep per batch, not one per event).

Tokens accrue at ``rate`` per second up to a burst of ``burst_seconds`` worth; a writer
takes as many whole tokens as there are (up to its batch size) and writes that many
events back to back, sleeping only when the bucket is empty. A writer that falls behind
(its writes were held up) catches up by at most one burst: what it missed beyond that
is not made up, so the achieved rate shows the shortfall honestly.

A :class:`StepPacer` takes one writer through the steps of the rate schedule: at each step boundary
it switches to a fresh bucket at the writer's share of the new step's rate (nothing saved up in one
step is spent in the next), and it never sleeps past a boundary.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .steps import NS_PER_SECOND, StepSchedule

# The shortest sleep between two looks at the bucket. The event loop's timers have a resolution of 1 ms
# (libuv's): a shorter sleep fires at once, so a writer whose next token is due in 0.2 ms would spin,
# writing one event per turn of the loop at several times the CPU cost, and take that CPU from the store
# it measures. Sleeping a tick lets the tokens of that millisecond gather into one batch.
TICK_SECONDS = 0.001


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

    def wait_seconds(self) -> float:
        """How long until the next whole token (as of the last look)."""
        return max(0.0, 1.0 - self._tokens) / self.rate


class StepPacer:
    """Permits for one of ``writers`` writers, each step's rate shared evenly among them (0: unlimited)."""

    def __init__(self, schedule: StepSchedule, writers: int, clock_ns: Callable[[], int] = time.time_ns,
                 bucket_clock: Callable[[], float] = time.monotonic):
        self.schedule = schedule
        self.writers = writers
        self.step = -1  # none yet: the first take starts the first step's bucket
        self._bucket: TokenBucket | None = None
        self._clock_ns = clock_ns  # the schedule's clock (wall clock, as the events' send times)
        self._bucket_clock = bucket_clock

    @property
    def rate(self) -> float:
        """This writer's rate in the current step (events/s; 0: unlimited)."""
        return 0.0 if self._bucket is None else self._bucket.rate

    def _enter(self, step: int) -> None:
        self.step = step
        share = self.schedule.rates[step] / self.writers
        self._bucket = TokenBucket(share, clock=self._bucket_clock) if share else None

    async def take(self, most: int) -> int:
        """Waits until the current step allows at least one event; returns how many (at most ``most``).

        It lets the loop run first (acks, readers, the progress line: even flat out, a writer yields between
        batches), so the permits are given at the time it returns, in the step of that time.
        """
        await asyncio.sleep(0)
        while True:
            now_ns = self._clock_ns()
            step = self.schedule.step_at(now_ns)
            if step != self.step:
                self._enter(step)
            bucket = self._bucket
            if bucket is None:
                return most
            count = bucket.available(most)
            if count:
                return count
            await asyncio.sleep(self._wait_seconds(bucket, now_ns))

    def _wait_seconds(self, bucket: TokenBucket, now_ns: int) -> float:
        """Until ``bucket``'s next token, or the next step if that comes first."""
        wait = max(TICK_SECONDS, bucket.wait_seconds())
        boundary = self.schedule.next_start_ns(self.step)
        if boundary is not None:
            wait = min(wait, max(0, boundary - now_ns) / NS_PER_SECOND)
        return wait


__all__ = ["StepPacer", "TokenBucket"]
