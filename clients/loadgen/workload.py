"""The loadgen's workers: event writers, transactional writers, readers and the ack sampler.

Each worker is one asyncio task of the run (``runner``). Writers write batches of
events as their pacer allows (the current step's token bucket, or 256 at a time,
yielding to the loop between batches, when the step's rate is unlimited), number them
per key and stamp them with the send time; a writer's ``sequences`` are what readers
must find. Readers decode each event, feed the sequence checker and record the
end-to-end latency (in the step the event was sent in).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..config import WriterConfig
from ..errors import TransactionFailed
from ..writer.acks import WriteAck
from ..writer.event_writer import EventWriter
from ..writer.transactions import Transaction
from .events import NO_KEY, EventCodec, decode, key_name
from .pacing import StepPacer
from .sequence import SequenceChecker
from .stats import Latency, RunStats

if TYPE_CHECKING:
    from ..client import Client
    from ..reader.event_reader import EventReader
    from ..reader.reader_group import ReaderGroup


class _Closeable(Protocol):
    async def close(self) -> None: ...

BATCH = 256  # events written between two looks at the clock, the stop flag and the loop
MAX_FAILED_TRANSACTIONS = 10  # in a row, then the writer gives up


class AckSampler:
    """Measures write-acknowledgement latency on a sample of events, in a fixed number of tasks.

    A writer offers the ack of one event every so often (``sample_interval_ns``); the
    ack goes into a bounded queue that ``tasks`` tasks take from and await. When the
    queue is full the sample is skipped (and counted), so high rates cost nothing extra.
    """

    def __init__(self, stats: RunStats, tasks: int = 16, queue_size: int = 4096):
        self._stats = stats
        self._queue: asyncio.Queue[tuple[WriteAck, int]] = asyncio.Queue(queue_size)
        self._tasks = [asyncio.get_running_loop().create_task(self._wait_acks()) for _ in range(tasks)]

    def offer(self, ack: WriteAck, sent_ns: int) -> None:
        """Samples ``ack`` (of an event sent at ``sent_ns``) if there is room."""
        try:
            self._queue.put_nowait((ack, sent_ns))
        except asyncio.QueueFull:
            self._stats.acks_skipped += 1

    async def _wait_acks(self) -> None:
        queue, acked = self._queue, self._stats.acked
        while True:
            ack, sent_ns = await queue.get()
            try:
                await ack
            except Exception:  # noqa: BLE001 - a failed write is reported by its writer's flush
                pass
            else:
                acked(sent_ns, time.time_ns())
            finally:
                queue.task_done()

    async def close(self, timeout: float) -> None:
        """Waits (up to ``timeout`` s) for the sampled acks still pending, then stops the tasks."""
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            pass
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)


class LoadWriter:
    """One writer of the run: writes numbered events to its stream until told to stop.

    ``sequences[key]`` is the number of events of ``key`` this writer got accepted
    (event writers) or committed (transactions): what the readers must read.
    """

    writer: EventWriter  # made by open()

    def __init__(self, index: int, writer_id: int, scope: str, stream: str, keys: int, pacer: StepPacer,
                 codec: EventCodec, stats: RunStats, sampler: AckSampler | None, sample_interval_ns: int):
        self.index, self.writer_id, self.scope, self.stream = index, writer_id, scope, stream
        self.name = f"writer {index} ({scope}/{stream})"
        self.codec, self.stats, self.sampler = codec, stats, sampler
        self.pacer = pacer
        self.sample_interval_ns = sample_interval_ns
        indices = [(index + offset) % keys for offset in range(keys)] if keys else [NO_KEY]
        self.keys = [(key, key_name(key)) for key in indices]
        self.sequences = {key: 0 for key, _ in self.keys}
        self.config = WriterConfig(writer_id=f"loadgen-{writer_id:08x}")

    def expected(self) -> dict[tuple[int, int], int]:
        """Events each (writer, key) source wrote that readers must find."""
        return {(self.writer_id, key): count for key, count in self.sequences.items()}

    async def open(self, client: Client) -> None:
        """Connects (before the clock starts)."""
        self.writer = client.create_writer(self.scope, self.stream, self.config)
        await self.writer.start()

    async def run(self, stop: asyncio.Event) -> None:
        """Writes until ``stop`` is set."""
        write, encode, sequences, keys = self.writer.write, self.codec.encode, self.sequences, self.keys
        writer_id, size = self.writer_id, self.codec.event_size
        sampler, interval = self.sampler, self.sample_interval_ns
        cursor, next_sample = 0, 0
        while not stop.is_set():
            count = await self.pacer.take(BATCH)
            done, batch_ns = 0, time.time_ns()
            try:
                for _ in range(count):
                    key, name = keys[cursor]
                    cursor = cursor + 1 if cursor + 1 < len(keys) else 0
                    sequence = sequences[key]
                    sent_ns = time.time_ns()
                    ack = await write(encode(writer_id, key, sequence, sent_ns), name)
                    sequences[key] = sequence + 1
                    done += 1
                    if sent_ns >= next_sample and sampler is not None:
                        sampler.offer(ack, sent_ns)
                        next_sample = sent_ns + interval
            finally:
                self.stats.wrote(self.stream, done, done * size, batch_ns)

    async def finish(self) -> None:
        """Flushes (every accepted event durable) and closes."""
        await self.writer.close()

    async def abandon(self) -> None:
        """Stops without waiting for anything (a second Ctrl-C): closes without flushing."""
        await _close_quietly(self.writer)


class TransactionalLoadWriter(LoadWriter):
    """A writer that puts its events in transactions of ``transaction_size``, committed as they fill.

    A failed transaction takes its sequence numbers back (its events never become
    visible), so the readers' check sees no gap for it; it is counted and reported.
    """

    def __init__(self, *args: Any, transaction_size: int, commit_latency: Latency, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.transaction_size = transaction_size
        self.commit_latency = commit_latency
        self._transaction: Transaction | None = None
        self._in_transaction = 0
        self._before: dict[int, int] = {}
        self._failures_in_a_row = 0

    async def open(self, client: Client) -> None:
        """Makes the transactional writer (transactions are begun as events come)."""
        self.transactions = client.create_transactional_writer(self.scope, self.stream, self.config)

    async def run(self, stop: asyncio.Event) -> None:
        """Writes transactions until ``stop`` is set (the last one is committed by ``finish``)."""
        encode, sequences, keys, writer_id = self.codec.encode, self.sequences, self.keys, self.writer_id
        cursor = 0
        while not stop.is_set():
            count = await self.pacer.take(BATCH)
            for _ in range(count):
                if self._transaction is None:
                    self._transaction = await self.transactions.begin()
                    self._before, self._in_transaction = dict(sequences), 0
                key, name = keys[cursor]
                cursor = cursor + 1 if cursor + 1 < len(keys) else 0
                sequence = sequences[key]
                try:
                    await self._transaction.write(encode(writer_id, key, sequence, time.time_ns()), name)
                except TransactionFailed as error:
                    await self._failed(error)
                    continue
                sequences[key] = sequence + 1
                self._in_transaction += 1
                if self._in_transaction >= self.transaction_size:
                    await self._commit()

    async def _commit(self) -> None:
        transaction, self._transaction = self._transaction, None
        assert transaction is not None, "a transaction is open"
        started = time.time_ns()
        try:
            await transaction.commit()
        except TransactionFailed as error:
            self._transaction = transaction
            await self._failed(error)
            return
        committed = time.time_ns()
        self.commit_latency.record_ns(committed - started)
        self.stats.transactions_committed += 1
        self.stats.wrote(self.stream, self._in_transaction, self._in_transaction * self.codec.event_size, committed)
        self._failures_in_a_row = 0

    async def _failed(self, error: TransactionFailed) -> None:
        transaction, self._transaction = self._transaction, None
        self.sequences.update(self._before)
        self.stats.transactions_failed += 1
        self.stats.error(self.name, error)
        await _close_quietly(transaction)
        self._failures_in_a_row += 1
        if self._failures_in_a_row >= MAX_FAILED_TRANSACTIONS:
            raise TransactionFailed(f"{MAX_FAILED_TRANSACTIONS} transactions in a row failed; giving up") from error

    async def finish(self) -> None:
        """Commits the last, partly filled transaction."""
        if self._transaction is not None:
            await self._commit()
        await self.transactions.close()

    async def abandon(self) -> None:
        """Stops at once: aborts the open transaction."""
        await _close_quietly(self.transactions)


class LoadReader:
    """One reader of the run: reads its group's events and checks them until cancelled."""

    reader: EventReader  # made by open()

    def __init__(self, index: int, group: ReaderGroup, stream: str, local_writers: set[int], stats: RunStats,
                 checker: SequenceChecker):
        self.index, self.group, self.stream = index, group, stream
        self.name = f"reader {index} ({group.scope}/{stream})"
        self.local_writers, self.stats, self.checker = local_writers, stats, checker
        self.own_read = 0  # events read that this run's writers wrote (first copies only)

    async def open(self) -> None:
        """Joins the reader group (before the clock starts)."""
        self.reader = self.group.create_reader(f"reader-{self.index}")
        await self.reader.start()

    async def run(self) -> None:
        """Reads and checks events until cancelled."""
        stats, checker, stream, local = self.stats, self.checker, self.stream, self.local_writers
        handled = 0
        async for event in self.reader:
            now_ns = time.time_ns()
            data = event.data
            header = decode(data) if isinstance(data, (bytes, bytearray)) else None
            if header is None:
                if not event.is_checkpoint:
                    checker.not_loadgen()
                continue
            if checker.observe(header.writer, header.key, header.sequence):
                stats.read(stream, len(data), header.sent_ns, now_ns)
                if header.writer in local:
                    self.own_read += 1
            else:
                stats.duplicates_read += 1
            handled += 1
            if handled % BATCH == 0:
                await asyncio.sleep(0)  # buffered events come without a pause: let the writers in

    async def close(self) -> None:
        """Leaves the group."""
        await _close_quietly(self.reader)


async def _close_quietly(closable: _Closeable | None) -> None:
    if closable is None:
        return  # as before: closing nothing does nothing
    try:
        await closable.close()
    except Exception:  # noqa: BLE001 - the failure was reported where it happened
        pass


__all__ = ["AckSampler", "LoadReader", "LoadWriter", "TransactionalLoadWriter"]
