"""The one retry policy of every process: exponential backoff, bounded by attempts and time.

Server, controller and clients all retry through this module, so units (seconds)
and limits are set in one place.

``Backoff`` is pure (it yields delays); ``retry`` runs an operation under it and
retries only failures whose ``retriable`` attribute is true (asyncio timeouts
count as retriable). When the budget runs out the last failure is raised as it
is, so callers see the typed error of the real cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Delays of ``initial_seconds * multiplier**n``, capped at ``max_delay_seconds``.

    ``attempts`` bounds the tries (None: no bound); ``total_seconds`` bounds the time
    spent waiting between them (None: no bound). Each delay is jittered by up to
    ``jitter`` of itself so that many clients do not retry in lockstep.
    """

    initial_seconds: float = 0.005
    multiplier: float = 4.0
    max_delay_seconds: float = 2.0
    attempts: int | None = 10
    total_seconds: float | None = None
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial_seconds < 0 or self.multiplier < 1 or self.max_delay_seconds < 0:
            raise ValueError("backoff delays must be non-negative and grow")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("attempts must be at least 1")

    def delays(self) -> Iterator[float]:
        """The delay before each retry (one fewer than ``attempts``), within ``total_seconds``."""
        delay, waited, tries = self.initial_seconds, 0.0, 1
        while self.attempts is None or tries < self.attempts:
            step = min(delay, self.max_delay_seconds)
            step += step * self.jitter * random.random()
            if self.total_seconds is not None:
                if waited >= self.total_seconds:
                    return
                step = min(step, self.total_seconds - waited)
            waited += step
            tries += 1
            yield step
            delay *= self.multiplier


def is_retriable(error: BaseException) -> bool:
    """True for failures worth another try: typed errors that say so, and timeouts."""
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return True
    return bool(getattr(error, "retriable", False))


async def retry(operation: Callable[[], Awaitable[T]], policy: Backoff, *,
                retriable: Callable[[BaseException], bool] = is_retriable,
                on_retry: Callable[[BaseException, float], None] | None = None,
                deadline: float | None = None) -> T:
    """Runs ``operation`` until it succeeds, a failure is not retriable, or ``policy`` is spent.

    ``deadline`` (event-loop time) also ends the retries: a wait that would end after it is not begun.

    Returns:
        The operation's result.
    Raises:
        The last failure (not retriable, or retriable with the budget or the time spent).
    """
    delays = policy.delays()
    while True:
        try:
            return await operation()
        except Exception as error:  # the predicate decides; everything else is re-raised
            if not retriable(error):
                raise
            delay = next(delays, None)
            if delay is None or (deadline is not None and asyncio.get_running_loop().time() + delay > deadline):
                raise
            if on_retry is not None:
                on_retry(error, delay)
        await asyncio.sleep(delay)
