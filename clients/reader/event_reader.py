"""The event reader: a member of a reader group that hands out events as an async iterator.

Theory of operation. ``async for event in reader`` takes the next complete event
from the segments this reader owns (staying on one segment for a run of events,
then moving round-robin), waiting for data when none is buffered. Asking for
the next event means the application finished with the previous one: its end
becomes the segment's ``processed`` position, which is what the group records.

Group steps change the shared group state with one compare-and-set update of
pure transitions (``group_state``): take dead readers offline (at their last
reported positions), complete finished segments (their successors become
readable once all their predecessors are done), acquire unassigned segments up
to this reader's share, release segments beyond it, answer checkpoints. Every
``refresh_ms`` a background step does what needs no exact position; releasing
and answering a checkpoint are done by a *blocking* step, taken inside
``__anext__`` before the next event is handed out, so they happen exactly after
the events the application has finished with. A reader owing a checkpoint
neither acquires nor releases, so a checkpoint is a consistent cut. The I/O a
step needs (successor lookups) is done before its update. After the update the
reader reads exactly the segments the written state says it owns (not those the
transition took or released: a write whose reply was lost is retried, and the
retry's transition runs on a state that already holds the first one's changes).

The same background task writes the reader's processed positions every ``refresh_ms``;
a reader whose heartbeat stops for ``reader_timeout_ms`` is declared offline by
the others and its segments are read again from those positions (so delivery
is at-least-once across a crash, from the last heartbeat or checkpoint).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..config import ReaderConfig
from ..connection import Endpoint, WireConnection
from ..errors import ClosedError, InvalidArgument, ReinitializationRequired, TributaryError, TruncatedData
from ..segment_stores import segment_of
from ..serializers import BytesSerializer, Serializer
from .group_state import GroupState
from .segment_reader import Found, SegmentReader
from .time_window import TimeWindow, TimeWindowFollower, group_position

if TYPE_CHECKING:
    from ..controller_client import Controller
    from ..segment_stores import SegmentStores
    from .group_store import GroupConfig, GroupStore


log = logging.getLogger("tributary.reader")
_STREAK_MAX = 256  # events taken from one segment before looking at the others


class EventRead:
    """One event: ``data`` (deserialized), where it came from, or a checkpoint marker (``data`` None)."""

    __slots__ = ("data", "segment", "offset", "size", "checkpoint_name")

    def __init__(self, data: Any, segment: str, offset: int, size: int, checkpoint_name: str | None = None):
        self.data = data
        self.segment = segment
        self.offset = offset
        self.size = size
        self.checkpoint_name = checkpoint_name

    def __repr__(self) -> str:
        if self.checkpoint_name is not None:
            return f"<EventRead checkpoint {self.checkpoint_name!r}>"
        return f"<EventRead {self.segment}@{self.offset} {self.size} bytes>"

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint_name is not None


class LargeEventRead(EventRead):
    """An event larger than ``max_event_buffer_bytes``: its bytes come as chunks (``data`` is None).

    Consume it with ``async for chunk in event.chunks()`` before asking the reader for the
    next event; whatever is left unread is skipped then.
    """

    __slots__ = ("_reader", "_segment_reader")

    def __init__(self, reader: EventReader, segment_reader: SegmentReader, offset: int, size: int):
        super().__init__(None, segment_reader.segment, offset, size)
        self._reader = reader
        self._segment_reader = segment_reader

    @property
    def payload_size(self) -> int:
        return self.size - 8

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yields the event's bytes in order, in pieces of at most one read, with bounded memory."""
        segment_reader = self._segment_reader
        while segment_reader.large_remaining:
            chunk = segment_reader.large_chunk()
            if chunk is not None:
                yield chunk
                continue
            if self._reader._failure is not None:
                raise self._reader._failure
            await self._reader._wait(self._reader._refresh)

    async def read_all(self) -> bytes:
        """The whole payload in memory (only for events that fit)."""
        return b"".join([chunk async for chunk in self.chunks()])


