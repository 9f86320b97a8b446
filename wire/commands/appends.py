"""The append path: writer setup, append blocks, conditional appends, transient segments."""

from __future__ import annotations

from uuid import UUID

from ..base import ErrorReply, Reply, Request, command
from ..constants import NO_REQUEST_ID
from ..fields import I32, I64, Buffer, BytesLike, Event, Rest, Trailing, Utf, Uuid


@command(1, "request_id" / I64, "writer_id" / Uuid, "segment" / Utf, "delegation_token" / Utf)
class SetupAppend(Request):
    """Registers ``writer_id`` as a writer of ``segment`` on this connection."""

    request_id: int
    writer_id: UUID
    segment: str
    delegation_token: str


@command(2, "request_id" / I64, "segment" / Utf, "writer_id" / Uuid, "last_event_number" / I64)
class AppendSetup(Reply):
    """Answers SetupAppend with the writer's last stored event number (NULL_ATTRIBUTE_VALUE if none)."""

    request_id: int
    segment: str
    writer_id: UUID
    last_event_number: int


@command(3, "writer_id" / Uuid, "data" / Rest)
class AppendBlock(Request):
    """Opens a block of appended events; its data has no length prefix (Java clients only)."""

    writer_id: UUID
    data: BytesLike


@command(
    4,
    "writer_id" / Uuid,
    "size_of_whole_events" / I32,
    "data" / Buffer,
    "num_events" / I32,
    "last_event_number" / I64,
    "request_id" / Trailing(I64, NO_REQUEST_ID),
)
class AppendBlockEnd(Request):
    """Closes an append block; alone (as the Rust client sends it) ``data`` is the whole append.

    The stream decoder hands the server every append as a standalone AppendBlockEnd:
    a preceding AppendBlock is reassembled into ``data`` (see :mod:`wire.decoder`).
    """

    writer_id: UUID
    size_of_whole_events: int
    data: BytesLike
    num_events: int
    last_event_number: int
    request_id: int = NO_REQUEST_ID


@command(
    5,
    "writer_id" / Uuid,
    "event_number" / I64,
    "expected_offset" / I64,
    "data" / Event,
    "request_id" / Trailing(I64, NO_REQUEST_ID),
)
class ConditionalAppend(Request):
    """Appends one event if the segment length equals ``expected_offset``.

    ``data`` is the event payload; on the wire it travels inside its envelope,
    and the envelope is what gets appended.
    """

    writer_id: UUID
    event_number: int
    expected_offset: int
    data: BytesLike
    request_id: int = NO_REQUEST_ID


@command(
    89,
    "writer_id" / Uuid,
    "event_number" / I64,
    "expected_offset" / I64,
    "data" / Buffer,
    "request_id" / I64,
)
class ConditionalBlockEnd(Request):
    """Appends ``data`` as-is if the segment length equals ``expected_offset``."""

    writer_id: UUID
    event_number: int
    expected_offset: int
    data: BytesLike
    request_id: int


@command(
    7,
    "writer_id" / Uuid,
    "event_number" / I64,
    "previous_event_number" / Trailing(I64, -1),
    "request_id" / Trailing(I64, NO_REQUEST_ID),
    "current_segment_write_offset" / Trailing(I64, -1),
)
class DataAppended(Reply):
    """Acknowledges every event of the writer up to ``event_number``."""

    writer_id: UUID
    event_number: int
    previous_event_number: int = -1
    request_id: int = NO_REQUEST_ID
    current_segment_write_offset: int = -1


@command(8, "writer_id" / Uuid, "event_number" / I64, "request_id" / Trailing(I64, NO_REQUEST_ID))
class ConditionalCheckFailed(ErrorReply):
    """A conditional append found a different segment length; nothing was written."""

    writer_id: UUID
    event_number: int
    request_id: int = NO_REQUEST_ID


@command(40, "request_id" / I64, "writer_id" / Uuid, "parent_segment" / Utf, "delegation_token" / Utf)
class CreateTransientSegment(Request):
    """Creates a transient segment beside ``parent_segment``; answered by SegmentCreated."""

    request_id: int
    writer_id: UUID
    parent_segment: str
    delegation_token: str
