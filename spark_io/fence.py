"""Fencing a streaming sink's micro-batches, so that a batch Spark replays is written once.

Spark records a micro-batch as done (``<checkpoint>/commits/<batch>``) only after the sink's
``commit`` returned. A crash between the two makes Spark run the batch again on restart, with
the same batch id and the same input offsets, and the sink is handed new transactions holding
the same events. The Pravega connector commits those too (duplicates). We keep, per query, a
record of the last batch committed, in a table segment of the stream's scope
(``<scope>/_SPARK<stream>_kvtable/0.#epoch.0``, key: the query id, which Spark keeps across
restarts from a checkpoint), changed only by conditional updates:

1. a new batch: write ``{batch, transactions (by partition), state: committing}``, commit the
   transactions, then mark the record ``committed``;
2. a replay of a batch whose record is ``committed`` (or of an older batch): abort the new
   transactions, nothing else;
3. a replay of a batch whose record is ``committing`` (the crash came mid-commit): for each
   partition keep the recorded transaction if it is still alive (open or committing or
   committed) and commit it; where it lapsed (its lease ran out while the query was down),
   take the new transaction of the same partition instead -- a replayed batch reads the same
   offsets, so a partition gets the same events; then abort whatever new transactions were
   not taken, rewrite the record, commit and mark it committed.

The remaining risk is Flink's: a transaction whose lease lapses between the record and its
commit. Leases are extended by the executors until the driver commits (``Transaction.release``).
"""

from __future__ import annotations

import json
import logging
import uuid

from clients.client import Client
from clients.model import TransactionState
from wire import naming
from wire.constants import NOT_EXISTS

from .options import WriteOptions
from .transactions import abort_transactions, commit_transactions

log = logging.getLogger("tributary.spark")
COMMITTING, COMMITTED = "committing", "committed"
_ALIVE = (TransactionState.OPEN, TransactionState.COMMITTING, TransactionState.COMMITTED)


def fence_table(scope: str, stream: str) -> str:
    return naming.table_segment_name(scope, f"_SPARK{stream}")


class SinkFence:
    """The batch records of the sinks writing to one stream."""

    def __init__(self, client: Client, scope: str, stream: str):
        self._store = client.segment_store
        self._table = fence_table(scope, stream)

    async def record(self, query_id: str) -> tuple[int, dict] | None:
        """(version, record) of a query's last batch, or None."""
        await self._store.create_table(self._table)
        found = (await self._store.read_table(self._table, [query_id.encode()]))[0]
        return None if found is None else (found[0], json.loads(found[1]))

    async def _put(self, query_id: str, version: int, record: dict) -> int:
        value = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        return (await self._store.update_table(self._table, [(query_id.encode(), version, value)]))[0]

    async def commit_batch(self, query_id: str, batch_id: int, commits: list, coordinator,
                           options: WriteOptions) -> None:
        """Commits micro-batch ``batch_id`` of ``query_id`` exactly once (see the module docstring).

        Raises:
            TableKeyBadVersion: another driver of the same query changed the record meanwhile.
        """
        new = {str(commit.partition): commit.transaction_id for commit in commits}
        found = await self.record(query_id)
        version = NOT_EXISTS if found is None else found[0]
        if found is not None and found[1]["batch"] >= batch_id:
            recorded = found[1]
            if recorded["batch"] > batch_id or recorded["state"] == COMMITTED:
                log.info("micro-batch already committed: dropping its replay",
                         extra={"query": query_id, "batch": batch_id})
                await abort_transactions(coordinator, [uuid.UUID(t) for t in new.values()])
                return
            chosen = await self._resume(coordinator, recorded["transactions"], new)
        else:
            chosen = new
        leftovers = [uuid.UUID(t) for t in new.values() if t not in set(chosen.values())]
        await abort_transactions(coordinator, leftovers)
        record = {"batch": batch_id, "transactions": chosen, "state": COMMITTING}
        version = await self._put(query_id, version, record)
        await commit_transactions(coordinator, [uuid.UUID(t) for t in chosen.values()], options)
        await self._put(query_id, version, {**record, "state": COMMITTED})

    @staticmethod
    async def _resume(coordinator, recorded: dict[str, str], new: dict[str, str]) -> dict[str, str]:
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


__all__ = ["SinkFence", "fence_table"]
