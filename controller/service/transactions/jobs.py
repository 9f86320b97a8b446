"""The commit and abort jobs: resumable steps over the stream's records (spec §6.5).

Theory of operation (commit). One batch at a time per stream:

1. The *committing record* names the batch: COMMITTING transactions of the lowest txn epoch, in
   commit order, at most 100. It is written once (compare-and-swap from EMPTY) and then only
   re-read, so a re-driven job works on exactly the same batch.
2. The stream is held: ACTIVE -> COMMITTING_TXN (compare-and-swap on the state record). Scale,
   update and truncate each need ACTIVE -> X as well, so none of them runs while a batch
   commits, and a batch waits (``StreamBusy``) while one of them runs. A SEALING stream is not
   moved: already-committing transactions finish before the seal (spec §6.2).
3. If the transaction epoch's parents are still live (active epoch == txn epoch, or the same
   reference epoch), each active segment gets one MergeSegmentsBatch of the batch's transaction
   segments, in order. Otherwise the batch is *rolled* (below).
4. Each transaction becomes COMMITTED (with its merge offsets); writers' marks are noted; the
   committing record goes back to EMPTY; COMMITTING_TXN goes back to ACTIVE.

Rolling (the txn epoch's parents were sealed by a scale). With ``c`` the active epoch, the
record is first marked rolling with ``active_epoch = c`` (so a re-run rolls from the same
epoch), then: duplicates ``(number, c + 1)`` of the txn epoch's segments are created, the batch
is merged into them and they are sealed; duplicates ``(number, c + 2)`` of the active segments
are created; epochs c + 1 (reference: the txn epoch's) and c + 2 (reference: the active one's)
are written with their sealed-epoch records (``scale.create_rolling_epochs``) *before* the
active segments are sealed; then the active segments are sealed and the current epoch moves to
c + 2 (``scale.complete_rolling_epochs``). Readers go: old active segments -> txn duplicates
(the committed data) -> new active duplicates.

Every step is idempotent: each store write is conditional or checks what is already done, and
each segment-store call tolerates a repeat. A controller that stops anywhere re-runs the job
from the top and finishes the same batch.

Abort: DeleteSegment for every transaction segment of the txn epoch, then ABORTED.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from controller_api.model import StreamConfiguration
from wire.naming import segment_id

from ... import metrics
from ...store import IllegalStateTransition, NotFound, State, StreamStore, WriteConflict, scale
from ...store.readers import note_writer_mark
from ...store.records import (
    EMPTY_COMMITTING_TRANSACTIONS,
    CommittingTransactionsRecord,
    EpochRecord,
    TransactionRecord,
    WriterMarkRecord,
)
from ...store.records.transactions import NO_TIME
from ...store.states import TransactionStatus
from ...store.transactions import (
    get_committing_transactions,
    get_transaction,
    list_transactions,
    replace_committing_transactions,
    transition_transaction,
)
from ..context import ControllerContext
from ..errors import StreamBusy
from ..paging import all_pages
from ..segment_calls import SegmentCalls
from .rules import TransactionSettings, commits_in_place, select_commit_batch
from .segments import delete_transaction_segments, merge_transactions

UNSCALED = StreamConfiguration()  # transaction duplicates never auto-scale and have no rollover size

log = logging.getLogger(__name__)


class StreamUncommittable(Exception):
    """The stream is SEALED with transactions still COMMITTING: their parents cannot take data.

    Internal to the commit job: the transactions stay COMMITTING and the job is retried at the
    next sweep (a seal workflow should let committing transactions finish first, spec §6.2).
    """


# The fault points (``FaultPoints``) of the jobs, in the order a rolling commit reaches them: a test
# armed at one makes the job stop right before that step, as if the controller had died there.
STEP_BATCH = "commit.batch"  # the batch is recorded, the stream not yet held
STEP_MERGE = "commit.merge"  # in place: about to merge into the active segments
STEP_ROLLING_DUPLICATES = "commit.rolling.duplicates"  # about to create and fill the txn duplicates
STEP_ROLLING_EPOCHS = "commit.rolling.epochs"  # duplicates filled and sealed, epochs not yet written
STEP_ROLLING_SEAL = "commit.rolling.seal"  # epochs written, active segments not yet sealed
STEP_COMPLETE = "commit.complete"  # data merged, transactions not yet COMMITTED
STEP_ABORT = "abort.delete"  # about to delete an aborting transaction's segments


async def list_all_transactions(stream: StreamStore) -> list[TransactionRecord]:
    """Every transaction record of the stream, page by page."""
    return await all_pages(lambda token: list_transactions(stream, token), b"")


async def commit_next_batch(context: ControllerContext, stream: StreamStore, settings: TransactionSettings,
                            now: int) -> bool:
    """Commits the batch in progress, or the next one. Returns False when nothing is COMMITTING.

    Raises:
        StreamBusy: another workflow holds the stream; retry later.
        StreamUncommittable: the stream is SEALED with transactions still COMMITTING.
        NotFound: the stream is gone.
        WriteConflict, clients.errors.ClientError: a lost race or a segment-store failure; retry.
        SimulatedCrash: a test armed one of the fault points above.
    """
    faults = context.fault_points
    state, _ = await stream.get_state()
    record, record_version = await get_committing_transactions(stream)
    if record.is_empty:
        batch = select_commit_batch(await list_all_transactions(stream), settings.commit_batch_size_max)
        if batch is None:
            if state == State.COMMITTING_TXN:  # a job stopped after its last batch, before this reset
                await stream.transition_state(State.ACTIVE, expected=State.COMMITTING_TXN)
            return False
        if state not in (State.ACTIVE, State.SEALING, State.COMMITTING_TXN):
            _refuse(stream, state)
        record_version = await replace_committing_transactions(stream, batch, record_version)
        record = batch
    faults.reach(STEP_BATCH)
    await _hold_stream(stream, state)
    transaction_epoch = await stream.get_epoch(record.epoch)
    active, _ = await stream.get_current_epoch()
    if not record.is_rolling and commits_in_place(transaction_epoch, active):
        faults.reach(STEP_MERGE)
        offsets = await merge_transactions(context, stream.scope, stream.name,
                                           [segment.segment_id for segment in active.segments], record.epoch,
                                           record.transaction_ids)
    else:
        if not record.is_rolling:
            record = CommittingTransactionsRecord(record.epoch, record.transaction_ids, active.epoch)
            record_version = await replace_committing_transactions(stream, record, record_version)
        offsets = await _roll(context, stream, record, transaction_epoch, now)
    faults.reach(STEP_COMPLETE)
    await _complete_batch(stream, record, record_version, offsets, now)
    return True


def _refuse(stream: StreamStore, state: State) -> None:
    if state == State.SEALED:
        raise StreamUncommittable(f"{stream} is sealed with transactions still committing")
    raise StreamBusy(f"{stream} is {state.name}")


async def _hold_stream(stream: StreamStore, state: State) -> None:
    """ACTIVE -> COMMITTING_TXN; SEALING and COMMITTING_TXN (a re-run) are kept as they are."""
    if state in (State.SEALING, State.COMMITTING_TXN):
        return
    if state != State.ACTIVE:
        _refuse(stream, state)
    try:
        await stream.transition_state(State.COMMITTING_TXN, expected=State.ACTIVE)
    except IllegalStateTransition as error:
        raise StreamBusy(f"{stream} became {error.current.name}") from None


async def _roll(context: ControllerContext, stream: StreamStore, record: CommittingTransactionsRecord,
                transaction_epoch: EpochRecord, now: int) -> dict[uuid.UUID, dict[int, int]]:
    """The rolling-transaction steps (module docstring). Returns the merge offsets per transaction
    (empty if an earlier run already moved the current epoch past the duplicates)."""
    first, second = record.active_epoch + 1, record.active_epoch + 2
    current, _ = await stream.get_current_epoch()
    if current.epoch >= second:
        return {}
    segments = SegmentCalls(context, stream.scope, stream.name)
    active = await stream.get_epoch(record.active_epoch)
    transaction_duplicates = [segment_id(segment.number, first) for segment in transaction_epoch.segments]
    context.fault_points.reach(STEP_ROLLING_DUPLICATES)
    await segments.create(transaction_duplicates, UNSCALED)
    offsets = await merge_transactions(context, stream.scope, stream.name, transaction_duplicates, record.epoch,
                                       record.transaction_ids)
    sealed_sizes = await segments.seal(transaction_duplicates)
    context.fault_points.reach(STEP_ROLLING_EPOCHS)
    stored, _ = await stream.get_configuration()
    await segments.create([segment_id(segment.number, second) for segment in active.segments],
                          stored.configuration)
    await scale.create_rolling_epochs(stream, record.epoch, record.active_epoch, now)
    context.fault_points.reach(STEP_ROLLING_SEAL)
    sealed_sizes.update(await segments.seal(active.segment_ids))
    await scale.complete_rolling_epochs(stream, record.active_epoch, sealed_sizes)
    return offsets


async def _complete_batch(stream: StreamStore, record: CommittingTransactionsRecord, record_version: int,
                          offsets: dict[uuid.UUID, dict[int, int]], now: int) -> None:
    """Writer marks noted, transactions COMMITTED, the committing record EMPTY, the stream ACTIVE.

    The marks come first: a writer that saw its transaction COMMITTED and then closed (which removes its
    mark) must not have the mark of that commit noted again after it left."""
    committing = []
    for transaction_id in record.transaction_ids:
        try:
            transaction, _ = await get_transaction(stream, transaction_id)
        except NotFound:
            continue  # purged already: a much older run completed it
        if transaction.status != TransactionStatus.COMMITTED:  # a re-driven step keeps what the first one stored
            transaction = dataclasses.replace(transaction, commit_offsets=offsets.get(transaction_id, {}))
        committing.append(transaction)
    await _note_writer_marks(stream, committing)
    for transaction in committing:
        try:
            await transition_transaction(stream, transaction.transaction_id, TransactionStatus.COMMITTED, now,
                                         commit_offsets=transaction.commit_offsets)
            metrics.TRANSACTIONS.labels("committed").inc()
        except NotFound:
            continue  # purged meanwhile
    await replace_committing_transactions(stream, EMPTY_COMMITTING_TRANSACTIONS, record_version)
    state, _ = await stream.get_state()
    if state == State.COMMITTING_TXN:
        await stream.transition_state(State.ACTIVE, expected=State.COMMITTING_TXN)


async def _note_writer_marks(stream: StreamStore, committed: list[TransactionRecord]) -> None:
    """Per writer, the latest commit time with its merge offsets (spec §6.5 step 6); best effort."""
    latest: dict[str, TransactionRecord] = {}
    for record in committed:
        if not record.writer_id or record.commit_time == NO_TIME or not record.commit_offsets:
            continue
        if record.writer_id not in latest or record.commit_time >= latest[record.writer_id].commit_time:
            latest[record.writer_id] = record
    for writer_id, record in latest.items():
        try:
            await note_writer_mark(stream, writer_id, WriterMarkRecord(record.commit_time, record.commit_offsets))
        except WriteConflict:
            log.info("writer %s of %s reported a mark concurrently; keeping its own", writer_id, stream)


async def abort_transaction(context: ControllerContext, stream: StreamStore, transaction_id: uuid.UUID,
                            now: int) -> None:
    """Deletes an ABORTING transaction's segments and records it ABORTED (idempotent).

    Raises:
        NotFound: the stream or the transaction is gone.
        WriteConflict, clients.errors.ClientError: retry.
    """
    record, _ = await get_transaction(stream, transaction_id)
    if record.status != TransactionStatus.ABORTING:
        return
    epoch = await stream.get_epoch(record.epoch)
    context.fault_points.reach(STEP_ABORT)
    await delete_transaction_segments(context, stream.scope, stream.name,
                                      [segment.segment_id for segment in epoch.segments], record.epoch, transaction_id)
    await transition_transaction(stream, transaction_id, TransactionStatus.ABORTED, now)
    metrics.TRANSACTIONS.labels("aborted").inc()