class _HeartbeatWatch:
    """Tells dead readers from live ones by whether their heartbeat entry's version moves (local clock only)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int | None, float]] = {}

    def dead(self, readers: list[str], reports: dict[str, tuple[int, dict[str, int]]], now: float,
             timeout: float) -> list[str]:
        dead = []
        for reader in readers:
            version = reports[reader][0] if reader in reports else None
            seen = self._seen.get(reader)
            if seen is None or seen[0] != version:
                self._seen[reader] = (version, now)
            elif now - seen[1] > timeout:
                dead.append(reader)
        for reader in set(self._seen) - set(readers):
            del self._seen[reader]
        return dead


class ReaderGroupView(Protocol):
    """What a reader sees of its group (``reader_group.ReaderGroup`` is one): its name, the store of its shared
    state, the controller and the segment stores, and its configuration."""

    name: str
    store: GroupStore
    controller: Controller
    stores: SegmentStores

    async def group_config(self) -> GroupConfig: ...


class EventReader:
    """Reads events for reader ``reader_id`` of a group. Make it with ``group.create_reader(id)``."""

    def __init__(self, group: ReaderGroupView, reader_id: str, config: ReaderConfig | None = None,
                 serializer: Serializer | None = None, checkpoint_events: bool = False):
        self.group = group
        self.reader_id = reader_id
        self.config = config or ReaderConfig()
        self._store = group.store
        self._controller = group.controller
        self._stores = group.stores
        self._deserialize: Callable[[bytes], Any] | None = (
            None if serializer is None or isinstance(serializer, BytesSerializer) else serializer.deserialize)
        self._checkpoint_events = checkpoint_events
        self._connections = group.stores.connection_cache()
        self._segments: dict[str, SegmentReader] = {}
        self._rotation: list[SegmentReader] = []
        self._current: SegmentReader | None = None
        self._streak = 0
        self._waiter: asyncio.Future[None] | None = None
        self._step_now = True
        self._refresh = 1.0
        self._timeout = 30.0
        self._watch = _HeartbeatWatch()
        self._heartbeat: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._end_of_data = False
        self._marker: str | None = None  # checkpoint handed to the application, to report on the next call
        self._marker_pending: str | None = None  # checkpoint to hand to the application
        self._started = False
        self._closed = False
        self._step_task: asyncio.Task[None] | None = None
        self._step_lock = asyncio.Lock()
        self._truncations = 0  # segment readers that met a truncation not yet reported
        self._time_windows: dict[str, TimeWindowFollower] = {}  # "scope/stream" -> its marks followed

    def __repr__(self) -> str:
        return f"<EventReader {self.reader_id} of {self.group.name} segments={list(self._segments)}>"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> EventReader:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Joins the group. Raises InvalidArgument if a reader with this id is online already."""
        if self._started:
            return
        config = await self.group.group_config()
        self._refresh = config.refresh_ms / 1000
        self._timeout = config.reader_timeout_ms / 1000
        await self._store.update(lambda state: state.add_reader(self.reader_id))
        self._started = True
        await self._store.report(self.reader_id, {})
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat())
        await self._run_step()

    async def close(self) -> None:
        """Leaves the group: owned segments go back after the last event handed out."""
        if self._closed:
            return
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._step_task is not None and not self._step_task.done():
            await asyncio.wait([self._step_task])  # let a step that changed the group finish first
        positions = self.positions(handed_out=True)
        for reader in self._segments.values():
            reader.close()
        try:
            if self._started:
                await self._store.update(lambda state: state.remove_reader(self.reader_id, positions))
                await self._store.forget_report(self.reader_id)
        finally:
            await self._connections.close()
            self._wake()

    def positions(self, handed_out: bool = False) -> dict[str, int]:
        """The offset of every owned segment after the events the application finished with, or with
        ``handed_out`` after every event handed out (closing a reader counts the last event as read)."""
        if handed_out:
            return {name: reader.processed if reader.large_remaining else reader.offset
                    for name, reader in self._segments.items()}
        return {name: reader.processed for name, reader in self._segments.items()}

    async def current_time_window(self, scope: str, stream: str) -> TimeWindow:
        """The group's time window in ``scope/stream``, from the stream's watermarks (Java's
        ``getCurrentTimeWindow``): writers' times bounding the events the group has read.

        The position is the group's: this reader's segments after the events the application
        finished with, the other readers' as they last reported (every ``refresh_ms``), and the
        segments nobody owns yet. Costs a few reads (group state, reports, new watermarks).

        Raises:
            InvalidArgument: the group does not read ``scope/stream``.
            ClosedError: the reader is closed.
        """
        if self._closed:
            raise ClosedError(f"reader {self.reader_id} is closed")
        key = f"{scope}/{stream}"
        if key not in (await self.group.group_config()).streams:
            raise InvalidArgument(f"reader group {self.group.name} does not read {key}")
        follower = self._time_windows.get(key)
        if follower is None:
            follower = self._time_windows[key] = TimeWindowFollower(self._controller, self._stores.raw, scope, stream)
        state, _ = await self._store.fetch()
        others = [reader for reader in state.readers if reader != self.reader_id]
        reports = {reader: positions for reader, (_, positions) in (await self._store.reports(others)).items()}
        reports[self.reader_id] = self.positions()
        return await follower.window(group_position(state, reports, scope, stream))

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> EventReader:
        return self

    async def __anext__(self) -> EventRead:
        current = self._current
        if current is not None:
            while current.large_remaining and not current.skip_large():
                await self._wait(self._refresh)  # the application left part of a large event unread
            current.processed = current.offset
        if self._closed:
            raise ClosedError(f"reader {self.reader_id} is closed")
        if not self._started:
            await self.start()
        while True:
            if self._failure is not None:
                raise self._failure
            if self._step_task is not None or self._step_now:
                await self._run_step()
                if self._marker_pending is not None:
                    self._marker, self._marker_pending = self._marker_pending, None
                    self._step_now = True  # report it as soon as the application asks for more
                    return EventRead(None, "", -1, 0, self._marker)
            if self._truncations:
                self._check_truncations()
            event = self._take()
            if event is not None:
                return event
            if self._end_of_data:
                raise StopAsyncIteration
            if any(reader.finished for reader in self._rotation):
                self._step_now = True
                continue
            await self._wait(self._refresh)  # data, or a background step that changed something, wakes it

    async def read_next(self, timeout_seconds: float | None = None) -> EventRead | None:
        """The next event, or None if none came within ``timeout_seconds`` (Java's readNextEvent).

        Raises:
            StopAsyncIteration: the group reached the end of its data (its end cuts).
            As ``__anext__``.
        """
        try:
            async with asyncio.timeout(timeout_seconds):
                return await self.__anext__()
        except TimeoutError:
            return None

    async def _run_step(self) -> None:
        """Runs a group step to its end even if the caller is cancelled: a step changes the shared state
        and then the reader's own, and stopping between the two would let two readers own a segment.
        A step left running by a cancelled caller is awaited (and its outcome raised) by the next one,
        before any event is handed out."""
        task = self._step_task
        if task is None:
            task = self._step_task = asyncio.get_running_loop().create_task(self._step())
        await asyncio.shield(task)  # raises the step's failure (and again on every later call)
        self._step_task = None

    def _take(self) -> EventRead | None:
        current = self._current
        if current is not None and self._streak < _STREAK_MAX:
            item = current.next_event()
            if item is not None:
                self._streak += 1
                payload = item[0]
                if payload is not None and self._deserialize is None:  # the common case, inlined
                    return EventRead(payload, current.segment, item[1], item[2])
                return self._event(item, current)
        for reader in self._rotation:
            item = reader.next_event()
            if item is not None:
                self._current, self._streak = reader, 0
                self._rotation.remove(reader)
                self._rotation.append(reader)
                return self._event(item, reader)
        return None

    def _event(self, item: Found, reader: SegmentReader) -> EventRead:


        payload, offset, size = item
        if payload is None:
            return LargeEventRead(self, reader, offset, size)
        data = payload if self._deserialize is None else self._deserialize(payload)
        return EventRead(data, reader.segment, offset, size)

    def _check_truncations(self) -> None:
        """Raises TruncatedData once per truncation met (before any event after the cut is handed out)."""
        for reader in self._rotation:
            if reader.truncated is not None:
                start, reader.truncated = reader.truncated, None
                self._truncations = max(0, self._truncations - 1)
                raise TruncatedData(f"data of {reader.segment} before offset {start} was truncated; "
                                    f"reading goes on from there")

    async def _wait(self, timeout: float) -> None:
        if timeout <= 0:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
        except TimeoutError:
            pass
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ segment readers' owner

    async def endpoint_of(self, segment: str) -> Endpoint:
        return await self._stores.endpoint_of(segment)

    async def connection(self, endpoint: Endpoint) -> WireConnection:
        return await self._connections.get(endpoint)

    def forget_endpoint(self, segment: str) -> None:
        self._stores.forget(segment)

    def token_for(self, segment: str) -> str:
        return self._stores.token_for(segment)

    def token_expired(self, segment: str) -> None:
        self._stores.tokens.expired(segment)

    def data_arrived(self) -> None:
        self._wake()

    def truncated(self) -> None:
        self._truncations += 1
        self._wake()

    def segment_failed(self, reader: SegmentReader, error: BaseException) -> None:
        self._failure = error
        self._wake()

    # ------------------------------------------------------------------ the group step

    async def _step(self, blocking: bool = True) -> None:
        """One group step (see the module docstring). A *blocking* step runs while the application waits
        in ``__anext__`` (no event is handed out meanwhile), so it may release segments and answer
        checkpoints at exact positions; a background step (every ``refresh_ms``) does everything else
        (dead readers, completions, acquisitions) and asks for a blocking step when one is needed."""
        async with self._step_lock:
            await self._step_locked(blocking)

    async def _step_locked(self, blocking: bool) -> None:
        loop = asyncio.get_running_loop()
        if blocking:
            self._step_now = False
        state, _ = await self._store.fetch()
        if self.reader_id not in state.readers:
            await self._drop_all()
            raise ReinitializationRequired(f"reader {self.reader_id} was declared offline; create a new reader")
        others = [reader for reader in state.readers if reader != self.reader_id]
        reports = await self._store.reports(others)
        dead = self._watch.dead(others, reports, loop.time(), self._timeout)
        finished = [reader for reader in self._rotation if reader.finished]
        completions = [(reader.segment, reader.offset, await self._successors(reader.segment))
                       for reader in finished]
        positions = self.positions() if blocking else {}
        handed = self._marker if blocking else None  # a checkpoint the application saw: report it now

        def transition(state: GroupState) -> tuple[dict[str, int], str | None, bool, bool, dict[str, int]]:

            state.check_member(self.reader_id)
            for reader in dead:
                if reader in state.readers:
                    state.remove_reader(reader, reports.get(reader, (0, None))[1])
            for segment, end_offset, successors in completions:
                state.complete(self.reader_id, segment, end_offset, successors)
            owed = state.owes_checkpoint(self.reader_id)
            hand_over, wants_blocking = None, False
            if owed is not None:
                if not blocking:
                    wants_blocking = True
                elif owed.silent or not self._checkpoint_events or owed.name == handed:
                    state.checkpoint(self.reader_id, owed.name, positions)
                else:
                    hand_over = owed.name
            if state.owes_checkpoint(self.reader_id) is None:
                owned = state.owned(self.reader_id)
                excess = state.excess(self.reader_id)
                if excess and not blocking:
                    wants_blocking = True
                for segment in sorted(owned, key=self._buffered_of)[:excess if blocking else 0]:
                    state.release(self.reader_id, segment, positions.get(segment, owned[segment]))
                state.acquire(self.reader_id, state.to_acquire(self.reader_id))
            return (dict(state.owned(self.reader_id)), hand_over, wants_blocking, state.is_end_of_data(),
                    dict(state.end_offsets))

        try:
            outcome, _ = await self._store.update(transition)
        except ReinitializationRequired:
            await self._drop_all()
            raise
        owned, hand_over, wants_blocking, end_of_data, end_offsets = outcome
        if dead:
            log.info("readers declared offline", extra={"group": self.group.name, "readers": dead})
        if blocking:
            self._marker = None
        if hand_over is not None:
            self._marker_pending = hand_over
        # The segments read are exactly those the state written says this reader owns, not those this
        # transition took or released: when the reply to a write is lost and the write is retried, the retry's
        # transition runs on a state that already holds the first one's changes (found by the simulation,
        # seed 111: segments acquired by a write whose reply was lost were owned and never read).
        for segment in [segment for segment in self._segments if segment not in owned]:
            self._drop(segment)  # completed or released
        for segment, offset in owned.items():
            if segment not in self._segments:
                self._open(segment, offset, end_offsets.get(segment))
        self._end_of_data = end_of_data and not self._segments
        if wants_blocking:
            self._step_now = True
        self._wake()

    def _buffered_of(self, segment: str) -> int:
        reader = self._segments.get(segment)
        return reader.buffered if reader is not None else 0

    async def _successors(self, segment: str) -> dict[str, list[str]]:
        owner = segment_of(segment)
        successors = await self._controller.get_successors(owner)  # retried within its budget
        result = {}
        for segment_range, predecessors in successors.successors:
            result[segment_range.segment.qualified_name] = [
                type(owner)(owner.scope, owner.stream, predecessor).qualified_name for predecessor in predecessors]
        return result

    def _open(self, segment: str, offset: int, end_offset: int | None) -> None:
        reader = SegmentReader(segment, offset, end_offset, self, self.config.read_size_bytes,
                               self.config.max_event_buffer_bytes)
        self._segments[segment] = reader
        self._rotation.append(reader)
        reader.start()

    def _drop(self, segment: str) -> None:
        reader = self._segments.pop(segment, None)
        if reader is None:
            return
        reader.close()
        self._rotation.remove(reader)
        if self._current is reader:
            self._current = None

    async def _drop_all(self) -> None:
        for segment in list(self._segments):
            self._drop(segment)

    async def _beat(self) -> None:
        """Every refresh interval: write the processed positions (the liveness signal), then take a
        background group step."""
        while not self._closed:
            await asyncio.sleep(self._refresh)
            try:
                await self._store.report(self.reader_id, self.positions())
                await self._step(blocking=False)
            except asyncio.CancelledError:
                raise
            except ReinitializationRequired as error:
                self._failure = error
                self._wake()
                return
            except TributaryError as error:
                log.warning("reader heartbeat or group step failed",
                            extra={"reader": self.reader_id, "error": repr(error)})
