"""The versioned key-value interface over segment-store table segments (the controller is stateless).

Each table is one table segment; a key's version is the table version the segment store assigns
(the segment offset of its latest update), and each method is one wire request:

    create_table  -> CreateTableSegment        delete_table -> DeleteTableSegment
    get_many      -> ReadTable                 write_batch  -> UpdateTableEntries (one atomic batch)
    remove_batch  -> RemoveTableKeys           list_entries -> ReadTableEntries (hash order, 16-byte token)

Expected versions map onto the wire's: ANY -> NO_VERSION, ABSENT -> NOT_EXISTS (-1), v -> v.
The segment store answers a failed condition with only ``TableKeyBadVersion`` (which key, and
whether it was a create, is not said), so on that reply the keys are re-read once to raise the
same typed error the in-memory store raises. The re-read is for the error's type only: the batch
failed either way. A retried request whose first attempt was applied but whose reply was lost also
surfaces as WriteConflict; callers re-read and check what is already done, as every workflow step does.
Connection failures are not translated: they stay the client's own errors, whose ``retriable``
attribute the caller's retry loop reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from clients import errors as client_errors
from wire.constants import NO_VERSION, NOT_EXISTS

from .errors import NotFound, WriteConflict
from .key_value import (
    ABSENT,
    PAGE_ENTRIES_DEFAULT,
    Page,
    Versioned,
    VersionedKeyValueStore,
    Write,
    check_removals,
    check_writes,
    conflict_for,
    encode_key,
)


class TableSegmentCalls(Protocol):
    """The table-segment calls this store makes (``clients.segment_store_client.SegmentStoreClient``'s)."""

    async def create_table(self, name: str) -> bool: ...

    async def delete_table(self, name: str, must_be_empty: bool = False) -> bool: ...

    async def read_table(self, name: str, keys: Iterable[bytes]) -> list[tuple[int, bytes] | None]: ...

    async def update_table(self, name: str, entries: Iterable[tuple[bytes, int, bytes]]) -> list[int]: ...

    async def remove_table_keys(self, name: str, keys: Iterable[tuple[bytes, int]]) -> None: ...

    async def read_table_entries(self, name: str, token: bytes = b"",
                                 count: int = 1000) -> tuple[list[tuple[bytes, int, bytes]], bytes]: ...


def _wire_version(expected: int | None) -> int:
    if expected is None:
        return NO_VERSION
    return NOT_EXISTS if expected == ABSENT else expected


@contextlib.contextmanager
def _table_must_exist(table: str) -> Iterator[None]:
    """Turns the segment store's NoSuchSegment for ``table`` into NotFound."""
    try:
        yield
    except client_errors.NoSuchSegment:
        raise NotFound(f"no table {table!r}", table) from None


class TableSegmentKeyValueStore(VersionedKeyValueStore):
    """Tables kept as table segments on the segment stores that ``client`` reaches."""

    def __init__(self, client: TableSegmentCalls) -> None:
        self._client = client

    async def create_table(self, table: str) -> bool:
        return await self._client.create_table(table)

    async def delete_table(self, table: str) -> bool:
        return await self._client.delete_table(table, must_be_empty=False)

    async def get_many(self, table: str, keys: Sequence[str]) -> list[Versioned | None]:
        if not keys:
            return []
        encoded = [encode_key(key) for key in keys]
        with _table_must_exist(table):
            found = await self._client.read_table(table, encoded)
        return [None if entry is None else Versioned(*entry) for entry in found]

    async def write_batch(self, table: str, writes: Sequence[Write]) -> list[int]:
        check_writes(table, writes)
        if not writes:
            return []
        entries = [(encode_key(w.key), _wire_version(w.expected), bytes(w.value)) for w in writes]
        try:
            with _table_must_exist(table):
                return await self._client.update_table(table, entries)
        except (client_errors.TableKeyBadVersion, client_errors.TableKeyDoesNotExist):
            pass
        raise await self._conflict(table, [(write.key, write.expected) for write in writes])

    async def remove_batch(self, table: str, keys: Sequence[tuple[str, int | None]]) -> None:
        check_removals(keys)
        if not keys:
            return
        wire_keys = [(encode_key(key), _wire_version(expected)) for key, expected in keys]
        try:
            with _table_must_exist(table):
                return await self._client.remove_table_keys(table, wire_keys)
        except (client_errors.TableKeyBadVersion, client_errors.TableKeyDoesNotExist):
            pass
        raise await self._conflict(table, list(keys))

    async def list_entries(self, table: str, token: bytes = b"", limit: int = PAGE_ENTRIES_DEFAULT) -> Page:
        if limit < 1:
            raise ValueError("a page holds at least one entry")
        try:
            with _table_must_exist(table):
                entries, next_token = await self._client.read_table_entries(table, token, limit)
        except client_errors.IllegalArgument:
            if not token:
                raise
            raise ValueError(f"invalid continuation token for {table!r}") from None  # a client's garbage
        page = [(key.decode("utf-8"), Versioned(version, value)) for key, version, value in entries]
        return Page(page, next_token if page else b"")

    async def _conflict(self, table: str, expectations: list[tuple[str, int | None]]) -> Exception:
        """The typed error for a batch the segment store refused (see the module docstring)."""
        current = await self.get_many(table, [key for key, _ in expectations])
        error = conflict_for(table, expectations, current)
        if error is None:  # the conflicting write was undone before we looked: still a lost race
            error = WriteConflict(f"a conditional write to {table!r} lost a race", table)
        return error
