"""Typed operating errors of the controller's services.

Each one names an expected outcome that a reply reports (spec §4): the gRPC layer turns it into
the RPC's status enum value or gRPC status code with one table per RPC, never with an if-chain
over messages. Errors of the metadata store (``controller.store.errors``) and of the segment-store
client (``clients.errors``) that are not caught and translated here mean "try again" (a lost
race, a store that is down) and end up as FAILURE / INTERNAL, which the clients retry.
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
    """A scale that does not apply to the current epoch (unknown segments, bad ranges, too few segments).

    ``precondition`` tells the two wire answers apart: PRECONDITION_FAILED (segments not active,
    below the minimum count) versus FAILURE (malformed ranges, a different scale pending).
    """

    def __init__(self, message: str, precondition: bool):
        super().__init__(message)
        self.precondition = precondition


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
    """A writer mark that goes back in time (``time_went_back``) or in position."""

    def __init__(self, message: str, time_went_back: bool):
        super().__init__(message)
        self.time_went_back = time_went_back


class TableNotFound(ServiceError):
    """A key-value table that does not exist."""


class TableExists(ServiceError):
    pass
