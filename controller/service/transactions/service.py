"""The transaction service (spec §4.5, §5.4, §6.5, §7.6): the transaction operations and their
background work.

Theory of operation. The operations only change transaction records (compare-and-swap through
``controller.store.transactions``) and queue work; the work runs in background tasks:

* a *commit worker* per stream runs ``jobs.commit_next_batch`` until nothing is COMMITTING
  (``commit_transaction`` returns as soon as the record says COMMITTING, as Java answers SUCCESS);
* an *abort worker* per transaction deletes its segments and records ABORTED (both in ``workers``);
* the *timer loop* aborts OPEN transactions whose abort deadline (``rules``) has passed, and every
  ``sweep_interval_ms`` re-examines every stream of the transaction index (``stream_index``):
  re-arms lease deadlines, restarts unfinished work, purges completed records past their
  retention and drops streams without any transaction record from the index. In a cluster a
  controller sweeps the streams whose bucket it owns (``context.coordination``), and sweeps them
  at once, restarting their commit workers, when another controller leaves: that one's work
  (its commit workers' leases went with it) is taken over.

Everything durable is in the store, so ``start`` on a fresh process re-drives whatever an earlier
one left: it sweeps every indexed stream at once, re-arming every OPEN transaction's deadline
and restarting every commit batch and abort. Workers retry busy streams and failed segment-store
calls with capped exponential back-off. Only the timer loop reads ``context.now_ms()`` for
timeouts; the rules themselves take time as an argument.

Requests and answers are plain values; ``controller.grpc_service`` converts the protobuf messages
and answers each typed error (``controller.service.errors``) as its RPC's table says.

Coordination with other workflows is through the stream's state record only: a commit batch
holds the stream in COMMITTING_TXN (from ACTIVE) and waits while SCALING, UPDATING or TRUNCATING.
No workflow intent is written for commits (a SEALING stream must still let them finish).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import NamedTuple, TypeVar

from clients.errors import ClientError
from coordination.retry import retry

from ... import metrics
from ...store import IllegalStateTransition, NotFound, State, StoreError, StreamStore, WriteConflict
from ...store import transactions as stored
from ...store.records import EpochRecord, TransactionRecord
from ...store.states import TransactionStatus
from ..context import ControllerContext
from ..errors import (
    InvalidArgument,
    StreamNotFound,
    StreamNotWritable,
    TransactionContention,
    TransactionNotFound,
    TransactionRefused,
)
from ..paging import all_pages
from ..retries import COMPARE_AND_SWAP
from . import stream_index
from .ids import TransactionIdAllocator
from .jobs import list_all_transactions
from .rules import (
    COMPLETED_STATUSES,
    PingAction,
    PingStatus,
    TransactionSettings,
    abort_deadline,
    check_lease,
    commit_time_of,
    decide_ping,
    is_expired,
    is_purgeable,
    new_transaction,
)
from .segments import create_transaction_segments, generalised_segment_id
from .workers import TransactionWorkers

log = logging.getLogger(__name__)
Result = TypeVar("Result")
StatusChange = Callable[[StreamStore, uuid.UUID, TransactionRecord], Awaitable[None]]
"""What commit or abort does to a found record."""

WRITABLE_STATES = frozenset({State.ACTIVE, State.SCALING, State.COMMITTING_TXN, State.TRUNCATING, State.UPDATING})


class TransactionSegment(NamedTuple):
    """A segment a new transaction writes to, under the id the client names it by: the parent's
    generalised id (``segments.generalised_segment_id``) and the parent's key range."""

    segment_id: int
    key_start: float
    key_end: float


@dataclasses.dataclass(frozen=True)
class CreatedTransaction:
    transaction_id: uuid.UUID
    segments: tuple[TransactionSegment, ...]  # one per active segment, by key: the last ends at exactly 1.0


