"""The in-memory implementation of the versioned key-value interface (unit tests, benchmarks).

It keeps the table-segment semantics the conformance suite checks: per-table versions that only
grow, atomic conditional batches, unconditional removal of absent keys as a no-op, and resumable
listings. Each call yields to the event loop once, so concurrent read-modify-write cycles really
interleave in tests instead of running back to back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sortedcontainers import SortedDict

from controller.store.errors import NotFound
from controller.store.key_value import (
    PAGE_ENTRIES_DEFAULT,
    Page,
    Versioned,
    VersionedKeyValueStore,
    Write,
    check_removals,
    check_writes,
    conflict_for,
)


class _Table:
    __slots__ = ("entries", "next_version")

    def __init__(self):
        self.entries: SortedDict = SortedDict()  # key -> Versioned; sorted so listing can resume
        self.next_version = 0


class InMemoryKeyValueStore(VersionedKeyValueStore):
    """Tables held in process memory; nothing survives the object."""

    def __init__(self):
        self._tables: dict[str, _Table] = {}

    def _table(self, table: str) -> _Table:
        found = self._tables.get(table)
        if found is None:
            raise NotFound(f"no table {table!r}", table)
        return found

    async def create_table(self, table: str) -> bool:
        await asyncio.sleep(0)
        if table in self._tables:
            return False
        self._tables[table] = _Table()
        return True

    async def delete_table(self, table: str) -> bool:
        await asyncio.sleep(0)
        return self._tables.pop(table, None) is not None

    async def get_many(self, table: str, keys: Sequence[str]) -> list[Versioned | None]:
        await asyncio.sleep(0)
        entries = self._table(table).entries
        return [entries.get(key) for key in keys]

    async def write_batch(self, table: str, writes: Sequence[Write]) -> list[int]:
        await asyncio.sleep(0)
        check_writes(table, writes)
        target = self._table(table)
        current = [target.entries.get(write.key) for write in writes]
        error = conflict_for(table, [(write.key, write.expected) for write in writes], current)
        if error is not None:
            raise error
        versions = []
        for write in writes:
            version = target.next_version
            target.next_version += 1
            target.entries[write.key] = Versioned(version, bytes(write.value))
            versions.append(version)
        return versions

    async def remove_batch(self, table: str, keys: Sequence[tuple[str, int | None]]) -> None:
        await asyncio.sleep(0)
        check_removals(keys)
        target = self._table(table)
        error = conflict_for(table, keys, [target.entries.get(key) for key, _ in keys])
        if error is not None:
            raise error
        for key, _ in keys:
            target.entries.pop(key, None)
        target.next_version += 1  # a removal is a write too: versions stay unique per table

    async def list_entries(self, table: str, token: bytes = b"", limit: int = PAGE_ENTRIES_DEFAULT) -> Page:
        await asyncio.sleep(0)
        if limit < 1:
            raise ValueError("a page holds at least one entry")
        entries = self._table(table).entries
        start = entries.bisect_right(token.decode("utf-8")) if token else 0
        page = [(key, entries[key]) for key in entries.islice(start, start + limit)]
        return Page(page, page[-1][0].encode("utf-8") if page else b"")
