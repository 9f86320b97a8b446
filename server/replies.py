"""Operating errors -> wire replies (protocol reference §3.0).

Each request decides which ``segment`` and ``offset`` its error replies carry;
this module only knows how each error type becomes its reply. Errors with no
reply (a failed container, an unexpected exception) close the connection.
"""

from __future__ import annotations

from wire import commands as wc

from . import errors


class CloseConnection(Exception):
    """The request cannot be answered: close this connection (and only it)."""


def error_reply(error: errors.SegmentStoreError, request_id: int, segment: str, offset: int = -1,
                operation: str = ""):
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
    if isinstance(error, errors.IllegalArgument):
        return wc.ErrorMessage(request_id, segment, _ascii(str(error)), wc.ErrorMessage.ILLEGAL_ARGUMENT)
    raise CloseConnection(repr(error))


def _ascii(text: str) -> str:
    """Server-generated text is ASCII only (clients' strict UTF-8 decoders and Java's both accept it)."""
    return text.encode("ascii", "replace").decode("ascii")[:4000]
