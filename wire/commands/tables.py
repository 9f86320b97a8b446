"""Table segments: create, delete, conditional updates and removals, reads and iteration."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import dataclass_transform

from ..base import C, Reply, Request, command
from ..constants import NULL_TABLE_SEGMENT_OFFSET
from ..fields import I32, I64, Bool, Buffer, BytesLike, CompositeField, ListOf, Trailing, Utf
from .composites import TableEntry, TableKey

TableEntries = ListOf(CompositeField(TableEntry))
TableKeys = ListOf(CompositeField(TableKey))


@command(68, "request_id" / I64, "segment_name" / Utf, "delegation_token" / Utf)
class GetTableSegmentInfo(Request):
    """Asks for a table segment's length and live key count."""

    request_id: int
    segment_name: str
    delegation_token: str


@command(
    69,
    "request_id" / I64,
    "segment_name" / Utf,
    "start_offset" / I64,
    "length" / I64,
    "entry_count" / I64,
    "key_length" / I32,
)
class TableSegmentInfo(Reply):
    """A table segment's byte length, live key count and fixed key length (0: hash table)."""

    request_id: int
    segment_name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int


@command(
    70,
    "request_id" / I64,
    "segment" / Utf,
    "delegation_token" / Utf,
    "sorted_deprecated" / Trailing(Bool, False),
    "key_length" / Trailing(I32, 0),
    "rollover_size_bytes" / Trailing(I64, 0),
)
class CreateTableSegment(Request):
    """Creates an empty table segment."""

    request_id: int
    segment: str
    delegation_token: str
    sorted_deprecated: bool = False
    key_length: int = 0
    rollover_size_bytes: int = 0


@command(71, "request_id" / I64, "segment" / Utf, "must_be_empty" / Bool, "delegation_token" / Utf)
class DeleteTableSegment(Request):
    """Deletes a table segment, optionally only if it holds no keys."""

    request_id: int
    segment: str
    must_be_empty: bool
    delegation_token: str


@command(72, "request_id" / I64, "target" / Utf, "source" / Utf, "delegation_token" / Utf)
class MergeTableSegments(Request):
    """(Legacy, the Rust CLI only) Merges one table segment into another."""

    request_id: int
    target: str
    source: str
    delegation_token: str


@command(73, "request_id" / I64, "segment" / Utf, "delegation_token" / Utf)
class SealTableSegment(Request):
    """(Legacy, the Rust CLI only) Seals a table segment."""

    request_id: int
    segment: str
    delegation_token: str


@command(
    74,
    "request_id" / I64,
    "segment" / Utf,
    "delegation_token" / Utf,
    "entries" / TableEntries,
    "table_segment_offset" / Trailing(I64, NULL_TABLE_SEGMENT_OFFSET, min_bytes=1),
)
class UpdateTableEntries(Request):
    """Inserts or replaces entries, conditionally on the versions of versioned keys."""

    request_id: int
    segment: str
    delegation_token: str
    entries: Sequence[TableEntry]
    table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET


@command(75, "request_id" / I64, "updated_versions" / ListOf(I64))
class TableEntriesUpdated(Reply):
    """The new version of each entry, in request order."""

    request_id: int
    updated_versions: Sequence[int]


@command(
    76,
    "request_id" / I64,
    "segment" / Utf,
    "delegation_token" / Utf,
    "keys" / TableKeys,
    "table_segment_offset" / Trailing(I64, NULL_TABLE_SEGMENT_OFFSET),
)
class RemoveTableKeys(Request):
    """Removes keys, conditionally on the versions of versioned keys."""

    request_id: int
    segment: str
    delegation_token: str
    keys: Sequence[TableKey]
    table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET


@command(77, "request_id" / I64, "segment" / Utf)
class TableKeysRemoved(Reply):
    """The keys are removed."""

    request_id: int
    segment: str


@command(78, "request_id" / I64, "segment" / Utf, "delegation_token" / Utf, "keys" / TableKeys)
class ReadTable(Request):
    """Reads the current value and version of each key."""

    request_id: int
    segment: str
    delegation_token: str
    keys: Sequence[TableKey]


@command(79, "request_id" / I64, "segment" / Utf, "entries" / TableEntries)
class TableRead(Reply):
    """One entry per requested key; an absent key has version NOT_EXISTS and an empty value."""

    request_id: int
    segment: str
    entries: Sequence[TableEntry]


@dataclass_transform(frozen_default=True)
def _iterator_request(type_code: int, count_field: str) -> Callable[[type[C]], type[C]]:
    """The decorator of ReadTableKeys and ReadTableEntries, which differ only in their count's name."""
    return command(
        type_code,
        "request_id" / I64,
        "segment" / Utf,
        "delegation_token" / Utf,
        count_field / I32,
        "continuation_token" / Trailing(Buffer, b""),
        "prefix_filter" / Trailing(Buffer, b""),
        "from_key" / Trailing(Buffer, b""),
        "to_key" / Trailing(Buffer, b""),
    )


@_iterator_request(83, "suggested_key_count")
class ReadTableKeys(Request):
    """Reads a page of keys, resuming after ``continuation_token``."""

    request_id: int
    segment: str
    delegation_token: str
    suggested_key_count: int
    continuation_token: BytesLike = b""
    prefix_filter: BytesLike = b""
    from_key: BytesLike = b""
    to_key: BytesLike = b""


@_iterator_request(85, "suggested_entry_count")
class ReadTableEntries(Request):
    """Reads a page of entries, resuming after ``continuation_token``."""

    request_id: int
    segment: str
    delegation_token: str
    suggested_entry_count: int
    continuation_token: BytesLike = b""
    prefix_filter: BytesLike = b""
    from_key: BytesLike = b""
    to_key: BytesLike = b""


@command(84, "request_id" / I64, "segment" / Utf, "keys" / TableKeys, "continuation_token" / Buffer)
class TableKeysRead(Reply):
    """A page of keys; an empty page (and token) ends the iteration."""

    request_id: int
    segment: str
    keys: Sequence[TableKey]
    continuation_token: BytesLike


@command(86, "request_id" / I64, "segment" / Utf, "entries" / TableEntries, "continuation_token" / Buffer)
class TableEntriesRead(Reply):
    """A page of entries; an empty page (and token) ends the iteration."""

    request_id: int
    segment: str
    entries: Sequence[TableEntry]
    continuation_token: BytesLike


@command(
    88,
    "request_id" / I64,
    "segment" / Utf,
    "delegation_token" / Utf,
    "from_position" / I64,
    "suggested_entry_count" / I32,
)
class ReadTableEntriesDelta(Request):
    """Reads the entries updated at or after byte position ``from_position``."""

    request_id: int
    segment: str
    delegation_token: str
    from_position: int
    suggested_entry_count: int


@command(
    87,
    "request_id" / I64,
    "segment" / Utf,
    "entries" / TableEntries,
    "should_clear" / Bool,
    "reached_end" / Bool,
    "last_position" / I64,
)
class TableEntriesDeltaRead(Reply):
    """A page of the table's change log, to be resumed at ``last_position``."""

    request_id: int
    segment: str
    entries: Sequence[TableEntry]
    should_clear: bool
    reached_end: bool
    last_position: int
