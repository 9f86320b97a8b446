"""Table segments: create, delete, conditional updates and removals, reads and iteration."""

from ..base import Reply, Request, command
from ..constants import NULL_TABLE_SEGMENT_OFFSET
from ..fields import I32, I64, Bool, Buffer, CompositeField, ListOf, Trailing, Utf
from .composites import TableEntry, TableKey

TableEntries = ListOf(CompositeField(TableEntry))
TableKeys = ListOf(CompositeField(TableKey))


@command(68, "request_id" / I64, "segment_name" / Utf, "delegation_token" / Utf)
class GetTableSegmentInfo(Request):
    """Asks for a table segment's length and live key count."""


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


@command(71, "request_id" / I64, "segment" / Utf, "must_be_empty" / Bool, "delegation_token" / Utf)
class DeleteTableSegment(Request):
    """Deletes a table segment, optionally only if it holds no keys."""


@command(72, "request_id" / I64, "target" / Utf, "source" / Utf, "delegation_token" / Utf)
class MergeTableSegments(Request):
    """(Legacy, the Rust CLI only) Merges one table segment into another."""


@command(73, "request_id" / I64, "segment" / Utf, "delegation_token" / Utf)
class SealTableSegment(Request):
    """(Legacy, the Rust CLI only) Seals a table segment."""


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


@command(75, "request_id" / I64, "updated_versions" / ListOf(I64))
class TableEntriesUpdated(Reply):
    """The new version of each entry, in request order."""


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


@command(77, "request_id" / I64, "segment" / Utf)
class TableKeysRemoved(Reply):
    """The keys are removed."""


@command(78, "request_id" / I64, "segment" / Utf, "delegation_token" / Utf, "keys" / TableKeys)
class ReadTable(Request):
    """Reads the current value and version of each key."""


@command(79, "request_id" / I64, "segment" / Utf, "entries" / TableEntries)
class TableRead(Reply):
    """One entry per requested key; an absent key has version NOT_EXISTS and an empty value."""


def _iterator_request(type_code: int, count_field: str):
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


@_iterator_request(85, "suggested_entry_count")
class ReadTableEntries(Request):
    """Reads a page of entries, resuming after ``continuation_token``."""


@command(84, "request_id" / I64, "segment" / Utf, "keys" / TableKeys, "continuation_token" / Buffer)
class TableKeysRead(Reply):
    """A page of keys; an empty page (and token) ends the iteration."""


@command(86, "request_id" / I64, "segment" / Utf, "entries" / TableEntries, "continuation_token" / Buffer)
class TableEntriesRead(Reply):
    """A page of entries; an empty page (and token) ends the iteration."""


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
