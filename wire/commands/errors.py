"""Error replies. Stack-trace fields are always sent empty (Java's default)."""

from __future__ import annotations

from uuid import UUID

from ..base import ErrorReply, command
from ..fields import I32, I64, Trailing, Utf, Uuid


@command(50, "request_id" / I64, "segment" / Utf, "correct_host" / Utf, "server_stack_trace" / Trailing(Utf, ""))
class WrongHost(ErrorReply):
    """The segment belongs to a container this server does not own."""

    request_id: int
    segment: str
    correct_host: str
    server_stack_trace: str = ''


@command(
    51,
    "request_id" / I64,
    "segment" / Utf,
    "server_stack_trace" / Trailing(Utf, ""),
    "offset" / Trailing(I64, -1),
)
class SegmentIsSealed(ErrorReply):
    """The segment is sealed (for appends ``offset`` carries the event number)."""

    request_id: int
    segment: str
    server_stack_trace: str = ''
    offset: int = -1


@command(52, "request_id" / I64, "segment" / Utf, "server_stack_trace" / Trailing(Utf, ""))
class SegmentAlreadyExists(ErrorReply):
    """A segment of that name exists."""

    request_id: int
    segment: str
    server_stack_trace: str = ''


@command(
    53,
    "request_id" / I64,
    "segment" / Utf,
    "server_stack_trace" / Trailing(Utf, ""),
    "offset" / Trailing(I64, -1),
)
class NoSuchSegment(ErrorReply):
    """No segment of that name exists (or it was deleted or merged)."""

    request_id: int
    segment: str
    server_stack_trace: str = ''
    offset: int = -1


@command(
    55,
    "writer_id" / Uuid,
    "request_id" / I64,
    "server_stack_trace" / Trailing(Utf, ""),
    "event_number" / Trailing(I64, -1),
)
class InvalidEventNumber(ErrorReply):
    """The writer's stored event number did not match (a zombie writer); the connection closes.

    v16+ layout; its first three fields read the same to a v15 decoder.
    """

    writer_id: UUID
    request_id: int
    server_stack_trace: str = ''
    event_number: int = -1


@command(
    56,
    "request_id" / I64,
    "segment" / Utf,
    "start_offset" / I64,
    "server_stack_trace" / Trailing(Utf, ""),
    "offset" / Trailing(I64, -1),
)
class SegmentIsTruncated(ErrorReply):
    """The requested offset is before the segment's start (or an offset condition failed)."""

    request_id: int
    segment: str
    start_offset: int
    server_stack_trace: str = ''
    offset: int = -1


@command(57, "request_id" / I64, "operation_name" / Utf, "server_stack_trace" / Trailing(Utf, ""))
class OperationUnsupported(ErrorReply):
    """The server does not support the operation."""

    request_id: int
    operation_name: str
    server_stack_trace: str = ''


def _check_auth_code(value: AuthTokenCheckFailed) -> None:
    if value.error_code not in (-1, 0, 1):
        raise ValueError("AuthTokenCheckFailed.error_code must be -1, 0 or 1 (Rust clients panic otherwise)")


@command(
    60,
    "request_id" / I64,
    "server_stack_trace" / Trailing(Utf, ""),
    "error_code" / Trailing(I32, -1),
    check=_check_auth_code,
)
class AuthTokenCheckFailed(ErrorReply):
    """A delegation token was rejected: -1 unspecified, 0 check failed, 1 expired."""

    request_id: int
    server_stack_trace: str = ''
    error_code: int = -1

    UNSPECIFIED = -1
    TOKEN_CHECK_FAILED = 0
    TOKEN_EXPIRED = 1


@command(61, "request_id" / I64, "segment" / Utf, "message" / Utf, "error_code" / I32)
class ErrorMessage(ErrorReply):
    """A request failed with an illegal argument (error code 0) or otherwise (-1)."""

    request_id: int
    segment: str
    message: str
    error_code: int

    UNSPECIFIED = -1
    ILLEGAL_ARGUMENT = 0


@command(80, "request_id" / I64, "segment" / Utf, "server_stack_trace" / Utf)
class TableSegmentNotEmpty(ErrorReply):
    """A delete that required an empty table found keys."""

    request_id: int
    segment: str
    server_stack_trace: str


@command(81, "request_id" / I64, "segment" / Utf, "server_stack_trace" / Utf)
class TableKeyDoesNotExist(ErrorReply):
    """A conditional table update named a key that does not exist."""

    request_id: int
    segment: str
    server_stack_trace: str


@command(82, "request_id" / I64, "segment" / Utf, "server_stack_trace" / Utf)
class TableKeyBadVersion(ErrorReply):
    """A conditional table update named a key whose version differs."""

    request_id: int
    segment: str
    server_stack_trace: str
