"""Transactions: events that become visible all together at commit, or never (client reference §3).

``begin`` asks the controller for a transaction: it creates one transaction
segment beside each segment of the stream's current epoch and returns them
with their key ranges. Events are routed by key over those ranges and appended
by ordinary segment writers (own writer ids, resends after reconnects), so a
transaction's per-key order is its write order. A pinger extends the lease
every ``lease / max(1, sqrt(lease_seconds))`` (Java's interval; Rust sleeps a
whole lease, which lets leases expire). ``commit`` first waits for every event
to be durable: if any write failed, the commit is refused (TransactionFailed)
and the controller is not asked. The controller then merges the transaction
segments into the stream -- into the successors if the stream scaled meanwhile
(a "rolling" commit) -- and ``commit`` returns once it accepted; ``wait`` (or
``commit(wait=True)``) waits until the data is visible.

A transaction can also be written in one process and ended in another (Spark's
tasks write, its driver commits): the writer ``release``s its handle -- flushed,
segment writers closed, lease still extended -- and passes on the id; the other
side ends it with ``TransactionalWriter.commit_transaction`` / ``abort_transaction``.
The transactions of one ``TransactionalWriter`` share its connections.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import uuid
from types import TracebackType
from typing import Any

from wire import naming
from wire.fields import BytesLike

from ..config import WriterConfig
from ..connection import ConnectionCache
from ..controller_client import Controller
from ..errors import TransactionFailed, TransactionNotFound, TributaryError
from ..model import Segment, SegmentRange, TransactionState
from ..routing import KeyHasher, RoutingKey, SegmentMap
from ..segment_stores import SegmentStores
from ..serializers import BytesSerializer, Serializer
from .acks import WriteAck
from .event_writer import WriterBase
from .segment_writer import SegmentWriter
from .time_mark import WriterTimeMark

log = logging.getLogger("tributary.transactions")
_COMMIT_POLL_SECONDS = 0.05
_NULL_TIMESTAMP = -(2**63)


def ping_interval_seconds(lease_ms: int) -> float:
    """Java's ping interval: ``lease / max(1, sqrt(lease in seconds))`` (24.5 s for 600 s)."""
    return lease_ms / max(1.0, math.sqrt(lease_ms / 1000)) / 1000


