"""What sealing a stream needs from its transactions (spec §6.7 step 2): abort the open ones, then
wait until none is active, so transactions already committing finish before the seal.

Aborting goes through the transaction service when there is one (it owns the abort job); without
it (the module is absent) the abort is done here directly: OPEN -> ABORTING, delete the
transaction segments, ABORTED.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Awaitable, Callable

from wire import naming

from ..store import IllegalStateTransition, NotFound, StreamStore, TransactionStatus, WriteConflict
from ..store import transactions as store_transactions
from ..store.records import TransactionRecord
from .context import ControllerContext
from .errors import WorkflowTimeout
from .segment_calls import SegmentCalls

Abort = Callable[[str, str, uuid.UUID], Awaitable[None]]
ACTIVE_STATUSES = frozenset({TransactionStatus.OPEN, TransactionStatus.COMMITTING, TransactionStatus.ABORTING})


async def active_transactions(stream: StreamStore) -> list[TransactionRecord]:
    """Every transaction of the stream that is OPEN, COMMITTING or ABORTING."""
    token, found = b"", []
    while True:
        try:
            page, token = await store_transactions.list_transactions(stream, token)
        except NotFound:  # no transactions table: none ever existed
            return found
        if not page:
            return found
        found += [record for record in page if record.status in ACTIVE_STATUSES]
        if not token:
            return found


async def abort_directly(context: ControllerContext, stream: StreamStore, transaction_id: uuid.UUID) -> None:
    """Aborts one transaction without the transaction service (idempotent; a committing one is left alone)."""
    try:
        record = await store_transactions.transition_transaction(stream, transaction_id, TransactionStatus.ABORTING,
                                                                 context.now_ms())
    except IllegalStateTransition:
        return  # committing or completed already
    epoch = await stream.get_epoch(record.epoch)
    calls = SegmentCalls(context, stream.scope, stream.name)
    await asyncio.gather(*(context.segments.delete_segment(naming.transaction_segment_name(
        calls.name(naming.segment_id(segment.number, record.epoch)), transaction_id)) for segment in epoch.segments))
    await store_transactions.transition_transaction(stream, transaction_id, TransactionStatus.ABORTED,
                                                    context.now_ms())


async def abort_and_drain(context: ControllerContext, stream: StreamStore, abort: Abort | None) -> None:
    """Aborts every OPEN transaction and waits until no transaction of the stream is active.

    Raises:
        WorkflowTimeout: transactions were still active after ``transactions_wait_seconds_max``.
    """
    settings = context.settings
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.transactions_wait_seconds_max
    delay = settings.workflow_retry_delay_seconds
    while True:
        active = await active_transactions(stream)
        if not active:
            return
        for record in active:
            try:
                if abort is not None and record.status == TransactionStatus.OPEN:
                    await abort(stream.scope, stream.name, record.transaction_id)
                elif abort is None and record.status != TransactionStatus.COMMITTING:
                    await abort_directly(context, stream, record.transaction_id)
            except WriteConflict:
                pass  # it changed meanwhile (a commit request, a ping): looked at again next round
        if loop.time() > deadline:
            raise WorkflowTimeout(f"{stream}: {len(active)} transactions are still active")
        await asyncio.sleep(delay)
        delay = min(delay * 2, settings.workflow_retry_delay_seconds_max)
