"""Scopes, the streams and reader groups listed in each, and deleted-stream numbering (spec §4.1, §4.2).

Listing tokens are the store's resume tokens as hex text, since the gRPC ``ContinuationToken``
is a string. Following the API, a listing ends with an empty page (and an empty token); ""
starts from the beginning.
"""

from __future__ import annotations

from . import layout
from .errors import AlreadyExists, NotEmpty
from .key_value import PAGE_ENTRIES_DEFAULT, VersionedKeyValueStore
from .records import CreationRecord, DeletedStreamRecord, ReaderGroupConfigRecord, ScopeRecord


def _decode_token(token: str) -> bytes:
    try:
        return bytes.fromhex(token)
    except ValueError:
        raise ValueError(f"invalid continuation token {token[:40]!r}") from None


async def list_keys(kv: VersionedKeyValueStore, table: str, token: str, limit: int) -> tuple[list[str], str]:
    """One page of ``table``'s keys and the token of the next (see the module docstring).

    Raises:
        ValueError: ``token`` is not one of ours.
        NotFound: no such table.
    """
    page = await kv.list_entries(table, _decode_token(token), limit)
    return [key for key, _ in page.entries], page.token.hex()


class ScopeStore:
    """Scope-level records over a versioned key-value store."""

    def __init__(self, kv: VersionedKeyValueStore):
        self.kv = kv

    # ------------------------------------------------------------------ scopes

    async def create_scope(self, scope: str) -> bool:
        """Creates a scope and its tables. Returns False if it already exists (sealed ones included)."""
        await self.kv.create_table(layout.streams_table(scope))
        await self.kv.create_table(layout.reader_groups_table(scope))
        try:
            await self.kv.create(layout.SCOPES_TABLE, scope, ScopeRecord().encode())
            return True
        except AlreadyExists:
            return False

    async def get_scope(self, scope: str) -> tuple[ScopeRecord, int]:
        """Raises NotFound."""
        found = await self.kv.get(layout.SCOPES_TABLE, scope)
        return ScopeRecord.decode(found.value), found.version

    async def scope_exists(self, scope: str) -> bool:
        (found,) = await self.kv.get_many(layout.SCOPES_TABLE, [scope])
        return found is not None

    async def seal_scope(self, scope: str) -> None:
        """Marks the scope as being deleted recursively: no new streams, createScope says it exists."""
        record, version = await self.get_scope(scope)
        if not record.sealed:
            await self.kv.replace(layout.SCOPES_TABLE, scope, ScopeRecord(sealed=True).encode(), version)

    async def delete_scope(self, scope: str) -> None:
        """Deletes an empty scope and its tables.

        Raises:
            NotFound: no such scope.
            NotEmpty: it still lists streams or reader groups.
        """
        await self.get_scope(scope)
        for table in (layout.streams_table(scope), layout.reader_groups_table(scope)):
            if (await self.kv.list_entries(table, b"", 1)).entries:
                raise NotEmpty(f"scope {scope!r} is not empty", table)
        await self.kv.remove(layout.SCOPES_TABLE, scope)
        await self.kv.delete_table(layout.streams_table(scope))
        await self.kv.delete_table(layout.reader_groups_table(scope))

    async def list_scopes(self, token: str = "", limit: int = PAGE_ENTRIES_DEFAULT) -> tuple[list[str], str]:
        """One page of scope names and the token for the next."""
        return await list_keys(self.kv, layout.SCOPES_TABLE, token, limit)

    # ------------------------------------------------------------------ streams in a scope

    async def add_stream(self, scope: str, stream: str, creation_time: int) -> None:
        """Lists a stream in its scope (idempotent)."""
        await self.kv.put(layout.streams_table(scope), stream, CreationRecord(creation_time).encode())

    async def remove_stream(self, scope: str, stream: str) -> None:
        await self.kv.remove(layout.streams_table(scope), stream)

    async def list_streams(self, scope: str, token: str = "",
                           limit: int = PAGE_ENTRIES_DEFAULT) -> tuple[list[str], str]:
        """One page of stream names in ``scope`` (internal ``_MARK``/``_RG`` streams included).

        Raises:
            NotFound: no such scope.
        """
        return await list_keys(self.kv, layout.streams_table(scope), token, limit)

    async def record_deleted_stream(self, scope: str, stream: str, last_segment_number: int) -> None:
        await self.kv.put(layout.DELETED_STREAMS_TABLE, layout.scoped_name(scope, stream),
                          DeletedStreamRecord(last_segment_number).encode())

    async def starting_segment_number(self, scope: str, stream: str) -> int:
        """0 for a new name; one past the last number of a deleted stream of the same name."""
        (found,) = await self.kv.get_many(layout.DELETED_STREAMS_TABLE, [layout.scoped_name(scope, stream)])
        return 0 if found is None else DeletedStreamRecord.decode(found.value).last_segment_number + 1

    # ------------------------------------------------------------------ reader groups

    async def create_reader_group(self, scope: str, group: str, record: ReaderGroupConfigRecord) -> int:
        """Returns the version. Raises AlreadyExists, or NotFound if the scope's table is gone."""
        return await self.kv.create(layout.reader_groups_table(scope), group, record.encode())

    async def get_reader_group(self, scope: str, group: str) -> tuple[ReaderGroupConfigRecord, int]:
        """Raises NotFound."""
        found = await self.kv.get(layout.reader_groups_table(scope), group)
        return ReaderGroupConfigRecord.decode(found.value), found.version

    async def replace_reader_group(self, scope: str, group: str, record: ReaderGroupConfigRecord,
                                   expected_version: int) -> int:
        """Compare-and-swap of a reader group's configuration. Raises NotFound or WriteConflict."""
        return await self.kv.replace(layout.reader_groups_table(scope), group, record.encode(), expected_version)

    async def delete_reader_group(self, scope: str, group: str, expected_version: int | None = None) -> None:
        await self.kv.remove(layout.reader_groups_table(scope), group, expected_version)

    async def list_reader_groups(self, scope: str, token: str = "",
                                 limit: int = PAGE_ENTRIES_DEFAULT) -> tuple[list[str], str]:
        return await list_keys(self.kv, layout.reader_groups_table(scope), token, limit)