class _Phase(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"
    FAILED = "failed"
    RELEASED = "released"  # flushed and handed over to be ended elsewhere; still pinged


async def wait_for_end(controller: Controller, scope: str, stream: str, transaction_id: uuid.UUID,
                       timeout_seconds: float, poll_seconds: float = _COMMIT_POLL_SECONDS) -> TransactionState:
    """Polls the controller (every ``poll_seconds``) until the transaction is COMMITTED or ABORTED;
    returns which."""
    async with asyncio.timeout(timeout_seconds):
        while True:
            state = await controller.transaction_state(scope, stream, transaction_id)
            if state in (TransactionState.COMMITTED, TransactionState.ABORTED):
                return state
            await asyncio.sleep(poll_seconds)


class Transaction(WriterBase):
    """One open transaction of a stream; see the module docstring.

    ``async with await writer.begin() as txn:`` commits when the block ends normally
    and aborts it if the block raises.
    """

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, stream: str,
                 transaction_id: uuid.UUID, ranges: list[SegmentRange], config: WriterConfig,
                 serializer: Serializer, time_mark: WriterTimeMark, connections: ConnectionCache | None = None):
        super().__init__(controller, stores, config, connections)
        self.scope, self.stream, self.id = scope, stream, transaction_id
        self._time_mark = time_mark  # the writer's: a commit with a time notes it
        self._serialize = None if isinstance(serializer, BytesSerializer) else serializer.serialize
        self._phase = _Phase.OPEN
        self._map = SegmentMap.of_ranges(ranges)
        self._hasher = KeyHasher()
        self._segment_writers: dict[Segment, SegmentWriter] = {}
        for segment_range in ranges:
            name = naming.transaction_segment_name(segment_range.segment.qualified_name, transaction_id)
            writer = self._segment_writers[segment_range.segment] = SegmentWriter(name, self)
            writer.start()
        loop = asyncio.get_running_loop()
        self._monitor = loop.create_task(self._watch_acks())
        self._ping_until = float("inf")
        self._pinger = loop.create_task(self._ping())

    def __repr__(self) -> str:
        return f"<Transaction {self.id} of {self.scope}/{self.stream} {self._phase.value}>"

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._phase is not _Phase.OPEN:
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.abort()

    @property
    def state(self) -> str:
        return self._phase.value

    # ------------------------------------------------------------------ writing

    async def write(self, event: Any, routing_key: str | None = None) -> WriteAck:
        """Adds ``event`` to the transaction (visible only after commit).

        Raises:
            TransactionFailed: the transaction was committed, aborted, or a write of it failed.
            EventTooLarge, InvalidArgument: as for the event writer.
        """
        self._check_open()
        payload: BytesLike = event if self._serialize is None else self._serialize(event)
        size = self._sized(payload, routing_key)
        if self._inflight_bytes + size > self._max_bytes or self._inflight_events >= self._max_events:
            await self._wait_for_room(size)
            self._check_open()
        writer = self._writer_for(routing_key)
        self._inflight_bytes += size
        self._inflight_events += 1
        return writer.add(payload, routing_key)

    async def _ready(self) -> None:
        self._check_open()

    def _writer_for(self, routing_key: RoutingKey) -> SegmentWriter:
        # a transaction's segments never change: no cache needed beyond the key hasher's own
        return self._segment_writers[self._map.segment_for(self._hasher.fraction(routing_key))]

    async def flush(self) -> None:
        """Waits until every event written so far is durable. Raises TransactionFailed if one failed."""
        self._check_open()
        await self._flush()

    async def _flush_or_fail(self) -> None:
        """Flushes before the handle lets go (commit, release); a failed write ends the handle as failed."""
        self._check_open()
        try:
            await self._flush()
        except TransactionFailed:
            await self._end(_Phase.FAILED)
            raise

    async def _flush(self) -> None:
        for writer in self._segment_writers.values():
            writer.flush_now()
        try:
            await self._wait_drained()
        except TributaryError as error:
            raise TransactionFailed(f"a write of transaction {self.id} failed: {error}") from error

    # ------------------------------------------------------------------ ending

    async def commit(self, *, wait: bool = False, timestamp_ms: int | None = None,
                     timeout_seconds: float = 120.0) -> None:
        """Commits: every event becomes visible, in per-key write order, all at once.

        ``wait`` waits until the controller finished merging (the events are readable).
        ``timestamp_ms`` is the commit's time mark for watermarks (none by default).

        Raises:
            TransactionFailed: a write failed (nothing is committed), this handle already committed
                or aborted it, or it was aborted (or timed out) on the controller. Committing a
                transaction that another handle committed succeeds (commit is idempotent).
        """
        await self._flush_or_fail()
        try:
            if timestamp_ms is not None:
                self._time_mark.noted = True
            await self._controller.commit_transaction(
                self.scope, self.stream, self.id, self._time_mark.writer_id,
                _NULL_TIMESTAMP if timestamp_ms is None else timestamp_ms)
        except TransactionNotFound as error:
            await self._end(_Phase.FAILED)
            raise TransactionFailed(str(error)) from error
        except TransactionFailed:
            await self._end(_Phase.FAILED)
            raise
        await self._end(_Phase.COMMITTED)
        if wait:
            await self.wait(timeout_seconds)

    async def wait(self, timeout_seconds: float = 120.0) -> TransactionState:
        """Waits until the transaction is COMMITTED or ABORTED; returns which."""
        return await wait_for_end(self._controller, self.scope, self.stream, self.id, timeout_seconds)

    async def release(self, keep_alive_seconds: float = 3600.0) -> uuid.UUID:
        """Flushes, then lets go of this handle without ending the transaction, so that another process
        ends it by id (``TransactionalWriter.commit_transaction``); returns the id.

        Its lease goes on being extended from here until the transaction ends on the controller,
        the client closes, or ``keep_alive_seconds`` pass (then the lease runs out and the
        controller aborts it). The handle takes no more calls.

        Raises:
            TransactionFailed: a write failed, or the transaction is not open here.
        """
        await self._flush_or_fail()
        self._phase = _Phase.RELEASED
        self._ping_until = asyncio.get_running_loop().time() + keep_alive_seconds
        await self._close_resources()
        return self.id

    async def abort(self) -> None:
        """Aborts: nothing written in the transaction will ever be visible. Raises TransactionFailed if
        the transaction is already committed."""
        if self._phase is _Phase.COMMITTED:
            raise TransactionFailed(f"transaction {self.id} is committed; it cannot be aborted")
        if self._phase is _Phase.ABORTED:
            return
        await self._end(_Phase.ABORTED)
        await self._controller.abort_transaction(self.scope, self.stream, self.id)

    async def status(self) -> TransactionState:
        """The transaction's state on the controller."""
        return await self._controller.transaction_state(self.scope, self.stream, self.id)

    async def close(self) -> None:
        """Aborts the transaction if it is still open here (one already ended on the controller, e.g.
        committed through another handle, is left as it is); stops extending a released one's lease."""
        if self._phase is _Phase.OPEN:
            try:
                await self.abort()
            except TransactionFailed:
                pass
        elif self._phase is _Phase.RELEASED:
            self._pinger.cancel()

    async def _end(self, phase: _Phase) -> None:
        self._phase = phase
        self._pinger.cancel()
        if phase is not _Phase.COMMITTED:
            self._fail(TransactionFailed(f"transaction {self.id} is {phase.value}"))
        await self._close_resources()

    def _check_open(self) -> None:
        if self._phase is not _Phase.OPEN:
            raise TransactionFailed(f"transaction {self.id} is {self._phase.value}: it takes no more calls")
        if self._failure is not None:
            raise TransactionFailed(f"a write of transaction {self.id} failed: {self._failure}")

    # ------------------------------------------------------------------ writer owner, pinger

    def sealed(self, writer: SegmentWriter) -> None:
        # A transaction segment disappears only when the transaction was committed or aborted.
        self._fail(TransactionFailed(f"transaction {self.id} ended on the server (lease expired or aborted)"))

    def _writers(self) -> list[SegmentWriter]:
        return list(self._segment_writers.values())

    async def _ping(self) -> None:
        lease = self.config.transaction_lease_ms
        interval = ping_interval_seconds(lease)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            if loop.time() > self._ping_until:
                return
            try:
                state = await self._controller.ping_transaction(self.scope, self.stream, self.id, lease)
            except asyncio.CancelledError:
                raise
            except TributaryError as error:
                log.warning("transaction ping failed", extra={"transaction": str(self.id), "error": repr(error)})
                continue
            if state is not TransactionState.OPEN:
                self._fail(TransactionFailed(f"transaction {self.id} is {state.value} on the controller"))
                return


