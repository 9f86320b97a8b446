"""InMemoryDurableDataLog: a DurableDataLog kept in this process's memory, for tests and embedding.

It keeps every promise of ``api.py`` that does not need a disk (the conformance suite in
``tests/unit/tier1/conformance.py`` runs against it): ownership and epochs, ``LogBusy`` while a live owner
holds the log, records in call order, acknowledgements in call order, truncation, ``RecordTooLarge``, a
closed instance refusing everything. What it does not keep is durability across the process: the records
live in a ``MemoryLogs`` registry (by default the process-wide ``MEMORY_LOGS``), so a segment store
stopped and started again *in the same process* recovers them, and a process that exits loses them.
Choose it with ``SegmentStoreConfig(tier1="memory")`` (``--tier1 memory``) wherever durability is not
what is being tested; the test suite's in-process stores do, and clear the registry after each test.

Acknowledgements are not given inside ``append``: the futures of the appends made in one turn of the
event loop resolve together on the next turn, in order, as a real log's group commit does, so that the
callers see the same interleavings they see over a disk.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from .api import DEFAULT_MAX_APPEND_SIZE, AppendData, DurableDataLog, LogAddress
from .errors import LogBusy, LogClosed, RecordTooLarge


@dataclass
class _StoredLog:
    """One log's surviving records and ownership, shared by every instance opened on it."""

    records: deque[tuple[int, bytes]] = field(default_factory=deque)  # (sequence, payload) after truncation
    epoch: int = 0
    next_sequence: int = 1
    truncation_sequence: int = 0
    owner: InMemoryDurableDataLog | None = None


class MemoryLogs:
    """A registry of in-memory logs by name: what "the same log" means for ``InMemoryDurableDataLog``."""

    def __init__(self) -> None:
        self._logs: dict[str, _StoredLog] = {}

    def log(self, name: str, *, max_append_size: int = DEFAULT_MAX_APPEND_SIZE) -> InMemoryDurableDataLog:
        """A new, unopened instance on the log called ``name`` (created empty on first use)."""
        return InMemoryDurableDataLog(name, self._logs.setdefault(name, _StoredLog()), max_append_size)

    def forget(self, prefix: str = "") -> int:
        """Drops every log whose name starts with ``prefix`` (all of them by default); returns how many."""
        names = [name for name in self._logs if name.startswith(prefix)]
        for name in names:
            del self._logs[name]
        return len(names)

    def __len__(self) -> int:
        return len(self._logs)


MEMORY_LOGS = MemoryLogs()


class InMemoryDurableDataLog(DurableDataLog):
    """A DurableDataLog whose records live in a ``MemoryLogs`` registry (see the module docstring)."""

    def __init__(self, name: str, stored: _StoredLog, max_append_size: int = DEFAULT_MAX_APPEND_SIZE):
        if max_append_size <= 0:
            raise ValueError(f"max_append_size {max_append_size} out of range")
        self.name = name
        self.max_append_size = max_append_size
        self._stored = stored
        self._epoch: int | None = None
        self._open = False
        self._used = False  # opened once: an instance is never opened twice
        self._unacknowledged: list[tuple[asyncio.Future, int]] = []  # (future, sequence), resolved next turn

    def __repr__(self) -> str:
        return (f"<InMemoryDurableDataLog {self.name} {'open' if self._open else 'closed'} epoch={self._epoch} "
                f"records={len(self._stored.records)}>")

    @property
    def epoch(self) -> int:
        if self._epoch is None:
            raise LogClosed(f"log {self.name} was never opened")
        return self._epoch

    @property
    def truncation_address(self) -> LogAddress | None:
        sequence = self._stored.truncation_sequence
        return LogAddress(sequence) if sequence else None

    def readable_records(self) -> int | None:
        return len(self._stored.records)

    async def open(self) -> int:
        if self._used:
            raise LogClosed(f"log {self.name} instance was already opened; create a new instance")
        owner = self._stored.owner
        if owner is not None and owner._open:
            raise LogBusy(f"log {self.name} is held by a live owner (epoch {owner._epoch})")
        self._used = self._open = True
        self._stored.epoch += 1
        self._stored.owner = self
        self._epoch = self._stored.epoch
        return self._epoch

    async def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        self._check_open()
        start = after.sequence if after is not None else 0
        for sequence, payload in list(self._stored.records):
            if sequence > start:
                yield LogAddress(sequence), memoryview(payload)

    def append(self, data: AppendData) -> asyncio.Future[LogAddress]:
        self._check_open()
        payload = b"".join(data) if isinstance(data, list | tuple) else bytes(data)  # type: ignore[arg-type]
        if len(payload) > self.max_append_size:
            raise RecordTooLarge(f"record of {len(payload)} bytes exceeds {self.max_append_size}")
        stored = self._stored
        sequence = stored.next_sequence
        stored.next_sequence += 1
        stored.records.append((sequence, payload))
        future = asyncio.get_running_loop().create_future()
        if not self._unacknowledged:
            future.get_loop().call_soon(self._acknowledge)
        self._unacknowledged.append((future, sequence))
        return future

    async def truncate(self, upto: LogAddress) -> None:
        self._check_open()
        stored = self._stored
        if upto.sequence >= stored.next_sequence:
            raise ValueError(f"cannot truncate to {upto}: the last record is {stored.next_sequence - 1}")
        if upto.sequence <= stored.truncation_sequence:
            return
        stored.truncation_sequence = upto.sequence
        records = stored.records
        while records and records[0][0] <= upto.sequence:
            records.popleft()

    async def close(self) -> None:
        if not self._open:
            return
        self._acknowledge()  # every record appended is already "durable": acknowledge, as a drained log does
        self._open = False
        if self._stored.owner is self:
            self._stored.owner = None

    def _acknowledge(self) -> None:
        unacknowledged, self._unacknowledged = self._unacknowledged, []
        for future, sequence in unacknowledged:
            if not future.done():
                future.set_result(LogAddress(sequence))

    def _check_open(self) -> None:
        if not self._open:
            raise LogClosed(f"log {self.name} is not open")
