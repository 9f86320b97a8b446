"""The log store server: ledger entries over TCP, durable in the journal before they are acknowledged.

Theory of operation. Each connection decodes frames (``protocol.Decoder``); a malformed frame
closes that connection only. Writes (ADD, FENCE, DELETE) become journal records; everything one
loop turn received is written with one pwritev and one fdatasync (group commit) in a callback at
the end of that turn, on the loop itself, then indexed, and only then answered (the replies of a
group go out with one write per connection). The store does nothing but this, so blocking its loop
for the fdatasync costs nothing: what arrives meanwhile waits in the kernel and forms the next
group. A thread hand-off each way would add 50-85 us to every acknowledgement (PERF-NOTES), and
the one-in-flight latency of a replicated append is two of those plus a network round trip.
Reads (READ) are answered from the index on the loop.

Fencing. A FENCE takes effect when it is received, before it is durable: from then on ADDs to that
ledger are answered FENCED (unless flagged as recovery), so a zombie writer can never again make
an entry durable here. The FENCE reply, with the store's last entry and last-add-confirmed for the
ledger, is sent once the fence is durable.

Failure. If a journal write fails (disk full, failed fsync), the store stops acknowledging: that
group and every later write is answered UNAVAILABLE, and writers roll away from this replica.

Files. The store's own are ``IDENTITY`` and the journal's directory under ``data_dir``. A caller may
give the journal (any ``StoreJournal``) and the replica id instead; with both given the store touches
no file at all (the simulated world runs it so, tests/simulation/journal_sim.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable

from ... import metrics
from ...fsync import fsync_directory
from . import protocol as p
from .journal import Journal, NewRecord, Placed, StoreJournal, entries_of
from .journal_format import NO_ENTRY, Kind

log = logging.getLogger("tributary.logstore")

_Reply = Callable[[p.Status, list[Placed]], None]


class LogStore:
    """One log store: a journal directory served on ``host:port`` (port 0: any free port).

    ``journal``: the journal to use instead of ``data_dir/journal`` (``journal_file_size`` is then unused);
    ``replica_id``: the replica's id, instead of the one in ``data_dir/IDENTITY`` (then neither read nor written).
    """

    def __init__(self, data_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 0,
                 journal_file_size: int | None = None, *, journal: StoreJournal | None = None,
                 replica_id: bytes | None = None):
        self.data_dir = os.fspath(data_dir)
        self.host = host
        self.port = port
        self.replica_id = b"" if replica_id is None else replica_id
        self._identity_file = replica_id is None
        self._journal: StoreJournal = journal if journal is not None else Journal(
            os.path.join(self.data_dir, "journal"), *(() if journal_file_size is None else (journal_file_size,)))
        self._fenced: set[int] = set()  # fences received, durable or not yet
        self._deleting: set[int] = set()  # deletes received, not yet durable: adds to them are refused already
        self._failed: BaseException | None = None
        self._pending: list[tuple[list[NewRecord], _Reply]] = []  # writes waiting for this loop turn's commit
        self._commit_scheduled = False
        self._commit_running = False
        self._replying: set[_Connection] = set()  # connections with replies buffered during a commit
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: dict[_Connection, None] = {}  # (in accept order: closed in it)
        self._stopped = False
        self.last_add: dict[int, float] = {}  # ledger -> loop time of its last ADD (for garbage collection)

    async def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        if self._identity_file:
            os.makedirs(self.data_dir, exist_ok=True)
            self.replica_id = await loop.run_in_executor(None, _identity, self.data_dir)
        await loop.run_in_executor(None, self._journal.open)
        self._fenced = {ledger for ledger, state in self._journal.ledgers.items() if state.fenced}
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
        if self._commit_scheduled:
            self._commit()
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

        if message.entry < 0 or message.ledger in self._journal.deleted or message.ledger in self._deleting:
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
        # Effective on receipt, as a fence is: an add after it in the same group would be acknowledged, then
        # dropped by the index (the DELETE record before it in the group wins).
        self._deleting.add(ledger)

        def deleted(status: p.Status, _: list[Placed]) -> None:
            self._deleting.discard(ledger)
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
        self._pending.append((records, done))
        if not self._commit_scheduled:
            self._commit_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._commit)

    def _commit(self) -> None:
        """One group commit of everything this loop turn received, on the loop itself."""
        self._commit_scheduled = False
        group, self._pending = self._pending, []
        if not group:
            return
        records = [record for records, _ in group for record in records]
        began = time.perf_counter() if metrics.enabled else 0.0
        try:
            placed: list[Placed] | BaseException = self._journal.write(records)
        except OSError as error:
            placed = error
        if began and not isinstance(placed, BaseException):
            metrics.observe_group_commit(False, sum(len(record[4]) for record in records), time.perf_counter() - began)
        self._commit_running = True
        try:
            self._group_done(group, placed)
        finally:
            self._commit_running = False
        replying, self._replying = self._replying, set()
        for connection in replying:
            connection.flush()

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
        self._out: list = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._store._connections[self] = None

    def connection_lost(self, error: Exception | None) -> None:
        self._store._connections.pop(self, None)

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
        """Sends a reply; during a group commit, replies are gathered and sent with one write at its end."""
        if self._store._commit_running:
            self._out += p.encode(message)
            self._store._replying.add(self)
            return
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.writelines(p.encode(message))

    def flush(self) -> None:
        out, self._out = self._out, []
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)


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
    fsync_directory(data_dir)
    return identity.bytes
