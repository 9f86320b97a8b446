"""Table segments: the entry format inside the segment, and the in-memory key index.

A table segment is an ordinary segment whose bytes are serialized entries; an
update or removal batch is one append, so it is atomic. The version of a key is
the segment offset of its latest update record (design §4.1, §4.3). Record
format (Java's EntrySerializer, so versions, lengths and positions match Java)::

    version:u8 (0) | key_length:i32 | value_length:i32 (-1: removal) | explicit_version:i64 | key | value

The committed key index maps key -> (version, value) and orders keys by a
128-bit hash of the key for resumable iteration: the continuation token is the
last returned key's hash, and a page resumes strictly after it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TypeAlias

from sortedcontainers import SortedDict

from wire.constants import NO_VERSION
from wire.fields import BytesLike

from ..errors import IllegalArgument
from .views import TableDelta, TableEntry

ENTRY_HEADER = struct.Struct(">Biiq")
ENTRY_HEADER_SIZE = ENTRY_HEADER.size  # 17
REMOVAL = -1
MAX_KEY_LENGTH = 8192
MAX_VALUE_LENGTH = 1024 * 1024 - 8192
TOKEN_SIZE = 16

# What a table update batch holds, per key: (key, expected version, value); a value of None removes the key.
TableUpdate: TypeAlias = tuple[BytesLike, int, BytesLike | None]
# What a removal batch holds, per key: (key, expected version).
TableRemoval: TypeAlias = tuple[BytesLike, int]


class Entry(NamedTuple):
    """One record of a table segment's data."""

    version: int  # its segment offset (or, for a record re-written by compaction, the original one)
    key: bytes
    value: BytesLike | None  # None for a removal
    size: int  # bytes the record takes
    offset: int  # where the record lies in the segment (its version, unless re-written by compaction)


def key_hash(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:TOKEN_SIZE]


def check_key(key: BytesLike, value: BytesLike | None = None) -> None:
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise IllegalArgument("", f"table keys are 1..{MAX_KEY_LENGTH} bytes, got {len(key)}")
    if value is not None and len(value) > MAX_VALUE_LENGTH:
        raise IllegalArgument("", f"table values are at most {MAX_VALUE_LENGTH} bytes, got {len(value)}")


def serialize_update(key: BytesLike, value: BytesLike, explicit_version: int = NO_VERSION) -> list[BytesLike]:
    """An update record; compaction re-writes live entries with their version made explicit."""
    return [ENTRY_HEADER.pack(0, len(key), len(value), explicit_version), key, value]


def serialize_removal(key: BytesLike) -> list[BytesLike]:
    return [ENTRY_HEADER.pack(0, len(key), REMOVAL, NO_VERSION), key]


def update_size(key: BytesLike, value: BytesLike) -> int:
    return ENTRY_HEADER_SIZE + len(key) + len(value)


def removal_size(key: BytesLike) -> int:
    return ENTRY_HEADER_SIZE + len(key)


def parse_entries(data: BytesLike, base_offset: int) -> Iterator[Entry]:
    """Parses whole records from ``data``, which starts at segment offset ``base_offset``.

    Raises ValueError on a malformed record (table data is written only by the container).
    """
    view = memoryview(data)
    position = 0
    while position < len(view):
        _, key_length, value_length, explicit_version = ENTRY_HEADER.unpack_from(view, position)
        key_start = position + ENTRY_HEADER_SIZE
        key = bytes(view[key_start:key_start + key_length])
        offset = base_offset + position
        version = offset if explicit_version == NO_VERSION else explicit_version
        if value_length == REMOVAL:
            size = ENTRY_HEADER_SIZE + key_length
            yield Entry(version, key, None, size, offset)
        else:
            value_start = key_start + key_length
            size = ENTRY_HEADER_SIZE + key_length + value_length
            yield Entry(version, key, view[value_start:value_start + value_length], size, offset)
        if position + size > len(view):
            raise ValueError("table entry runs past the end of its batch")
        position += size


def complete_length(data: BytesLike) -> int:
    """The length of the longest prefix of ``data`` made of whole records."""
    view = memoryview(data)
    position = 0
    while position + ENTRY_HEADER_SIZE <= len(view):
        _, key_length, value_length, _ = ENTRY_HEADER.unpack_from(view, position)
        size = ENTRY_HEADER_SIZE + key_length + max(value_length, 0)
        if position + size > len(view):
            break
        position += size
    return position


