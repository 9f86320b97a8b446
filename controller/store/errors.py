"""Typed errors of the metadata store.

Operating errors (a lost optimistic-concurrency race, a missing record, a refused state
transition) are expected in normal operation: workflows catch them by type and re-read or reply
with the matching status; those that a later try may win say so with ``retriable = True``
(read by ``coordination.retry.is_retriable``). ``CorruptRecord`` and ``RecordTooLarge`` mean a broken
invariant (bad bytes in a table, a record that outgrew the table-entry limit) and should crash
the workflow loudly.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every metadata-store error; ``table`` and ``key`` say where it happened."""

    def __init__(self, message: str, table: str = "", key: str = ""):
        super().__init__(message)
        self.table = table
        self.key = key


class NotFound(StoreError):
    """A table, or a key that an operation needed, does not exist."""


class WriteConflict(StoreError):
    """A conditional write met a version other than the expected one (someone else wrote first).

    ``retriable``: reading again and writing again may succeed.
    """

    retriable = True


# Pravega's name for the same failure; the controller code may use either.
DataVersionMismatch = WriteConflict


class AlreadyExists(WriteConflict):
    """A create-if-absent write found the key (or the named object) already there."""


class NotEmpty(StoreError):
    """A scope (or table) that must be empty before deletion still holds entries."""


class IllegalStateTransition(StoreError):
    """A stream state or transaction status change that the transition table refuses."""

    def __init__(self, message: str, current, requested, table: str = "", key: str = ""):
        super().__init__(message, table, key)
        self.current = current
        self.requested = requested


class ScaleInputInvalid(StoreError):
    """Scale input that does not describe a valid epoch transition (unknown segments, bad ranges)."""


class ScaleConflict(StoreError):
    """A different epoch transition is already pending, or the transition is stale.

    ``retriable``: the pending transition completes or is dropped, and the same call may then succeed.
    """

    retriable = True


class CorruptRecord(StoreError):
    """Bytes that do not decode as the record type stored under that key."""


class RecordTooLarge(StoreError):
    """A key or value beyond the table-entry limits (keys 8 KiB, values 1 MiB - 8 KiB)."""
