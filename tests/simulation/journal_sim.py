"""Log stores in the simulated world: a simulated journal on a per-host disk, and a log store process on a host.

Theory of operation
-------------------
The production ``LogStore`` (server/tier1/logstore/store.py) runs unchanged; it is given a ``SimJournal``
instead of its ``Journal`` and its replica id instead of the ``IDENTITY`` file (the two keyword seams of
``LogStore``/``LogStoreService``), so it touches no real file. Its clients (``StoreClient``, ``LedgerWriter``,
``recover``, the replicated log) reach it over the world's network.

``JournalDisk(world, host)`` is the disk of one log-store host; it outlives every process on that host. It
holds the journal files as one ``bytearray`` each (file number -> the bytes written, in the real record format
of ``journal_format``: ``encode`` writes them and the real ``scan`` reads them back), and the replica's
identity (created from ``world.random`` on first use, as ``_identity`` creates ``IDENTITY`` once).

``SimJournal(disk)`` implements what the store uses of a journal (``StoreJournal``), mirroring ``Journal``
(server/tier1/logstore/journal.py):

* ``open`` scans the files oldest first with the real ``scan`` and rebuilds the index with the real indexing
  code (``Journal.index``/``Journal._index``, borrowed verbatim: they touch only ``ledgers`` and
  ``deleted``). So the real torn-tail rule applies: a torn tail of the newest file holding data is cut (it
  was never acknowledged), damage anywhere else raises ``JournalCorrupted`` and the store does not start.
* ``write`` appends a group's encoded records to the current file and returns where they went; it rolls
  to a new file once the current one reached ``file_size_max`` (before the group, as the real one does).
* ``read`` returns payload bytes from the disk; ``collect`` drops the files whose every ledger is deleted,
  keeping a tombstone while an older file holds the ledger's entries (the real policy, restated here for
  in-memory files).

Durability and time. The real store calls ``journal.write`` synchronously on its loop (group commit at
the end of a loop turn, then the replies), and the real write returns once the group is fdatasync'd. The
simulated write is synchronous too: the group is durable when it returns. It takes no virtual time unless
the disk is slow (``slow(seconds, latency)``, the nemesis's slow-disk fault): then each group's fsync takes
between half of ``latency`` and all of it, and the write pauses the store's process for that long (the
``block`` a journal is given: ``Process.pause`` from inside the callback, which holds every other callback of
the process, and what the process writes to its connections meanwhile, replies included, until the pause
ends; tcp.py). So a slow fsync delays that group's acknowledgements and everything else the store does, as
the real blocked loop does; unlike the real store, whose ZooKeeper client has a thread of its own, the
simulated one's pings wait too, so a stall past the session timeout also costs the store its registration.
Nothing written is lost: a kill -9 (``Process.crash``) and a power loss are the same event for a log store
(every group a store wrote is durable, one in a slow fsync included, as its pages would reach the disk;
every group it was about to write was never acknowledged), and a crash never tears a group;
``JournalDisk.tear()`` plants the tail a power loss during a group's write would have left, for ``open`` to
cut.

Faults, each off by default:

* Disk full: ``fill()``/``free()``, or ``capacity_bytes``: ``write`` raises ``OSError(ENOSPC)`` and writes
  nothing, as the real journal's does when its write or the next file's preallocation fails (the real
  one preallocates, so in practice it meets ENOSPC at a rollover; here any write on a full disk fails).
  The store answers that group and every later write UNAVAILABLE until it is restarted. ``open`` on a
  full disk without files fails with ENOSPC too (the real one preallocates its first file).
* Disk lost: ``lose()``: the host's disk is replaced by an empty one (no files, no identity): the next
  store on the host is a new, empty replica. Journals opened on the old disk fail every call with EIO.
* Damage: ``corrupt(number, offset)`` flips one byte of durable data (bit rot); ``open`` then raises
  ``JournalCorrupted``, except where the damage makes the last record of the newest file look torn (the
  real journal cuts it too: a damaged tail cannot be told from a torn one).

``SimLogStoreHost(world, host)`` is a log store on a host: a process (``logstore-<host>``) whose main
coroutine starts a ``LogStore`` on ``host:port`` over a ``SimJournal`` on the host's ``JournalDisk``, or,
with ``zk_hosts``, a ``LogStoreService`` (registration and garbage collection). That needs a ZooKeeper
client that works in the world: the real one's kazoo threads are refused (its start fails with
``ZooKeeperUnavailable``), so the service form waits for a simulated ZooKeeper to be wired in. A start that
fails with ``ZooKeeperUnavailable`` is tried again a second later (``processes.start_supervised``), as a
supervisor restarts a log store that exited.
``start()``, ``await serving()``, ``crash()`` (kill -9), ``restart()``, ``lose_disk()``, ``await stop()``
(a graceful stop).

The trace: ``journal_open`` (host, files, records, bytes cut), ``journal_write`` (host, file, offset,
records, bytes), ``journal_enospc`` (host, bytes), ``journal_identity`` (host, replica id),
``journal_disk_lost`` (host, files, bytes), ``journal_torn`` (host, file, bytes), ``journal_corrupt``
(host, file, offset), ``journal_collect`` (host, files dropped), ``journal_slow`` (host, seconds, latency),
``journal_fsync_wait`` (host, seconds).

Not simulated: fsync latency outside a slow spell, a failed fsync (EIO) and its uncertainty, preallocation,
zeroing ahead, pages and O_DIRECT, the CPU time of a group commit, a journal's descriptors (a collected file read
by a stale index), two stores opening one disk at once (not guarded in production either).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from coordination.zookeeper import ZooKeeperUnavailable
from server.tier1.logstore.journal import DEFAULT_FILE_SIZE_MAX, Journal, LedgerState, NewRecord, Placed
from server.tier1.logstore.journal_format import Kind, encode, scan
from server.tier1.logstore.service import LogStoreService
from server.tier1.logstore.store import LogStore
from tests.simulation.processes import Terminations, start_supervised

if TYPE_CHECKING:
    from tests.simulation.world import World

Block = Callable[[float], None]  # keeps the calling process busy for that many seconds
LOGSTORE_PORT = 3181  # BookKeeper's bookie port
SIM_FILE_SIZE_MAX = 1024 * 1024  # small journal files, so that rollover and collection happen in short runs


class JournalDisk:
    """The disk of one log-store host: journal files and the replica's identity (see the module docstring)."""

    def __init__(self, world: World, host: str, *, capacity_bytes: int | None = None) -> None:
        self.world = world
        self.host = host
        self.capacity_bytes = capacity_bytes
        self.files: dict[int, bytearray] = {}  # file number -> its bytes (every byte here is durable)
        self.identity: bytes | None = None
        self.full = False
        self.generation = 0  # bumped by lose(): journals opened before it are gone with the old disk
        self.groups = 0  # groups written
        self.slow_until = 0.0  # virtual time a slow spell ends (slow())
        self.slow_latency = 0.0  # the most a group's fsync takes during it

    def __repr__(self) -> str:
        return f"<JournalDisk {self.host} files={len(self.files)} used={self.used_bytes}>"

    @property
    def used_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())

    def replica_id(self) -> bytes:
        """This replica's id: made once (from the world's random), then the same until the disk is lost."""
        if self.identity is None:
            self.identity = uuid.UUID(bytes=self.world.random.randbytes(16), version=4).bytes  # as _identity
            self.world.record("journal_identity", self.host, self.identity.hex())
        return self.identity

    def journal(self, file_size_max: int = DEFAULT_FILE_SIZE_MAX, block: Block | None = None) -> SimJournal:
        """A new, unopened journal on this disk; ``block(seconds)`` keeps its caller's process busy (a slow fsync)."""
        return SimJournal(self, file_size_max, block)

    def fsync_seconds(self) -> float:
        """How long a group's fsync takes now: nothing, or during a slow spell between half its latency and all."""
        if self.world.loop.time() >= self.slow_until:
            return 0.0
        return self.world.random.uniform(self.slow_latency / 2, self.slow_latency)

    # -- faults ---------------------------------------------------------------------------------------

    def slow(self, seconds: float, latency: float) -> None:
        """For ``seconds`` from now each group's fsync takes up to ``latency`` seconds (replaces a spell under way)."""
        self.slow_until = self.world.loop.time() + seconds
        self.slow_latency = latency
        self.world.record("journal_slow", self.host, seconds, latency)

    def fill(self) -> None:
        """The disk is full: every write fails with ENOSPC until ``free()``."""
        self.full = True

    def free(self) -> None:
        self.full = False

    def lose(self) -> None:
        """The disk is replaced by an empty one: no journal, no identity (crash the store's process first)."""
        self.world.record("journal_disk_lost", self.host, len(self.files), self.used_bytes)
        self.files = {}
        self.identity = None
        self.full = False
        self.generation += 1

    def tear(self, size: int | None = None) -> int:
        """Appends to the newest file what a power loss during a group's write leaves: the first ``size``
        bytes (random if None) of a record that was never acknowledged, or zeros after some of them; for the
        next ``open`` (tear a disk whose store is down). Returns the bytes appended."""
        if not self.files:
            raise ValueError(f"{self.host}: no journal file to tear")
        rng = self.world.random
        number = max(self.files)
        header, *rest = encode(*_TORN_RECORD, rng.randbytes(rng.randint(1, 200)))
        whole = bytes(header) + b"".join(bytes(part) for part in rest)
        cut = size if size is not None else rng.randrange(1, len(whole))
        torn = whole[:cut] if rng.random() < 0.5 else whole[:cut] + bytes(len(whole) - cut)
        self.files[number] += torn
        self.world.record("journal_torn", self.host, number, len(torn))
        return len(torn)

    def corrupt(self, number: int | None = None, offset: int | None = None) -> tuple[int, int]:
        """Flips the bits of one durable byte (the oldest file and a random byte if None); returns (file, offset)."""
        if not self.files:
            raise ValueError(f"{self.host}: no journal file to damage")
        number = min(self.files) if number is None else number
        data = self.files[number]
        offset = self.world.random.randrange(len(data)) if offset is None else offset
        data[offset] ^= 0xFF
        self.world.record("journal_corrupt", self.host, number, offset)
        return number, offset


