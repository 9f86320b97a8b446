"""The simulation's workload and its oracle: SDK writers and a reader group in processes of their own, and
what the test knows of what they did, kept outside every process (a crash loses nothing of it).

Theory of operation
-------------------
Each writer process owns a set of routing keys and writes events ``<key>:<sequence>``, sequences counting
up per key from where the oracle says the key's last *issued* event was (so a restarted writer goes on,
and an event whose writer crashed before its ack may be missing, never out of order). An event goes into
``Oracle.acknowledged`` only when its ``WriteAck`` completed: from then on it must be read exactly once.
A fifth of a writer's events go without a routing key (the SDK spreads those over the segments).
A transactional writer process (keys of its own) writes transactions of a few events and commits them; a
transaction whose ``commit`` returned is in ``Oracle.committed``, one it gave up before committing (or whose
writer crashed) is left to be aborted by its lease. The reader process reads the group from the head and
notes every event in ``Oracle.read``. A reader that meets an error it cannot go on from (``Oracle.reader_exits``)
is replaced as a crashed one is (below); one that meets truncated data goes on from the head, and notes it.

An admin process checkpoints the reader group, scales the stream (splits a segment or merges two neighbours)
and truncates it at a completed checkpoint, as an application using consumption-based retention does. The
reader notes where each checkpoint fell in what it read (``Oracle.checkpoint_marks``). A reader that crashes
is restarted the way an exactly-once application restarts: it resets the group to the last completed
checkpoint (or to the head, before any) and forgets what it read after it (``Oracle.read`` is cut back to the
checkpoint's mark), so the group's reads after a reset must again be exactly once. The admin neither
checkpoints nor truncates while a restore is under way (``Oracle.restoring``), never truncates past the
checkpoint a restore goes back to, and keeps no checkpoint that a reset overtook.

``check`` states the invariants (``Violation`` lists what broke):

* every acknowledged event was read, exactly once;
* no event was read twice, acknowledged or not, and nothing was read that was never written;
* per key, events were read in the order written (sequences increase); events written without a routing key
  (a fifth of each writer's, counted under ``w<writer>-keyless``) are promised no order, only exactly once;
  nor are the events of a transaction whose commit was asked for and never returned (the writer gave up on the
  call, or crashed, and went on): its commit may take effect after later transactions' (Pravega orders
  transactions by commit, not by write), so it is left out of its keys' order;
* a transaction is read whole or not at all, whole if its commit returned, and not at all if its writer never
  asked for the commit;
* the stream's metadata is consistent (``stream_problems``, asked of the controller at the end): the active
  segments share out the key space [0, 1) exactly; every segment reached from the first epoch's through the
  successors the controller names is either active or has successors that cover its key range and name it as
  a predecessor, and every active segment is reached so; the stream's head is the cut of a truncation the admin
  asked for (the last one that succeeded, or a later one whose answer was lost), or the start if none was.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

import clients
from clients.errors import TruncatedData
from clients.model import ScalingPolicy, Segment, SegmentRange, StreamConfiguration
from clients.reader.reader_group import Checkpoint, ReaderGroup, ReaderGroupConfig
from clients.stream_cut import StreamCut
from tests.simulation.world import World

SCOPE, STREAM, GROUP = "sim", "events", "readers"
KEYLESS_SHARE = 0.2  # of a writer's events, written without a routing key


@dataclass
class Oracle:
    """What the workload did, as the test knows it."""

    issued: dict[str, int] = field(default_factory=dict)  # key -> sequences handed to a writer so far
    unordered: set[str] = field(default_factory=set)  # keys of events written without a routing key
    acknowledged: set[tuple[str, int]] = field(default_factory=set)
    read: list[tuple[str, int]] = field(default_factory=list)
    read_where: list[tuple[str, int, int]] = field(default_factory=list)  # each read's (segment, offset, reader)
    errors: list[str] = field(default_factory=list)  # what reached the application (type: message)
    transactions: list[list[tuple[str, int]]] = field(default_factory=list)  # each one's events, as written
    committed: set[int] = field(default_factory=set)  # transactions (indexes) whose commit returned
    commit_asked: set[int] = field(default_factory=set)  # transactions whose commit was called
    commit_times: dict[int, tuple[float, float | None]] = field(default_factory=dict)  # asked at, returned at
    ready: bool = False  # the stream exists
    checkpoint_marks: dict[str, int] = field(default_factory=dict)  # checkpoint -> len(read) when the reader met it
    checkpoints: list[tuple[Checkpoint, int]] = field(default_factory=list)  # completed ones, with their marks
    resets: int = 0  # restores of the reader group to a checkpoint (after a reader crash)
    restoring: bool = False  # a restarted reader is resetting the group
    truncations: list[tuple[StreamCut, bool]] = field(default_factory=list)  # cuts asked for, whether it returned
    scales: int = 0  # scales that returned
    metadata_problems: list[str] = field(default_factory=list)  # what stream_problems found at the end
    group_at_end: str = "not read"  # the reader group's state at the end, for a failure's report
    reader_exits: list[str] = field(default_factory=list)  # errors a reader could not go on from, when

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
        problems.append(f"{len(missing)} acknowledged events never read, e.g. {missing[:5]} (the reader group at "
                        f"the end: {oracle.group_at_end}; readers that ended: {oracle.reader_exits or 'none'})")
    duplicated = sorted(event for event, count in counts.items() if count > 1)
    if duplicated:
        where = [oracle.read_where[index] for index, event in enumerate(oracle.read) if event == duplicated[0]]
        problems.append(f"{len(duplicated)} events read more than once, e.g. {duplicated[:5]} ({duplicated[0]} at "
                        f"(segment, offset, reader generation) {where})")
    invented = sorted(event for event in counts if event[1] >= oracle.issued.get(event[0], 0))
    if invented:
        problems.append(f"{len(invented)} events read that were never written, e.g. {invented[:5]}")
    last: dict[str, tuple[int, int]] = {}  # key -> (sequence, index in read) of its last event read
    unsettled = {event for number in oracle.commit_asked - oracle.committed for event in oracle.transactions[number]}
    for index, (key, sequence) in enumerate(oracle.read):
        if key in oracle.unordered or (key, sequence) in unsettled:
            continue
        if key in last and sequence <= last[key][0]:
            before = last[key][1]
            problems.append(f"key {key}: {sequence} read after {last[key][0]} ({_whereabouts(oracle, index)}; "
                            f"{_whereabouts(oracle, before)})")
            break
        last[key] = sequence, index
    for index, events in enumerate(oracle.transactions):
        seen = sum(1 for event in events if counts[event])
        if index in oracle.committed and seen < len(events):
            problems.append(f"committed transaction {index}: {seen} of its {len(events)} events read")
        elif 0 < seen < len(events):
            problems.append(f"transaction {index} read in part: {seen} of {len(events)} events")
        elif seen and index not in oracle.commit_asked:
            problems.append(f"transaction {index}, never committed, was read")
    problems.extend(oracle.metadata_problems)
    if problems:
        raise Violation("; ".join(problems))


def _whereabouts(oracle: Oracle, index: int) -> str:
    """Where and when the read at ``index`` happened, and the transaction of its event, for a failure message."""
    event = oracle.read[index]
    segment, offset, generation = oracle.read_where[index]
    text = f"{event[0]}:{event[1]} read from {segment} at {offset} by reader {generation}"
    for number, events in enumerate(oracle.transactions):
        if event in events:
            asked, returned = oracle.commit_times.get(number, (None, None))
            text += f", transaction {number} (commit asked at {asked}, returned at {returned})"
            break
    return text


def _covers(ranges: list[tuple[float, float]], low: float, high: float) -> bool:
    """Whether ``ranges`` together cover [low, high) (to a rounding error)."""
    reach = low
    for start, end in sorted(ranges):
        if start > reach + 1e-9:
            break
        reach = max(reach, end)
    return reach >= high - 1e-9


async def stream_problems(client: clients.Client, oracle: Oracle, segments: int) -> list[str]:
    """The stream metadata invariants (module docstring), as the controller answers for them."""
    problems: list[str] = []
    active = {item.segment.segment_id: item for item in await client.get_segments(SCOPE, STREAM)}
    shares = sorted((item.low, item.high) for item in active.values())
    if not shares or shares[0][0] > 1e-9 or shares[-1][1] < 1 - 1e-9 or any(
            abs(end - start) > 1e-9 for (_, end), (start, _) in zip(shares, shares[1:])):
        problems.append(f"the active segments do not share out the key space: {shares}")
    first = [SegmentRange(Segment(SCOPE, STREAM, number), number / segments, (number + 1) / segments)
             for number in range(segments)]
    reached: dict[int, SegmentRange] = {}
    queue = collections.deque(first)
    while queue:
        item = queue.popleft()
        if item.segment.segment_id in reached:
            continue
        reached[item.segment.segment_id] = item
        following = await client.get_successors(item.segment)
        if not following.successors:
            if item.segment.segment_id not in active:
                problems.append(f"segment {item.segment.segment_id} has no successors and is not active")
            continue
        if item.segment.segment_id in active:
            problems.append(f"active segment {item.segment.segment_id} has successors")
        for successor, predecessors in following.successors:
            if item.segment.segment_id not in predecessors:
                problems.append(f"successor {successor.segment.segment_id} of {item.segment.segment_id} does not "
                                f"name it as a predecessor ({sorted(predecessors)})")
            queue.append(successor)
        if not _covers([(successor.low, successor.high) for successor, _ in following.successors],
                       item.low, item.high):
            problems.append(f"the successors of segment {item.segment.segment_id} do not cover [{item.low}, "
                            f"{item.high})")
    unreached = sorted(set(active) - set(reached))
    if unreached:
        problems.append(f"active segments {unreached} are not reached through successors")
    head = await client.head_cut(SCOPE, STREAM)
    succeeded = [index for index, (_, returned) in enumerate(oracle.truncations) if returned]
    allowed = [cut for cut, _ in oracle.truncations[succeeded[-1]:]] if succeeded else [
        cut for cut, _ in oracle.truncations]
    at_start = all(offset == 0 for offset in head.positions.values()) and set(head.positions) == set(range(segments))
    if head not in allowed and not (at_start and not succeeded):
        problems.append(f"the stream's head {head} is no truncation cut asked for (last returned: "
                        f"{oracle.truncations[succeeded[-1]][0] if succeeded else None})")
    return problems


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
        self.admin = world.process("admin", "10.0.3.2")
        self._reader_generation = 0
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
                        if random.random() < KEYLESS_SHARE:  # no routing key: any segment, no order promised
                            key, routing_key = f"w{index}-keyless", None
                            self.oracle.unordered.add(key)
                        else:
                            key = routing_key = keys[random.randrange(len(keys))]
                        sequence = self.oracle.next_sequence(key)
                        ack = await writer.write(f"{key}:{sequence}".encode(), routing_key)
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
                        loop = asyncio.get_running_loop()
                        oracle.commit_times[index] = round(loop.time(), 3), None
                        await transaction.commit()
                        oracle.committed.add(index)
                        oracle.commit_times[index] = oracle.commit_times[index][0], round(loop.time(), 3)
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
        """Reads as an exactly-once application does: an error the reader cannot go on from (the SDK gave up, or
        the group declared it offline) makes a new reader, which restores the group to the last checkpoint."""
        loop = asyncio.get_running_loop()
        while True:
            generation = self._reader_generation
            try:
                await self._read(generation)
            except Exception as error:  # noqa: BLE001 - reported with a failure (Oracle.reader_exits)
                self.oracle.reader_exits.append(f"{loop.time():.3f} reader {generation}: {type(error).__name__}: "
                                                f"{error}")
                self.world.record("reader_exit", generation, type(error).__name__)
                self._reader_generation += 1
                await asyncio.sleep(1.0)

    async def _read(self, generation: int) -> None:
        oracle = self.oracle
        async with clients.connect(self.uri) as client:
            group = client.reader_group(SCOPE, GROUP)
            if generation:
                await self._restore(client, group)
            async with group.create_reader(f"reader-{generation}", checkpoint_events=True) as reader:
                while True:
                    try:
                        event = await reader.read_next(timeout_seconds=1.0)
                    except TruncatedData as error:  # reading goes on at the head; what it skipped was unread
                        oracle.errors.append(f"reader {generation}: TruncatedData: {error}")
                        continue
                    if event is None:
                        continue
                    if event.is_checkpoint:
                        oracle.checkpoint_marks[event.checkpoint_name] = len(oracle.read)
                        continue
                    key, _, sequence = event.data.decode().partition(":")
                    oracle.read.append((key, int(sequence)))
                    oracle.read_where.append((event.segment, event.offset, generation))

    async def _restore(self, client: clients.Client, group: ReaderGroup) -> None:
        """A restarted reader's application: back to the last completed checkpoint (module docstring)."""
        oracle = self.oracle
        oracle.restoring = True
        while True:
            index = len(oracle.checkpoints) - 1
            try:
                if index >= 0:
                    checkpoint, mark = oracle.checkpoints[index]
                    await group.reset(checkpoint)
                else:
                    mark = 0
                    await group.reset([await client.head_cut(SCOPE, STREAM)])
                break
            except Exception as error:  # noqa: BLE001 - the cluster may be failing: try again
                self.world.record("restore_retry", type(error).__name__)
                await asyncio.sleep(1.0)
        del oracle.checkpoints[index + 1:]
        del oracle.read[mark:]
        del oracle.read_where[mark:]
        oracle.resets += 1
        oracle.restoring = False
        self.world.record("restored", index, mark)

    async def _admin_main(self) -> None:
        """Checkpoints the group, scales and truncates the stream (module docstring), until writing stops."""
        random, oracle = self.world.random, self.oracle
        async with clients.connect(self.uri) as client:
            group = client.reader_group(SCOPE, GROUP)
            while self.writing:
                await asyncio.sleep(random.uniform(1.0, 4.0))
                if oracle.restoring:
                    continue
                choice = random.random()
                try:
                    if choice < 0.6:
                        await self._checkpoint(group)
                    elif choice < 0.85:
                        await self._scale(client)
                    elif len(oracle.checkpoints) >= 2:
                        checkpoint, _ = oracle.checkpoints[-2]
                        cut = checkpoint.cut(SCOPE, STREAM)
                        oracle.truncations.append((cut, False))
                        await client.truncate_stream(cut)
                        oracle.truncations[-1] = (cut, True)
                except Exception as error:  # noqa: BLE001 - faults make admin calls fail; the next one may not
                    self.world.record("admin_error", type(error).__name__)

    async def _checkpoint(self, group: ReaderGroup) -> None:
        oracle = self.oracle
        resets = oracle.resets
        name = f"checkpoint-{len(oracle.checkpoint_marks)}-{self.world.random.randrange(1 << 30)}"
        checkpoint = await group.initiate_checkpoint(name, timeout_seconds=20.0)
        if oracle.resets == resets and not oracle.restoring and name in oracle.checkpoint_marks:
            oracle.checkpoints.append((checkpoint, oracle.checkpoint_marks[name]))

    async def _scale(self, client: clients.Client) -> None:
        """Splits a random active segment in two (while there are fewer than four), or merges two neighbours."""
        random = self.world.random
        active = sorted(await client.get_segments(SCOPE, STREAM), key=lambda item: item.low)
        if len(active) < 4 and (len(active) < 2 or random.random() < 0.5):
            item = active[random.randrange(len(active))]
            middle = (item.low + item.high) / 2
            await client.scale_stream(SCOPE, STREAM, [item.segment], [(item.low, middle), (middle, item.high)])
        else:
            index = random.randrange(len(active) - 1)
            left, right = active[index], active[index + 1]
            await client.scale_stream(SCOPE, STREAM, [left.segment, right.segment], [(left.low, right.high)])
        self.oracle.scales += 1

    # ------------------------------------------------------------------ driving

    async def start(self) -> None:
        setup = self.world.process("setup", "10.0.3.9")
        await setup.start(self._setup)
        self.reader.start(self._reader_main)
        self.admin.start(self._admin_main)
        for index, process in enumerate(self.writers):
            self._writer_tasks[index] = process.start(self._writer_main(index))
        self._writer_tasks[-1] = self.transactional.start(self._transactional_main)

    def restart_writer(self, index: int) -> None:
        self._writer_tasks[index] = self.writers[index].restart(self._writer_main(index))

    def restart_reader(self) -> None:
        """The reader crashes; its restart restores the group to the last checkpoint (module docstring)."""
        self._reader_generation += 1
        self.reader.restart(self._reader_main)

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
                break
            await asyncio.sleep(0.5)
        checker = self.world.process("checker", "10.0.3.3")
        await checker.start(self._check_metadata)

    async def _check_metadata(self, settle_seconds: float = 60.0) -> None:
        """``stream_problems`` until there are none, for up to ``settle_seconds``: a scale the admin asked for
        may still be on its way (successors recorded, the epoch not yet moved on), and must finish."""
        deadline = asyncio.get_running_loop().time() + settle_seconds
        while True:
            try:
                async with clients.connect(self.uri) as client:
                    self.oracle.metadata_problems = await stream_problems(client, self.oracle, self.segments)
                    state, _ = await client.reader_group(SCOPE, GROUP).store.fetch()
                    active = sorted(item.segment.qualified_name for item in await client.get_segments(SCOPE, STREAM))
                    self.oracle.group_at_end = (f"readers {state.readers}, assigned {state.assigned}, unassigned "
                                                f"{state.unassigned}, future {state.future}, completed "
                                                f"{state.completed}; active segments {active}")
                if not self.oracle.metadata_problems or asyncio.get_running_loop().time() >= deadline:
                    return
                self.world.record("check_unsettled", len(self.oracle.metadata_problems))
            except Exception as error:  # noqa: BLE001 - the cluster is healed, but may still be recovering
                self.world.record("check_retry", type(error).__name__)
            await asyncio.sleep(2.0)
