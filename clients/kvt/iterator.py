"""Iterating over a key-value table: by key family, by secondary-key range or prefix, by primary-key range
or prefix, or all of it.

``table.iterator(max_per_page=100)`` gives an :class:`IteratorBuilder`; each of its methods selects a
key range and returns a :class:`KeyValueTableIterator`, whose ``keys()`` and ``entries()`` are
:class:`TableItems`: ``async for`` over them gives the items one by one, ``pages()`` gives them as lists
of at most ``max_per_page``. Each ``async for`` (or ``pages()``) runs a new iteration.

A key family (``for_primary_key``) lives in one partition, so its iteration reads that partition only.
The others (``for_range``, ``for_prefix``, ``all``) read every partition: they read a page of each, and
merge them, so their items too come in key order over the whole table (primary key first, then
secondary key, comparing bytes), at the cost of a page buffered per partition.

An iteration is not a snapshot. It reads page by page, each page after the last key of the one
before: a key changed meanwhile may come with its old value or its new one, one removed or added
meanwhile may or may not come, and no key comes twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Generic, TypeVar

from ..errors import InvalidArgument, KeyValueTableNotFound, NoSuchSegment
from ..segment_store_client import SegmentStoreClient
from .layout import KeyLayout
from .model import TableEntry, TableKey, Version
from .partitions import Partition, Partitions

T = TypeVar("T")

_LOWEST, _HIGHEST = b"\x00", b"\xff"


@dataclasses.dataclass(frozen=True, slots=True)
class TableSource:
    """What an iteration reads from: one table's partitions, key layout and segment-store client."""

    scope: str
    table: str
    layout: KeyLayout
    partitions: Partitions
    segments: SegmentStoreClient
    check_open: Callable[[], None]

    def not_found(self) -> KeyValueTableNotFound:
        return KeyValueTableNotFound(f"key-value table {self.scope}/{self.table} does not exist")


class TableItems(Generic[T]):
    """Keys or entries of an iteration: ``async for item in items``, or ``async for page in items.pages()``."""

    __slots__ = ("_pages",)

    def __init__(self, pages: Callable[[], AsyncIterator[list[T]]]):
        self._pages = pages

    def pages(self) -> AsyncIterator[list[T]]:
        """The items in pages (lists) of at most ``max_per_page``, none of them empty."""
        return self._pages()

    def __aiter__(self) -> AsyncIterator[T]:
        return self._items()

    async def _items(self) -> AsyncIterator[T]:
        async for page in self._pages():
            for item in page:
                yield item


class KeyValueTableIterator:
    """The keys from ``from_key`` to ``to_key`` (segment keys, both included) of some partitions."""

    __slots__ = ("_source", "_partitions", "_from_key", "_to_key", "_max_per_page")

    def __init__(self, source: TableSource, partitions: list[Partition], from_key: bytes, to_key: bytes,
                 max_per_page: int):
        self._source = source
        self._partitions = partitions
        self._from_key = from_key
        self._to_key = to_key
        self._max_per_page = max_per_page

    def __repr__(self) -> str:
        return (f"<KeyValueTableIterator {self._source.scope}/{self._source.table} "
                f"{self._from_key.hex()}..{self._to_key.hex()} over {len(self._partitions)} partition(s)>")

    def keys(self) -> TableItems[TableKey]:
        """The keys, in key order (less to transfer than ``entries()`` when the values are not needed)."""
        return TableItems(lambda: self._pages(self._key_pages, _key_of_key))

    def entries(self) -> TableItems[TableEntry]:
        """The entries (key, value, version), in key order."""
        return TableItems(lambda: self._pages(self._entry_pages, _key_of_entry))

    def _pages(self, pages_of: Callable[[Partition], AsyncGenerator[list[T], None]],
               key_of: Callable[[T], TableKey]) -> AsyncIterator[list[T]]:
        if len(self._partitions) == 1:
            return pages_of(self._partitions[0])
        return _merged([pages_of(partition) for partition in self._partitions], key_of, self._max_per_page)

    async def _key_pages(self, partition: Partition) -> AsyncGenerator[list[TableKey], None]:
        source, token = self._source, b""
        while True:
            source.check_open()
            try:
                keys, token = await source.segments.read_table_keys(partition.name, token, self._max_per_page,
                                                                    b"", self._from_key, self._to_key)
            except NoSuchSegment:
                raise source.not_found() from None
            if not keys:
                return
            yield [source.layout.key_of(key) for key, _ in keys]

    async def _entry_pages(self, partition: Partition) -> AsyncGenerator[list[TableEntry], None]:
        source, token = self._source, b""
        while True:
            source.check_open()
            try:
                entries, token = await source.segments.read_table_entries(
                    partition.name, token, self._max_per_page, b"", self._from_key, self._to_key)
            except NoSuchSegment:
                raise source.not_found() from None
            if not entries:
                return
            yield [TableEntry(source.layout.key_of(key), value, Version(partition.segment_id, version))
                   for key, version, value in entries]


def _key_of_key(key: TableKey) -> TableKey:
    return key


def _key_of_entry(entry: TableEntry) -> TableKey:
    return entry.key


class _Cursor(Generic[T]):
    """The buffered page of one partition's iteration."""

    __slots__ = ("pages", "page", "position")

    def __init__(self, pages: AsyncIterator[list[T]]):
        self.pages = pages
        self.page: list[T] = []
        self.position = 0

    async def fill(self) -> bool:
        """Makes sure an item is buffered; False once the partition has no more."""
        if self.position < len(self.page):
            return True
        self.page, self.position = await anext(self.pages, []), 0
        return bool(self.page)

    def take(self) -> T:
        item = self.page[self.position]
        self.position += 1
        return item


