"""Pure transaction rules: leases, timeouts, ping replies, commit batches (spec §4.5, §6.5).

Nothing here does I/O or reads a clock: every function takes ``now`` (ms) and records, and
returns a decision that the service carries out.

Lease and timeout model. A transaction record keeps ``lease_expiry_time`` (creation or last
ping + lease, as Java does) and ``max_execution_expiry_time`` (creation + min(multiplier x
lease, cap)). It is aborted once ``now`` reaches its *abort deadline*:

    min(lease_expiry_time + lease_grace_ms, max_execution_expiry_time)

The grace exists for the ``pravega`` (Rust) client: its pinger pings once per round, sleeps a
whole lease (its default transaction timeout, 90 s) between rounds and takes at most one new
transaction per round: a live transaction's pings come just after its lease ran out, and the
n-th transaction begun during one round is first pinged up to n rounds after it began (spec
§4.5 Rec., §8 item 10). The default, 180 s, is two such rounds; the controller's
``--transaction-lease-grace`` sets it (0: Java's exact behaviour, enough for Java's and
Tributary's clients, which ping several times per lease).
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Iterable

from coordination.retry import Backoff

from ...store.records import CommittingTransactionsRecord, EpochRecord, TransactionRecord
from ...store.records.transactions import NO_TIME
from ...store.states import TransactionStatus
from ..errors import LeaseOutOfRange
from ..retries import TRANSACTION_JOB


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionSettings:
    lease_ms_min: int = 10_000  # Java transaction.lease.count.min
    lease_ms_max: int = 600_000  # Java transaction.lease.count.max
    max_execution_lease_multiplier: int = 1000
    max_execution_ms_max: int = 86_400_000  # one day
    lease_grace_ms: int = 180_000  # two Rust pinger rounds of 90 s (--transaction-lease-grace)
    commit_batch_size_max: int = 100  # transactions per commit batch (Java's limit)
    completed_retention_ms: int = 86_400_000  # Java transaction.ttl.hours = 24
    completed_listing_max: int = 500  # Java listCompletedTxn.max.records
    timer_interval_ms: int = 1000  # how often the background loop looks at lease deadlines
    sweep_interval_ms: int = 60_000  # how often every indexed stream is re-examined
    job_backoff: Backoff = TRANSACTION_JOB  # commit/abort job back-off after a failure or a busy stream


ACTIVE_STATUSES = frozenset({TransactionStatus.OPEN, TransactionStatus.COMMITTING, TransactionStatus.ABORTING})
COMPLETED_STATUSES = frozenset({TransactionStatus.COMMITTED, TransactionStatus.ABORTED})


def check_lease(lease_ms: int, settings: TransactionSettings) -> None:
    """Raises LeaseOutOfRange unless ``lease_ms_min <= lease_ms <= lease_ms_max``."""
    if not settings.lease_ms_min <= lease_ms <= settings.lease_ms_max:
        raise LeaseOutOfRange(f"lease {lease_ms} ms is outside [{settings.lease_ms_min}, {settings.lease_ms_max}]")


def new_transaction(transaction_id: uuid.UUID, epoch: int, lease_ms: int, now: int,
                    settings: TransactionSettings) -> TransactionRecord:
    """The OPEN record of a transaction created at ``now``."""
    max_execution_ms = min(settings.max_execution_lease_multiplier * lease_ms, settings.max_execution_ms_max)
    return TransactionRecord(transaction_id, epoch, TransactionStatus.OPEN, now, now + lease_ms,
                             now + max_execution_ms)


def abort_deadline(record: TransactionRecord, settings: TransactionSettings) -> int:
    """When an OPEN transaction is aborted for want of pings (see the module docstring)."""
    return min(record.lease_expiry_time + settings.lease_grace_ms, record.max_execution_expiry_time)


def is_expired(record: TransactionRecord, now: int, settings: TransactionSettings) -> bool:
    return record.status == TransactionStatus.OPEN and now >= abort_deadline(record, settings)


class PingStatus(enum.IntEnum):
    """What a ping answers; the numbers are the wire's ``PingTxnStatus.Status`` values."""

    OK = 0
    LEASE_TOO_LARGE = 1
    MAX_EXECUTION_TIME_EXCEEDED = 2
    DISCONNECTED = 4  # the service is not running (yet, or any more)
    COMMITTED = 5
    ABORTED = 6
    UNKNOWN = 7


class PingAction(enum.Enum):
    REPLY = "reply"  # answer ``status``, change nothing
    EXTEND = "extend"  # store ``record`` (the extended lease), then answer OK
    ABORT = "abort"  # the lease already ran out: abort, then answer ABORTED


@dataclasses.dataclass(frozen=True, slots=True)
class PingDecision:
    action: PingAction
    status: PingStatus
    record: TransactionRecord | None = None


def decide_ping(record: TransactionRecord, lease_ms: int, now: int, settings: TransactionSettings) -> PingDecision:
    """What a ping with ``lease_ms`` does to ``record`` at ``now`` (spec §4.5 ping table)."""
    if record.status in (TransactionStatus.COMMITTING, TransactionStatus.COMMITTED):
        return PingDecision(PingAction.REPLY, PingStatus.COMMITTED)
    if record.status in (TransactionStatus.ABORTING, TransactionStatus.ABORTED):
        return PingDecision(PingAction.REPLY, PingStatus.ABORTED)
    if record.status != TransactionStatus.OPEN:
        return PingDecision(PingAction.REPLY, PingStatus.UNKNOWN)
    if is_expired(record, now, settings):
        return PingDecision(PingAction.ABORT, PingStatus.ABORTED)
    if lease_ms > settings.lease_ms_max:
        return PingDecision(PingAction.REPLY, PingStatus.LEASE_TOO_LARGE)
    if now + lease_ms > record.max_execution_expiry_time:
        return PingDecision(PingAction.REPLY, PingStatus.MAX_EXECUTION_TIME_EXCEEDED)
    extended = dataclasses.replace(record, lease_expiry_time=max(record.lease_expiry_time, now + lease_ms))
    return PingDecision(PingAction.EXTEND, PingStatus.OK, extended)


def commit_time_of(timestamp: int) -> int:
    """The writer's event time for watermarks; negative (Python sends i64::MIN) means none."""
    return NO_TIME if timestamp < 0 else timestamp


def select_commit_batch(records: Iterable[TransactionRecord], size_max: int) -> CommittingTransactionsRecord | None:
    """The next batch: COMMITTING transactions of the lowest epoch, in commit order (spec §6.5 step 1).

    Returns None when nothing is COMMITTING.
    """
    committing = [record for record in records if record.status == TransactionStatus.COMMITTING]
    if not committing:
        return None
    epoch = min(record.epoch for record in committing)
    ordered = sorted((record for record in committing if record.epoch == epoch),
                     key=lambda record: (record.commit_order, record.transaction_id.int))
    return CommittingTransactionsRecord(epoch, tuple(record.transaction_id for record in ordered[:size_max]))


def commits_in_place(transaction_epoch: EpochRecord, active_epoch: EpochRecord) -> bool:
    """True if the transaction epoch's parents are still the live segments (spec §6.5 step 3)."""
    return (active_epoch.epoch == transaction_epoch.epoch
            or active_epoch.reference_epoch == transaction_epoch.reference_epoch)


def is_purgeable(record: TransactionRecord, now: int, settings: TransactionSettings) -> bool:
    """A completed record older than the retention (checkTransactionState then answers UNKNOWN)."""
    return (record.status in COMPLETED_STATUSES and record.completion_time != NO_TIME
            and now >= record.completion_time + settings.completed_retention_ms)