_TORN_RECORD = (Kind.ADD, 2**40, 0, -1)  # (kind, a ledger no test uses, entry, last add confirmed)


class SimJournal:
    """A log store's journal on a ``JournalDisk`` (see the module docstring); a ``StoreJournal``."""

    # The real journal's indexing, verbatim: it reads and writes only ``ledgers`` and ``deleted``.
    index = Journal.index
    _index = Journal._index

    def __init__(self, disk: JournalDisk, file_size_max: int = DEFAULT_FILE_SIZE_MAX, block: Block | None = None
                 ) -> None:
        self.disk = disk
        self.file_size_max = file_size_max
        self._block = block
        self.ledgers: dict[int, LedgerState] = {}
        self.deleted: dict[int, tuple[set[int], int]] = {}  # as Journal.deleted
        self._generation = disk.generation
        self._current = 0  # number of the file appended to
        self._offset = 0  # its length

    def _files(self) -> dict[int, bytearray]:
        if self._generation != self.disk.generation:
            raise OSError(errno.EIO, f"journal on {self.disk.host}: the disk it was opened on is gone")
        return self.disk.files

    # -- lifecycle ------------------------------------------------------------------------------------

    def open(self) -> None:
        """Scans every file (oldest first), rebuilds the index, cuts a torn tail; as ``Journal.open``."""
        files = self._files()
        numbers = sorted(files)
        # The newest file may be one with nothing in it yet: the torn-tail rule is then the one before's.
        newest_with_data = len(numbers) - (2 if numbers and not bytes(files[numbers[-1]]).rstrip(b"\0") else 1)
        count = cut = 0
        for position, number in enumerate(numbers):
            data = files[number]
            records, end = scan(bytes(data), newest=position >= newest_with_data)  # a copy: no view pins data
            for record in records:
                self._index(number, record.kind, record.ledger, record.entry, record.last_add_confirmed,
                            record.payload_offset, record.length)
            count += len(records)
            if end < len(data):  # a torn tail (or zeros after it): never acknowledged, cut
                cut += len(data) - end
                del data[end:]
            self._current, self._offset = number, end
        if not numbers:
            self._start_file(1)
        self.disk.world.record("journal_open", self.disk.host, len(numbers), count, cut)

    def close(self) -> None:
        pass  # nothing is open: the bytes are on the disk object

    # -- writing and reading --------------------------------------------------------------------------

    def write(self, records: Sequence[NewRecord]) -> list[Placed]:
        """Appends ``records`` durably, in order; returns where they went, for ``index`` (as ``Journal.write``)."""
        files = self._files()
        if not records:
            return []
        parts: list[bytes] = []
        placed: list[Placed] = []
        roll = self._offset >= self.file_size_max
        number, offset = (self._current + 1, 0) if roll else (self._current, self._offset)
        for kind, ledger, entry, last_add_confirmed, payload in records:
            header, *rest = encode(kind, ledger, entry, last_add_confirmed, payload)
            placed.append((number, kind, ledger, entry, last_add_confirmed, offset + len(header), len(payload)))
            parts.append(bytes(header))
            parts.extend(bytes(part) for part in rest)
            offset += len(header) + len(payload)
        group_bytes = offset - (0 if roll else self._offset)
        self._check_space(group_bytes)
        if roll:
            self._start_file(number)
        start = offset - group_bytes
        data = files[number]
        data[start:start + group_bytes] = b"".join(parts)  # at the end of the data, as the real pwrite
        self._offset = offset
        self.disk.groups += 1
        self.disk.world.record("journal_write", self.disk.host, number, start, len(records), group_bytes)
        fsync = self.disk.fsync_seconds()
        if fsync and self._block is not None:
            self.disk.world.record("journal_fsync_wait", self.disk.host, fsync)
            self._block(fsync)
        return placed

    def read(self, ledger: int, entry: int) -> bytes | None:
        """The entry's payload, or None if this journal does not hold it."""
        state = self.ledgers.get(ledger)
        location = state.entries.get(entry) if state is not None else None
        if location is None:
            return None
        number, offset, length = location
        return bytes(self._files()[number][offset:offset + length])

    def collect(self) -> list[int]:
        """Deletes the files (but the current one) whose every ledger is deleted; returns their numbers.

        ``Journal.collect``'s policy over the disk's files: a file holding a ledger's DELETE record is kept
        while an older file still holds that ledger's entries (else a restart would bring the ledger back)."""
        files = self._files()
        dropped: list[int] = []
        while True:  # dropping files can free the tombstones that kept others: until nothing changes
            live: set[int] = {self._current}
            for state in self.ledgers.values():
                live |= state.files
            for holding, tombstone in self.deleted.values():
                if holding & (files.keys() - {tombstone}):
                    live.add(tombstone)
            now = sorted(number for number in files if number not in live)
            if not now:
                break
            for number in now:
                del files[number]
            dropped += now
        if dropped:
            self.deleted = {ledger: (holding, tombstone) for ledger, (holding, tombstone) in self.deleted.items()
                            if tombstone in files or holding & files.keys()}
            self.disk.world.record("journal_collect", self.disk.host, tuple(dropped))
        return sorted(dropped)

    # -- internals ------------------------------------------------------------------------------------

    def _check_space(self, size: int) -> None:
        disk = self.disk
        if disk.full or (disk.capacity_bytes is not None and disk.used_bytes + size > disk.capacity_bytes):
            disk.world.record("journal_enospc", disk.host, size)
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")

    def _start_file(self, number: int) -> None:
        self._check_space(0)  # the real journal preallocates the file: a full disk refuses it
        self._files().setdefault(number, bytearray())
        self._current, self._offset = number, 0


