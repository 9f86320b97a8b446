"""Ending many transactions at once, from the driver: in parallel, each by its id."""

from __future__ import annotations

import asyncio
import logging
import uuid

from clients.writer.transactions import TransactionalWriter

from .options import WriteOptions

log = logging.getLogger("tributary.spark")


async def commit_transactions(coordinator: TransactionalWriter, transaction_ids: list[uuid.UUID],
                              options: WriteOptions) -> None:
    """Commits every transaction (in parallel); with read-after-write consistency, until readable."""
    poll = options.transaction_status_poll_interval_ms / 1000
    await asyncio.gather(*(coordinator.commit_transaction(transaction_id, wait=options.read_after_write_consistency,
                                                          poll_seconds=poll)
                           for transaction_id in transaction_ids))


async def abort_transactions(coordinator: TransactionalWriter, transaction_ids: list[uuid.UUID]) -> None:
    """Aborts every transaction, logging (not raising) those that cannot be aborted."""
    results = await asyncio.gather(*(coordinator.abort_transaction(transaction_id)
                                     for transaction_id in transaction_ids), return_exceptions=True)
    for transaction_id, result in zip(transaction_ids, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("could not abort a transaction", extra={"transaction": str(transaction_id),
                                                                 "error": repr(result)})


__all__ = ["abort_transactions", "commit_transactions"]
