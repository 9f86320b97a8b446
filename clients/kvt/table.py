"""A key-value table: reads, conditional and unconditional updates, atomic batches per key family, iteration.

Each call goes straight to the partition (table segment) of its key's primary key, through the
client's shared segment-store client: a read is one ReadTable request, a change one UpdateTableEntries
or RemoveTableKeys request, which the segment store applies atomically, so every batch of one key
family is all-or-nothing. Conditions are key versions (:class:`~clients.kvt.model.Version`): the
segment store checks them and applies the batch only if all of them hold.

Like every raw segment-store call, a change is retried when its connection fails
(``ClientConfig.segment_store_retry``). If a reply was lost on its way back, the retried change meets
the result of the first attempt: an unconditional one is simply applied twice (same result), a
conditional one then fails with :class:`BadKeyVersion` although it was applied. Read the key again
when that matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any

from controller_api.key_value_tables import KeyValueTableConfiguration
from wire.constants import MAX_PAYLOAD_SIZE, MAX_TABLE_KEY_LENGTH, MAX_TABLE_VALUE_LENGTH, NO_VERSION, NOT_EXISTS

from ..errors import (
    BadKeyVersion,
    ClosedError,
    InvalidArgument,
    NoSuchKey,
    NoSuchSegment,
    OperationFailed,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
)
from ..segment_store_client import SegmentStoreClient
from .iterator import IteratorBuilder, TableSource
from .layout import KeyLayout
from .model import NO_SEGMENT, TableEntry, TableKey, Version
from .modifications import Insert, Put, Remove, TableModification
from .partitions import Partition, Partitions

_ENTRY_OVERHEAD = 64  # bytes around one entry in a request or reply (lengths, version), generously
_KEYS_PER_READ = (MAX_PAYLOAD_SIZE - 65536) // (MAX_TABLE_KEY_LENGTH + MAX_TABLE_VALUE_LENGTH + _ENTRY_OVERHEAD)
"""Keys asked in one ReadTable: even if every value is as large as allowed, the reply fits one frame."""


class KeyValueTable:
    """A key-value table of a scope (``await client.key_value_table(scope, name)``).

    Keys are :class:`TableKey` (primary + secondary key, of the lengths of the table's
    :class:`KeyValueTableConfiguration`), values are bytes (up to 1 MiB - 8 KiB). Keys that share a
    primary key (a *key family*) live in one partition and can be changed together atomically with
    :meth:`update`; keys of different families cannot.

    The handle holds no connection of its own; closing it (or the client it came from) makes its
    calls raise :class:`ClosedError`.
    """

    def __init__(self, scope: str, name: str, config: KeyValueTableConfiguration, partitions: Partitions,
                 segments: SegmentStoreClient):
        if len(partitions) != config.partition_count:
            raise OperationFailed(f"key-value table {scope}/{name} has {len(partitions)} partitions, but its "
                                  f"configuration says {config.partition_count}")
        self.scope = scope
        self.name = name
        self.config = config
        self._closed = False
        self._layout = KeyLayout(config)
        self._partitions = partitions
        self._segments = segments
        self._source = TableSource(scope, name, self._layout, partitions, segments, self._check_open)

    def __repr__(self) -> str:
        return f"<KeyValueTable {self.scope}/{self.name}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> KeyValueTable:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the handle (the table itself stays); later calls raise ClosedError."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"key-value table handle {self.scope}/{self.name} is closed")

    # ------------------------------------------------------------------ reads

    async def get(self, key: TableKey) -> TableEntry | None:
        """The entry of ``key``, or None if it does not exist. Raises InvalidArgument for a key of the wrong shape."""
        return (await self.get_all([key]))[0]

    async def get_all(self, keys: Iterable[TableKey]) -> list[TableEntry | None]:
        """The entry of each key (None where it does not exist), in the order asked; keys of any families.

        Reads each partition concurrently.
        """
        self._check_open()
        wanted = list(keys)
        by_partition: dict[Partition, list[tuple[int, bytes]]] = {}
        for index, key in enumerate(wanted):
            segment_key = self._layout.key_bytes(key)
            by_partition.setdefault(self._partitions.of(key.primary), []).append((index, segment_key))
        found: list[TableEntry | None] = [None] * len(wanted)

        async def read(partition: Partition, batch: list[tuple[int, bytes]]) -> None:
            try:
                results = await self._segments.read_table(partition.name, [key for _, key in batch])
            except NoSuchSegment:
                raise self._source.not_found() from None
            for (index, _), result in zip(batch, results, strict=True):
                if result is not None:
                    version, value = result
                    found[index] = TableEntry(wanted[index], value, Version(partition.segment_id, version))

        await _all_of(read(partition, batch[start:start + _KEYS_PER_READ])
                      for partition, batch in by_partition.items() for start in range(0, len(batch), _KEYS_PER_READ))
        return found

    async def exists(self, key: TableKey) -> bool:
        """Whether ``key`` exists (reads its key only, not its value)."""
        self._check_open()
        segment_key = self._layout.key_bytes(key)
        partition = self._partitions.of(key.primary)
        try:
            keys, _ = await self._segments.read_table_keys(partition.name, b"", 1, b"", segment_key, segment_key)
        except NoSuchSegment:
            raise self._source.not_found() from None
        return bool(keys)

    def iterator(self, max_per_page: int = 100) -> IteratorBuilder:
        """An iteration over part of the table, chosen by the builder's ``for_primary_key``, ``for_range``,
        ``for_prefix`` or ``all`` (see :mod:`clients.kvt.iterator`); ``max_per_page`` items per page."""
        self._check_open()
        return IteratorBuilder(self._source, max_per_page)

    # ------------------------------------------------------------------ changes

    async def put(self, key: TableKey, value: bytes) -> Version:
        """Sets ``key`` to ``value`` whether it exists or not; returns its new version."""
        return (await self.update([Put(key, value)]))[0]

    async def put_if_absent(self, key: TableKey, value: bytes) -> Version:
        """Sets ``key`` to ``value`` only if it does not exist; returns its version.

        Raises:
            BadKeyVersion: the key exists (nothing was changed).
        """
        return (await self.update([Insert(key, value)]))[0]

    async def replace(self, key: TableKey, value: bytes, version: Version) -> Version:
        """Sets ``key`` to ``value`` only if it is still at ``version``; returns its new version.

        Raises:
            BadKeyVersion: the key is at another version (someone changed it since).
            NoSuchKey: the key does not exist (any more).
        """
        if version is None:
            raise InvalidArgument("replace needs the version to replace (put() changes a key unconditionally)")
        return (await self.update([Put(key, value, version)]))[0]

    async def remove(self, key: TableKey, version: Version | None = None) -> None:
        """Removes ``key``: unconditionally (``version`` None: an absent key is no error), or only if it is
        at ``version``.

        Raises:
            BadKeyVersion: the key is at another version.
            NoSuchKey: the key does not exist and a version was given.
        """
        await self.update([Remove(key, version)])

    async def update(self, modifications: Iterable[TableModification]) -> list[Version]:
        """Applies ``modifications`` (Insert, Put, Remove) of one key family atomically: all or none.

        Every condition (Insert: the key is absent; Put or Remove with a version: the key is at it) must
        hold for anything to change. Returns the new version of each key of an Insert/Put batch, in
        order; an empty list for a batch of removals (and for no modifications).

        Raises:
            InvalidArgument: keys of different primary keys (key families), removals mixed with inserts
                or puts (the segment store has no atomic request for both), a key twice, a key or value
                of the wrong size, or a batch larger than one request (16 MiB).
            BadKeyVersion: a key is not at the version its change names (an Insert's key exists; a
                version of another partition never matches).
            NoSuchKey: a change names a version of a key that does not exist.
        """
        self._check_open()
        changes = list(modifications)
        if not changes:
            return []
        for change in changes:
            if not isinstance(change, Insert | Put | Remove):
                raise InvalidArgument(f"expected Insert, Put or Remove, not {type(change).__name__}")
        keys = [self._layout.key_bytes(change.key) for change in changes]
        primary = changes[0].key.primary
        for change in changes:
            if change.key.primary != primary:
                raise InvalidArgument(f"the keys of one update must share one primary key (one key family): "
                                      f"{primary.hex()} and {change.key.primary.hex()}")
        removals = sum(isinstance(change, Remove) for change in changes)
        if removals not in (0, len(changes)):
            raise InvalidArgument("one update cannot mix removals with inserts or puts: the segment store "
                                  "applies each kind in its own atomic request")
        partition = self._partitions.of(primary)
        if len(set(keys)) != len(keys):
            raise InvalidArgument("one update changes each key at most once")
        versions = [self._segment_version(partition, change.version) for change in changes]
        try:
            if removals:
                await self._segments.remove_table_keys(partition.name, list(zip(keys, versions, strict=True)))
                return []
            values = [self._layout.value(change.value) for change in changes if not isinstance(change, Remove)]
            size = sum(len(key) + len(value) + _ENTRY_OVERHEAD for key, value in zip(keys, values, strict=True))
            if size > MAX_PAYLOAD_SIZE - 65536:
                raise InvalidArgument(f"the update is too large for one request ({size} bytes; at most "
                                      f"{MAX_PAYLOAD_SIZE - 65536})")
            updated = await self._segments.update_table(partition.name, zip(keys, versions, values, strict=True))
        except TableKeyBadVersion as error:
            raise BadKeyVersion(f"a key of {self.scope}/{self.name} is not at the version the update names "
                                f"(or exists, for an insert)") from error
        except TableKeyDoesNotExist as error:
            raise NoSuchKey(f"the update names a version of a key of {self.scope}/{self.name} that does not "
                            f"exist") from error
        except NoSuchSegment:
            raise self._source.not_found() from None
        return [Version(partition.segment_id, version) for version in updated]

    def _segment_version(self, partition: Partition, version: object) -> int:
        """The segment store's version condition for ``version`` on a key of ``partition``."""
        if version is None:
            return NO_VERSION
        if not isinstance(version, Version):
            raise InvalidArgument(f"a version must be a Version, not {type(version).__name__}")
        if version.segment_id == NO_SEGMENT:
            if version.segment_version != NOT_EXISTS:
                raise InvalidArgument(f"{version} is not a version of this table")
            return NOT_EXISTS
        if version.segment_id != partition.segment_id:
            raise BadKeyVersion(f"{version} is a version of another partition of {self.scope}/{self.name}")
        if version.segment_version < 0:
            raise InvalidArgument(f"{version} is not a version of this table")
        return version.segment_version


async def _all_of(calls: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Runs the calls concurrently; waits for all of them, then raises the first failure if any."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


__all__ = ["KeyValueTable"]
