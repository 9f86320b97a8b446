"""The DurableDataLog interface (design §2.9): what a segment container needs from Tier-1.

The local fsync'd log implements it today; a replicated log (BookKeeper-style ledgers with
ZooKeeper-coordinated metadata, §2.10) will implement the same surface later, and both must pass
``tests/unit/tier1/conformance.py``.

Contract, in short:

* ``open()`` takes exclusive ownership and fences every older owner, bumps and persists the
  epoch, and recovers the tail. An older owner's next append fails with ``LogFenced``.
* ``append()`` resolves only once the record is durable. Records land in call order; when
  append N is acknowledged every earlier append is durable. If an append fails, the log closes
  and every queued or later append fails as well: the caller recovers by opening a fresh
  instance, which returns exactly a prefix of what was appended, including everything that was
  acknowledged.
* ``read()`` replays every surviving record after the truncation point, in order. It is meant
  for recovery: call it after ``open()`` and before the first append.
* ``truncate(upto)`` durably discards everything up to and including ``upto``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass

# Largest payload one append accepts: a 8 MiB frame plus room for its framing. A container sizes
# its frames from this (Pravega's BookKeeper log allows 1 MiB - 1 KiB; ours may be larger).
DEFAULT_MAX_APPEND_SIZE = 8 * 1024 * 1024 + 64 * 1024

# What append() takes: one bytes-like object, or a list/tuple of bytes-like parts that the log
# writes back to back without joining them.
AppendData = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]


@dataclass(frozen=True, order=True, slots=True)
class LogAddress:
    """Where a record sits in a log; comparable, ordered across files (or ledgers)."""

    sequence: int  # monotonic per log, the first record is 1


class DurableDataLog(abc.ABC):
    """An ordered, durable, fenced log of opaque records (design §2.9)."""

    max_append_size: int = DEFAULT_MAX_APPEND_SIZE

    @property
    @abc.abstractmethod
    def epoch(self) -> int:
        """The epoch taken by ``open()``; strictly increasing across opens.

        Raises:
            LogClosed: the log was never opened.
        """

    @abc.abstractmethod
    async def open(self) -> int:
        """Takes exclusive ownership, fences older owners, bumps and persists the epoch, recovers the tail.

        Returns:
            The new epoch.
        Raises:
            LogBusy: another live owner holds the log.
            LogCorrupted: the tail of the log is damaged in a way a crash cannot explain.
            LogClosed: this instance was opened (and closed) before; open a new instance instead.
        """

    @abc.abstractmethod
    def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        """Yields every surviving record after the truncation point (or after ``after``), in order.

        Meant for recovery, between ``open()`` and the first append.

        Raises (while iterating):
            LogCorrupted: a record in the middle of the log is damaged.
            LogClosed: the log is not open.
        """

    @abc.abstractmethod
    def append(self, data: AppendData) -> Awaitable[LogAddress]:
        """Appends one record; the returned awaitable gives its address once it is durable.

        ``data`` is one bytes-like object or a list/tuple of parts written without joining;
        the caller must not modify them until the awaitable is done. An implementation may
        be a coroutine function, or return a future at once (the local log: no task needed
        per record, and a failure it can tell at once is raised by the call itself).

        Raises:
            RecordTooLarge: the payload exceeds ``max_append_size`` (the log stays open).
            LogWriteFailed: writing or syncing failed, now or for an earlier append; the log is closed.
            LogFenced: a newer owner exists; the log is closed.
            LogClosed: the log is not open.
        """

    @abc.abstractmethod
    async def truncate(self, upto: LogAddress) -> None:
        """Durably discards every record up to and including ``upto``; reads never return them again.

        Raises:
            ValueError: ``upto`` is beyond the last acknowledged record.
            LogWriteFailed, LogFenced, LogClosed: as for ``append``.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Waits for the write in progress, fails queued appends with ``LogClosed``, releases ownership.

        Idempotent; never raises for a log that already failed.
        """

    def readable_records(self) -> int | None:
        """How many records ``read()`` from the start would yield now (after the truncation point), for
        progress reports; None if the log cannot tell."""
        return None

    @property
    @abc.abstractmethod
    def truncation_address(self) -> LogAddress | None:
        """The address everything up to which has been truncated, or None if nothing has been."""
