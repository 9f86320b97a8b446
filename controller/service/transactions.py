"""The transaction RPCs and their background work (spec §4.5, §5.4, §6.5, §7.6).

Theory of operation. The RPCs only change transaction records (compare-and-swap through
``controller.store.transactions``) and queue work; the work runs in background tasks:

* a *commit worker* per stream runs ``transaction_jobs.commit_next_batch`` until nothing is
  COMMITTING (commitTransaction answers SUCCESS as soon as the record says COMMITTING, as Java does);
* an *abort worker* per transaction deletes its segments and records ABORTED
  (both in ``transaction_workers``);
* the *timer loop* aborts OPEN transactions whose abort deadline (``transaction_policy``) has
  passed, and every ``sweep_interval_ms`` re-examines every stream of the transaction index
  (``transaction_index``): re-arms lease deadlines, restarts unfinished work, purges completed
  records past their retention and drops streams without any transaction record from the index.

Everything durable is in the store, so ``start`` on a fresh process re-drives whatever an earlier
one left: it sweeps every indexed stream at once, re-arming every OPEN transaction's deadline
and restarting every commit batch and abort. Workers retry busy streams and failed segment-store
calls with capped exponential back-off. Only the timer loop reads ``context.now_ms()`` for
timeouts; the rules themselves take time as an argument.

Coordination with other workflows is through the stream's state record only: a commit batch
holds the stream in COMMITTING_TXN (from ACTIVE) and waits while SCALING, UPDATING or TRUNCATING.
No workflow intent is written for commits (a SEALING stream must still let them finish).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import uuid
from typing import Awaitable, Callable, TypeVar

from clients.errors import ClientError
from clients.grpc_api import controller_pb2 as pb
from controller.store import IllegalStateTransition, NotFound, State, StoreError, StreamStore, WriteConflict
from controller.store import transactions as stored
from controller.store.records import EpochRecord, TransactionRecord
from controller.store.states import TransactionStatus

from . import messages, transaction_index
from .context import ControllerContext
from .paging import all_pages
from .transaction_errors import (InvalidTransactionRequest, StreamNotFound, StreamNotWritable,
                                 TransactionContention)
from .transaction_ids import TransactionIdAllocator, from_wire, to_wire
from .transaction_jobs import StepHook, list_all_transactions
from .transaction_policy import (COMPLETED_STATUSES, PingAction, TransactionSettings, abort_deadline, check_lease,
                                 commit_time_of, decide_ping, is_expired, is_purgeable, new_transaction)
from .transaction_segments import create_transaction_segments, generalised_segment_id
from .transaction_workers import TransactionWorkers

log = logging.getLogger(__name__)
Reply = TypeVar("Reply")
StatusChange = Callable[[StreamStore, uuid.UUID, TransactionRecord], Awaitable[int]]
"""What commit or abort does to a found record; returns the pb.TxnStatus value to answer."""

WRITABLE_STATES = frozenset({State.ACTIVE, State.SCALING, State.COMMITTING_TXN, State.TRUNCATING, State.UPDATING})
_TXN_STATUS = pb.TxnStatus
_COMPLETED_REPLY = {TransactionStatus.COMMITTED: pb.TxnResponse.COMMITTED,
                    TransactionStatus.ABORTED: pb.TxnResponse.ABORTED}


class TransactionService:
    def __init__(self, context: ControllerContext, *, settings: TransactionSettings | None = None):
        self.context = context
        self.settings = settings or TransactionSettings()
        self._ids = TransactionIdAllocator(context.store.kv)
        self._workers = TransactionWorkers(context, self.settings)
        self._deadlines: list[tuple[int, str, str, uuid.UUID]] = []  # heap; stale entries are skipped
        self._deadline_of: dict[tuple[str, str, uuid.UUID], int] = {}
        self._timer: asyncio.Task | None = None
        self._running = False

    def __repr__(self) -> str:
        return f"TransactionService(running={self._running}, deadlines={len(self._deadline_of)}, {self._workers})"

    @property
    def step_hook(self) -> StepHook:
        """Called with each job step's name before it runs (tests stop a job there, as a crash would)."""
        return self._workers.step_hook

    @step_hook.setter
    def step_hook(self, hook: StepHook) -> None:
        self._workers.step_hook = hook

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Re-drives what the store says is unfinished, then starts the timer loop."""
        if self._running:
            return
        await self.context.store.kv.create_table(transaction_index.STREAMS_TABLE)
        self._running = True
        await self.sweep(self.context.now_ms(), redrive=True)
        self._timer = asyncio.create_task(self._run_timer(), name="transaction-timer")

    async def stop(self) -> None:
        """Cancels the timer and every worker (their steps are durable and resumable)."""
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None
        await self._workers.stop()

    async def drain(self) -> None:
        """Waits until no commit or abort work is pending (tests, orderly shutdown)."""
        await self._workers.drain()

    # ------------------------------------------------------------------ RPCs

    async def create_transaction(self, request: pb.CreateTxnRequest) -> pb.CreateTxnResponse:
        """Raises LeaseOutOfRange, InvalidTransactionRequest, StreamNotFound, StreamNotWritable."""
        scope, name = _names(request.streamInfo)
        check_lease(request.lease, self.settings)
        stream = self.context.store.stream(scope, name)
        found = await stream.state_and_current_epoch()
        if found is None:
            raise StreamNotFound(f"stream {scope}/{name} does not exist")
        state, current = found
        if state not in WRITABLE_STATES:
            raise StreamNotWritable(f"stream {scope}/{name} is {state.name}")
        epoch = current.reference_epoch
        transaction_id = await self._ids.next_id(epoch)
        record = new_transaction(transaction_id, epoch, request.lease, self.context.now_ms(), self.settings)
        kv = self.context.store.kv
        await transaction_index.touch(kv, scope, name)  # before and after: see transaction_index
        await stored.create_transaction(stream, record)
        self._schedule(scope, name, record)  # if anything below fails, the lease timeout cleans up
        await transaction_index.touch(kv, scope, name)
        await create_transaction_segments(self.context, scope, name,
                                          [segment.segment_id for segment in current.segments], epoch, transaction_id)
        return pb.CreateTxnResponse(txnId=to_wire(transaction_id), activeSegments=_ranges(scope, name, current, epoch),
                                    delegationToken="")

    async def ping_transaction(self, request: pb.PingTxnRequest) -> pb.PingTxnStatus:
        if not self._running:
            return pb.PingTxnStatus(status=pb.PingTxnStatus.DISCONNECTED)
        stream = self.context.store.stream(request.streamInfo.scope, request.streamInfo.stream)
        transaction_id = from_wire(request.txnId)

        async def attempt() -> pb.PingTxnStatus:
            found = await _find(stream, transaction_id)
            if found is None:
                return pb.PingTxnStatus(status=pb.PingTxnStatus.UNKNOWN)
            record, version = found
            now = self.context.now_ms()
            decision = decide_ping(record, request.lease, now, self.settings)
            if decision.action == PingAction.ABORT:
                await self._begin_abort(stream, transaction_id, now)
            elif decision.action == PingAction.EXTEND:
                await stored.replace_transaction(stream, decision.record, version)
                self._schedule(stream.scope, stream.name, decision.record)
            return pb.PingTxnStatus(status=decision.status)

        return await self._retrying(transaction_id, attempt)

    async def commit_transaction(self, request: pb.TxnRequest) -> pb.TxnStatus:
        """OPEN -> COMMITTING and queue the commit: SUCCESS without waiting for COMMITTED."""
        async def commit(stream: StreamStore, transaction_id: uuid.UUID, record: TransactionRecord) -> int:
            now = self.context.now_ms()
            if record.status in (TransactionStatus.COMMITTING, TransactionStatus.COMMITTED):
                if record.status == TransactionStatus.COMMITTING:
                    self._workers.request_commit(stream.scope, stream.name)
                return _TXN_STATUS.SUCCESS
            if record.status != TransactionStatus.OPEN or (await stream.get_state())[0] == State.SEALED:
                return _TXN_STATUS.FAILURE  # a sealed stream's parents take no data
            if is_expired(record, now, self.settings):
                await self._begin_abort(stream, transaction_id, now)
                return _TXN_STATUS.FAILURE
            order = await transaction_index.next_commit_order(self.context.store.kv, stream.scope, stream.name)
            await stored.transition_transaction(stream, transaction_id, TransactionStatus.COMMITTING, now,
                                                writer_id=request.writerId, commit_order=order,
                                                commit_time=commit_time_of(request.timestamp))
            self._workers.request_commit(stream.scope, stream.name)
            return _TXN_STATUS.SUCCESS

        return await self._change_status(request, commit)

    async def abort_transaction(self, request: pb.TxnRequest) -> pb.TxnStatus:
        """OPEN -> ABORTING and queue the abort; aborting twice is SUCCESS, a committing one FAILURE."""
        async def abort(stream: StreamStore, transaction_id: uuid.UUID, record: TransactionRecord) -> int:
            if record.status in (TransactionStatus.COMMITTING, TransactionStatus.COMMITTED):
                return _TXN_STATUS.FAILURE
            if record.status == TransactionStatus.ABORTED:
                return _TXN_STATUS.SUCCESS
            await self._begin_abort(stream, transaction_id, self.context.now_ms())
            return _TXN_STATUS.SUCCESS

        return await self._change_status(request, abort)

    async def _change_status(self, request: pb.TxnRequest, change: StatusChange) -> pb.TxnStatus:
        """``change(stream, id, record)``'s TxnStatus for the request's transaction (through ``_retrying``);
        TRANSACTION_NOT_FOUND or STREAM_NOT_FOUND if there is no such record."""
        stream = self.context.store.stream(request.streamInfo.scope, request.streamInfo.stream)
        transaction_id = from_wire(request.txnId)

        async def attempt() -> int:
            found = await _find(stream, transaction_id)
            if found is None:
                return await _not_found_status(stream)
            return await change(stream, transaction_id, found[0])

        return pb.TxnStatus(status=await self._retrying(transaction_id, attempt))

    async def _retrying(self, transaction_id: uuid.UUID, attempt: Callable[[], Awaitable[Reply]]) -> Reply:
        """``attempt()`` again while the record changes under it (a lost compare-and-swap).

        Raises:
            TransactionContention: it kept changing for ``status_update_attempts_max`` attempts.
        """
        for _ in range(self.settings.status_update_attempts_max):
            try:
                return await attempt()
            except (WriteConflict, IllegalStateTransition):
                continue
        raise TransactionContention(f"transaction {transaction_id} kept changing")

    async def check_transaction_state(self, request: pb.TxnRequest) -> pb.TxnState:
        """The record's status; UNKNOWN for an unknown (or purged) transaction or stream."""
        stream = self.context.store.stream(request.streamInfo.scope, request.streamInfo.stream)
        found = await _find(stream, from_wire(request.txnId))
        return pb.TxnState(state=pb.TxnState.UNKNOWN if found is None else int(found[0].status))

    async def list_completed_transactions(self, request: pb.ListCompletedTxnRequest) -> pb.ListCompletedTxnResponse:
        """The most recently completed transactions (at most ``completed_listing_max``). Raises StreamNotFound."""
        scope, name = _names(request.streamInfo)
        try:
            records = await list_all_transactions(self.context.store.stream(scope, name))
        except NotFound:
            raise StreamNotFound(f"stream {scope}/{name} does not exist") from None
        completed = sorted((record for record in records if record.status in COMPLETED_STATUSES),
                           key=lambda record: record.completion_time, reverse=True)
        return pb.ListCompletedTxnResponse(response=[
            pb.TxnResponse(txnId=to_wire(record.transaction_id), status=_COMPLETED_REPLY[record.status])
            for record in completed[:self.settings.completed_listing_max]])

    async def abort_open_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID) -> None:
        """For the seal workflow (``transaction_coordination.Abort``): OPEN -> ABORTING and queue the
        abort; a transaction already committing, aborting or completed is left alone.

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
                found = await _find(stream, transaction_id)
                if found is None or found[0].status != TransactionStatus.OPEN:
                    continue
                if is_expired(found[0], now, self.settings):
                    await self._begin_abort(stream, transaction_id, now)
                else:
                    self._schedule(scope, name, found[0])
            except (StoreError, ClientError, OSError) as error:
                log.warning("timeout of transaction %s on %s/%s failed, retrying: %r", transaction_id, scope, name,
                            error)
                self._push_deadline(key, now + self.settings.retry_delay_ms_max)

    async def sweep(self, now: int, redrive: bool = False) -> None:
        """Re-examines every indexed stream (see the module docstring). ``redrive`` also restarts the
        commit worker of every stream, to finish a batch or a state reset cut short by a crash."""
        kv = self.context.store.kv
        for scope, name in await all_pages(lambda token: transaction_index.list_streams(kv, token), b""):
            try:
                await self._sweep_stream(scope, name, now, redrive)
            except (StoreError, ClientError, OSError):
                log.exception("sweeping the transactions of %s/%s failed; next sweep retries", scope, name)

    async def _sweep_stream(self, scope: str, name: str, now: int, redrive: bool) -> None:
        kv, stream = self.context.store.kv, self.context.store.stream(scope, name)
        entry = await transaction_index.read_entry(kv, scope, name)
        if entry is None:
            return
        try:
            records = await list_all_transactions(stream)
        except NotFound:  # the stream was deleted
            await transaction_index.forget(kv, scope, name, entry.version)
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
            await transaction_index.forget(self.context.store.kv, stream.scope, stream.name, version)

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


def _names(info: pb.StreamInfo) -> tuple[str, str]:
    if not info.scope or not info.stream:
        raise InvalidTransactionRequest("the request names no scope and stream")
    return info.scope, info.stream


async def _find(stream: StreamStore, transaction_id: uuid.UUID) -> tuple[TransactionRecord, int] | None:
    """The transaction and its version, or None if it (or its stream) does not exist."""
    try:
        return await stored.get_transaction(stream, transaction_id)
    except NotFound:
        return None


async def _not_found_status(stream: StreamStore) -> int:
    """TRANSACTION_NOT_FOUND or STREAM_NOT_FOUND: final for the Rust client (spec §4.5 Rec.)."""
    try:
        await stream.creation_time()
    except NotFound:
        return _TXN_STATUS.STREAM_NOT_FOUND
    return _TXN_STATUS.TRANSACTION_NOT_FOUND


def _ranges(scope: str, name: str, current: EpochRecord, transaction_epoch: int) -> list[pb.SegmentRange]:
    """The current segments under their generalised ids, by key: the last ends at exactly 1.0."""
    return [messages.key_range(scope, name, generalised_segment_id(segment.segment_id, transaction_epoch),
                               segment.key_start, segment.key_end)
            for segment in sorted(current.segments, key=lambda segment: segment.key_start)]
