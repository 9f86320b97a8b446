"""Per-name asyncio locks: SLTS serializes the operations on each segment (design §5.3, §7.3).

``hold(*names)`` takes the locks of several names in sorted order, so two operations locking
overlapping sets (a concat locks its target and its source) cannot deadlock. A lock exists only
while someone holds or awaits it, so the table stays as small as the number of busy segments.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class KeyedLocks:
    def __init__(self):
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # name -> (lock, holders and waiters)

    @contextlib.asynccontextmanager
    async def hold(self, *names: str) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for name in sorted(set(names)):
                await stack.enter_async_context(self._hold_one(name))
            yield

    @contextlib.asynccontextmanager
    async def _hold_one(self, name: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(name) or (asyncio.Lock(), 0)
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)
