"""Key-value tables (spec §4.9): a fixed set of table-segment partitions per table.

The metadata store has no key-value-table records, so this module keeps its own: one table per
scope, ``_system/_tables/<scope>/keyValueTables``, mapping a table name to a
``KeyValueTableRecord`` (the Controller API's ``KeyValueTableConfiguration`` as stored).
Partitions are the table segments ``<scope>/<kvt>_kvtable/<i>.#epoch.0``, each owning
[i/p, (i+1)/p) of the key space (the last one ending at exactly 1.0). A record is written with
``creating`` set before its partitions, and cleared after: an interrupted create is finished by
the next create of the same name.

Record format (after the format-version byte)::

    partition_count:i32 primary_key_length:i32 secondary_key_length:i32 rollover_size_bytes:i64
    creation_time:i64 creating:bool
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable

from controller_api import errors as api_errors
from controller_api.key_value_tables import KeyValueTableConfiguration
from wire import naming

from ..store import AlreadyExists, CorruptRecord, NotFound, Versioned, layout
from ..store.codec import Decoder, Encoder
from ..store.key_space import equal_ranges
from ..store.scopes import list_keys
from .context import ControllerContext
from .errors import InvalidArgument, ScopeNotFound, TableExists, TableNotFound
from .scopes import checked_name, require_open_scope
from .segment_calls import bounded_gather

FORMAT_VERSION = 1


def tables_table(scope: str) -> str:
    return f"{layout.TABLE_PREFIX}/{scope}/keyValueTables"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyValueTableRecord:
    """A table's configuration (the Controller API's value) as stored, with its creation time;
    ``creating`` is set until its partitions exist."""

    configuration: KeyValueTableConfiguration
    creation_time: int = 0
    creating: bool = False

    def encode(self) -> bytes:
        configuration = self.configuration
        return (Encoder(FORMAT_VERSION).i32(configuration.partition_count).i32(configuration.primary_key_length)
                .i32(configuration.secondary_key_length).i64(configuration.rollover_size_bytes)
                .i64(self.creation_time).boolean(self.creating).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> KeyValueTableRecord:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        fields = decoder.i32(), decoder.i32(), decoder.i32(), decoder.i64()
        record_fields = decoder.i64(), decoder.boolean()
        decoder.finish()
        try:
            configuration = KeyValueTableConfiguration(*fields)
        except api_errors.InvalidArgument as error:  # values the controller never stores
            raise CorruptRecord(f"{cls.__name__}: {error}") from None
        return cls(configuration, *record_fields)


class KeyValueTables:
    def __init__(self, context: ControllerContext):
        self._context = context
        self._kv = context.store.kv

    async def create_table(self, scope: str, table: str, configuration: KeyValueTableConfiguration) -> None:
        """Creates the table and its partitions (the configuration's own rules are its constructor's).

        Raises:
            InvalidArgument: more partitions than an epoch may have segments.
            InvalidName: the table name breaks the user-name rules.
            ScopeNotFound: no such scope, or it is being deleted.
            TableExists: the table exists (a retried create included, as in Java).
        """
        if configuration.partition_count > self._context.settings.segments_per_epoch_max:
            raise InvalidArgument(f"at most {self._context.settings.segments_per_epoch_max} partitions")
        checked_name(naming.validate_user_name, table, "key-value table name")
        await require_open_scope(self._context.store.scopes, scope)
        await self._kv.create_table(tables_table(scope))
        found = await self._find(scope, table)
        if found is not None:
            stored = KeyValueTableRecord.decode(found.value)
            if stored.creating:
                await self._finish(scope, table, stored, found.version)
            raise TableExists(f"key-value table {scope}/{table} exists")
        creating = KeyValueTableRecord(configuration, creation_time=self._context.now_ms(), creating=True)
        try:
            version = await self._kv.create(tables_table(scope), table, creating.encode())
        except AlreadyExists:
            raise TableExists(f"key-value table {scope}/{table} exists") from None
        await self._finish(scope, table, creating, version)

    async def _finish(self, scope: str, table: str, record: KeyValueTableRecord, version: int) -> None:
        configuration = record.configuration

        async def create(name: str) -> object:  # fixed-key-length partitions
            return await self._context.segments.create_table(name, configuration.total_key_length,
                                                             configuration.rollover_size_bytes)

        await self._each_partition(scope, table, configuration, create)
        await self._kv.replace(tables_table(scope), table,
                               dataclasses.replace(record, creating=False).encode(), version)

    async def _find(self, scope: str, table: str) -> Versioned | None:
        """The table's stored record, or None (no such table, or the scope has no tables)."""
        try:
            (found,) = await self._kv.get_many(tables_table(scope), [table])
        except NotFound:
            return None
        return found

    async def _each_partition(self, scope: str, table: str, configuration: KeyValueTableConfiguration,
                              call: Callable[[str], Awaitable[object]]) -> None:
        names = [naming.table_segment_name(scope, table, number) for number in range(configuration.partition_count)]
        await bounded_gather([functools.partial(call, name) for name in names],
                             self._context.settings.segment_calls_concurrency_max)

    async def get_table(self, scope: str, table: str) -> KeyValueTableConfiguration:
        """Raises TableNotFound."""
        found = await self._find(scope, table)
        record = None if found is None else KeyValueTableRecord.decode(found.value)
        if record is None or record.creating:
            raise TableNotFound(f"key-value table {scope}/{table} does not exist")
        return record.configuration

    async def partitions(self, scope: str, table: str) -> list[tuple[int, float, float]]:
        """(segment id, key start, key end) of every partition. Raises TableNotFound."""
        configuration = await self.get_table(scope, table)
        ranges = equal_ranges(0.0, 1.0, configuration.partition_count)
        return [(naming.segment_id(number, 0), start, end) for number, (start, end) in enumerate(ranges)]

    async def list_tables(self, scope: str, token: str) -> tuple[list[str], str]:
        """One page of table names and the next token.

        Raises:
            ScopeNotFound: no such scope.
            InvalidArgument: the token is not one of ours.
        """
        if not await self._context.store.scopes.scope_exists(scope):
            raise ScopeNotFound(f"scope {scope!r} does not exist")
        try:
            return await list_keys(self._kv, tables_table(scope), token, self._context.settings.listing_page_max)
        except NotFound:
            return [], ""
        except ValueError as error:
            raise InvalidArgument(str(error)) from None

    async def delete_table(self, scope: str, table: str) -> None:
        """Deletes the partitions, then the record. Raises TableNotFound."""
        found = await self._find(scope, table)
        if found is None:
            raise TableNotFound(f"key-value table {scope}/{table} does not exist")
        await self._each_partition(scope, table, KeyValueTableRecord.decode(found.value).configuration,
                                   self._context.segments.delete_table)
        await self._kv.remove(tables_table(scope), table)

    async def has_tables(self, scope: str) -> bool:
        try:
            return bool((await self._kv.list_entries(tables_table(scope), b"", 1)).entries)
        except NotFound:
            return False

    async def forget_scope(self, scope: str) -> None:
        """Drops the scope's (empty) table of tables after the scope is deleted."""
        await self._kv.delete_table(tables_table(scope))
