"""What sealing a stream needs from its transactions (spec §6.7 step 2): abort the open ones, then
wait until none is active, so transactions already committing finish before the seal.

Aborting goes through the transaction service (``TransactionService.abort_open_transaction``),
which owns the abort job. The wait is the busy-stream retry (``retries.retry_while_busy``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from ...store import NotFound, StreamStore, TransactionStatus, WriteConflict
from ...store.records import TransactionRecord
from ..context import ControllerContext
from ..errors import StreamBusy, WorkflowTimeout
from ..retries import retry_while_busy
from .jobs import list_all_transactions
from .rules import ACTIVE_STATUSES

Abort = Callable[[str, str, uuid.UUID], Awaitable[None]]


async def active_transactions(stream: StreamStore) -> list[TransactionRecord]:
    """Every transaction of the stream that is OPEN, COMMITTING or ABORTING."""
    try:
        records = await list_all_transactions(stream)
    except NotFound:  # no transactions table: none ever existed
        return []
    return [record for record in records if record.status in ACTIVE_STATUSES]


async def abort_and_drain(context: ControllerContext, stream: StreamStore, abort: Abort) -> None:
    """Aborts every OPEN transaction and waits until no transaction of the stream is active.

    Raises:
        WorkflowTimeout: transactions were still active after ``transactions_wait_seconds_max``.
    """
    settings = context.settings
    deadline = asyncio.get_running_loop().time() + settings.transactions_wait_seconds_max
    try:
        await retry_while_busy(lambda: _abort_open_ones(stream, abort), settings.stream_busy_backoff, deadline)
    except StreamBusy as error:
        raise WorkflowTimeout(str(error)) from None


async def _abort_open_ones(stream: StreamStore, abort: Abort) -> None:
    """Aborts the OPEN transactions. Raises StreamBusy while any transaction is still active."""
    active = await active_transactions(stream)
    if not active:
        return
    for record in active:
        try:
            if record.status == TransactionStatus.OPEN:
                await abort(stream.scope, stream.name, record.transaction_id)
        except WriteConflict:
            pass  # it changed meanwhile (a commit request, a ping): looked at again next round
    raise StreamBusy(f"{stream}: {len(active)} transactions are still active")
