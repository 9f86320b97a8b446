"""Writing a DataFrame to a stream: Arrow batches in, events out, exactly once through transactions.

Input columns (matched by name, as in the Pravega connector): ``event`` (binary or string,
required, never null) and ``routing_key`` (string, optional; null or absent means no key).
Events with one routing key keep their order within each task; the connector's caveat
stands: Spark does not put one key's rows in one task unless the job repartitions by key.

Exactly once (``exactly_once``, the default):

* each task that has rows begins one transaction on its first row, writes every row into it
  (one bridge hop per Arrow batch), then *releases* it -- flushed, and its lease still
  extended from the task's worker process -- and returns its id in the commit message;
* a task that fails aborts its own transaction before the error goes on (Python data sources
  have no per-task abort hook, and Spark hands the driver None for a failed task);
* the driver commits every transaction only when all tasks succeeded, in parallel, and with
  ``read_after_write_consistency`` waits until the events are readable; otherwise it aborts
  the transactions it was handed.

A streaming sink also fences each micro-batch (:mod:`spark_io.fence`), so a batch that Spark
replays after a crash between our commit and its own bookkeeping is not written twice.

``exactly_once=false`` writes with the process's ordinary event writer and flushes at the end
of each task: at least once (a retried task writes its rows again).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from clients.config import WriterConfig
from clients.errors import TributaryError
from clients.writer.transactions import TransactionalWriter

from . import faults
from .bridge import Bridge
from .fence import SinkFence
from .jobs import WriteJob, group_of, writer_id_in
from .options import WriteOptions
from .reading import ensure_stream
from .transactions import abort_transactions, commit_transactions

log = logging.getLogger("tributary.spark")
EVENT, ROUTING_KEY = "event", "routing_key"


def check_input_schema(schema: StructType, overwrite: bool) -> None:
    """Refuses, at planning, what cannot be written: overwrite mode and missing or mistyped columns."""
    if overwrite:
        raise ValueError("tributary streams are append-only: use mode('append'), not overwrite")
    fields = {field.name.lower(): field for field in schema.fields}
    event = fields.get(EVENT)
    if event is None:
        raise ValueError(f"the data to write has no column 'event' (columns: {', '.join(schema.fieldNames())})")
    if not isinstance(event.dataType, (BinaryType, StringType)):
        raise ValueError(f"column 'event' must be binary or string, not {event.dataType.simpleString()}")
    key = fields.get(ROUTING_KEY)
    if key is not None and not isinstance(key.dataType, StringType):
        raise ValueError(f"column 'routing_key' must be string, not {key.dataType.simpleString()}")


@dataclasses.dataclass
class TransactionCommit(WriterCommitMessage):
    """What a task of an exactly-once write hands to the driver."""

    transaction_id: str
    partition: int
    events: int
    bytes: int
    writer_id: str  # the job record the task registered its transaction in (spark_io.jobs)
    query_id: str | None = None


@dataclasses.dataclass
class WrittenCommit(WriterCommitMessage):
    """What a task reports whose events are already visible (an at-least-once write) or that had none."""

    partition: int
    events: int
    bytes: int
    writer_id: str


def columns_of(batch: pa.RecordBatch) -> tuple[list[bytes], list[str | None] | None, int]:
    """(events as bytes, routing keys or None, payload bytes) of one Arrow batch."""
    names = [name.lower() for name in batch.schema.names]
    events = batch.column(names.index(EVENT))
    if events.null_count:
        raise ValueError(f"column 'event' holds {events.null_count} null value(s); events cannot be null")
    if pa.types.is_string(events.type) or pa.types.is_large_string(events.type):
        events = pc.cast(events, pa.binary())
    size = pc.sum(pc.binary_length(events)).as_py() or 0
    keys = batch.column(names.index(ROUTING_KEY)).to_pylist() if ROUTING_KEY in names else None
    return events.to_pylist(), keys, size


async def _abort_quietly(transaction) -> None:
    try:
        await transaction.abort()
    except (TimeoutError, TributaryError) as error:
        log.warning("could not abort the failed task's transaction (its lease will lapse)",
                    extra={"transaction": str(transaction.id), "error": repr(error)})


@dataclasses.dataclass(frozen=True)
class _Task:
    partition: int
    batch: int  # the micro-batch id of a streaming write; 0 for a batch write
    query_id: str | None


async def _close_quietly(writer) -> None:
    try:
        await writer.close()
    except (TimeoutError, TributaryError):  # what was not written is the failed task's to redo
        pass


def _task() -> _Task:
    context = TaskContext.get()
    if context is None:  # not inside Spark (a direct call)
        return _Task(0, 0, None)
    batch = context.getLocalProperty("streaming.sql.batchId")
    return _Task(context.partitionId(), int(batch) if batch else 0,
                 context.getLocalProperty("sql.streaming.queryId"))


class _Writer:
    """What the batch and the streaming writers share: the task side, and ending a job's transactions.

    ``writer_id`` names the job record. Executors use the id of the writer object Spark pickled to
    them; the driver's commit may run on another instance (a streaming sink's runner makes its
    own), so it takes the id from the tasks' messages.
    """

    # How long an executor keeps a released transaction's lease alive while the driver has not ended
    # it: a job (micro-batch) whose commit comes later loses its transactions (the commit fails; a
    # streaming query replays the batch), and the transactions of a dead driver lapse after it.
    keep_alive_seconds = 6 * 3600.0

    def __init__(self, options: WriteOptions, schema: StructType):
        self.options = options
        self.group = group_of(options.checkpoint)
        self.writer_id = writer_id_in(self.group)  # names this write job's record (spark_io.jobs)
        target = options.target
        bridge = Bridge.get()
        # A streaming sink's runner makes a writer for every commit: one check per query and process.
        bridge.once(("stream ensured", self.group or self.writer_id, target.access, target.scope, target.stream),
                    lambda: ensure_stream(bridge.client(target.access), target))

    def _client(self, bridge: Bridge):
        return bridge.client(self.options.target.access)

    def _job(self, bridge: Bridge, writer_id: str) -> WriteJob:
        target = self.options.target
        return WriteJob(self._client(bridge), target.scope, target.stream, writer_id)

    def _transactional_writer(self, bridge: Bridge) -> TransactionalWriter:
        target = self.options.target
        client = self._client(bridge)
        lease = self.options.transaction_timeout_ms
        return bridge.cached(("transactions", target.access, target.scope, target.stream, lease),
                             lambda: client.create_transactional_writer(
                                 target.scope, target.stream, WriterConfig(transaction_lease_ms=lease)))

    # ------------------------------------------------------------------ executors

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        task = _task()
        if self.options.exactly_once:
            return self._write_transaction(iterator, task)
        return self._write_directly(iterator, task)

    def _write_transaction(self, iterator, task: _Task) -> WriterCommitMessage:
        bridge = Bridge.get()
        transaction = None
        events = size = 0
        try:
            for batch in iterator:
                payloads, keys, batch_size = columns_of(batch)
                if not payloads:
                    continue
                if transaction is None:
                    transaction = bridge.run(self._transactional_writer(bridge).begin())
                bridge.run(transaction.write_many(payloads, keys))
                events += len(payloads)
                size += batch_size
            if transaction is None:
                return WrittenCommit(task.partition, 0, 0, self.writer_id)  # no rows: no transaction
            transaction_id = bridge.run(transaction.release(self.keep_alive_seconds))
            if not bridge.run(self._job(bridge, self.writer_id).register(task.batch, transaction_id)):
                log.warning("the write job ended before this task did: its transaction is aborted",
                            extra={"partition": task.partition, "transaction": str(transaction_id)})
                bridge.run(_abort_quietly(transaction))
                return WrittenCommit(task.partition, 0, 0, self.writer_id)
        except BaseException:
            if transaction is not None:
                bridge.run(_abort_quietly(transaction))
            raise
        return TransactionCommit(str(transaction_id), task.partition, events, size, self.writer_id,
                                 task.query_id)

    def _write_directly(self, iterator, task: _Task) -> WrittenCommit:
        bridge = Bridge.get()
        target = self.options.target
        client = self._client(bridge)
        key = ("writer", target.access, target.scope, target.stream)
        writer = bridge.cached(key, lambda: client.create_writer(target.scope, target.stream))
        events = size = 0
        try:
            for batch in iterator:
                payloads, keys, batch_size = columns_of(batch)
                bridge.run(writer.write_many(payloads, keys))
                events += len(payloads)
                size += batch_size
            bridge.run(writer.flush())
        except BaseException:
            bridge.forget(key)  # the next task of this worker starts with a new writer (this one may be broken)
            bridge.run(_close_quietly(writer))
            raise
        return WrittenCommit(task.partition, events, size, self.writer_id)

    # ------------------------------------------------------------------ driver

    def _end(self, messages, batch: int, commit) -> None:
        """Closes the job's ``batch`` and aborts every transaction of it that is not in ``messages``; then
        ``commit(coordinator, {partition: transaction id})`` (None: abort those too)."""
        if not self.options.exactly_once:
            return
        reported = {str(m.partition): m.transaction_id for m in messages if isinstance(m, TransactionCommit)}
        bridge = Bridge.get()
        coordinator = self._transactional_writer(bridge)

        writer_ids = {m.writer_id for m in messages if isinstance(m, (TransactionCommit, WrittenCommit))}

        async def end():
            registered = []
            for writer_id in writer_ids or {self.writer_id}:
                registered.extend(await self._job(bridge, writer_id).close(batch))
            keep = set(reported.values()) if commit is not None else set()
            strays = [t for t in {*map(str, registered), *reported.values()} if t not in keep]
            await abort_transactions(coordinator, [uuid.UUID(t) for t in strays])
            if commit is not None and reported:
                await commit(coordinator, reported)

        bridge.run(end())


class BatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("tributary")``: one transaction per task, all committed at the end."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        async def commit(coordinator, reported):
            await commit_transactions(coordinator, [uuid.UUID(t) for t in reported.values()], self.options)

        self._end(messages, 0, commit)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._end(messages, 0, None)


class StreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("tributary")``: per micro-batch, one transaction per task, committed
    with the batch's fence record so that a replayed batch is not written twice."""

    keep_alive_seconds = 3600.0

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_ids = {m.query_id for m in messages if isinstance(m, TransactionCommit)}
        if len(query_ids) > 1 or None in query_ids:
            raise RuntimeError(f"tasks of batch {batchId} report query ids {sorted(map(str, query_ids))}")
        target = self.options.target

        async def commit(coordinator, reported):
            fence = SinkFence(self._client(Bridge.get()), target.scope, target.stream)
            query_id = query_ids.pop()
            assert query_id is not None, "checked above"
            await fence.commit_batch(query_id, batchId, reported, coordinator, self.options)

        self._end(messages, batchId, commit)
        faults.reach("sink-committed", batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._end(messages, batchId, None)
        group = self.group
        if self.options.exactly_once and group is not None:  # tasks that did not report, or not yet
            bridge = Bridge.get()
            target = self.options.target

            async def sweep():
                strays = await WriteJob.close_group(self._client(bridge), target.scope, target.stream, group,
                                                    batchId)

                await abort_transactions(self._transactional_writer(bridge), strays)

            bridge.run(sweep())


__all__ = ["BatchWriter", "StreamWriter", "TransactionCommit", "WrittenCommit", "check_input_schema",
           "columns_of"]
