"""Segment slices: ``_SliceReader``, the SDK event reader under a binding ``StreamReader``, and the
``Slice`` objects (of ``EventData``) it hands out.

Theory of operation. The binding hands out *segment slices*: ``await reader.get_segment_slice_async()``
returns the events available now in one segment the reader owns; iterating the slice consumes
them; ``release_segment(slice)`` gives the segment back with what was not consumed. Here a reader
is an SDK :class:`~clients.reader.event_reader.EventReader` (``_SliceReader``) that pulls events
into per-segment queues on the runtime loop; a slice takes every event queued for one segment (the
one queued longest). Before it is made, a read still in flight for that segment is waited for if the
segment held more than the reader has (one request asks for its length), so a slice holds what the
segment held when it was asked for (up to the reader's buffer), however late the reply of a read
comes in.

Positions follow what the application consumed, not what was pulled: ``_SliceReader.positions``
(what heartbeats, releases to other readers, checkpoints and going offline record) gives, for each
owned segment, the offset of the first event not yet consumed from a slice (or queued), else the
offset after everything pulled. The application consumes in its own thread while the loop thread
records positions, and both take one lock (the application once per event, the loop once per batch);
a group step that may release segments to other readers holds it for the whole step (milliseconds),
and a segment released that way takes its queued events along and ends its outstanding slice (the
next owner reads them), so no event is delivered twice or lost on a rebalance.

A slice whose events were all consumed no longer holds its segment; a slice released (or garbage
collected, as the binding's are dropped) puts what it did not consume back at the front of its
segment's queue (``release_segment`` does that under the lock, in the caller's thread, without a trip
to the loop). Before a slice is served from the queues, a group step the SDK reader has due (handing
segments to a reader that joined, answering a checkpoint) is taken, so a reader with plenty queued
still shares its segments; it releases first the segments with no slice out. At the end of the
group's data (sealed streams read to their end), and when no event came for a second, slices are
empty, as the binding's are.

One difference from the binding remains: a segment read to its end (sealed) is reported finished to
the group once its last events are queued here, not once the application consumed them, so those
events are not read again by another reader if this one goes offline before consuming them.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Iterator

from clients.errors import ClosedError, TributaryError, TruncatedData
from clients.reader.event_reader import EventRead, EventReader, LargeEventRead
from clients.reader.reader_group import ReaderGroup

from ._common import Internal
from ._runtime import Runtime

_SETTLE_TURNS = 2  # event-loop turns a new slice waits for replies already received (no clock involved)
CATCH_UP_SECONDS = 1.0  # the longest a slice waits for the reply of a read bringing data the segment held
IDLE_SLICE_SECONDS = 1.0  # with no event for this long, a slice request returns an empty slice (the binding's)



# ---------------------------------------------------------------------- events and slices


class EventData(Internal):
    """One event of a slice: ``data()`` (bytes) and ``offset()`` (where it starts in its segment)."""

    _offset: int
    _data: bytes

    @classmethod
    def _of(cls, offset: int, data: bytes) -> EventData:
        event = cls._new()
        event._offset, event._data = offset, data
        return event

    def data(self) -> bytes:
        return self._data

    def offset(self) -> int:
        return self._offset

    def to_str(self) -> str:
        return f"offset {self._offset} data :[{', '.join(map(str, self._data))}]"

    def __repr__(self) -> str:
        return f"EventData({self.to_str()})"


class _SliceState:
    """The loop-side record of one slice: its segment's events (with their pull order) and how many
    the application consumed. Read and changed only under the reader's ``guard``."""

    __slots__ = ("segment", "events", "index", "ended")

    def __init__(self, segment: str, events: list[tuple[int, EventData]]):
        self.segment = segment
        self.events = events
        self.index = 0  # the next event to hand out
        self.ended = False  # released, or revoked: it hands out nothing more

    @property
    def holding(self) -> bool:
        """Whether it still has events for the application (then no other slice of its segment is made)."""
        return not self.ended and self.index < len(self.events)


class Slice(Internal):
    """The events of one segment handed to the application at once; iterate it (each event once)."""

    _reader: _SliceReader | None
    _state: _SliceState | None

    @classmethod
    def _of(cls, reader: _SliceReader | None, state: _SliceState | None) -> Slice:
        piece = cls._new()
        piece._reader, piece._state = reader, state
        if reader is not None and state is not None:
            weakref.finalize(piece, _release_later, reader.runtime, reader, state)
        return piece

    def __iter__(self) -> Iterator[EventData]:
        return self

    def __next__(self) -> EventData:
        state, reader = self._state, self._reader
        if state is None or reader is None:
            raise StopIteration
        with reader.guard:
            if not state.holding:
                raise StopIteration
            event = state.events[state.index][1]
            state.index += 1
            if state.index == len(state.events):  # all handed out: keep no bytes for a slice kept around
                state.events, state.index = [], 0
        return event


