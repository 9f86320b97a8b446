"""The writers' bookkeeping: small JSON records in one table segment per stream, changed only by
conditional updates.

The table is ``<scope>/_SPARK<stream>_kvtable/0.#epoch.0`` (a name of ours, beside the stream; a
Pravega client never looks at it). Two kinds of keys live there: ``job/<writer id>``, the
transactions of a write job (:mod:`spark_io.jobs`), and ``query/<query id>``, the last
micro-batch a streaming query committed (:mod:`spark_io.fence`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from clients.client import Client
from clients.errors import ConflictingOperation, NoSuchSegment, TableKeyBadVersion, TableKeyDoesNotExist
from wire import naming
from wire.constants import NOT_EXISTS

_CONFLICTS_MAX = 100
T = TypeVar("T")


def records_table(scope: str, stream: str) -> str:
    return naming.table_segment_name(scope, f"_SPARK{stream}")


class Records:
    """Read and conditionally replace JSON records of one stream's table."""

    def __init__(self, client: Client, scope: str, stream: str):
        self._store = client.segment_store
        self._table = records_table(scope, stream)

    async def _in_table(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``; the table is created the first time it is found missing (one round trip, once)."""
        try:
            return await call()
        except NoSuchSegment:
            await self._store.create_table(self._table)
            return await call()

    async def get(self, key: str) -> tuple[int, dict | None]:
        """(version, record); (NOT_EXISTS, None) when there is none."""
        found = (await self._in_table(lambda: self._store.read_table(self._table, [key.encode()])))[0]
        return (NOT_EXISTS, None) if found is None else (found[0], json.loads(found[1]))

    async def keys(self, prefix: str) -> list[str]:
        """The keys starting with ``prefix`` (the table holds a few records per query and write job)."""
        async def listed() -> list[str]:
            return [key.decode() async for key, _, _ in self._store.table_entries(self._table)
                    if key.startswith(prefix.encode())]

        return await self._in_table(listed)

    async def put(self, key: str, version: int, record: dict) -> int:
        """Writes ``record`` if the key is still at ``version``; returns the new version.

        Raises:
            TableKeyBadVersion, TableKeyDoesNotExist: someone else changed it first.
        """
        value = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        return (await self._store.update_table(self._table, [(key.encode(), version, value)]))[0]

    async def update(self, key: str, change: Callable[[dict | None], dict | None]) -> tuple[dict | None, dict | None]:
        """Applies ``change`` (old record -> new record, or None to leave it) until the conditional write
        succeeds; returns (old, new).

        Raises:
            ConflictingOperation: the record changed under every one of many attempts.
        """
        for _ in range(_CONFLICTS_MAX):
            version, old = await self.get(key)
            new = change(old)
            if new is None:
                return old, None
            try:
                await self.put(key, version, new)
                return old, new
            except (TableKeyBadVersion, TableKeyDoesNotExist):
                continue
        raise ConflictingOperation(f"record {key} of {self._table} kept changing under {_CONFLICTS_MAX} attempts")


__all__ = ["Records", "records_table"]
