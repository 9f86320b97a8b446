"""Which transactions a write job has, so none outlives the job.

Spark tells the driver about a task's transaction only through the task's commit message, and a
message can miss the driver: a task still running when the job is aborted finishes *after* the
driver's ``abort``; a speculative attempt that lost the race is never reported; a failed task
contributes None. Their transactions would stay open (and, released, be kept alive by their
executors). So every task also registers its transaction in the job's record before handing it
over, and the driver closes the record before it commits or aborts:

* record ``job/<writer id>`` = ``{"batch": n, "state": "open"|"closed", "transactions": [...]}``
  (``batch`` is the micro-batch id of a streaming sink, 0 for a batch write);
* a task registers with a conditional update, only while its batch is the record's batch and
  ``open`` (a record of an earlier batch is replaced); otherwise the job is over and the task
  aborts its own transaction;
* the driver closes the batch with a conditional update and gets every registered transaction:
  those it commits are the messages'; every other one is aborted.

Either a task registers before the close (and the driver sees it) or after (and the task sees
the close): no transaction escapes. A task killed before it registers never released its
transaction; nobody extends its lease, so the controller aborts it when the lease runs out.

The driver learns the writer id from the tasks' messages: its own writer object may not be the
one the tasks were given (a streaming sink's commits run on a writer of their own). When a
micro-batch fails and no task reported, the driver cannot name the record; a streaming writer's
ids therefore start with a *group* derived from the query's checkpoint, and the abort closes every
open record of that group and batch it finds, looking again for a few seconds to catch tasks
still finishing (:meth:`WriteJob.close_group`).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid

from clients.client import Client

from .records import Records

OPEN, CLOSED = "open", "closed"


def _key(writer_id: str) -> str:
    return f"job/{writer_id}"


def group_of(checkpoint: str | None) -> str | None:
    """The group of a streaming query's writers (one per checkpoint location), or None."""
    return None if checkpoint is None else hashlib.sha256(checkpoint.encode()).hexdigest()[:16]


def writer_id_in(group: str | None) -> str:
    """A new writer id, in ``group`` if there is one."""
    return uuid.uuid4().hex if group is None else f"{group}.{uuid.uuid4().hex}"


class WriteJob:
    """The transaction registry of one writer (one batch write, or one run of a streaming query)."""

    def __init__(self, client: Client, scope: str, stream: str, writer_id: str):
        self._records = Records(client, scope, stream)
        self._key = _key(writer_id)

    async def register(self, batch: int, transaction_id: uuid.UUID) -> bool:
        """Adds a task's transaction to ``batch``; False if that batch is already closed (or superseded):
        the caller must then abort the transaction itself."""
        def change(record):
            if record is None or record["batch"] < batch:
                return {"batch": batch, "state": OPEN, "transactions": [str(transaction_id)]}
            if record["batch"] == batch and record["state"] == OPEN:
                return {**record, "transactions": [*record["transactions"], str(transaction_id)]}
            return None

        _, new = await self._records.update(self._key, change)
        return new is not None

    async def close(self, batch: int) -> list[uuid.UUID]:
        """Closes ``batch`` to further registrations; returns every transaction registered in it."""
        def change(record):
            if record is not None and record["batch"] > batch:
                return None  # a later batch began: this one was closed long ago
            same = record is not None and record["batch"] == batch
            return {"batch": batch, "state": CLOSED, "transactions": record["transactions"] if same else []}

        old, _ = await self._records.update(self._key, change)
        if old is None or old["batch"] != batch:
            return []
        return [uuid.UUID(transaction) for transaction in old["transactions"]]

    @staticmethod
    async def close_group(client: Client, scope: str, stream: str, group: str, batch: int,
                          looks: int = 5, interval_seconds: float = 1.0) -> list[uuid.UUID]:
        """Closes ``batch`` in every record of ``group`` where it is open, ``looks`` times
        ``interval_seconds`` apart; returns the transactions registered in them."""
        records = Records(client, scope, stream)
        found: list[uuid.UUID] = []
        for look in range(looks):
            if look:
                await asyncio.sleep(interval_seconds)
            for key in await records.keys(_key(f"{group}.")):
                _, record = await records.get(key)
                if record is not None and record["batch"] == batch and record["state"] == OPEN:
                    found.extend(await WriteJob(client, scope, stream, key.removeprefix("job/")).close(batch))
        return found


__all__ = ["WriteJob"]