class TransactionService:
    def __init__(self, context: ControllerContext, *, settings: TransactionSettings | None = None):
        self.context = context
        self.settings = settings or TransactionSettings()
        self._ids = TransactionIdAllocator(context.store.kv)
        self._workers = TransactionWorkers(context, self.settings)
        self._deadlines: list[tuple[int, str, str, uuid.UUID]] = []  # heap; stale entries are skipped
        self._deadline_of: dict[tuple[str, str, uuid.UUID], int] = {}
        self._timer: asyncio.Task | None = None
        self._takeover: asyncio.Task | None = None
        self._running = False

    def __repr__(self) -> str:
        return f"TransactionService(running={self._running}, deadlines={len(self._deadline_of)}, {self._workers})"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Re-drives what the store says is unfinished, then starts the timer loop."""
        if self._running:
            return
        await self.context.store.kv.create_table(stream_index.STREAMS_TABLE)
        self._running = True
        await self.sweep(self.context.now_ms(), redrive=True)
        self._timer = asyncio.create_task(self._run_timer(), name="transaction-timer")
        self.context.coordination.on_controllers_lost(self._take_over)

    def _take_over(self) -> None:
        """Another controller left: sweep our buckets now, restarting commit workers (in the background)."""
        if self._running and (self._takeover is None or self._takeover.done()):
            self._takeover = asyncio.get_running_loop().create_task(self._sweep_now(), name="transaction-takeover")

    async def _sweep_now(self) -> None:
        try:
            await self.sweep(self.context.now_ms(), redrive=True)
        except Exception:
            log.exception("sweep after a controller left failed")

    async def stop(self) -> None:
        """Cancels the timer and every worker (their steps are durable and resumable)."""
        self._running = False
        for task in (self._timer, self._takeover):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._timer = self._takeover = None
        await self._workers.stop()

    async def drain(self) -> None:
        """Waits until no commit or abort work is pending (tests, orderly shutdown)."""
        await self._workers.drain()

    # ------------------------------------------------------------------ operations

    async def create_transaction(self, scope: str, name: str, lease_ms: int) -> CreatedTransaction:
        """Opens a transaction on the stream's current epoch and creates its segments.

        Raises:
            InvalidArgument: no scope or stream named.
            LeaseOutOfRange: ``lease_ms`` outside [lease_ms_min, lease_ms_max].
            StreamNotFound: no such stream.
            StreamNotWritable: the stream is CREATING, SEALING or SEALED.
        """
        _require_names(scope, name)
        check_lease(lease_ms, self.settings)
        stream = self.context.store.stream(scope, name)
        found = await stream.state_and_current_epoch()
        if found is None:
            raise StreamNotFound(f"stream {scope}/{name} does not exist")
        state, current = found
        if state not in WRITABLE_STATES:
            raise StreamNotWritable(f"stream {scope}/{name} is {state.name}")
        epoch = current.reference_epoch
        transaction_id = await self._ids.next_id(epoch)
        record = new_transaction(transaction_id, epoch, lease_ms, self.context.now_ms(), self.settings)
        kv = self.context.store.kv
        await stream_index.touch(kv, scope, name)  # before and after: see stream_index
        await stored.create_transaction(stream, record)
        self._schedule(scope, name, record)  # if anything below fails, the lease timeout cleans up
        await stream_index.touch(kv, scope, name)
        await create_transaction_segments(self.context, scope, name,
                                          [segment.segment_id for segment in current.segments], epoch, transaction_id)
        metrics.TRANSACTIONS.labels("created").inc()
        return CreatedTransaction(transaction_id, _segments(current, epoch))

    async def ping_transaction(self, scope: str, name: str, transaction_id: uuid.UUID, lease_ms: int) -> PingStatus:
        """Extends an OPEN transaction's lease to ``lease_ms`` from now, if the rules allow (``decide_ping``).

        Returns:
            OK (extended), why not (LEASE_TOO_LARGE, MAX_EXECUTION_TIME_EXCEEDED), the outcome of a
            transaction no longer open (COMMITTED, ABORTED), or DISCONNECTED while the service is stopped.
        Raises:
            TransactionNotFound: no such transaction (or stream).
            TransactionContention: the record kept changing.
        """
        if not self._running:
            return PingStatus.DISCONNECTED
        stream = self.context.store.stream(scope, name)

        async def attempt() -> PingStatus:
            record, version = await _find(stream, transaction_id)
            now = self.context.now_ms()
            decision = decide_ping(record, lease_ms, now, self.settings)
            if decision.action == PingAction.ABORT:
                await self._begin_abort(stream, transaction_id, now)
            elif decision.action == PingAction.EXTEND:
                assert decision.record is not None, "an EXTEND decision carries the extended record"
                await stored.replace_transaction(stream, decision.record, version)
                self._schedule(stream.scope, stream.name, decision.record)
            return decision.status

        return await self._retrying(transaction_id, attempt)

    async def commit_transaction(self, scope: str, name: str, transaction_id: uuid.UUID, writer_id: str,
                                 timestamp: int) -> None:
        """OPEN -> COMMITTING and queue the commit; returns without waiting for COMMITTED.

        Committing again, or a transaction already committed, is fine. ``writer_id`` and
        ``timestamp`` (the writer's event time; negative: none) feed the writer's mark.

        Raises:
            StreamNotFound / TransactionNotFound: no such stream, or no such transaction on it.
            TransactionRefused: the transaction is aborting or aborted (also when its lease has
                just run out), or the stream is sealed.
            TransactionContention: the record kept changing.
        """
        async def commit(stream: StreamStore, transaction_id: uuid.UUID, record: TransactionRecord) -> None:
            now = self.context.now_ms()
            if record.status in (TransactionStatus.COMMITTING, TransactionStatus.COMMITTED):
                if record.status == TransactionStatus.COMMITTING:
                    self._workers.request_commit(stream.scope, stream.name)
                return
            if record.status != TransactionStatus.OPEN:
                raise TransactionRefused(f"transaction {transaction_id} is {record.status.name}")
            if (await stream.get_state())[0] == State.SEALED:
                raise TransactionRefused(f"{stream} is sealed")  # a sealed stream's parents take no data
            if is_expired(record, now, self.settings):
                await self._begin_abort(stream, transaction_id, now)
                raise TransactionRefused(f"transaction {transaction_id} outlived its lease")
            order = await stream_index.next_commit_order(self.context.store.kv, stream.scope, stream.name)
            await stored.transition_transaction(stream, transaction_id, TransactionStatus.COMMITTING, now,
                                                writer_id=writer_id, commit_order=order,
                                                commit_time=commit_time_of(timestamp))
            self._workers.request_commit(stream.scope, stream.name)

        await self._change_status(scope, name, transaction_id, commit)

    async def abort_transaction(self, scope: str, name: str, transaction_id: uuid.UUID) -> None:
        """OPEN -> ABORTING and queue the abort; aborting again is fine.

        Raises:
            StreamNotFound / TransactionNotFound: no such stream, or no such transaction on it.
            TransactionRefused: the transaction is committing or committed.
            TransactionContention: the record kept changing.
        """
        async def abort(stream: StreamStore, transaction_id: uuid.UUID, record: TransactionRecord) -> None:
            if record.status in (TransactionStatus.COMMITTING, TransactionStatus.COMMITTED):
                raise TransactionRefused(f"transaction {transaction_id} is {record.status.name}")
            if record.status == TransactionStatus.ABORTED:
                return
            await self._begin_abort(stream, transaction_id, self.context.now_ms())

        await self._change_status(scope, name, transaction_id, abort)

    async def _change_status(self, scope: str, name: str, transaction_id: uuid.UUID, change: StatusChange) -> None:
        """``change(stream, id, record)`` for the transaction's record (through ``_retrying``).

        Raises:
            StreamNotFound / TransactionNotFound: there is no such record (final for the Rust client).
            (and whatever ``change`` raises)
        """
        stream = self.context.store.stream(scope, name)

        async def attempt() -> None:
            try:
                record, _ = await stored.get_transaction(stream, transaction_id)
            except NotFound:
                raise await _not_found(stream, transaction_id) from None
            await change(stream, transaction_id, record)

        await self._retrying(transaction_id, attempt)

    async def _retrying(self, transaction_id: uuid.UUID, attempt: Callable[[], Awaitable[Result]]) -> Result:
        """``attempt()`` again while the record changes under it (a lost compare-and-swap).

        Raises:
            TransactionContention: it kept changing for every attempt of ``COMPARE_AND_SWAP``.
        """
        try:
            return await retry(attempt, COMPARE_AND_SWAP, retriable=_record_changed)
        except (WriteConflict, IllegalStateTransition):
            raise TransactionContention(f"transaction {transaction_id} kept changing") from None

    async def check_transaction_state(self, scope: str, name: str, transaction_id: uuid.UUID) -> TransactionStatus:
        """The record's status.

        Raises:
            TransactionNotFound: no such transaction or stream (or its record was purged).
        """
        record, _ = await _find(self.context.store.stream(scope, name), transaction_id)
        return record.status

    async def list_completed_transactions(self, scope: str, name: str) -> list[TransactionRecord]:
        """The most recently completed (COMMITTED or ABORTED) transactions, newest first, at most
        ``completed_listing_max``.

        Raises:
            InvalidArgument: no scope or stream named.
            StreamNotFound: no such stream.
        """
        _require_names(scope, name)
        try:
            records = await list_all_transactions(self.context.store.stream(scope, name))
        except NotFound:
            raise StreamNotFound(f"stream {scope}/{name} does not exist") from None
        completed = sorted((record for record in records if record.status in COMPLETED_STATUSES),
                           key=lambda record: record.completion_time, reverse=True)
        return completed[:self.settings.completed_listing_max]

    async def abort_open_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID) -> None:
        """For the seal workflow (``sealing.Abort``): OPEN -> ABORTING and queue the abort; a
        transaction already committing, aborting or completed is left alone.

        Raises:
            WriteConflict: the record changed meanwhile (the caller looks again).
        """
        try:
            await self._begin_abort(self.context.store.stream(scope, stream), transaction_id, self.context.now_ms())
        except (IllegalStateTransition, NotFound):
            return

    # ------------------------------------------------------------------ timeouts and sweeps

    async def abort_expired_transactions(self, now: int) -> None:
        """Aborts every OPEN transaction whose deadline is at or before ``now`` (the timer loop's tick)."""
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, scope, name, transaction_id = heapq.heappop(self._deadlines)
            key = (scope, name, transaction_id)
            if self._deadline_of.get(key) != deadline:
                continue  # superseded by a later deadline (a ping) or already handled
            del self._deadline_of[key]
            stream = self.context.store.stream(scope, name)
            try:
                record, _ = await _find(stream, transaction_id)
                if record.status != TransactionStatus.OPEN:
                    continue
                if is_expired(record, now, self.settings):
                    await self._begin_abort(stream, transaction_id, now)
                else:
                    self._schedule(scope, name, record)
            except TransactionNotFound:
                continue
            except (StoreError, ClientError, OSError) as error:
                log.warning("timeout of transaction %s on %s/%s failed, retrying: %r", transaction_id, scope, name,
                            error)
                self._push_deadline(key, now + int(self.settings.job_backoff.max_delay_seconds * 1000))

    async def sweep(self, now: int, redrive: bool = False) -> None:
        """Re-examines every indexed stream (see the module docstring). ``redrive`` also restarts the
        commit worker of every stream, to finish a batch or a state reset cut short by a crash."""
        kv, owns = self.context.store.kv, self.context.coordination.owns
        for scope, name in await all_pages(lambda token: stream_index.list_streams(kv, token), b""):
            if not owns(scope, name):
                continue
            try:
                await self._sweep_stream(scope, name, now, redrive)
            except (StoreError, ClientError, OSError):
                log.exception("sweeping the transactions of %s/%s failed; next sweep retries", scope, name)

    async def _sweep_stream(self, scope: str, name: str, now: int, redrive: bool) -> None:
        kv, stream = self.context.store.kv, self.context.store.stream(scope, name)
        entry = await stream_index.read_entry(kv, scope, name)
        if entry is None:
            return
        try:
            records = await list_all_transactions(stream)
        except NotFound:  # the stream was deleted
            await stream_index.forget(kv, scope, name, entry.version)
            return
        committing, kept = False, 0
        for record in records:
            if record.status == TransactionStatus.OPEN:
                self._schedule(scope, name, record)
            elif record.status == TransactionStatus.ABORTING:
                self._workers.request_abort(scope, name, record.transaction_id)
            elif record.status == TransactionStatus.COMMITTING:
                committing = True
            elif is_purgeable(record, now, self.settings):
                await stored.remove_transaction(stream, record.transaction_id)
                continue
            kept += 1
        if committing or redrive:
            self._workers.request_commit(scope, name)
        if kept == 0 and not redrive and not self._workers.is_committing(scope, name):
            await self._forget_if_idle(stream, entry.version)

    async def _forget_if_idle(self, stream: StreamStore, version: int) -> None:
        committing, _ = await stored.get_committing_transactions(stream)
        state, _ = await stream.get_state()
        if committing.is_empty and state != State.COMMITTING_TXN:
            await stream_index.forget(self.context.store.kv, stream.scope, stream.name, version)

    async def _run_timer(self) -> None:
        next_sweep = self.context.now_ms() + self.settings.sweep_interval_ms
        while True:
            await asyncio.sleep(self.settings.timer_interval_ms / 1000)
            now = self.context.now_ms()
            try:
                await self.abort_expired_transactions(now)
                if now >= next_sweep:
                    next_sweep = now + self.settings.sweep_interval_ms
                    await self.sweep(now)
            except Exception:  # the loop must outlive any one failure; each tick starts afresh
                log.exception("transaction timer tick failed")

    def _schedule(self, scope: str, name: str, record: TransactionRecord) -> None:
        if record.status == TransactionStatus.OPEN:
            self._push_deadline((scope, name, record.transaction_id), abort_deadline(record, self.settings))

    def _push_deadline(self, key: tuple[str, str, uuid.UUID], deadline: int) -> None:
        if self._deadline_of.get(key) == deadline:
            return
        self._deadline_of[key] = deadline
        heapq.heappush(self._deadlines, (deadline, *key))

    # ------------------------------------------------------------------ aborts

    async def _begin_abort(self, stream: StreamStore, transaction_id: uuid.UUID, now: int) -> None:
        """OPEN -> ABORTING (nothing to write if already ABORTING) and queue the abort.

        Raises IllegalStateTransition (it is committing) or WriteConflict (it changed meanwhile).
        """
        await stored.transition_transaction(stream, transaction_id, TransactionStatus.ABORTING, now)
        self._workers.request_abort(stream.scope, stream.name, transaction_id)


# ---------------------------------------------------------------------- helpers


def _require_names(scope: str, name: str) -> None:
    if not scope or not name:
        raise InvalidArgument("the request names no scope and stream")


def _record_changed(error: BaseException) -> bool:
    """A lost compare-and-swap on a transaction record: its version or its status moved meanwhile."""
    return isinstance(error, (WriteConflict, IllegalStateTransition))


async def _find(stream: StreamStore, transaction_id: uuid.UUID) -> tuple[TransactionRecord, int]:
    """The transaction and its version.

    Raises:
        TransactionNotFound: it (or its stream) does not exist.
    """
    try:
        return await stored.get_transaction(stream, transaction_id)
    except NotFound:
        raise TransactionNotFound(f"{stream} has no transaction {transaction_id}") from None


async def _not_found(stream: StreamStore, transaction_id: uuid.UUID) -> StreamNotFound | TransactionNotFound:
    """The error to raise for a missing transaction record: StreamNotFound or TransactionNotFound,
    whichever is missing (both final for the Rust client, spec §4.5 Rec.)."""
    try:
        await stream.creation_time()
    except NotFound:
        return StreamNotFound(f"stream {stream.scope}/{stream.name} does not exist")
    return TransactionNotFound(f"{stream} has no transaction {transaction_id}")


def _segments(current: EpochRecord, transaction_epoch: int) -> tuple[TransactionSegment, ...]:
    """The current segments under their generalised ids, by key: the last ends at exactly 1.0."""
    return tuple(TransactionSegment(generalised_segment_id(segment.segment_id, transaction_epoch),
                                    segment.key_start, segment.key_end)
                 for segment in sorted(current.segments, key=lambda segment: segment.key_start))
