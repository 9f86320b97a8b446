"""The writer's side of one ledger on an ensemble of log stores: quorum appends and recovery.

``LedgerWriter.append`` sends entry n to every replica of the ensemble (write quorum = ensemble
size) with the current last-add-confirmed (LAC) piggybacked, and acknowledges it once ``ack_quorum``
replicas answered OK, never before entry n - 1. A replica that fails (an error status, a lost
connection) is dropped; while at least ``ack_quorum`` replicas remain, appends go on and
``degraded`` tells the log to roll to a new ledger; below that, every unacknowledged entry fails
with ``LedgerBroken``. A FENCED answer fails the writer with ``LedgerFenced``: a newer owner has
recovered the ledger.

``recover`` closes a ledger whose writer died (docs/replicated-log.md, "Recovering a ledger"):
fence it on at least E - A + 1 replicas, then from the highest reported LAC + 1 read each next
entry from the replicas and write it back to all of them (flagged as recovery), until at least
E - A + 1 replicas report it missing. Every acknowledged entry is on A replicas, so it is found.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections import deque

from wire.fields import BytesLike

from . import protocol as p

_request_ids = itertools.count(1)


class LedgerError(Exception):
    pass


class LedgerBroken(LedgerError):
    """Too few replicas are left to acknowledge entries."""


class LedgerFenced(LedgerError):
    """A newer owner fenced the ledger: this writer must stop."""


class StoreClient(asyncio.Protocol):
    """One connection to a log store; ``call`` returns the reply to a request (ConnectionError if lost)."""

    def __init__(self) -> None:
        self._decoder = p.Decoder()
        self._pending: dict[int, asyncio.Future[p.Message]] = {}
        self._transport: asyncio.Transport | None = None
        self.closed = False

    @classmethod
    async def connect(cls, host: str, port: int) -> StoreClient:
        _, client = await asyncio.get_running_loop().create_connection(cls, host, port)
        return client

    @classmethod
    async def handshake(cls, host: str, port: int, timeout: float) -> tuple[StoreClient, str]:
        """Connects and says HELLO; returns the client and the store's replica id (hex).

        Raises ConnectionError (or OSError) if the store does not answer within ``timeout`` seconds: a
        paused process still completes the TCP handshake, so only the HELLO reply shows it is alive.
        """
        try:
            client = await asyncio.wait_for(cls.connect(host, port), timeout)
        except TimeoutError as error:
            raise ConnectionError(f"log store {host}:{port} did not accept in {timeout}s") from error
        try:
            reply = await asyncio.wait_for(client.call(p.Hello(next(_request_ids), p.VERSION)), timeout)
        except TimeoutError as error:
            client.close()
            raise ConnectionError(f"log store {host}:{port} did not answer HELLO in {timeout}s") from error
        except BaseException:
            client.close()
            raise
        if not isinstance(reply, p.HelloReply) or reply.status != p.Status.OK:
            client.close()
            raise ConnectionError(f"log store {host}:{port} refused HELLO")
        return client, reply.replica_id.hex()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            messages = self._decoder.feed(data)
        except p.ProtocolError as error:
            self._lose(ConnectionError(f"malformed reply: {error}"))
            return
        for message in messages:
            future = self._pending.pop(message.request_id, None)
            if future is not None and not future.done():
                future.set_result(message)

    def connection_lost(self, error: Exception | None) -> None:
        self._lose(ConnectionError(f"log store connection lost: {error}"))

    def call(self, message: p.Message, frame: list[BytesLike] | None = None) -> asyncio.Future[p.Message]:
        """Sends ``message`` (``frame``: its encoding, when the caller sends the same one to several stores)."""
        future: asyncio.Future[p.Message] = asyncio.get_running_loop().create_future()
        if self.closed or self._transport is None:
            future.set_exception(ConnectionError("log store connection closed"))
            return future
        self._pending[message.request_id] = future
        self._transport.writelines(frame if frame is not None else p.encode(message))
        return future

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._lose(ConnectionError("closed"))

    def _lose(self, error: Exception) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)


class LedgerWriter:
    """Appends to one ledger on ``replicas`` (the ensemble); see the module docstring.

    A replica that has not answered the oldest unacknowledged entry within ``add_timeout`` seconds
    (a paused process, a stuck disk) counts as failed, like one that answered an error. ``failed``
    says which replicas were dropped and why (``"unavailable"``, ``"timeout"``, ``"lost"``). Those seconds
    are of this writer's own loop running: after a stall of it (a GC pause, SIGSTOP), which the watchdog
    sees as coming late, the replicas get a whole ``add_timeout`` again from then (the requests may have
    left only then, and answers that came meanwhile are counted by callbacks that run after the watchdog's).
    """

    def __init__(self, ledger: int, replicas: list[StoreClient], ack_quorum: int, first_entry: int = 0,
                 add_timeout: float = 2.0):
        if not 1 <= ack_quorum <= len(replicas):
            raise ValueError(f"ack quorum {ack_quorum} for an ensemble of {len(replicas)}")
        self.ledger = ledger
        self.ack_quorum = ack_quorum
        self.add_timeout = add_timeout
        self.failed: dict[StoreClient, str] = {}
        self.bytes_written = 0
        self._live = list(replicas)
        self._ensemble_size = len(replicas)
        self._next_entry = first_entry
        self.last_add_confirmed = first_entry - 1
        self._acks: dict[int, int] = {}  # entry -> OK answers so far
        self._answered: dict[StoreClient, int] = dict.fromkeys(replicas, first_entry - 1)
        self._waiting: deque[tuple[int, float, asyncio.Future[int]]] = deque()  # unacknowledged, in entry order
        self._failure: LedgerError | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_due = 0.0  # when the watchdog should fire (it fires late after a stall of this loop)
        self._judged_from = float("-inf")  # replicas' add timeouts run from here at the earliest (after a stall)

    @property
    def degraded(self) -> bool:
        """Some replica failed: the log should roll to a new ledger."""
        return len(self._live) < self._ensemble_size

    @property
    def broken(self) -> bool:
        return self._failure is not None

    def append(self, payload: BytesLike) -> asyncio.Future[int]:
        """The entry id, once ``ack_quorum`` replicas hold it durably (and every earlier entry is acknowledged)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        if self._failure is not None:
            future.set_exception(self._failure)
            return future
        entry = self._next_entry
        self._next_entry += 1
        self.bytes_written += len(payload)
        self._acks[entry] = 0
        self._waiting.append((entry, loop.time(), future))
        message = p.Add(next(_request_ids), self.ledger, entry, self.last_add_confirmed, 0, payload)
        frame = p.encode(message)  # once for every replica: request ids are per connection
        for replica in list(self._live):
            replica.call(message, frame).add_done_callback(functools.partial(self._answered_by, replica, entry))
        if self._watchdog is None:
            self._arm(loop, self.add_timeout)
        return future

    def _arm(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self._watchdog_due = loop.time() + delay
        self._watchdog = loop.call_later(delay, self._check_timeouts)

    def abandon(self) -> None:
        """Stops the watchdog; later answers still count but nobody waits for them."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _answered_by(self, replica: StoreClient, entry: int, done: asyncio.Future[p.Message]) -> None:
        error = done.exception()  # retrieved even when ignored, or asyncio logs it as never retrieved
        if self._failure is not None:
            return
        reply = None if error is not None else done.result()
        if isinstance(reply, p.Added) and reply.status == p.Status.OK:
            if replica in self._answered:
                self._answered[replica] = max(self._answered[replica], entry)
            if entry in self._acks:
                self._acks[entry] += 1
                self._acknowledge_ready()
            return
        if isinstance(reply, p.Added) and reply.status == p.Status.FENCED:
            self._fail(LedgerFenced(f"ledger {self.ledger} was fenced by a newer owner"))
            return
        status = p.Status(reply.status).name.lower() if isinstance(reply, p.Added) else "lost"
        self._drop(replica, status)

    def _drop(self, replica: StoreClient, why: str) -> None:
        if replica not in self._live:
            return
        self._live.remove(replica)
        self.failed[replica] = why
        if len(self._live) < self.ack_quorum:
            self._fail(LedgerBroken(f"ledger {self.ledger}: {len(self._live)} replicas left, "
                                    f"{self.ack_quorum} needed"))

    def _check_timeouts(self) -> None:
        self._watchdog = None
        if self._failure is not None or not self._waiting:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._watchdog_due > self.add_timeout / 2:  # this loop stalled: nobody is judged on it (class doc)
            self._judged_from = now
        oldest_entry, sent, _ = self._waiting[0]
        if now - max(sent, self._judged_from) >= self.add_timeout:
            for replica in [replica for replica in self._live if self._answered.get(replica, -1) < oldest_entry]:
                self._drop(replica, "timeout")
        if self._failure is None and self._waiting:
            self._arm(loop, max(0.05, max(self._waiting[0][1], self._judged_from) + self.add_timeout - now))

    def _acknowledge_ready(self) -> None:
        waiting = self._waiting
        while waiting and self._acks.get(waiting[0][0], 0) >= self.ack_quorum:
            entry, _, future = waiting.popleft()
            del self._acks[entry]
            self.last_add_confirmed = entry
            if not future.done():
                future.set_result(entry)

    def _fail(self, error: LedgerError) -> None:
        self._failure = error
        self.abandon()
        while self._waiting:
            _, _, future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        self._acks.clear()


async def recover(ledger: int, replicas: list[StoreClient], ack_quorum: int, ensemble_size: int | None = None) -> int:
    """Fences ``ledger`` and makes every possibly acknowledged entry whole; returns its last entry (-1: none).

    ``replicas`` are the ensemble's replicas that can be reached (``ensemble_size`` of them exist).
    Raises LedgerBroken when too few replicas answer to decide.
    """
    ensemble_size = len(replicas) if ensemble_size is None else ensemble_size
    quorum = ensemble_size - ack_quorum + 1  # any ``quorum`` replicas include one of any ack quorum
    fences = await asyncio.gather(*(replica.call(p.Fence(next(_request_ids), ledger)) for replica in replicas),
                                  return_exceptions=True)
    fenced = [(replica, reply) for replica, reply in zip(replicas, fences, strict=True)
              if isinstance(reply, p.FenceResult) and reply.status == p.Status.OK]
    if len(fenced) < quorum:
        raise LedgerBroken(f"ledger {ledger}: fenced on {len(fenced)} replicas, {quorum} needed")
    live = [replica for replica, _ in fenced]
    entry = max(reply.last_add_confirmed for _, reply in fenced) + 1
    while True:
        reads = await asyncio.gather(*(replica.call(p.Read(next(_request_ids), ledger, entry, entry))
                                       for replica in live), return_exceptions=True)
        found = next((bytes(reply.entries[0][1]) for reply in reads
                      if isinstance(reply, p.Entries) and reply.status == p.Status.OK and reply.entries), None)
        if found is None:
            missing = sum(1 for reply in reads if isinstance(reply, p.Entries)
                          and reply.status in (p.Status.NO_SUCH_ENTRY, p.Status.NO_SUCH_LEDGER))
            if missing >= quorum:
                return entry - 1
            raise LedgerBroken(f"ledger {ledger}: entry {entry} is missing on {missing} replicas, {quorum} needed")
        writes = await asyncio.gather(*(replica.call(p.Add(next(_request_ids), ledger, entry, entry - 1, p.RECOVERY,
                                                           found)) for replica in live), return_exceptions=True)
        if sum(1 for reply in writes if isinstance(reply, p.Added) and reply.status == p.Status.OK) < ack_quorum:
            raise LedgerBroken(f"ledger {ledger}: entry {entry} could not be written back to {ack_quorum} replicas")
        entry += 1
