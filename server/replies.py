"""Operating errors -> wire replies (protocol reference §3.0): the one place that decides them.

Each request decides which ``segment`` and ``offset`` its error replies carry;
this module only knows how each error type becomes its reply. Errors with no
reply (a failed container, an unexpected exception) close the connection.

Two tables of §3.0, two entry points: :func:`error_reply` for requests,
:func:`append_error_reply` for SetupAppend and appends. The append table
answers fewer errors (everything else closes) and has its own cases
(ConditionalCheckFailed, InvalidEventNumber, the event number in
SegmentIsSealed); the replies both tables share are built by ``error_reply``.
"""

from __future__ import annotations

import uuid

from wire import Reply
from wire import commands as wc

from . import errors


class CloseConnection(Exception):
    """The request cannot be answered: close this connection (and only it)."""


def error_reply(error: errors.SegmentStoreError, request_id: int, segment: str, offset: int = -1,
                operation: str = "") -> Reply:
    """The reply for ``error`` to a request about ``segment``.

    Raises:
        CloseConnection: the error has no reply.
    """
    if isinstance(error, errors.NoSuchSegment):
        return wc.NoSuchSegment(request_id, segment, "", offset)
    if isinstance(error, errors.SegmentIsSealed):
        return wc.SegmentIsSealed(request_id, segment, "", offset)
    if isinstance(error, errors.SegmentAlreadyExists):
        return wc.SegmentAlreadyExists(request_id, segment, "")
    if isinstance(error, errors.SegmentIsTruncated):
        return wc.SegmentIsTruncated(request_id, segment, error.start_offset, "", error.offset)
    if isinstance(error, errors.BadOffset):
        return wc.SegmentIsTruncated(request_id, segment, error.actual_offset, "", error.expected_offset)
    if isinstance(error, errors.TableKeyDoesNotExist):
        return wc.TableKeyDoesNotExist(request_id, segment, "")
    if isinstance(error, errors.TableKeyBadVersion):
        return wc.TableKeyBadVersion(request_id, segment, "")
    if isinstance(error, errors.TableSegmentNotEmpty):
        return wc.TableSegmentNotEmpty(request_id, segment, "")
    if isinstance(error, errors.WrongHost):
        return wc.WrongHost(request_id, segment, "", "")
    if isinstance(error, errors.OperationUnsupported):
        return wc.OperationUnsupported(request_id, operation or error.operation, "")
    if isinstance(error, errors.BadAttributeUpdate):
        return wc.SegmentAttributeUpdated(request_id, False)
    if isinstance(error, errors.TooManySegments):
        return wc.ErrorMessage(request_id, segment, _ascii(str(error)), wc.ErrorMessage.UNSPECIFIED)
    if isinstance(error, errors.IllegalArgument):
        return wc.ErrorMessage(request_id, segment, _ascii(str(error)), wc.ErrorMessage.ILLEGAL_ARGUMENT)
    raise CloseConnection(repr(error))


def append_error_reply(error: errors.SegmentStoreError, writer_id: uuid.UUID, request_id: int, segment: str,
                       event_number: int = -1, conditional: bool = False) -> Reply:
    """The reply for ``error`` to a SetupAppend (``event_number`` -1) or to an append of ``segment``.

    * BadOffset of a conditional append: ConditionalCheckFailed (the writer stays set up);
    * BadAttributeUpdate (a zombie writer): InvalidEventNumber, after which the caller closes the
      connection;
    * SegmentIsSealed: its offset field carries the event number; NoSuchSegment (offset -1) and
      WrongHost: as for any request.

    Raises:
        CloseConnection: the error has no reply (anything else, including a failed container).
    """
    if isinstance(error, errors.BadOffset) and conditional:
        return wc.ConditionalCheckFailed(writer_id, event_number, request_id)
    if isinstance(error, errors.BadAttributeUpdate):
        return wc.InvalidEventNumber(writer_id, request_id, "", event_number)
    if isinstance(error, errors.SegmentIsSealed):
        return error_reply(error, request_id, segment, event_number)
    if isinstance(error, (errors.NoSuchSegment, errors.WrongHost)):
        return error_reply(error, request_id, segment)
    raise CloseConnection(f"append to {segment} failed: {error!r}")


def _ascii(text: str) -> str:
    """Server-generated text is ASCII only (clients' strict UTF-8 decoders and Java's both accept it)."""
    return text.encode("ascii", "replace").decode("ascii")[:4000]