class TableIndex:
    """The committed key index of one table segment.

    A hash table (``key_length`` 0) iterates in key-hash order, its continuation token the last key's
    16-byte hash. A fixed-key-length table (the layout of key-value tables) holds only keys of exactly
    ``key_length`` bytes and iterates in key order, its token the last key itself, so it serves ranges
    and prefixes (protocol reference §3.8.7).
    """

    __slots__ = ("_entries", "_order", "live_bytes", "key_length")

    def __init__(self, key_length: int = 0) -> None:
        self.key_length = key_length
        self._entries: dict[bytes, tuple[int, bytes]] = {}  # key -> (version, value)
        self._order: SortedDict = SortedDict()  # iteration position (key hash, or the key) -> key
        self.live_bytes = 0  # what the live entries' records would take (compaction's yardstick)

    @property
    def entry_count(self) -> int:
        return len(self._entries)

    def _position(self, key: bytes) -> bytes:
        return key if self.key_length else key_hash(key)

    def get(self, key: bytes) -> tuple[int, bytes] | None:
        return self._entries.get(key)

    def items(self) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, version, value) of every key, in no particular order."""
        for key, (version, value) in self._entries.items():
            yield key, version, value

    def index_batch(self, data: BytesLike, base_offset: int) -> None:
        """Applies an appended batch of records (committed) to the index."""
        for entry in parse_entries(data, base_offset):
            previous = self._entries.get(entry.key)
            if previous is not None:
                self.live_bytes -= update_size(entry.key, previous[1])
            if entry.value is None:
                if previous is not None:
                    del self._entries[entry.key]
                    del self._order[self._position(entry.key)]
            else:
                self.live_bytes += update_size(entry.key, entry.value)
                if previous is None:
                    self._order[self._position(entry.key)] = entry.key
                # An owned copy: a view would keep the whole appended batch alive, and the segment's
                # bytes are evicted from the cache once they are in Tier-2.
                self._entries[entry.key] = (entry.version, bytes(entry.value))

    def lookup(self, keys: Iterable[BytesLike]) -> list[TableEntry | None]:
        """The entry of each key (None for a key the table does not hold)."""
        found: list[TableEntry | None] = []
        for each in keys:
            key = bytes(each)
            hit = self._entries.get(key)
            found.append(None if hit is None else TableEntry(key, hit[0], hit[1]))
        return found

    def page(self, token: BytesLike, max_count: int, max_bytes: int, prefix: BytesLike = b"",
             from_key: BytesLike = b"", to_key: BytesLike = b"") -> tuple[list[TableEntry], bytes]:
        """Entries after ``token`` in iteration order, and the next token; an empty page comes with an
        empty token (the iteration is over). Only keys starting with ``prefix`` are returned, and, in a
        fixed-key-length table, only keys from ``from_key`` to ``to_key`` (both included; empty: no bound).

        Raises IllegalArgument: a token that is not one of ours, a range on a hash table.
        """
        token, prefix, low, high = bytes(token), bytes(prefix), bytes(from_key), bytes(to_key)
        if token and len(token) != (self.key_length or TOKEN_SIZE):
            raise IllegalArgument("", "invalid continuation token")
        if not self.key_length and (low or high):
            raise IllegalArgument("", "a key range needs a fixed-key-length table (a hash table has no key order)")
        if self.key_length:
            if prefix:  # a prefix is the range of the keys that start with it
                low = max(low, prefix.ljust(self.key_length, b"\0"))
                high = min(high, prefix.ljust(self.key_length, b"\xff")) if high else \
                    prefix.ljust(self.key_length, b"\xff")
            start = self._order.bisect_right(token) if token else self._order.bisect_left(low) if low else 0
            if token and low and token < low:
                start = self._order.bisect_left(low)
        else:
            start = self._order.bisect_right(token) if token else 0
        items: list[TableEntry] = []
        size, last = 0, b""
        for position in self._order.islice(start):
            if len(items) >= max_count or size >= max_bytes:
                break
            key = self._order[position]
            if self.key_length and high and key > high:
                return items, last if items else b""
            if prefix and not key.startswith(prefix):
                continue
            version, value = self._entries[key]
            items.append(TableEntry(key, version, value))
            size += len(key) + len(value) + 32
            last = position
        return items, last


def check_fixed_length(key_length: int, key: BytesLike) -> None:
    """A key of a fixed-key-length table must have exactly its length (0: any length)."""
    if key_length and len(key) != key_length:
        raise IllegalArgument("", f"this table's keys are {key_length} bytes, got {len(key)}")


# Bytes of a table read for one delta page of at most ``max_bytes``: plus one largest record, so it is never cut short.
DELTA_WINDOW_EXTRA = ENTRY_HEADER_SIZE + MAX_KEY_LENGTH + MAX_VALUE_LENGTH


def delta_page(data: BytesLike, base: int, end: int, max_entries: int, max_bytes: int) -> TableDelta:
    """The change-log page of the whole records in ``data`` (at ``base``; the table ends at ``end``).

    Holds the latest live entry of each key changed, whether the page reaches the end, and the
    position after its last record. Java's semantics, protocol reference §3.8.8.
    """
    data = memoryview(data)[:complete_length(data)]
    page: dict[bytes, TableEntry] = {}
    page_bytes, last_position, reached_end = 0, 0, True
    for entry in parse_entries(data, base):
        if len(page) >= max_entries or page_bytes >= max_bytes:
            break
        following = entry.offset + entry.size  # not the version: a re-written record keeps an older one
        last_position, reached_end = following, following >= end
        if entry.value is None:
            page.pop(entry.key, None)
        else:
            page[entry.key] = TableEntry(entry.key, entry.version, entry.value)
            page_bytes += entry.size
    return TableDelta(list(page.values()), reached_end, last_position)
