"""A proxy that counts round trips to the store it wraps (scalability tests and benchmarks).

PDP-32 promises that the hot queries cost a constant number of store calls however long the
stream's history is; counting the primitive calls at the interface is how that is checked.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from .key_value import PAGE_ENTRIES_DEFAULT, Page, Versioned, VersionedKeyValueStore, Write


class CountingKeyValueStore(VersionedKeyValueStore):
    """Forwards every primitive to ``inner`` and counts it by method name in ``calls``."""

    def __init__(self, inner: VersionedKeyValueStore):
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        """All primitive calls since the last ``reset``."""
        return sum(self.calls.values())

    def reset(self) -> None:
        self.calls.clear()

    async def create_table(self, table: str) -> bool:
        self.calls["create_table"] += 1
        return await self.inner.create_table(table)

    async def delete_table(self, table: str) -> bool:
        self.calls["delete_table"] += 1
        return await self.inner.delete_table(table)

    async def get_many(self, table: str, keys: Sequence[str]) -> list[Versioned | None]:
        self.calls["get_many"] += 1
        return await self.inner.get_many(table, keys)

    async def write_batch(self, table: str, writes: Sequence[Write]) -> list[int]:
        self.calls["write_batch"] += 1
        return await self.inner.write_batch(table, writes)

    async def remove_batch(self, table: str, keys: Sequence[tuple[str, int | None]]) -> None:
        self.calls["remove_batch"] += 1
        await self.inner.remove_batch(table, keys)

    async def list_entries(self, table: str, token: bytes = b"", limit: int = PAGE_ENTRIES_DEFAULT) -> Page:
        self.calls["list_entries"] += 1
        return await self.inner.list_entries(table, token, limit)