class SimLogStoreHost:
    """A log store process on ``host`` with its own ``JournalDisk`` (see the module docstring).

    ``zk_hosts``: run a ``LogStoreService`` (registered in ZooKeeper, collecting garbage; ``service_options``
    are its other keyword arguments) instead of a bare ``LogStore``. ``terminations``: where its graceful stops
    go through (a cluster's, whose ``problems`` a run reports; by default one of its own).
    """

    def __init__(self, world: World, host: str, *, port: int = LOGSTORE_PORT, name: str | None = None,
                 file_size_max: int = SIM_FILE_SIZE_MAX, capacity_bytes: int | None = None,
                 zk_hosts: str | None = None, service_options: dict[str, Any] | None = None,
                 terminations: Terminations | None = None) -> None:
        self.world = world
        self.host = host
        self.port = port
        self.file_size_max = file_size_max
        self.zk_hosts = zk_hosts
        self.service_options = dict(service_options or {})
        self.disk = JournalDisk(world, host, capacity_bytes=capacity_bytes)
        self.process = world.process(name or f"logstore-{host}", host)
        self.store: LogStore | None = None  # the current generation's, once made
        self.service: LogStoreService | None = None  # with zk_hosts
        self.journal: SimJournal | None = None
        self._serving: asyncio.Future[LogStore] | None = None
        self.terminations = terminations or Terminations(world)

    def __repr__(self) -> str:
        return f"<SimLogStoreHost {self.host}:{self.port} {self.process!r}>"

    @property
    def replica_id(self) -> str:
        """The replica id (hex, as ZooKeeper and the chains name it); made on first use."""
        return self.disk.replica_id().hex()

    # -- the process ----------------------------------------------------------------------------------

    async def _main(self, serving: asyncio.Future[LogStore]) -> None:
        data_dir = f"/simulated/{self.host}/logstore"  # never touched: journal and replica id are given

        async def start() -> LogStore:  # as `tributary logstore`, which exits when this fails
            journal = self.journal = self.disk.journal(self.file_size_max, block=self.process.pause)
            if self.zk_hosts is None:
                store = self.store = LogStore(data_dir, self.host, self.port, journal=journal,
                                              replica_id=self.disk.replica_id())
                self.service = None
                await store.start()
                return store
            service = self.service = LogStoreService(data_dir, self.zk_hosts, self.host, self.port, journal=journal,
                                                     replica_id=self.disk.replica_id(), **self.service_options)
            self.store = service.store
            await service.start()
            return service.store

        try:  # ZooKeeper out of reach: its supervisor starts it again a second later, as the stores' do
            store = await start_supervised(self.world, "logstore", start, (ZooKeeperUnavailable,), self.host)
        except Exception as error:
            if not serving.done():
                serving.set_exception(error)
                serving.exception()  # retrieved: whoever cares awaits serving(); the process exit is traced
            raise
        self.world.record("logstore_serving", self.host, self.port, store.replica_id.hex())
        serving.set_result(store)
        await self.terminations.requested(self.process)
        if self.service is not None:
            await self.service.stop()
        else:
            await store.stop()

    def start(self) -> asyncio.Task[Any]:
        """Starts the store's process (a new generation); ``serving()`` tells when it listens."""
        task = self.process.task
        if self.process.alive and task is not None and task.done():  # its main ended (a stop, a failed start):
            self.process.crash()  # the generation ends with it (``Process`` keeps it alive until a crash)
        loop = self.world.loop
        self._serving = loop.create_future()
        return self.process.start(functools.partial(self._main, self._serving))

    async def serving(self) -> LogStore:
        """The store once it listens (raises what its start raised, e.g. ``JournalCorrupted``)."""
        if self._serving is None:
            raise RuntimeError(f"{self!r} was not started")
        return await asyncio.shield(self._serving)

    def crash(self) -> None:
        """kill -9 of the store's process: every group it wrote is kept (see the module docstring)."""
        self.process.crash()

    def restart(self) -> asyncio.Task[Any]:
        """Crashes the store's process if it runs, then starts the next generation on the same disk."""
        self.crash()
        return self.start()

    def lose_disk(self) -> None:
        """The store's process crashes and the host's disk is replaced: the next start is a new, empty replica."""
        self.crash()
        self.disk.lose()

    async def stop(self) -> str:
        """Stops the store gracefully (closes its connections; with a service, deregisters) and ends the process;
        returns how it ended (``Terminations.stop``)."""
        return await self.terminations.stop(self.process)