async def _merged(partition_pages: list[AsyncGenerator[list[T], None]], key_of: Callable[[T], TableKey],
                  max_per_page: int) -> AsyncIterator[list[T]]:
    """Pages of the items of every partition, in key order (each partition's are in key order already)."""
    cursors = [_Cursor(pages) for pages in partition_pages]
    try:
        results = await asyncio.gather(*(cursor.fill() for cursor in cursors), return_exceptions=True)
        for result in results:  # every first read has ended: the partitions' generators are idle
            if isinstance(result, BaseException):
                raise result
        filled = [result is True for result in results]
        heap = [(key_of(cursor.page[0]), index) for index, (cursor, ready) in enumerate(zip(cursors, filled,
                                                                                           strict=True)) if ready]
        heapq.heapify(heap)
        page: list[T] = []
        while heap:
            _, index = heap[0]
            cursor = cursors[index]
            page.append(cursor.take())
            if await cursor.fill():
                heapq.heapreplace(heap, (key_of(cursor.page[cursor.position]), index))
            else:
                heapq.heappop(heap)
            if len(page) == max_per_page:
                yield page
                page = []
        if page:
            yield page
    finally:
        for pages in partition_pages:
            await pages.aclose()


class IteratorBuilder:
    """Selects what an iteration covers (Java's ``KeyValueTableIterator.Builder``); from ``table.iterator()``."""

    __slots__ = ("_source", "_max_per_page")

    def __init__(self, source: TableSource, max_per_page: int):
        if not isinstance(max_per_page, int) or isinstance(max_per_page, bool) or max_per_page < 1:
            raise InvalidArgument(f"max_per_page must be a positive int, not {max_per_page!r}")
        self._source = source
        self._max_per_page = max_per_page

    def for_primary_key(self, primary_key: bytes, from_secondary: bytes | None = None,
                        to_secondary: bytes | None = None, *,
                        secondary_prefix: bytes | None = None) -> KeyValueTableIterator:
        """The key family of ``primary_key``: all of it, its secondary keys from ``from_secondary`` to
        ``to_secondary`` (both included; None: from the first, to the last), or those starting with
        ``secondary_prefix``. Reads the family's partition only.

        Raises:
            InvalidArgument: a key of the wrong length, or both a range and a prefix.
        """
        layout = self._source.layout
        primary = layout.primary(primary_key)
        if secondary_prefix is not None:
            if from_secondary is not None or to_secondary is not None:
                raise InvalidArgument("give a secondary key range or a secondary key prefix, not both")
            prefix = layout.prefix(secondary_prefix, layout.secondary_length, "secondary key prefix")
            low, high = _padded(prefix, layout.secondary_length)
        else:
            low = _lowest(layout.secondary_length) if from_secondary is None else \
                layout.secondary(from_secondary, "secondary key to start from")
            high = _highest(layout.secondary_length) if to_secondary is None else \
                layout.secondary(to_secondary, "secondary key to end at")
        return self._iterator([self._source.partitions.of(primary)], primary + low, primary + high)

    def for_range(self, from_primary: bytes | None = None, to_primary: bytes | None = None) -> KeyValueTableIterator:
        """The keys whose primary key is from ``from_primary`` to ``to_primary`` (both included; None: from
        the first, to the last), over every partition, in key order.

        Raises:
            InvalidArgument: a primary key of the wrong length.
        """
        layout = self._source.layout
        low = _lowest(layout.primary_length) if from_primary is None else \
            layout.primary(from_primary, "primary key to start from")
        high = _highest(layout.primary_length) if to_primary is None else \
            layout.primary(to_primary, "primary key to end at")
        return self._over_all(low, high)

    def for_prefix(self, primary_prefix: bytes | None) -> KeyValueTableIterator:
        """The keys whose primary key starts with ``primary_prefix`` (None or b"": all), over every
        partition, in key order.

        Raises:
            InvalidArgument: a prefix longer than a primary key.
        """
        layout = self._source.layout
        prefix = b"" if primary_prefix is None else layout.prefix(primary_prefix, layout.primary_length,
                                                                   "primary key prefix")
        return self._over_all(*_padded(prefix, layout.primary_length))

    def all(self) -> KeyValueTableIterator:
        """Every key of the table, over every partition, in key order."""
        return self.for_range(None, None)

    def _over_all(self, low_primary: bytes, high_primary: bytes) -> KeyValueTableIterator:
        secondary = self._source.layout.secondary_length
        return self._iterator(list(self._source.partitions), low_primary + _lowest(secondary),
                              high_primary + _highest(secondary))

    def _iterator(self, partitions: list[Partition], from_key: bytes, to_key: bytes) -> KeyValueTableIterator:
        self._source.check_open()
        return KeyValueTableIterator(self._source, partitions, from_key, to_key, self._max_per_page)


def _lowest(length: int) -> bytes:
    return _LOWEST * length


def _highest(length: int) -> bytes:
    return _HIGHEST * length


def _padded(prefix: bytes, length: int) -> tuple[bytes, bytes]:
    """The lowest and the highest key of ``length`` bytes that start with ``prefix``."""
    return prefix + _lowest(length - len(prefix)), prefix + _highest(length - len(prefix))


__all__ = ["IteratorBuilder", "KeyValueTableIterator", "TableItems", "TableSource"]
