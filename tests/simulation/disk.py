"""A simulated disk for the world, and Tier-1 logs on it that lose what was not durable when the host crashes.

Theory of operation
-------------------
``SimDisk(world, host)`` is the disk of one host; it outlives every process on that host. ``disk.log(name)``
gives a new, unopened ``SimDurableDataLog`` on the log called ``name`` (the same name is the same log, as
with ``MemoryLogs.log``), implementing ``server.tier1.api.DurableDataLog`` and passing its conformance
suite (tests/simulation/test_disk.py runs it inside a world).

What is simulated, and how it mirrors ``LocalDurableDataLog`` (server/tier1/local.py):

* The bytes. Each record is stored in the real on-disk record format (``server.tier1.record_format``: a
  32-byte header with sequence, epoch and an xxh3 checksum, then the payload), so a torn record is told
  from a whole one exactly as the real reader does: by length, magic, sequence and checksum.
* Durability. ``append`` writes its record into the disk's *volatile* part (the page cache) at once. A
  simulated fsync then makes everything written so far durable, after a latency drawn from
  ``world.random`` (``fsync_latency``; with ``slow_fsync_probability`` a slow one of ``slow_fsync_latency``).
  Group commit, as the real log's writer thread does it: one fsync in flight per log; the first append of
  a loop turn starts one on the next turn (so a burst of appends shares it), appends made while it is in
  flight wait for the next one, which starts as soon as it ends. An append's future resolves, in append
  order, once its record is durable.
* Reading. ``read()`` yields the records up to the last *acknowledged* one as of the call, as the local
  log does (an unsynced record is not readable by ``read()``); after a crash a new owner reads whatever
  is on the platter (and, after a mere process crash, in the page cache).
* Metadata. ``open`` (the epoch bump) and ``truncate`` (the truncation point) are durable when they return;
  each takes one I/O latency. The disk keeps the epoch and truncation point per log.
* Ownership. ``open`` takes the log exclusively (``LogBusy`` while a live owner holds it) and bumps the
  epoch. An owner whose process died (``Process.crash``, the world's ``kill -9``) releases it, as the
  kernel drops a dead process's ``flock``; its page cache survives and its fsyncs in flight complete.
* Host crash (power loss): ``SimDisk.crash()``. Every I/O in flight never completes; every record not yet
  durable is lost, except that with ``crash_writeback_probability`` a random prefix of them had reached
  the platter anyway; with ``torn_probability`` the first lost record is *torn* (a prefix of it persisted,
  its tail missing or zeroed). The next ``open`` drops a torn tail, as the real recovery does (damage
  anywhere but the tail is ``LogCorrupted``). Every instance on the disk dies: its pending appends,
  opens, truncates and closes never resolve (no error reaches anyone, as for a killed process), and its
  later calls are refused with ``LogFenced``; ownership is released and the next ``open`` gets a higher
  epoch. ``crash(power_loss=False)`` is the process-only variant: instances die, the page cache stays.
  Who crashes the host calls ``disk.crash()`` right after ``process.crash()``; or ``disk.attach(process)``
  makes every crash of that process a crash of the disk.
* Faults for a nemesis, each off by default: ENOSPC (``fill()``/``free()``, ``capacity_bytes``,
  ``enospc_probability``): the write fails as a full disk makes the local log fail, with
  ``LogWriteFailed`` caused by ``OSError(ENOSPC)``; the log closes, records queued behind the failed one
  fail too (those already in the fsync in flight are acknowledged first), ownership is released, later
  calls raise ``LogWriteFailed``. An ``open`` on a full disk raises the ``OSError`` itself, as the local
  log's does (its metadata write fails). I/O latency spikes: ``spike_probability`` adds
  ``spike_latency`` to an I/O, and ``stall(seconds)`` holds every I/O completion until the stall ends.
* Planted bug (tests only): ``ack_before_durable=True`` acknowledges each append on the next loop turn,
  before its fsync, so a crash can lose an acknowledged record.
* The trace: ``log_open`` (host, log, epoch, last sequence), ``fsync`` (host, log, records made durable),
  ``enospc`` (host, log, bytes), ``disk_crash`` (host, power loss, records lost, torn logs) and
  ``disk_lost`` (host, log, records lost, torn) per log that lost something.

Not simulated: a failed fsync (EIO) and its "the data may or may not be on disk" (tests/support/faults
does that against the real log), damage to synced data (bit rot, misdirected writes), pages written back
out of order (a power loss here keeps a *prefix* of the unsynced records; the real reader's batch-index
logic for out-of-order pages is not exercised), the kernel's own periodic writeback (unsynced data of a
dead process stays volatile until the next fsync of that log), files, file rollover and preallocation,
the CPU time of I/O, and the bytes of the metadata (they take no space).
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.tier1.api import DEFAULT_MAX_APPEND_SIZE, AppendData, DurableDataLog, LogAddress
from server.tier1.errors import LogBusy, LogClosed, LogCorrupted, LogError, LogFenced, LogWriteFailed, RecordTooLarge
from server.tier1.record_format import HEADER_SIZE, MAGIC, checksum_matches, encode_record, parse_header
from tests.simulation.loop import OWNER, Owner

if TYPE_CHECKING:
    from tests.simulation.processes import Process
    from tests.simulation.world import World

Seconds = tuple[float, float]  # a (low, high) range a latency is drawn from, uniformly
READ_YIELD_BYTES = 1024 * 1024  # read() lets the loop run once per this many payload bytes, as the real one does


@dataclass(frozen=True)
class DiskLogState:
    """What the disk holds for one log, for tests and a nemesis to look at."""

    epoch: int
    truncation_sequence: int
    durable_sequence: int  # every record up to here is durable
    last_sequence: int  # the last record written (durable or not); the truncation point if none
    volatile_records: int  # written, not yet durable


@dataclass(frozen=True)
class CrashReport:
    """What one ``SimDisk.crash()`` did: per log that lost something, (name, records lost, torn)."""

    power_loss: bool
    losses: tuple[tuple[str, int, bool], ...]

    @property
    def lost(self) -> int:
        return sum(lost for _, lost, _ in self.losses)

    @property
    def torn(self) -> int:
        return sum(torn for _, _, torn in self.losses)


@dataclass(eq=False)
class _StoredLog:
    """One log on the disk: its records (durable ones, then volatile ones), metadata and fsync state."""

    name: str
    records: list[tuple[int, bytes]] = field(default_factory=list)  # (sequence, encoded record), after truncation
    durable_sequence: int = 0
    epoch: int = 0
    truncation_sequence: int = 0
    owner: SimDurableDataLog | None = None
    instances: list[SimDurableDataLog] = field(default_factory=list)  # opening or opened, not closed, not dead
    sync_requested: bool = False  # an fsync starts on the next loop turn
    sync_target: int | None = None  # the last sequence the fsync in flight makes durable

    @property
    def last_sequence(self) -> int:
        return self.records[-1][0] if self.records else self.truncation_sequence

    def index_of(self, sequence: int) -> int | None:
        if not self.records:
            return None
        index = sequence - self.records[0][0]
        return index if 0 <= index < len(self.records) else None

    def drop_after(self, sequence: int) -> int:
        """Removes the records after ``sequence``; returns their bytes."""
        keep = len(self.records)
        while keep and self.records[keep - 1][0] > sequence:
            keep -= 1
        freed = sum(len(blob) for _, blob in self.records[keep:])
        del self.records[keep:]
        return freed


class SimDisk:
    """The disk of one host in the world (see the module docstring)."""

    def __init__(self, world: World, host: str, *, fsync_latency: Seconds = (0.0005, 0.004),
                 slow_fsync_probability: float = 0.01, slow_fsync_latency: Seconds = (0.05, 0.5),
                 spike_probability: float = 0.0, spike_latency: Seconds = (0.2, 2.0),
                 enospc_probability: float = 0.0, capacity_bytes: int | None = None,
                 crash_writeback_probability: float = 0.5, torn_probability: float = 0.5,
                 ack_before_durable: bool = False) -> None:
        self.world = world
        self.host = host
        self.fsync_latency = fsync_latency
        self.slow_fsync_probability = slow_fsync_probability
        self.slow_fsync_latency = slow_fsync_latency
        self.spike_probability = spike_probability
        self.spike_latency = spike_latency
        self.enospc_probability = enospc_probability
        self.capacity_bytes = capacity_bytes
        self.crash_writeback_probability = crash_writeback_probability
        self.torn_probability = torn_probability
        self.ack_before_durable = ack_before_durable
        self.full = False  # fill() / free(): every write fails with ENOSPC while set
        self.used_bytes = 0  # record bytes held (durable and volatile), against capacity_bytes
        self.fsyncs = 0
        self.crashes: list[CrashReport] = []
        self._logs: dict[str, _StoredLog] = {}
        self._generation = 0  # bumped by a power loss: I/O started before it never completes
        self._stalled_until = 0.0
        self._attached: set[str] = set()

    def __repr__(self) -> str:
        return f"<SimDisk {self.host} logs={len(self._logs)} used={self.used_bytes} crashes={len(self.crashes)}>"

    # -- the public surface ---------------------------------------------------------------------------

    def log(self, name: str, *, max_append_size: int = DEFAULT_MAX_APPEND_SIZE) -> SimDurableDataLog:
        """A new, unopened instance on the log called ``name`` (created empty on first use)."""
        stored = self._logs.get(name)
        if stored is None:
            stored = self._logs[name] = _StoredLog(name)
        return SimDurableDataLog(self, stored, max_append_size)

    def state(self, name: str) -> DiskLogState:
        stored = self._logs[name]
        return DiskLogState(stored.epoch, stored.truncation_sequence, stored.durable_sequence, stored.last_sequence,
                        sum(1 for sequence, _ in stored.records if sequence > stored.durable_sequence))

    def crash(self, *, power_loss: bool = True) -> CrashReport:
        """The host crashed (see the module docstring); returns what was lost."""
        rng = self.world.random
        losses: list[tuple[str, int, bool]] = []
        if power_loss:
            self._generation += 1
        for stored in self._logs.values():
            for instance in list(stored.instances):
                instance._die()
            stored.owner = None
            stored.instances.clear()
            if not power_loss:
                continue
            stored.sync_requested = False
            stored.sync_target = None
            first_volatile = stored.index_of(stored.durable_sequence + 1)
            if first_volatile is None:
                continue
            volatile = stored.records[first_volatile:]
            survivors = 0
            if self.crash_writeback_probability and rng.random() < self.crash_writeback_probability:
                survivors = rng.randint(1, len(volatile))
            lost = len(volatile) - survivors
            kept = volatile[:survivors]
            torn = False
            if lost and self.torn_probability and rng.random() < self.torn_probability:
                sequence, blob = volatile[survivors]
                cut = rng.randrange(1, len(blob))
                kept.append((sequence, blob[:cut] if rng.random() < 0.5 else blob[:cut] + bytes(len(blob) - cut)))
                torn = True
            self.used_bytes -= sum(len(blob) for _, blob in volatile) - sum(len(blob) for _, blob in kept)
            stored.records[first_volatile:] = kept
            stored.durable_sequence = stored.last_sequence
            if lost:
                losses.append((stored.name, lost, torn))
                self.world.record("disk_lost", self.host, stored.name, lost, torn)
        report = CrashReport(power_loss, tuple(losses))
        self.crashes.append(report)
        self.world.record("disk_crash", self.host, power_loss, report.lost, report.torn)
        return report

    def attach(self, process: Process, *, power_loss: bool = True) -> None:
        """Makes every crash of ``process`` (also through ``restart``) a crash of this disk, right after it."""
        if process.name in self._attached:
            return
        self._attached.add(process.name)
        crash_process = process.crash

        def crash() -> None:
            was_alive = process.alive
            crash_process()
            if was_alive:
                self.crash(power_loss=power_loss)

        process.crash = crash  # type: ignore[method-assign]

    def fill(self) -> None:
        """The disk is full: every write fails with ENOSPC until ``free()``."""
        self.full = True

    def free(self) -> None:
        self.full = False

    def stall(self, seconds: float) -> None:
        """A latency spike of the whole disk: no I/O completes for ``seconds`` (extends one under way)."""
        self._stalled_until = max(self._stalled_until, self.world.now + seconds)
        self.world.record("disk_stall", self.host, seconds)

    def log_factory(self, prefix: str = "container-") -> Callable[[Any, int], SimDurableDataLog]:
        """A ``log_factory(config, container_id)`` for ``SegmentStoreService``: one log per container."""
        return lambda _config, container_id: self.log(f"{prefix}{container_id}")

    # -- I/O timing -----------------------------------------------------------------------------------

    def _io_delay(self) -> float:
        rng = self.world.random
        delay = rng.uniform(*self.fsync_latency)
        if self.slow_fsync_probability and rng.random() < self.slow_fsync_probability:
            delay = rng.uniform(*self.slow_fsync_latency)
        if self.spike_probability and rng.random() < self.spike_probability:
            delay += rng.uniform(*self.spike_latency)
        return delay

    def _after_io(self, callback: Callable[..., None], *args: Any) -> None:
        """Calls ``callback(*args)`` once an I/O started now completes; never, if the power goes meanwhile."""
        generation, loop, context = self._generation, self.world.loop, self.world.context

        def done() -> None:
            if generation != self._generation:
                return
            if loop.time() < self._stalled_until:
                loop.call_at(self._stalled_until, done, context=context)
                return
            callback(*args)

        loop.call_later(self._io_delay(), done, context=context)

    def _io(self) -> asyncio.Future[None]:
        """A future resolved when a metadata write started now is durable (never, after a power loss)."""
        future: asyncio.Future[None] = self.world.loop.create_future()

        def settle() -> None:
            if not future.done():
                future.set_result(None)

        self._after_io(settle)
        return future

    def _no_space(self, stored: _StoredLog, size: int) -> OSError | None:
        """The error a write of ``size`` bytes gets now, if the disk is full (the bytes are not taken)."""
        if (self.full or (self.capacity_bytes is not None and self.used_bytes + size > self.capacity_bytes)
                or (self.enospc_probability and self.world.random.random() < self.enospc_probability)):
            self.world.record("enospc", self.host, stored.name, size)
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return None

    # -- group commit ---------------------------------------------------------------------------------

    def _request_sync(self, stored: _StoredLog) -> None:
        if stored.sync_requested or stored.sync_target is not None:
            return
        stored.sync_requested = True
        self.world.loop.call_soon(self._start_sync, stored, self._generation, context=self.world.context)

    def _start_sync(self, stored: _StoredLog, generation: int) -> None:
        if generation != self._generation:
            return
        stored.sync_requested = False
        if stored.sync_target is not None or stored.last_sequence <= stored.durable_sequence:
            return
        stored.sync_target = stored.last_sequence
        self._after_io(self._finish_sync, stored)

    def _finish_sync(self, stored: _StoredLog) -> None:
        target = stored.sync_target
        assert target is not None
        stored.sync_target = None
        made_durable = max(0, target - stored.durable_sequence)
        stored.durable_sequence = max(stored.durable_sequence, target)
        self.fsyncs += 1
        self.world.record("fsync", self.host, stored.name, made_durable)
        for instance in list(stored.instances):
            instance._on_durable(stored.durable_sequence)
        if stored.last_sequence > stored.durable_sequence:  # written while this one was in flight
            self._start_sync(stored, self._generation)


class SimDurableDataLog(DurableDataLog):
    """A DurableDataLog on a ``SimDisk`` (see the module docstring)."""

    def __init__(self, disk: SimDisk, stored: _StoredLog, max_append_size: int = DEFAULT_MAX_APPEND_SIZE) -> None:
        if max_append_size <= 0:
            raise ValueError(f"max_append_size {max_append_size} out of range")
        self.name = stored.name
        self.max_append_size = max_append_size
        self._disk = disk
        self._stored = stored
        self._state = "new"  # new, opening, open, closing, failed, closed, dead
        self._epoch: int | None = None
        self._process: Owner | None = None  # the process generation that opened it (None: the test driving)
        self._next_sequence = 1
        self._acknowledged = 0
        self._waiting: deque[tuple[int, asyncio.Future[LogAddress]]] = deque()  # written, not yet durable
        self._doomed_after: int | None = None  # after a failure: the waiting records past this one fail
        self._failure: LogError | None = None
        self._ack_scheduled = False
        self._drained: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return (f"<SimDurableDataLog {self._disk.host}:{self.name} {self._state} epoch={self._epoch} "
                f"acknowledged={self._acknowledged} waiting={len(self._waiting)}>")

    # -- properties -----------------------------------------------------------------------------------

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
        return max(0, self._acknowledged - self._stored.truncation_sequence)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def open(self) -> int:
        if self._state != "new":
            raise LogClosed(f"log {self.name} instance was already opened; create a new instance")
        stored, disk = self._stored, self._disk
        holder = stored.owner
        if holder is not None:
            if holder._holds():
                raise LogBusy(f"log {self.name} is held by a live owner (epoch {holder._epoch})")
            holder._die()  # its process is dead: the kernel released its lock
        no_space = disk._no_space(stored, 0)
        if no_space is not None:
            raise no_space  # the local log's open lets its failed metadata write through
        self._state = "opening"
        self._process = OWNER.get()
        stored.owner = self
        stored.instances.append(self)
        await disk._io()
        if self._state == "dead":
            await self._never()  # died while opening: never returns, as a killed process's call
        epoch = stored.epoch + 1
        last = self._recover_tail(epoch)
        stored.epoch = self._epoch = epoch
        self._acknowledged = last
        self._next_sequence = last + 1
        self._state = "open"
        disk.world.record("log_open", disk.host, self.name, epoch, last)
        return epoch

    def _recover_tail(self, epoch: int) -> int:
        """Validates every record, drops a torn tail (LogCorrupted for damage before it); the last sequence."""
        stored = self._stored
        expected = stored.truncation_sequence + 1 if not stored.records else stored.records[0][0]
        for index, (sequence, blob) in enumerate(stored.records):
            if sequence == expected and _valid(blob, sequence, epoch):
                expected += 1
                continue
            if index < len(stored.records) - 1:
                raise LogCorrupted(f"log {self.name}: record {sequence} is damaged and records follow it",
                                   location=self.name, offset=index, byte_count=len(blob))
            self._disk.used_bytes -= stored.drop_after(sequence - 1)  # a torn tail: the next append overwrites it
        stored.durable_sequence = min(stored.durable_sequence, stored.last_sequence)
        return stored.last_sequence

    async def close(self) -> None:
        if self._state == "new":
            self._state = "closed"
            return
        if self._state in ("opening", "closed", "dead"):
            return  # idempotent; never raises (an open under way goes on, as the local log's does)
        if self._state == "open":
            self._state = "closing"
        if self._waiting:
            self._drained = drained = asyncio.get_running_loop().create_future()
            await drained
        if self._state == "dead":
            await self._never()
        self._state = "closed"
        self._release()

    def _release(self) -> None:
        stored = self._stored
        if stored.owner is self:
            stored.owner = None
        if self in stored.instances and not self._waiting:
            stored.instances.remove(self)

    def _holds(self) -> bool:
        """Whether this instance still owns its log: opening or open, and its process alive."""
        alive = self._process is None or self._process.alive
        return alive and self._state in ("opening", "open", "closing")

    def _die(self) -> None:
        """Killed with its host or process: nothing it waits for ever completes; later calls are fenced."""
        self._state = "dead"
        self._waiting.clear()
        stored = self._stored
        if stored.owner is self:
            stored.owner = None
        if self in stored.instances:
            stored.instances.remove(self)

    @staticmethod
    async def _never() -> None:
        await asyncio.get_running_loop().create_future()

    # -- append ---------------------------------------------------------------------------------------

    def append(self, data: AppendData) -> asyncio.Future[LogAddress]:
        if self._state != "open":
            raise self._not_open_error()
        payload = b"".join(data) if isinstance(data, list | tuple) else bytes(data)  # type: ignore[arg-type]
        if len(payload) > self.max_append_size:
            raise RecordTooLarge(f"record of {len(payload)} bytes exceeds max_append_size {self.max_append_size}")
        disk, stored = self._disk, self._stored
        sequence = self._next_sequence
        self._next_sequence = sequence + 1
        future: asyncio.Future[LogAddress] = asyncio.get_running_loop().create_future()
        self._waiting.append((sequence, future))
        blob = encode_record(payload, sequence, self.epoch)
        no_space = disk._no_space(stored, len(blob))
        if no_space is not None:
            self._fail(no_space)
            return future
        stored.records.append((sequence, blob))
        disk.used_bytes += len(blob)
        if disk.ack_before_durable and not self._ack_scheduled:  # the planted bug
            self._ack_scheduled = True
            disk.world.loop.call_soon(self._acknowledge_early, context=disk.world.context)
        disk._request_sync(stored)
        return future

    def _on_durable(self, durable_sequence: int) -> None:
        """The disk made every record up to ``durable_sequence`` durable: acknowledge, in order."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= durable_sequence:
            sequence, future = waiting.popleft()
            if not future.done():  # a caller that gave up does not withdraw its record
                future.set_result(LogAddress(sequence))
            self._acknowledged = max(self._acknowledged, sequence)
        if self._doomed_after is not None:
            self._fail_doomed()
        if not waiting:
            self._drained_now()

    def _acknowledge_early(self) -> None:
        self._ack_scheduled = False
        if self._state == "dead":
            return
        for sequence, future in self._waiting:
            if not future.done():
                future.set_result(LogAddress(sequence))
            self._acknowledged = max(self._acknowledged, sequence)

    def _drained_now(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)
        if self._state in ("closed", "failed") and self in self._stored.instances:
            self._stored.instances.remove(self)

    # -- failure --------------------------------------------------------------------------------------

    def _fail(self, cause: BaseException) -> None:
        """A write failed: the log closes; records past the fsync in flight were never written and fail."""
        error = LogWriteFailed(f"log {self.name}: {cause!r}")
        error.__cause__ = cause
        self._failure = error
        self._state = "failed"
        stored = self._stored
        keep = stored.sync_target if stored.sync_target is not None else stored.durable_sequence
        self._doomed_after = keep
        mine = [sequence for sequence, _ in self._waiting if sequence > keep]
        if mine:
            self._disk.used_bytes -= stored.drop_after(mine[0] - 1)
        if stored.owner is self:
            stored.owner = None
        if stored.sync_target is None:  # nothing in flight to wait for: fail them on the next turn
            self._disk.world.loop.call_soon(self._fail_doomed, context=self._disk.world.context)

    def _fail_doomed(self) -> None:
        limit, error = self._doomed_after, self._failure
        if limit is None or error is None or self._state == "dead":
            return
        waiting = self._waiting
        doomed: list[asyncio.Future[LogAddress]] = []
        while waiting and waiting[-1][0] > limit:
            doomed.append(waiting.pop()[1])
        for future in reversed(doomed):  # in append order
            if not future.done():
                failure = LogWriteFailed(str(error))  # one instance per waiter: tracebacks stay apart
                failure.__cause__ = error
                future.set_exception(failure)
        if not waiting:
            self._drained_now()

    def _not_open_error(self) -> LogError:
        if self._state == "dead":
            return LogFenced(f"log {self.name}: this instance lost ownership (its host or process crashed; "
                             f"epoch {self._epoch}, the log's epoch is now {self._stored.epoch})")
        failure = self._failure
        if failure is not None:
            error = type(failure)(f"the log failed earlier: {failure}")
            error.__cause__ = failure
            return error
        return LogClosed(f"log {self.name} is {self._state}")

    # -- truncate and read ----------------------------------------------------------------------------

    async def truncate(self, upto: LogAddress) -> None:
        if self._state != "open":
            raise self._not_open_error()
        if upto.sequence > self._acknowledged:
            raise ValueError(f"cannot truncate at {upto.sequence}: only {self._acknowledged} acknowledged")
        stored, disk = self._stored, self._disk
        if upto.sequence <= stored.truncation_sequence:
            return
        no_space = disk._no_space(stored, 0)
        if no_space is not None:
            self._fail(no_space)
            assert self._failure is not None
            raise self._failure
        await disk._io()
        if self._state == "dead":
            await self._never()
        if upto.sequence <= stored.truncation_sequence:
            return
        stored.truncation_sequence = upto.sequence
        cut = 0
        while cut < len(stored.records) and stored.records[cut][0] <= upto.sequence:
            cut += 1
        disk.used_bytes -= sum(len(blob) for _, blob in stored.records[:cut])
        del stored.records[:cut]
        if stored.durable_sequence < upto.sequence:  # only with ack_before_durable: discarded, so nothing to sync
            stored.durable_sequence = upto.sequence
            for instance in list(stored.instances):
                instance._on_durable(upto.sequence)

    async def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        """See DurableDataLog.read: up to the last acknowledged record as of the call."""
        if self._state != "open":
            raise self._not_open_error()
        stored = self._stored
        sequence = max(after.sequence if after is not None else 0, stored.truncation_sequence)
        end = self._acknowledged
        since_yield = 0
        while sequence < end:
            if self._state != "open":
                raise self._not_open_error()
            sequence = max(sequence + 1, stored.truncation_sequence + 1)  # a truncation may have passed us
            if sequence > end:
                break
            index = stored.index_of(sequence)
            if index is None:
                raise LogCorrupted(f"log {self.name}: record {sequence} is missing", location=self.name)
            blob = stored.records[index][1]
            if not _valid(blob, sequence, self.epoch):
                raise LogCorrupted(f"log {self.name}: record {sequence} is damaged", location=self.name,
                                   offset=index, byte_count=len(blob))
            yield LogAddress(sequence), memoryview(blob)[HEADER_SIZE:]
            since_yield += len(blob)
            if since_yield >= READ_YIELD_BYTES:
                since_yield = 0
                await asyncio.sleep(0)


def _valid(blob: bytes, sequence: int, epoch_maximum: int) -> bool:
    """Whether ``blob`` is a whole, undamaged record ``sequence`` (the real reader's checks, record_format.py)."""
    if len(blob) < HEADER_SIZE:
        return False
    header = parse_header(blob)
    return (header.magic == MAGIC and HEADER_SIZE + header.length == len(blob) and header.sequence == sequence
            and header.epoch <= epoch_maximum and checksum_matches(header, memoryview(blob)))
