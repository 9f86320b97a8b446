"""Every retry of the controller, defined once: the policies (``coordination.retry.Backoff``, in seconds)
and which failures each kind of loop tries again. Every such loop runs ``coordination.retry.retry``.

Three kinds of loop:

* *Compare-and-swap.* A conditional write lost to a concurrent one (``WriteConflict``, which
  ``AlreadyExists`` also is): read again and write again at once, a bounded number of times
  (``COMPARE_AND_SWAP``). The transaction index waits a little between tries
  (``TRANSACTION_INDEX_UPDATE``), because a concurrent update there is accepted before it can be
  read, and re-reading at once would only see the old version again.
* *Busy stream.* Another workflow holds the stream (``StreamBusy``): wait with growing delays
  (``STREAM_BUSY``, the default of ``ServiceSettings.stream_busy_backoff``) until a deadline, if
  there is one (``retry_while_busy``). When it gives up, the caller raises its own operating error.
* *Background jobs.* Transaction commits and aborts must finish, so they retry every transient
  failure with no bound on attempts (``TRANSACTION_JOB``, the default of
  ``TransactionSettings.job_backoff``, with ``is_transient``). A workflow's re-drive retries
  transient failures too, for a while (``REDRIVE``); the periodic re-drive takes over after that.

Periodic timers (re-drive, retention, auto-scale sampling, lease deadlines) are not retries and
are not here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

from clients.errors import ClientError
from coordination.retry import Backoff, is_retriable, retry

from ..store import WriteConflict
from .errors import StreamBusy

T = TypeVar("T")

STREAM_BUSY = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=1.0, attempts=None, jitter=0.0)
TRANSACTION_JOB = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=5.0, attempts=None, jitter=0.0)
COMPARE_AND_SWAP = Backoff(initial_seconds=0.0, multiplier=1.0, max_delay_seconds=0.0, attempts=20, jitter=0.0)
WRITER_MARK_UPDATE = dataclasses.replace(COMPARE_AND_SWAP, attempts=3)
# A re-drive that failed on something transient (the last write of a controller that died lands after our
# read, a segment store still recovering) is tried again at once rather than at the next periodic round.
REDRIVE = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=2.0, attempts=None, total_seconds=30.0,
                  jitter=0.5)
# A stream's commit worker whose lease another controller holds waits for it (that controller's worker may have
# done its last batch before this one's transaction turned COMMITTING): a commit request is never left to the sweep.
COMMITS_LEASE = Backoff(initial_seconds=0.02, multiplier=2.0, max_delay_seconds=0.5, attempts=None, total_seconds=30.0,
                        jitter=0.5)
TRANSACTION_INDEX_UPDATE = Backoff(initial_seconds=0.001, multiplier=2.0, max_delay_seconds=0.1, attempts=20,
                                   jitter=1.0)


def is_lost_race(error: BaseException) -> bool:
    """True for a conditional write that another writer beat."""
    return isinstance(error, WriteConflict)


def is_redrive_retriable(error: BaseException) -> bool:
    """For a re-drive: a lost race (a dead controller's last write may land after our read) or a transient
    failure of a segment store or the network."""
    return is_lost_race(error) or is_transient(error)


def is_stream_busy(error: BaseException) -> bool:
    return isinstance(error, StreamBusy)


def is_transient(error: BaseException) -> bool:
    """For jobs that must finish: every retriable error, and any failure of a segment store or the network."""
    return is_retriable(error) or isinstance(error, (ClientError, OSError))


async def retry_while_busy(operation: Callable[[], Awaitable[T]], policy: Backoff, deadline: float | None) -> T:
    """Runs ``operation`` again after each ``StreamBusy``, waiting as ``policy`` says, until it succeeds.

    Returns:
        The operation's result.
    Raises:
        StreamBusy: the next wait would end after ``deadline`` (event-loop time; None: no deadline),
            or ``policy`` is spent.
        Whatever else ``operation`` raises, at once.
    """
    return await retry(operation, policy, retriable=is_stream_busy, deadline=deadline)
