"""Transaction records and the committing-transactions record of one stream (spec §6.5).

Transactions live in the stream's ``transactions`` table keyed by id, so they can be listed
page by page (the commit job gathers COMMITTING ones, the lease sweeper finds expired OPEN ones)
without reading epoch records. Status changes go through the transition table of
``states.TransactionStatus`` and a compare-and-swap on the record's version.
"""

from __future__ import annotations

import dataclasses
import uuid

from . import layout
from .errors import IllegalStateTransition
from .key_value import PAGE_ENTRIES_DEFAULT
from .records import CommittingTransactionsRecord, TransactionRecord
from .states import TransactionStatus, transaction_transition_allowed
from .stream_store import StreamStore

COMPLETED_STATUSES = frozenset({TransactionStatus.COMMITTED, TransactionStatus.ABORTED})


async def create_transaction(stream: StreamStore, record: TransactionRecord) -> int:
    """Stores a new transaction (normally OPEN). Returns its version. Raises AlreadyExists."""
    return await stream.kv.create(stream.tables.transactions, layout.transaction_key(record.transaction_id),
                                  record.encode())


async def get_transaction(stream: StreamStore, transaction_id: uuid.UUID) -> tuple[TransactionRecord, int]:
    """The transaction and its version. Raises NotFound."""
    return await stream.read(layout.transaction_key(transaction_id), TransactionRecord, stream.tables.transactions)


async def replace_transaction(stream: StreamStore, record: TransactionRecord, expected_version: int) -> int:
    """Compare-and-swap of a transaction record (e.g. a ping extending the lease). Returns the new version."""
    return await stream.kv.replace(stream.tables.transactions, layout.transaction_key(record.transaction_id),
                                   record.encode(), expected_version)


async def transition_transaction(stream: StreamStore, transaction_id: uuid.UUID, status: TransactionStatus,
                                 time: int, **changes) -> TransactionRecord:
    """Moves a transaction to ``status`` (plus any field ``changes``). Returns the stored record.

    Completing (COMMITTED/ABORTED) stamps ``completion_time = time``. Moving to the current status
    writes nothing, so a re-driven commit or abort step is harmless.

    Raises:
        NotFound: no such transaction.
        IllegalStateTransition: e.g. committing an aborting transaction.
        WriteConflict: the record changed between the read and the write.
    """
    record, version = await get_transaction(stream, transaction_id)
    if record.status == status:
        return record
    if not transaction_transition_allowed(record.status, status):
        raise IllegalStateTransition(f"transaction {transaction_id}: {record.status.name} -> {status.name}",
                                     record.status, status, stream.tables.transactions,
                                     layout.transaction_key(transaction_id))
    if status in COMPLETED_STATUSES:
        changes.setdefault("completion_time", time)
    updated = dataclasses.replace(record, status=status, **changes)
    await replace_transaction(stream, updated, version)
    return updated


async def remove_transaction(stream: StreamStore, transaction_id: uuid.UUID) -> None:
    """Drops a transaction record (a purge of completed ones). Absent is fine."""
    await stream.kv.remove(stream.tables.transactions, layout.transaction_key(transaction_id))


async def list_transactions(stream: StreamStore, token: bytes = b"",
                            limit: int = PAGE_ENTRIES_DEFAULT) -> tuple[list[TransactionRecord], bytes]:
    """One page of the stream's transactions and the token for the next (empty list: done)."""
    page = await stream.kv.list_entries(stream.tables.transactions, token, limit)
    return [TransactionRecord.decode(value.value) for _, value in page.entries], page.token


async def get_committing_transactions(stream: StreamStore) -> tuple[CommittingTransactionsRecord, int]:
    return await stream.read(layout.COMMITTING_TRANSACTIONS, CommittingTransactionsRecord)


async def replace_committing_transactions(stream: StreamStore, record: CommittingTransactionsRecord,
                                          expected_version: int) -> int:
    """Compare-and-swap of the committing record (set a batch, mark it rolling, reset it to EMPTY)."""
    return await stream.kv.replace(stream.tables.metadata, layout.COMMITTING_TRANSACTIONS, record.encode(),
                                   expected_version)
