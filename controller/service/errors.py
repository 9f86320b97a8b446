"""Typed operating errors of the controller's services.

Each one names an expected outcome that a reply reports (spec §4): the gRPC layer turns it into
the RPC's status enum value or gRPC status code with one table per RPC, never with an if-chain
over messages. Two answers are two classes (a subclass where one answer refines another), never
a flag the gRPC layer would have to read. Errors of the metadata store (``controller.store.errors``)
and of the segment-store client (``clients.errors``) that are not caught and translated here mean
"try again" (a lost race, a store that is down) and end up as FAILURE / INTERNAL, which the
clients retry.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every operating error the services raise on purpose."""


class InvalidName(ServiceError):
    """A scope, stream, reader-group or table name that breaks the naming rules (spec §5.1)."""


class InvalidArgument(ServiceError):
    """A request whose content can never succeed (bad segment count, bad tags, malformed cut)."""


class ScopeNotFound(ServiceError):
    pass


class ScopeNotEmpty(ServiceError):
    """The scope still lists streams, reader groups or key-value tables."""


class StreamNotFound(ServiceError):
    pass


class StreamNotReady(ServiceError):
    """The stream is still CREATING (a create that has not finished); callers should retry."""


class StreamSealed(ServiceError):
    """The stream is SEALING or SEALED, so it refuses changes."""


class StreamNotSealed(ServiceError):
    """Deletion needs a sealed stream."""


class EpochNotFound(ServiceError):
    pass


class ConcurrentWorkflow(ServiceError):
    """Another workflow (update, truncation, scale, ...) holds the stream; the caller may retry."""


class WorkflowTimeout(ServiceError):
    """The workflow did not finish within the completion timeout; it goes on in the background."""


class ScaleRejected(ServiceError):
    """A scale that cannot be accepted: the stream is sealed, another scale is pending, or the new
    ranges do not replace the sealed segments exactly (answered FAILURE)."""


class ScalePreconditionFailed(ScaleRejected):
    """A scale whose segments to seal are not all active, or that would leave too few segments
    (answered PRECONDITION_FAILED)."""


class InvalidStreamCut(ServiceError):
    """A stream cut that is not well formed for the stream, or behind the current truncation."""


class ReaderGroupNotFound(ServiceError):
    pass


class ReaderGroupConfigMismatch(ServiceError):
    """An update naming another generation or reader-group id than the stored one."""


class SubscriberNotFound(ServiceError):
    pass


class GenerationMismatch(ServiceError):
    pass


class WriterNotFound(ServiceError):
    pass


class WriterMarkRejected(ServiceError):
    """A writer mark that goes back in time or in position."""


class WriterTimeWentBack(WriterMarkRejected):
    """The writer already reported a later time."""


class WriterPositionWentBack(WriterMarkRejected):
    """The reported position is behind the writer's last one."""


class TableNotFound(ServiceError):
    """A key-value table that does not exist."""


class TableExists(ServiceError):
    pass


class TransactionNotFound(ServiceError):
    """No such transaction (never created, or completed and purged) on the named stream."""


class TransactionRefused(ServiceError):
    """A commit or abort that the transaction's status rules out (commit after an abort or after the
    lease ran out, abort after a commit), or a commit into a sealed stream."""


class TransactionContention(ServiceError):
    """A transaction record kept changing under one request (the client may retry)."""


class LeaseOutOfRange(InvalidArgument):
    """createTransaction with a lease outside [lease_ms_min, lease_ms_max].

    Java answers UNKNOWN (retried by Rust for about a minute); spec §8 item 9 prefers a final
    status for malformed requests, so this is an invalid argument.
    """


class StreamNotWritable(ServiceError):
    """The stream is CREATING, SEALING or SEALED, so it takes no new transactions (Java's
    illegal-state case)."""


# ---------------------------------------------------------------------- internal signals


class StreamBusy(Exception):
    """Another workflow holds the stream (or its intent changed meanwhile): wait and try again.

    Not an operating error: it never reaches a client. Loops that wait for a stream retry it
    (``controller.service.retries``); when one gives up it raises its own operating error
    (``ConcurrentWorkflow``, ``WorkflowTimeout``) instead.
    """

    retriable = True
