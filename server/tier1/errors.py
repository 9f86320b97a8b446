"""The one error hierarchy of the Tier-1 durable log.

Every failure a DurableDataLog reports is a ``LogError``. Callers decide what to do from
``retriable`` (habit 6), not by listing classes: a retriable error may go away if the caller
opens a *fresh* log instance later (after the other owner died, after recovery); it never means
"call the same method on the same instance again", because a log that failed an append stays
closed (design §2.9: if append N fails, every later append fails too).
"""

from __future__ import annotations


class LogError(Exception):
    """Base of every Tier-1 log error."""

    retriable: bool = False


class LogClosed(LogError):
    """The log is not open: never opened, closed by ``close()``, or closed after a failure."""


class LogFenced(LogError):
    """Not primary: a newer owner took the log over, or this instance lost ownership."""


class LogBusy(LogError):
    """``open()`` could not take ownership because another live owner holds it."""

    retriable = True


class LogCorrupted(LogError):
    """Damage in the middle of the log: valid, durable records follow a record that is not.

    ``location`` names the file (or ledger) and ``offset`` the first bad byte; ``byte_count``
    is how many bytes cannot be read (up to the next valid record, or to the end of the file).
    """

    def __init__(self, message: str, *, location: str = "", offset: int = -1, byte_count: int = 0):
        super().__init__(message)
        self.location = location
        self.offset = offset
        self.byte_count = byte_count


class LogWriteFailed(LogError):
    """A write or fdatasync failed; the record may or may not be on disk.

    The instance is closed afterwards and every queued or later append fails as well. Opening
    a fresh instance recovers exactly a prefix of the appended records, so it is retriable.
    """

    retriable = True


class RecordTooLarge(LogError):
    """The payload is longer than ``max_append_size``; nothing was written."""
