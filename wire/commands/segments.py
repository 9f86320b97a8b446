"""Segment reads, information, attributes and lifecycle (create, seal, truncate, delete, merge)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ..base import Reply, Request, command
from ..constants import NO_REQUEST_ID
from ..fields import I8, I32, I64, Bool, Buffer, BytesLike, CompositeField, ListOf, Trailing, Utf, Uuid
from .composites import ConditionalAttributeUpdate, MergedSource


@command(
    9,
    "segment" / Utf,
    "offset" / I64,
    "suggested_length" / I32,
    "delegation_token" / Utf,
    "request_id" / Trailing(I64, NO_REQUEST_ID),
)
class ReadSegment(Request):
    """Reads from ``offset``; at the tail the server waits for data."""

    segment: str
    offset: int
    suggested_length: int
    delegation_token: str
    request_id: int = NO_REQUEST_ID


@command(
    10,
    "segment" / Utf,
    "offset" / I64,
    "at_tail" / Bool,
    "end_of_segment" / Bool,
    "data" / Buffer,
    "request_id" / Trailing(I64, NO_REQUEST_ID),
)
class SegmentRead(Reply):
    """Data of a segment starting at ``offset`` (which echoes the request's offset)."""

    segment: str
    offset: int
    at_tail: bool
    end_of_segment: bool
    data: BytesLike
    request_id: int = NO_REQUEST_ID


@command(11, "request_id" / I64, "segment_name" / Utf, "delegation_token" / Utf)
class GetStreamSegmentInfo(Request):
    """Asks for a segment's length, start offset and state."""

    request_id: int
    segment_name: str
    delegation_token: str


@command(
    12,
    "request_id" / I64,
    "segment_name" / Utf,
    "exists" / Bool,
    "is_sealed" / Bool,
    "is_deleted" / Bool,
    "last_modified" / I64,
    "write_offset" / I64,
    "start_offset" / Trailing(I64, 0),
)
class StreamSegmentInfo(Reply):
    """A segment's state; ``last_modified`` is in milliseconds since the epoch."""

    request_id: int
    segment_name: str
    exists: bool
    is_sealed: bool
    is_deleted: bool
    last_modified: int
    write_offset: int
    start_offset: int = 0


@command(
    20,
    "request_id" / I64,
    "segment" / Utf,
    "target_rate" / I32,
    "scale_type" / I8,
    "delegation_token" / Utf,
    "rollover_size_bytes" / Trailing(I64, 0),
)
class CreateSegment(Request):
    """Creates a stream segment; scale types: 0 none, 1 KB/s, 2 events/s."""

    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str
    rollover_size_bytes: int = 0

    NO_SCALE = 0
    IN_KBYTES_PER_SEC = 1
    IN_EVENTS_PER_SEC = 2


@command(21, "request_id" / I64, "segment" / Utf)
class SegmentCreated(Reply):
    """A segment (stream, table or transient) was created."""

    request_id: int
    segment: str


@command(28, "request_id" / I64, "segment" / Utf, "delegation_token" / Utf)
class SealSegment(Request):
    """Seals a segment: no more appends."""

    request_id: int
    segment: str
    delegation_token: str


@command(29, "request_id" / I64, "segment" / Utf)
class SegmentSealed(Reply):
    """The segment is sealed."""

    request_id: int
    segment: str


@command(30, "request_id" / I64, "segment" / Utf, "delegation_token" / Utf)
class DeleteSegment(Request):
    """Deletes a segment."""

    request_id: int
    segment: str
    delegation_token: str


@command(31, "request_id" / I64, "segment" / Utf)
class SegmentDeleted(Reply):
    """The segment (stream or table) is deleted."""

    request_id: int
    segment: str


@command(
    32,
    "request_id" / I64,
    "segment" / Utf,
    "target_rate" / I32,
    "scale_type" / I8,
    "delegation_token" / Utf,
)
class UpdateSegmentPolicy(Request):
    """Changes the auto-scaling policy attributes of a segment."""

    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str


@command(33, "request_id" / I64, "segment" / Utf)
class SegmentPolicyUpdated(Reply):
    """The policy was updated."""

    request_id: int
    segment: str


@command(34, "request_id" / I64, "segment_name" / Utf, "attribute_id" / Uuid, "delegation_token" / Utf)
class GetSegmentAttribute(Request):
    """Reads one attribute of a segment."""

    request_id: int
    segment_name: str
    attribute_id: UUID
    delegation_token: str


@command(35, "request_id" / I64, "value" / I64)
class SegmentAttribute(Reply):
    """An attribute value; NULL_ATTRIBUTE_VALUE when unset."""

    request_id: int
    value: int


@command(
    36,
    "request_id" / I64,
    "segment_name" / Utf,
    "attribute_id" / Uuid,
    "new_value" / I64,
    "expected_value" / I64,
    "delegation_token" / Utf,
)
class UpdateSegmentAttribute(Request):
    """Compare-and-set of one attribute (expected NULL_ATTRIBUTE_VALUE means "unset")."""

    request_id: int
    segment_name: str
    attribute_id: UUID
    new_value: int
    expected_value: int
    delegation_token: str


@command(37, "request_id" / I64, "success" / Bool)
class SegmentAttributeUpdated(Reply):
    """Result of a compare-and-set (also of a merge whose attribute condition failed)."""

    request_id: int
    success: bool


@command(38, "request_id" / I64, "segment" / Utf, "truncation_offset" / I64, "delegation_token" / Utf)
class TruncateSegment(Request):
    """Drops the data of a segment before ``truncation_offset``."""

    request_id: int
    segment: str
    truncation_offset: int
    delegation_token: str


@command(39, "request_id" / I64, "segment" / Utf)
class SegmentTruncated(Reply):
    """The segment was truncated."""

    request_id: int
    segment: str


@command(41, "request_id" / I64, "segment" / Utf, "target_offset" / I64, "delegation_token" / Utf)
class LocateOffset(Request):
    """(v17, Java clients) Asks for the nearest indexed offset to ``target_offset``."""

    request_id: int
    segment: str
    target_offset: int
    delegation_token: str


@command(42, "request_id" / I64, "segment" / Utf, "offset" / I64)
class OffsetLocated(Reply):
    """(v17) Answer to LocateOffset; never send it to a v15 client."""

    request_id: int
    segment: str
    offset: int


@command(
    58,
    "request_id" / I64,
    "target" / Utf,
    "source" / Utf,
    "delegation_token" / Utf,
    "attribute_updates" / Trailing(ListOf(CompositeField(ConditionalAttributeUpdate)), ()),
)
class MergeSegments(Request):
    """Seals ``source`` and appends all its bytes to ``target`` atomically."""

    request_id: int
    target: str
    source: str
    delegation_token: str
    attribute_updates: Sequence[ConditionalAttributeUpdate] = ()


@command(
    59,
    "request_id" / I64,
    "target" / Utf,
    "source" / Utf,
    "new_target_write_offset" / Trailing(I64, -1, min_bytes=1),
)
class SegmentsMerged(Reply):
    """The source is merged; the target now has ``new_target_write_offset`` bytes."""

    request_id: int
    target: str
    source: str
    new_target_write_offset: int = -1


@command(
    90,
    "request_id" / I64,
    "target_segment_id" / Utf,
    "source_segment_ids" / ListOf(Utf),
    "delegation_token" / Utf,
)
class MergeSegmentsBatch(Request):
    """Merges several sources into one target, in list order (transaction commit)."""

    request_id: int
    target_segment_id: str
    source_segment_ids: Sequence[str]
    delegation_token: str


@command(
    91,
    "request_id" / I64,
    "target" / Utf,
    "merged" / ListOf(CompositeField(MergedSource)),
)
class SegmentsBatchMerged(Reply):
    """One (source, target length after it) pair per merged source, in request order."""

    request_id: int
    target: str
    merged: Sequence[MergedSource]
