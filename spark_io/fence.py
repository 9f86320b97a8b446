"""Fencing a streaming sink's micro-batches, so that a batch Spark replays is written once.

Spark records a micro-batch as done (``<checkpoint>/commits/<batch>``) only after the sink's
``commit`` returned. A crash between the two makes Spark run the batch again on restart, with
the same batch id and the same input offsets, and the sink is handed new transactions holding
the same events. The Pravega connector commits those too (duplicates). We keep, per query, a
record of the last batch committed (``query/<query id>`` in the stream's records table,
:mod:`spark_io.records`; Spark keeps the query id across restarts from a checkpoint), changed
only by conditional updates:

1. a new batch: write ``{batch, transactions (by partition), state: committing}``, commit the
   transactions, then mark the record ``committed``;
2. a replay of a batch whose record is ``committed`` (or of an older batch): abort the new
   transactions, nothing else;
3. a replay of a batch whose record is ``committing`` (the crash came mid-commit): for each
   partition keep the recorded transaction if it is still alive (open, committing or
   committed) and commit it; where it lapsed (its lease ran out while the query was down),
   take the new transaction of the same partition instead -- a replayed batch reads the same
   offsets, so a partition gets the same events; abort the new transactions not taken,
   rewrite the record, commit and mark it committed.

The remaining risk is Flink's: a transaction whose lease lapses between the record and its
commit. Leases are extended by the executors until the driver commits (``Transaction.release``).
"""

from __future__ import annotations

import logging
import uuid

from clients.client import Client
from clients.model import TransactionState
from clients.writer.transactions import TransactionalWriter

from .options import WriteOptions
from .records import Records
from .transactions import abort_transactions, commit_transactions

log = logging.getLogger("tributary.spark")
COMMITTING, COMMITTED = "committing", "committed"
_ALIVE = (TransactionState.OPEN, TransactionState.COMMITTING, TransactionState.COMMITTED)


class SinkFence:
    """The batch records of the streaming queries writing to one stream."""

    def __init__(self, client: Client, scope: str, stream: str):
        self._records = Records(client, scope, stream)

    async def commit_batch(self, query_id: str, batch_id: int, new: dict[str, str],
                           coordinator: TransactionalWriter, options: WriteOptions) -> None:
        """Commits micro-batch ``batch_id`` of ``query_id`` exactly once (see the module docstring);
        ``new`` maps each partition that wrote rows to its transaction id.

        Raises:
            TableKeyBadVersion: another driver of the same query changed the record meanwhile.
        """
        key = f"query/{query_id}"
        version, recorded = await self._records.get(key)
        if recorded is not None and recorded["batch"] >= batch_id:
            if recorded["batch"] > batch_id or recorded["state"] == COMMITTED:
                log.info("micro-batch already committed: dropping its replay",
                         extra={"query": query_id, "batch": batch_id})
                await abort_transactions(coordinator, [uuid.UUID(t) for t in new.values()])
                return
            chosen = await self._resume(coordinator, recorded["transactions"], new)
        else:
            chosen = new
        taken = set(chosen.values())
        await abort_transactions(coordinator, [uuid.UUID(t) for t in new.values() if t not in taken])
        record = {"batch": batch_id, "transactions": chosen, "state": COMMITTING}
        version = await self._records.put(key, version, record)
        await commit_transactions(coordinator, [uuid.UUID(t) for t in chosen.values()], options)
        await self._records.put(key, version, {**record, "state": COMMITTED})

    @staticmethod
    async def _resume(coordinator: TransactionalWriter, recorded: dict[str, str],
                      new: dict[str, str]) -> dict[str, str]:
        """Per partition, the recorded transaction if still alive, else the replay's."""
        chosen = {}
        for partition in sorted(set(recorded) | set(new)):
            previous = recorded.get(partition)
            if previous is not None and await coordinator.transaction_state(uuid.UUID(previous)) in _ALIVE:
                chosen[partition] = previous
            elif partition in new:
                chosen[partition] = new[partition]
            else:
                log.error("a recorded transaction lapsed and the replay has no rows for its partition",
                          extra={"partition": partition, "transaction": previous})
        return chosen


__all__ = ["SinkFence"]
