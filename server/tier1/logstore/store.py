"""The log store server: ledger entries over TCP, durable in the journal before they are acknowledged.

Theory of operation. Each connection decodes frames (``protocol.Decoder``); a malformed frame
closes that connection only. Writes (ADD, FENCE, DELETE) become journal records queued for the
store's one I/O thread, which takes everything queued, writes it with one pwritev and one
fdatasync (group commit), and hands the placements back to the event loop; the loop indexes them
and only then replies. Reads (READ) are answered from the index on the loop.

Fencing. A FENCE takes effect when it is received, before it is durable: from then on ADDs to that
ledger are answered FENCED (unless flagged as recovery), so a zombie writer can never again make
an entry durable here. The FENCE reply, with the store's last entry and last-add-confirmed for the
ledger, is sent once the fence is durable.

Failure. If a journal write fails (disk full, failed fsync), the store stops acknowledging: that
group and every later write is answered UNAVAILABLE, and writers roll away from this replica.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable

from . import protocol as p
from .journal import Journal, NewRecord, Placed, entries_of
from .journal_format import NO_ENTRY, Kind

log = logging.getLogger("tributary.logstore")

_Reply = Callable[[p.Status, list[Placed]], None]


class LogStore:
    """One log store: a journal directory served on ``host:port`` (port 0: any free port)."""

    def __init__(self, data_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 0,
                 journal_file_size: int | None = None):
        self.data_dir = os.fspath(data_dir)
        self.host = host
        self.port = port
        self.replica_id = b""
        self._journal = Journal(os.path.join(self.data_dir, "journal"),
                                *(() if journal_file_size is None else (journal_file_size,)))
        self._fenced: set[int] = set()  # fences received, durable or not yet
        self._failed: BaseException | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: set[_Connection] = set()
        self._stopped = False
        self.last_add: dict[int, float] = {}  # ledger -> loop time of its last ADD (for garbage collection)

    async def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        os.makedirs(self.data_dir, exist_ok=True)
        self.replica_id = await loop.run_in_executor(None, _identity, self.data_dir)
        await loop.run_in_executor(None, self._journal.open)
        self._fenced = {ledger for ledger, state in self._journal.ledgers.items() if state.fenced}
        self._thread = threading.Thread(target=self._run, name="logstore-journal", daemon=True)
        self._thread.start()
        self._server = await loop.create_server(lambda: _Connection(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stops listening, closes every connection (their writers see the loss), ends the I/O thread."""
        self._stopped = True
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                connection.close()
            await self._server.wait_closed()
        if self._thread is not None:
            self._queue.put(None)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._journal.close()

    # ------------------------------------------------------------------ requests

    def handle(self, message: p.Message, reply: Callable[[p.Message], None]) -> None:
        """Answers one request (some only once durable)."""
        if isinstance(message, p.Hello):
            reply(p.HelloReply(message.request_id, p.Status.OK, p.VERSION, self.replica_id))
        elif isinstance(message, p.Add):
            self._add(message, reply)
        elif isinstance(message, p.Read):
            reply(self._read(message))
        elif isinstance(message, p.Fence):
            self._fence(message, reply)
        elif isinstance(message, p.Delete):
            self._delete(message.ledger, lambda status: reply(p.Deleted(message.request_id, status, message.ledger)))
        else:
            reply(p.Added(message.request_id, p.Status.BAD_REQUEST, 0, NO_ENTRY))

    def _add(self, message: p.Add, reply: Callable[[p.Message], None]) -> None:
        def answer(status: p.Status) -> None:
            reply(p.Added(message.request_id, status, message.ledger, message.entry))

        if message.entry < 0 or message.ledger in self._journal.deleted:
            answer(p.Status.BAD_REQUEST if message.entry < 0 else p.Status.NO_SUCH_LEDGER)
        elif message.ledger in self._fenced and not message.flags & p.RECOVERY:
            answer(p.Status.FENCED)
        else:
            assert self._loop is not None
            self.last_add[message.ledger] = self._loop.time()
            self._write([(Kind.ADD, message.ledger, message.entry, message.last_add_confirmed, message.payload)],
                        lambda status, _: answer(status))

    def _read(self, message: p.Read) -> p.Message:
        state = self._journal.ledgers.get(message.ledger)
        if state is None:
            return p.Entries(message.request_id, p.Status.NO_SUCH_LEDGER, message.ledger)
        entries = tuple(entries_of(self._journal, message.ledger, max(0, message.first), message.last))
        status = p.Status.OK if entries else p.Status.NO_SUCH_ENTRY
        return p.Entries(message.request_id, status, message.ledger, entries)

    def _fence(self, message: p.Fence, reply: Callable[[p.Message], None]) -> None:
        self._fenced.add(message.ledger)  # effective now: later adds are refused

        def answer(status: p.Status, _: list[Placed]) -> None:
            state = self._journal.ledgers.get(message.ledger)
            last_entry = state.last_entry if state is not None else NO_ENTRY
            lac = state.last_add_confirmed if state is not None else NO_ENTRY
            reply(p.FenceResult(message.request_id, status, message.ledger, last_entry, lac))

        self._write([(Kind.FENCE, message.ledger, NO_ENTRY, NO_ENTRY, b"")], answer)

    def _delete(self, ledger: int, answer: Callable[[p.Status], None]) -> None:
        def deleted(status: p.Status, _: list[Placed]) -> None:
            self._fenced.discard(ledger)
            self.last_add.pop(ledger, None)
            if status == p.Status.OK:
                self._collect()
            answer(status)

        self._write([(Kind.DELETE, ledger, NO_ENTRY, NO_ENTRY, b"")], deleted)

    async def delete_ledger(self, ledger: int) -> p.Status:
        """Deletes a ledger as a DELETE request would; the status once it is durable."""
        assert self._loop is not None
        done: asyncio.Future[p.Status] = self._loop.create_future()
        self._delete(ledger, done.set_result)
        return await done

    def ledger_ids(self) -> list[int]:
        """The ledgers this store holds entries or fences of (deleted ones excluded)."""
        return [ledger for ledger in self._journal.ledgers if ledger not in self._journal.deleted]

    def _collect(self) -> None:
        """Drops journal files that hold only deleted ledgers. On the loop: reads use the same descriptors."""
        try:
            dropped = self._journal.collect()
        except OSError as error:
            log.warning("journal collection failed", extra={"error": repr(error)})
            return
        if dropped:
            log.info("journal files collected", extra={"files": dropped})

    # ------------------------------------------------------------------ group commit

    def _write(self, records: list[NewRecord], done: _Reply) -> None:
        if self._failed is not None or self._stopped:
            done(p.Status.UNAVAILABLE, [])
            return
        self._queue.put((records, done))

    def _run(self) -> None:
        """The I/O thread: drains the queue into one journal write per group, reports to the loop."""
        stopping = False
        while not stopping:
            group = [self._queue.get()]
            while True:
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if None in group:
                stopping = True
                group = [item for item in group if item is not None]
            if not group:
                continue
            records = [record for records, _ in group for record in records]
            try:
                placed: list[Placed] | BaseException = self._journal.write(records)
            except OSError as error:
                placed = error
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._group_done, group, placed)

    def _group_done(self, group: list[tuple[list[NewRecord], _Reply]], placed: list[Placed] | BaseException) -> None:
        if isinstance(placed, BaseException):
            if self._failed is None:
                log.error("journal write failed; no more writes are acknowledged", extra={"error": repr(placed)})
            self._failed = placed
            for _, done in group:
                done(p.Status.UNAVAILABLE, [])
            return
        self._journal.index(placed)
        position = 0
        for records, done in group:
            mine = placed[position:position + len(records)]
            position += len(records)
            done(p.Status.OK, mine)


class _Connection(asyncio.Protocol):
    def __init__(self, store: LogStore):
        self._store = store
        self._decoder = p.Decoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._store._connections.add(self)

    def connection_lost(self, error: Exception | None) -> None:
        self._store._connections.discard(self)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            messages = self._decoder.feed(data)
        except p.ProtocolError as error:
            log.info("closing log store connection", extra={"reason": str(error)})
            self.close()
            return
        for message in messages:
            self._store.handle(message, self._send)

    def _send(self, message: p.Message) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.writelines(p.encode(message))


def _identity(data_dir: str) -> bytes:
    """This replica's id: created once in ``IDENTITY``, then read back."""
    path = os.path.join(data_dir, "IDENTITY")
    try:
        with open(path, "rb") as file:
            return uuid.UUID(file.read().decode().strip()).bytes
    except FileNotFoundError:
        pass
    identity = uuid.uuid4()
    temporary = path + ".tmp"
    with open(temporary, "w") as file:
        file.write(str(identity))
        file.flush()
        os.fsync(file.fileno())
    os.rename(temporary, path)
    directory = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return identity.bytes
