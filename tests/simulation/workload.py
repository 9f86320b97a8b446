"""The simulation's workload and its oracle: SDK writers and a reader group in processes of their own, and
what the test knows of what they did, kept outside every process (a crash loses nothing of it).

Theory of operation
-------------------
Each writer process owns a set of routing keys and writes events ``<key>:<sequence>``, sequences counting
up per key from where the oracle says the key's last *issued* event was (so a restarted writer goes on,
and an event whose writer crashed before its ack may be missing, never out of order). An event goes into
``Oracle.acknowledged`` only when its ``WriteAck`` completed: from then on it must be read exactly once.
A transactional writer process (keys of its own) writes transactions of a few events and commits them; a
transaction whose ``commit`` returned is in ``Oracle.committed``, one it gave up before committing (or whose
writer crashed) is left to be aborted by its lease. The reader process reads the group from the head and
notes every event in ``Oracle.read``.

``check`` states the invariants (``Violation`` lists what broke):

* every acknowledged event was read, exactly once;
* no event was read twice, acknowledged or not, and nothing was read that was never written;
* per key, events were read in the order written (sequences increase);
* a transaction is read whole or not at all, whole if its commit returned, and not at all if its writer never
  asked for the commit.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

import clients
from clients.model import ScalingPolicy, StreamConfiguration
from clients.reader.reader_group import ReaderGroupConfig
from tests.simulation.world import World

SCOPE, STREAM, GROUP = "sim", "events", "readers"


@dataclass
class Oracle:
    """What the workload did, as the test knows it."""

    issued: dict[str, int] = field(default_factory=dict)  # key -> sequences handed to a writer so far
    acknowledged: set[tuple[str, int]] = field(default_factory=set)
    read: list[tuple[str, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # what reached the application (type: message)
    transactions: list[list[tuple[str, int]]] = field(default_factory=list)  # each one's events, as written
    committed: set[int] = field(default_factory=set)  # transactions (indexes) whose commit returned
    commit_asked: set[int] = field(default_factory=set)  # transactions whose commit was called
    ready: bool = False  # the stream exists

    def next_sequence(self, key: str) -> int:
        sequence = self.issued.get(key, 0)
        self.issued[key] = sequence + 1
        return sequence


class Violation(AssertionError):
    pass


def check(oracle: Oracle) -> None:
    """Raises Violation with every invariant the run broke (see the module docstring)."""
    problems: list[str] = []
    counts = collections.Counter(oracle.read)
    missing = sorted(event for event in oracle.acknowledged if counts[event] == 0)
    if missing:
        problems.append(f"{len(missing)} acknowledged events never read, e.g. {missing[:5]}")
    duplicated = sorted(event for event, count in counts.items() if count > 1)
    if duplicated:
        problems.append(f"{len(duplicated)} events read more than once, e.g. {duplicated[:5]}")
    invented = sorted(event for event in counts if event[1] >= oracle.issued.get(event[0], 0))
    if invented:
        problems.append(f"{len(invented)} events read that were never written, e.g. {invented[:5]}")
    last: dict[str, int] = {}
    for key, sequence in oracle.read:
        if sequence <= last.get(key, -1):
            problems.append(f"key {key}: {sequence} read after {last[key]}")
            break
        last[key] = sequence
    for index, events in enumerate(oracle.transactions):
        seen = sum(1 for event in events if counts[event])
        if index in oracle.committed and seen < len(events):
            problems.append(f"committed transaction {index}: {seen} of its {len(events)} events read")
        elif 0 < seen < len(events):
            problems.append(f"transaction {index} read in part: {seen} of {len(events)} events")
        elif seen and index not in oracle.commit_asked:
            problems.append(f"transaction {index}, never committed, was read")
    if problems:
        raise Violation("; ".join(problems))


class Workload:
    """Writers and a reader against a controller URI (see the module docstring)."""

    def __init__(self, world: World, controller_uri: str, *, writers: int = 2, keys_per_writer: int = 3,
                 segments: int = 2, pace_seconds: float = 0.02):
        self.world = world
        self.uri = controller_uri
        self.oracle = Oracle()
        self.segments = segments
        self.pace = pace_seconds
        self.keys = {index: [f"w{index}k{number}" for number in range(keys_per_writer)] for index in range(writers)}
        self.writers = [world.process(f"writer-{index}", f"10.0.2.{index + 1}") for index in range(writers)]
        self.reader = world.process("reader", "10.0.3.1")
        self.transactional = world.process("transactional-writer", "10.0.2.100")
        self.transaction_keys = [f"t{number}" for number in range(3)]
        self.writing = True  # writers stop issuing events when this turns false
        self._writer_tasks: dict[int, asyncio.Task[None]] = {}  # each writer's current generation

    # ------------------------------------------------------------------ processes

    async def _setup(self) -> None:
        while True:
            try:
                async with clients.connect(self.uri) as client:
                    await client.create_scope(SCOPE)
                    await client.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(self.segments)))
                    await client.create_reader_group(SCOPE, GROUP, [STREAM], config=ReaderGroupConfig(
                        reader_timeout_ms=10_000, refresh_ms=500))
                self.oracle.ready = True
                return
            except Exception as error:  # noqa: BLE001 - the cluster may be starting or failing: try again
                self.world.record("setup_retry", type(error).__name__)
                await asyncio.sleep(1.0)

    def _writer_main(self, index: int):
        async def main() -> None:
            random = self.world.random
            keys = self.keys[index]
            async with clients.connect(self.uri) as client:
                writer = client.create_writer(SCOPE, STREAM)
                pending: set[asyncio.Task[None]] = set()
                try:
                    while self.writing:
                        key = keys[random.randrange(len(keys))]
                        sequence = self.oracle.next_sequence(key)
                        ack = await writer.write(f"{key}:{sequence}".encode(), key)
                        task = asyncio.ensure_future(self._acknowledged(ack, key, sequence))
                        pending.add(task)
                        task.add_done_callback(pending.discard)
                        await asyncio.sleep(self.pace * random.random())
                    await writer.flush()
                finally:
                    await asyncio.gather(*pending, return_exceptions=True)
        return main

    async def _transactional_main(self) -> None:
        random, oracle = self.world.random, self.oracle
        async with clients.connect(self.uri) as client:
            writer = client.create_transactional_writer(SCOPE, STREAM)
            while self.writing:
                index = len(oracle.transactions)
                events: list[tuple[str, int]] = []
                oracle.transactions.append(events)
                try:
                    transaction = await writer.begin()
                    for _ in range(random.randint(1, 8)):
                        key = self.transaction_keys[random.randrange(len(self.transaction_keys))]
                        event = (key, oracle.next_sequence(key))
                        events.append(event)
                        await transaction.write(f"{event[0]}:{event[1]}".encode(), key)
                    if random.random() < 0.1:
                        await transaction.abort()
                    else:
                        oracle.commit_asked.add(index)
                        await transaction.commit()
                        oracle.committed.add(index)
                except Exception as error:  # noqa: BLE001 - a failed transaction may only vanish whole
                    oracle.errors.append(f"transaction {index}: {type(error).__name__}: {error}")
                    await asyncio.sleep(1.0)
                await asyncio.sleep(self.pace * 10 * random.random())

    async def _acknowledged(self, ack, key: str, sequence: int) -> None:
        try:
            await ack
        except Exception as error:  # noqa: BLE001 - an event that failed is allowed to be missing
            self.oracle.errors.append(f"{type(error).__name__}: {error}")
            return
        self.oracle.acknowledged.add((key, sequence))

    async def _reader_main(self) -> None:
        async with clients.connect(self.uri) as client:
            group = client.reader_group(SCOPE, GROUP)
            async with group.create_reader("reader-0") as reader:
                while True:
                    event = await reader.read_next(timeout_seconds=1.0)
                    if event is None or event.is_checkpoint:
                        continue
                    key, _, sequence = event.data.decode().partition(":")
                    self.oracle.read.append((key, int(sequence)))

    # ------------------------------------------------------------------ driving

    async def start(self) -> None:
        setup = self.world.process("setup", "10.0.3.9")
        await setup.start(self._setup)
        self.reader.start(self._reader_main)
        for index, process in enumerate(self.writers):
            self._writer_tasks[index] = process.start(self._writer_main(index))
        self._writer_tasks[-1] = self.transactional.start(self._transactional_main)

    def restart_writer(self, index: int) -> None:
        self._writer_tasks[index] = self.writers[index].restart(self._writer_main(index))

    def restart_transactional_writer(self) -> None:
        self._writer_tasks[-1] = self.transactional.restart(self._transactional_main)

    async def finish(self, timeout: float = 300.0) -> None:
        """Stops writing, then waits until every acknowledged event was read (or ``timeout`` of virtual time);
        the checks are the caller's (``check(workload.oracle)``)."""
        self.writing = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not all(task.done() for task in self._writer_tasks.values()) and loop.time() < deadline:
            await asyncio.sleep(0.5)
        committed = {event for index in self.oracle.committed for event in self.oracle.transactions[index]}
        while loop.time() < deadline:
            read = set(self.oracle.read)
            if self.oracle.acknowledged <= read and committed <= read:
                await asyncio.sleep(2.0)  # and nothing more arrives that should not
                return
            await asyncio.sleep(0.5)
