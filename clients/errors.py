"""Client-side errors. Retry loops read ``retriable`` instead of listing classes."""

from __future__ import annotations


class ClientError(Exception):
    retriable = False


class ConnectionFailed(ClientError):
    """Connecting, or the connection itself, failed; pending requests fail with this."""

    retriable = True


class ProtocolViolation(ClientError):
    """The server sent something the protocol does not allow (bad frame, wrong reply)."""

    retriable = True


class ServerError(ClientError):
    """The server answered a request with an error reply (kept in ``reply``)."""

    def __init__(self, reply):
        super().__init__(repr(reply))
        self.reply = reply


class SegmentError(ServerError):
    """An error reply about a segment (``reply.segment`` names it)."""


class NoSuchSegment(SegmentError):
    pass


class SegmentSealed(SegmentError):
    pass


class SegmentTruncated(SegmentError):
    """An offset below the start offset, or an offset condition that failed."""


class SegmentExists(SegmentError):
    pass


class TableKeyBadVersion(SegmentError):
    """A conditional table update met a different version (optimistic concurrency lost)."""


class TableKeyDoesNotExist(SegmentError):
    pass


class TableNotEmpty(SegmentError):
    pass


class WrongHost(SegmentError):
    retriable = True


class AttributeConditionFailed(SegmentError):
    """A conditional attribute update (or a merge's attribute condition) did not hold."""


class Unsupported(ServerError):
    pass


class IllegalArgument(ServerError):
    pass
