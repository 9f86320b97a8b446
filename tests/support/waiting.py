"""Waiting in tests for a condition to hold: look at it against a deadline, going on as soon as it holds.

Where the code under test offers the event itself (a future, an ``asyncio.Event``, a callback, a process
exit), wait on that instead; these are for state that only a look can tell. ``eventually`` is for coroutine
tests (the condition may be a plain or a coroutine function), ``eventually_blocking`` for plain ones.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str = "the condition", *,
                     timeout: float = 30.0, interval: float = 0.01) -> None:
    """Returns once ``condition()`` is true, looking every ``interval`` seconds; fails (naming ``what``) after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def eventually_blocking(condition: Callable[[], bool], what: str = "the condition", *,
                        timeout: float = 30.0, interval: float = 0.05) -> None:
    """``eventually`` for code outside an event loop: blocks this thread between looks."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
