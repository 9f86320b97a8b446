"""Every error the clients raise, in one hierarchy rooted at :class:`TributaryError`.

Each class says through ``retriable`` whether trying the same thing again can
succeed (a lost connection, a controller that is restarting) or not (an unknown
stream, an invalid name, a writer used after close). Retry loops read
``retriable``; they never list classes.

:class:`TributaryError` and :class:`InvalidArgument` are defined in ``controller_api.errors`` (the
Controller API's values raise InvalidArgument) and re-exported here. Three families:

* transport: :class:`ConnectionFailed`, :class:`ProtocolViolation`,
  :class:`RequestTimeout`, :class:`ControllerUnavailable` (all retriable; not
  :class:`ControllerTlsMismatch`, a kind of ControllerUnavailable that cannot succeed);
* usage and state: :class:`InvalidArgument`, :class:`ClosedError`,
  :class:`NotFound` and its kinds, :class:`StreamSealed`,
  :class:`TransactionFailed`, :class:`ReinitializationRequired`, ...;
* server error replies to raw segment calls: :class:`ServerError` and the
  segment errors below it (the reply is kept in ``reply``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller_api.errors import InvalidArgument as InvalidArgument  # re-exported: part of the hierarchy
from controller_api.errors import TributaryError as TributaryError

if TYPE_CHECKING:
    from wire.base import Command

ClientError = TributaryError
"""The name the controller and the command line use for "any client error"."""


# ---------------------------------------------------------------------- transport


class ConnectionFailed(TributaryError):
    """Connecting, or the connection itself, failed; pending requests fail with this."""

    retriable = True


class ProtocolViolation(TributaryError):
    """The server sent something the protocol does not allow (bad frame, wrong reply)."""

    retriable = True


class RequestTimeout(TributaryError):
    """A request got no reply within its timeout."""

    retriable = True


class ControllerUnavailable(ConnectionFailed):
    """The controller could not be reached (after the configured retries); the message names it."""


class ControllerTlsMismatch(ControllerUnavailable):
    """The controller cannot be reached because of TLS: its certificate is not trusted, it expects TLS and the
    URI says ``tcp://``, or the URI says ``tls://`` and it serves plaintext; the message says which. Not
    retried: trying again cannot help until the configuration changes."""

    retriable = False


# ---------------------------------------------------------------------- security


class AuthenticationFailed(TributaryError):
    """The controller refused the client's credentials (none, or wrong ones)."""


class PermissionDenied(TributaryError):
    """The caller may not do this (the controller's answer, or a segment store refusing the token)."""


# ---------------------------------------------------------------------- usage and state


class EventTooLarge(InvalidArgument):
    """An event above the 8 MiB limit of a normal write (large events have their own call)."""


class InvalidEvent(TributaryError):
    """Segment data that is not a sequence of events (e.g. a byte stream read by an event reader)."""


class ClosedError(TributaryError):
    """The object (client, writer, reader, transaction) was closed and cannot be used any more."""


class NotFound(TributaryError):
    """The named entity does not exist."""


class ScopeNotFound(NotFound):
    pass


class StreamNotFound(NotFound):
    pass


class ReaderGroupNotFound(NotFound):
    pass


class TransactionNotFound(NotFound):
    pass


class KeyValueTableNotFound(NotFound):
    """The key-value table does not exist (or was deleted while a handle of it was in use)."""


class AlreadyExists(TributaryError):
    """The entity to create exists already (for calls where that is an error, not a False result)."""


class StreamSealed(TributaryError):
    """The stream is sealed: nothing more can be written to it."""


class ScopeNotEmpty(TributaryError):
    """A scope still holds streams, reader groups or tables."""


class StreamNotSealed(TributaryError):
    """A stream must be sealed before it can be deleted."""


class OperationFailed(TributaryError):
    """The controller refused or could not finish an operation (the message says why)."""


class ConflictingOperation(OperationFailed):
    """Another operation on the same stream is running (retry after it finishes)."""

    retriable = True


class TransactionFailed(TributaryError):
    """A transaction cannot be committed or used: a write failed, or it was committed or aborted already."""


class OffsetConflict(TributaryError):
    """A conditional write found the segment at another offset (another writer wrote); nothing was written."""


class ReinitializationRequired(TributaryError):
    """This reader is no longer a member of its group (it was declared offline); create a new reader."""


class TruncatedData(TributaryError):
    """Data the reader was about to read was truncated; it continues from the segment's new start."""

    retriable = True


class CheckpointFailed(TributaryError):
    """A checkpoint could not be taken (too many outstanding, or the group changed under it)."""


class ConditionalTableUpdateError(TributaryError):
    """A condition of a key-value table update or removal did not hold: nothing of its batch was done."""


class BadKeyVersion(ConditionalTableUpdateError):
    """A key's version is not the one the update was conditioned on (or the key exists, for an insert)."""


class NoSuchKey(ConditionalTableUpdateError):
    """An update was conditioned on a version of a key that does not exist."""


# ---------------------------------------------------------------------- server error replies


class ServerError(TributaryError):
    """The server answered a request with an error reply (kept in ``reply``)."""

    def __init__(self, reply: Command):

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


class TokenExpired(ServerError):
    """A segment store found the delegation token expired; a new one is fetched and the request retried."""

    retriable = True


class TokenRejected(ServerError, PermissionDenied):
    """A segment store refused the delegation token: it does not grant what the request needs."""


class Unsupported(ServerError):
    pass


class IllegalArgument(ServerError):
    pass