def _release_later(runtime: Runtime, reader: _SliceReader, state: _SliceState) -> None:
    runtime.later(reader.release(state))


# ---------------------------------------------------------------------- the reader on the loop


class _Requeued(Exception):
    """A released slice put events back while a take waited for new ones."""


class _SliceReader(EventReader):
    """An SDK event reader that hands out segment slices (see the module docstring)."""

    def __init__(self, group: ReaderGroup, reader_id: str, runtime: Runtime):
        super().__init__(group, reader_id)
        self.runtime = runtime
        self.guard = threading.RLock()  # the application's thread against the loop's
        self._queued: dict[str, deque[tuple[int, EventData]]] = {}
        self._slices: dict[str, _SliceState] = {}  # the newest slice of each segment
        self._pulled = 0
        self._taking = asyncio.Lock()
        self._offline = asyncio.Event()
        self._requeued = asyncio.Event()  # a released slice put events back: a waiting take looks again

    # ------------------------------------------------------------------ positions: what was consumed

    def positions(self, handed_out: bool = False) -> dict[str, int]:
        with self.guard:
            result = {}
            for name, reader in self._segments.items():
                held = self._first_held(name)
                if held is not None:
                    result[name] = held
                else:
                    result[name] = reader.processed if reader.large_remaining else reader.offset
            return result

    def _first_held(self, segment: str) -> int | None:
        state = self._slices.get(segment)
        if state is not None and state.holding:
            return state.events[state.index][1].offset()
        queue = self._queued.get(segment)
        return queue[0][1].offset() if queue else None

    async def _step_locked(self, blocking: bool) -> None:
        if not blocking:
            await super()._step_locked(blocking)
            return
        # A blocking step may release segments at the positions it reads: the application consumes
        # nothing in between (the lock is held across the step's awaits by this thread only).
        self.guard.acquire()
        try:
            await super()._step_locked(blocking)
        finally:
            self.guard.release()

    def _buffered_of(self, segment: str) -> int:
        """Which segments a step releases first (the least buffered): those with no slice out, then the
        ones with the fewest events queued here."""
        with self.guard:
            state = self._slices.get(segment)
            held = 1 << 40 if state is not None and state.holding else 0
            return held + len(self._queued.get(segment, ())) + super()._buffered_of(segment)

    def _drop(self, segment: str) -> None:
        reader = self._segments.get(segment)
        if reader is not None and not reader.finished:  # given to another reader: what is held goes with it
            with self.guard:
                self._queued.pop(segment, None)
                state = self._slices.pop(segment, None)
                if state is not None:
                    state.ended = True
        super()._drop(segment)

    # ------------------------------------------------------------------ slices

    async def take_slice(self) -> _SliceState | None:
        """The next slice; None (an empty slice) when no event came for :data:`IDLE_SLICE_SECONDS` or the
        group's data ended. Raises ClosedError once offline."""
        async with self._taking:
            deadline = asyncio.get_running_loop().time() + IDLE_SLICE_SECONDS
            while True:
                self._requeued.clear()
                if self._step_task is not None or self._step_now:
                    await self._run_step()  # a release to another reader (or a checkpoint) is due
                with self.guard:
                    state = self._slice_from_queue()
                if state is not None:
                    return state
                try:
                    event = await self._next_event(deadline)
                except _Requeued:
                    continue
                except (StopAsyncIteration, TimeoutError):
                    return None
                except TruncatedData:
                    continue  # the binding's reader moves on to the segment's new head too
                await self._queue(event)
                await self._drain()
                if await self._catch_up(event.segment):
                    await self._drain()

    async def _drain(self) -> None:
        """Queues every event buffered now (after letting replies that already arrived land)."""
        for _ in range(_SETTLE_TURNS):
            await asyncio.sleep(0)
        events: list[EventRead] = []
        while self._drainable():
            ready = self._take()
            if ready is None:
                break
            if isinstance(ready, LargeEventRead):  # its chunks are read before anything else
                self._queue_all(events)
                events = []
                await self._queue(ready)
            elif not ready.is_checkpoint:
                events.append(ready)
        self._queue_all(events)

    async def _catch_up(self, segment: str) -> bool:
        """Waits until a read in flight brought what ``segment`` held when the slice was asked for (its
        length then), so that a slice does not depend on when the reply of a read comes in. Only when
        everything buffered was taken; at most :data:`CATCH_UP_SECONDS`. True if it waited for data."""
        reader = self._segments.get(segment)
        if reader is None or reader.finished or reader.buffered or not self._drainable():
            return False
        try:
            length = (await self._stores.raw.segment_info(segment)).write_offset
        except TributaryError:
            return False  # the reader meets the failure itself
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCH_UP_SECONDS
        waited = False
        while (self._segments.get(segment) is reader and reader._read_offset < length and not reader.finished
               and reader.buffered < self.config.read_size_bytes and self._failure is None):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            waited = True
            await self._wait(remaining)
        return waited

    async def _next_event(self, deadline: float) -> EventRead:
        """The next event of the SDK reader, by ``deadline`` (loop time; else TimeoutError). Raises
        ClosedError if the reader goes offline meanwhile, and _Requeued if a released slice put events
        back meanwhile (the SDK reader stops waiting then)."""
        if self._offline.is_set():
            raise ClosedError(f"reader {self.reader_id} is offline")
        step = asyncio.ensure_future(self.__anext__())
        offline = asyncio.ensure_future(self._offline.wait())
        requeued = asyncio.ensure_future(self._requeued.wait())
        try:
            await asyncio.wait({step, offline, requeued}, return_when=asyncio.FIRST_COMPLETED,
                               timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
        except BaseException:
            step.cancel()
            raise
        finally:
            offline.cancel()
            requeued.cancel()
        if not step.done():
            step.cancel()
            await asyncio.wait({step})
            if self._offline.is_set():
                raise ClosedError(f"reader {self.reader_id} is offline")
            if self._requeued.is_set():
                raise _Requeued
            raise TimeoutError
        return step.result()

    def _drainable(self) -> bool:
        """Whether buffered events may be taken without a group step first (none is due)."""
        return (self._failure is None and not self._step_now and self._step_task is None and not self._closed
                and self._marker_pending is None and not self._truncations)

    async def _queue(self, event: EventRead) -> None:
        if event.is_checkpoint:
            return
        if isinstance(event, LargeEventRead):
            event = EventRead(await event.read_all(), event.segment, event.offset, event.size)
        self._queue_all([event])

    def _queue_all(self, events: list[EventRead]) -> None:
        """Queues complete events, in the order pulled, under one acquisition of the lock."""
        if not events:
            return
        pulled, make = self._pulled, EventData._of
        with self.guard:
            queued = self._queued
            for event in events:
                pulled += 1
                data = event.data
                queue = queued.get(event.segment)
                if queue is None:
                    queue = queued[event.segment] = deque()
                queue.append((pulled, make(event.offset, data if type(data) is bytes else bytes(data))))
        self._pulled = pulled

    def _slice_from_queue(self) -> _SliceState | None:
        """A slice of the segment whose queued events wait longest, among those no slice holds."""
        best: str | None = None
        for segment, queue in self._queued.items():
            held = self._slices.get(segment)
            if not queue or (held is not None and held.holding):
                continue
            if best is None or queue[0][0] < self._queued[best][0][0]:
                best = segment
        if best is None:
            return None
        state = _SliceState(best, list(self._queued.pop(best)))
        previous = self._slices.get(best)
        if previous is not None:
            previous.ended = True
        self._slices[best] = state
        return state

    def release_now(self, state: _SliceState) -> None:
        """Takes a slice back (from any thread): what it did not hand out goes back to the front of its
        segment's queue, and a take waiting for events looks at the queues again."""
        if self._take_back(state) and self.runtime.alive:
            self.runtime.loop.call_soon_threadsafe(self._requeued.set)

    async def release(self, state: _SliceState) -> None:
        """:meth:`release_now` on the loop (for finalizers)."""
        if self._take_back(state):
            self._requeued.set()

    def _take_back(self, state: _SliceState) -> bool:
        with self.guard:
            return self._release_locked(state)

    def _release_locked(self, state: _SliceState) -> bool:
        """Ends the slice; True if it put events back."""
        requeued = False
        if self._slices.get(state.segment) is state:
            del self._slices[state.segment]
            if state.holding:
                queue = self._queued.setdefault(state.segment, deque())
                queue.extendleft(reversed(state.events[state.index:]))
                requeued = True
        state.ended = True
        return requeued

    async def go_offline(self) -> None:
        """Leaves the group at the positions after what the application consumed; slices end."""
        with self.guard:
            self._offline.set()
            for state in list(self._slices.values()):
                self._release_locked(state)
        await self.close()