class TransactionalWriter:
    """Begins transactions on one stream: ``txn = await writer.begin()``."""

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, stream: str,
                 config: WriterConfig | None = None, serializer: Serializer | None = None):
        self.scope, self.stream = scope, stream
        self.config = config or WriterConfig()
        self.writer_id = self.config.writer_id or str(uuid.uuid4())
        self._controller = controller
        self._stores = stores
        self._serializer = serializer or BytesSerializer()
        self._begun: set[Transaction] = set()
        self._connections = stores.connection_cache()
        self._time_mark = WriterTimeMark(controller, self.writer_id, scope, stream)

    async def __aenter__(self) -> TransactionalWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:

        await self.close()

    async def begin(self) -> Transaction:
        """A new open transaction. Raises StreamNotFound, or OperationFailed for a sealed stream."""
        transaction_id, ranges = await self._controller.create_transaction(self.scope, self.stream,
                                                                           self.config.transaction_lease_ms)
        transaction = Transaction(self._controller, self._stores, self.scope, self.stream, transaction_id, ranges,
                                  self.config, self._serializer, self._time_mark, self._connections)
        self._begun = {txn for txn in self._begun if txn.state in ("open", "released")}
        self._begun.add(transaction)
        return transaction

    async def get_transaction(self, transaction_id: uuid.UUID) -> Transaction:
        """The open transaction ``transaction_id`` (e.g. begun by another process), to write or end it.

        Raises:
            TransactionFailed: it is not open any more.
        """
        state = await self._controller.transaction_state(self.scope, self.stream, transaction_id)
        if state is not TransactionState.OPEN:
            raise TransactionFailed(f"transaction {transaction_id} is {state.value}")
        epoch = naming.transaction_epoch(transaction_id)
        ranges = [SegmentRange(Segment(self.scope, self.stream, naming.segment_id(r.segment.number, epoch)),
                               r.low, r.high)
                  for r in await self._controller.get_epoch_segments(self.scope, self.stream, epoch)]
        return Transaction(self._controller, self._stores, self.scope, self.stream, transaction_id, ranges,
                           self.config, self._serializer, self._time_mark, self._connections)

    async def commit_transaction(self, transaction_id: uuid.UUID, *, wait: bool = False,
                                 timeout_seconds: float = 120.0, poll_seconds: float = _COMMIT_POLL_SECONDS) -> None:
        """Commits the transaction ``transaction_id`` (written and released elsewhere); idempotent.

        ``wait`` waits until its events are readable (asking every ``poll_seconds``).

        Raises:
            TransactionFailed: it was aborted (or its lease ran out), or is unknown.
        """
        try:
            await self._controller.commit_transaction(self.scope, self.stream, transaction_id, self.writer_id,
                                                      _NULL_TIMESTAMP)
        except TransactionNotFound as error:
            raise TransactionFailed(str(error)) from error
        if wait and await wait_for_end(self._controller, self.scope, self.stream, transaction_id,
                                       timeout_seconds, poll_seconds) is TransactionState.ABORTED:
            raise TransactionFailed(f"transaction {transaction_id} was aborted")

    async def abort_transaction(self, transaction_id: uuid.UUID) -> None:
        """Aborts the transaction ``transaction_id``. Raises TransactionFailed if it is committed."""
        await self._controller.abort_transaction(self.scope, self.stream, transaction_id)

    async def transaction_state(self, transaction_id: uuid.UUID) -> TransactionState:
        return await self._controller.transaction_state(self.scope, self.stream, transaction_id)

    async def close(self) -> None:
        """Aborts the transactions begun here (not those resumed with ``get_transaction``) that are still open;
        if a commit noted a time, tells the controller the writer is gone (its mark stops holding watermarks)."""
        for transaction in list(self._begun):
            await transaction.close()
        self._begun.clear()
        await self._connections.close()
        await self._time_mark.gone()


__all__ = ["Transaction", "TransactionalWriter", "ping_interval_seconds", "wait_for_end"]
