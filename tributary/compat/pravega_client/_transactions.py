"""``StreamTxnWriter`` and ``StreamTransaction``: the binding's transactions, on the SDK's
:class:`~clients.writer.transactions.TransactionalWriter`.

Transaction ids are ints (the 128-bit UUID the controller assigns). A handle that committed or
aborted its transaction, or was got with ``get_txn`` for a transaction that is not open, raises
``TxnFailedException(txn_id)`` for writes, commits and aborts, as the binding does; ``is_open``
always asks the controller. Each write waits until its event is durable in the transaction.
"""

from __future__ import annotations

import asyncio
import uuid

from clients.config import WriterConfig
from clients.errors import TransactionFailed, TributaryError
from clients.model import TransactionState
from clients.writer.transactions import Transaction, TransactionalWriter

from ._common import Internal, TxnFailedException, check_routing_key, check_type, error_text, scoped_stream_text
from ._connection import Connection

END_TIMEOUT_SECONDS = 120.0  # how long commit and abort wait (the binding's bound)
NO_TIMESTAMP = 1 << 63  # what the binding's commit() passes to commit_timestamp: i64::MIN as u64, "no time"


class StreamTxnWriter(Internal):
    """Begins transactions on one stream (made by ``StreamManager.create_transaction_writer``)."""

    _connection: Connection
    _scope: str
    _stream: str
    _writer: TransactionalWriter

    @classmethod
    def _make(cls, connection: Connection, scope: str, stream: str, writer_id: int) -> StreamTxnWriter:
        if writer_id < 0:
            raise OverflowError("can't convert negative int to unsigned")
        txn_writer = cls._new()
        txn_writer._connection, txn_writer._scope, txn_writer._stream = connection, scope, stream
        txn_writer._writer = connection.call(_make_writer(connection, scope, stream, writer_id))
        return txn_writer

    def begin_txn(self) -> StreamTransaction:
        """A new open transaction. Raises ValueError if the controller refuses (no such stream, sealed)."""
        return StreamTransaction._make(self, self._connection.call(self._begin()), open_here=True)

    async def _begin(self) -> Transaction:
        try:
            return await self._writer.begin()
        except TributaryError as error:
            raise ValueError(f"begin transaction failed: {error_text(error)}") from error

    def get_txn(self, txn_id: int) -> StreamTransaction:
        """A handle of transaction ``txn_id`` (one that is not open any more takes no writes or ends).

        Raises:
            ValueError: the controller knows no such transaction.
        """
        transaction = self._connection.call(self._get(uuid.UUID(int=txn_id)))
        return StreamTransaction._make(self, transaction if isinstance(transaction, Transaction) else None,
                                       open_here=isinstance(transaction, Transaction), txn_id=txn_id)

    async def _get(self, txn_id: uuid.UUID) -> Transaction | TransactionState:
        try:
            state = await self._writer.transaction_state(txn_id)
            if state is TransactionState.UNKNOWN:
                raise ValueError(f"transaction {txn_id} is unknown to the controller")
            if state is not TransactionState.OPEN:
                return state
            try:
                return await self._writer.get_transaction(txn_id)
            except TransactionFailed:  # it ended in between
                return TransactionState.ABORTED
        except TributaryError as error:
            raise ValueError(f"get transaction failed: {error_text(error)}") from error

    def to_str(self) -> str:
        return f"Stream: {scoped_stream_text(self._scope, self._stream)} "

    def __repr__(self) -> str:
        return f"StreamTxnWriter({self.to_str()})"


async def _make_writer(connection: Connection, scope: str, stream: str, writer_id: int) -> TransactionalWriter:
    return connection.client.create_transactional_writer(scope, stream, WriterConfig(writer_id=str(writer_id)))


class StreamTransaction(Internal):
    """One transaction (made by ``StreamTxnWriter.begin_txn`` or ``get_txn``)."""

    _writer: StreamTxnWriter
    _transaction: Transaction | None
    _id: uuid.UUID
    _closed: bool

    @classmethod
    def _make(cls, writer: StreamTxnWriter, transaction: Transaction | None, open_here: bool,
              txn_id: int | None = None) -> StreamTransaction:
        handle = cls._new()
        handle._writer, handle._transaction = writer, transaction
        handle._id = transaction.id if transaction is not None else uuid.UUID(int=txn_id or 0)
        handle._closed = not open_here
        return handle

    def get_txn_id(self) -> int:
        return self._id.int

    def is_open(self) -> bool:
        """Whether the controller has the transaction OPEN. Raises ValueError if it cannot be asked."""
        return self._writer._connection.call(self._is_open())

    async def _is_open(self) -> bool:
        try:
            return await self._writer._writer.transaction_state(self._id) is TransactionState.OPEN
        except TributaryError as error:
            raise ValueError(error_text(error)) from error

    def write_event(self, event: str, routing_key: str | None = None) -> None:
        """Writes ``event`` (UTF-8) into the transaction and waits until it is durable there."""
        check_type(event, str, "event")
        self.write_event_bytes(event.encode("utf-8"), routing_key)

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        """Writes the bytes ``event`` into the transaction and waits until it is durable there.

        Raises:
            TxnFailedException: the transaction is committed, aborted or failed.
            ValueError: another failure.
        """
        check_type(event, bytes, "event")
        check_routing_key(routing_key)
        self._writer._connection.call(self._write(event, routing_key))

    async def _write(self, event: bytes, routing_key: str | None) -> None:
        transaction = self._open()
        try:
            await (await transaction.write(event, routing_key))
        except TransactionFailed as error:
            raise TxnFailedException(self._id.int) from error
        except TributaryError as error:
            raise ValueError(f"Error {error_text(error)}") from error

    def commit(self) -> None:
        """Commits: every event of the transaction becomes readable, all at once.

        Raises:
            TxnFailedException: the transaction is not open (committed, aborted, timed out).
            ValueError: the commit failed otherwise, or took more than 120 s.
        """
        self.commit_timestamp(NO_TIMESTAMP)

    def commit_timestamp(self, timestamp: int) -> None:
        """Commits with ``timestamp`` (ms) as the commit's time mark for watermarks."""
        self._writer._connection.call(self._end(NO_TIMESTAMP if timestamp == NO_TIMESTAMP else timestamp))

    def abort(self) -> None:
        """Aborts: nothing of the transaction will be readable.

        Raises:
            TxnFailedException: the transaction is not open (committed, or aborted already).
        """
        self._writer._connection.call(self._end(None))

    async def _end(self, commit_time: int | None) -> None:
        """Commits (``commit_time``: a time or NO_TIMESTAMP) or aborts (None)."""
        transaction = self._open()
        self._closed = True
        operation = "Abort" if commit_time is None else "Commit"
        try:
            async with asyncio.timeout(END_TIMEOUT_SECONDS):
                if commit_time is None:
                    await transaction.abort()
                else:
                    await transaction.commit(timestamp_ms=None if commit_time == NO_TIMESTAMP else commit_time)
        except TimeoutError:
            raise ValueError(f"{operation} timed out, please check connectivity with Pravega") from None
        except TransactionFailed as error:
            raise TxnFailedException(self._id.int) from error
        except TributaryError as error:
            raise ValueError(f"{operation} of transaction failed with {error_text(error)}") from error

    def _open(self) -> Transaction:
        if self._closed or self._transaction is None:
            raise TxnFailedException(self._id.int)
        return self._transaction

    def to_str(self) -> str:
        return f"Txn id: {self._id} , {scoped_stream_text(self._writer._scope, self._writer._stream)}"

    def __repr__(self) -> str:
        return f"StreamTransaction({self.to_str()})"
