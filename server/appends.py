"""The append path of one connection: writer states, dedup checks, acks in order.

Theory of operation (protocol reference §3.4). SetupAppend registers a writer
on this connection with the last event number the segment stores for it, durably:
while an append to the segment is still being logged (the writer's own, sent on a
connection it has since dropped, may be among them), the answer waits until it is
durable or failed. Answered at once with the number before it, the writer would
send that event again; and if a seal is decided meanwhile, it would be told
SegmentIsSealed and write the event to the successor as well, where the first one
lands too: read twice (found by the simulation, seed 10). The setup also claims the
writer's events on the segment at once: appends of the writer that arrive by another
connection after it (sent before the writer gave that connection up) are refused:
InvalidEventNumber, and nothing more from that writer on that connection is stored
(``containers/writer_attributes.py``). On a segment deleted since, the setup names the
last event number it stored of the writer (``containers/state.py``). Each
append (AppendBlockEnd, ConditionalAppend, ConditionalBlockEnd) is checked in
Java's order; connection-level violations close the connection. The append is
submitted to the container with two attribute updates decided atomically with
it: the writer's attribute ``ReplaceIfEquals(new=eventNumber, expected=prev)``
(dedup and fencing of zombie writers) and ``EVENT_COUNT += numEvents``.

A duplicate (an event number at or below the writer's last stored or submitted
one, as a client resends after a lost ack) is acknowledged, in order, without
being written again; Java would close the connection (lower) or append it a
second time (equal).

An append refused with SegmentIsSealed, NoSuchSegment or WrongHost ends the writer's
setup: the appends submitted with it fail as a consequence and are not answered, and
those that arrive before the writer sets up again are dropped. The connection stays
open: closing it (as one more reply, InvalidEventNumber, would) made a client that was
still sending get a reset, which dropped the first reply unread (simulation seed 196).

Submission is synchronous (no task per append): the container returns a
future. Replies for one writer go out strictly in submission order even though
a rejected append fails at once while earlier ones are still being logged: each
writer keeps a queue of outstanding appends and replies leave from its head.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from wire import Reply
from wire import commands as wc
from wire.envelope import envelope

from . import errors, metrics
from .containers import SegmentContainer, WriterClaim
from .replies import CloseConnection, append_error_reply

if TYPE_CHECKING:
    from wire.fields import BytesLike


class WriterState:
    """One writer registered on this connection."""

    __slots__ = ("writer_id", "segment", "container", "claim", "ready", "last_stored", "last_acked", "last_seen",
                 "outstanding", "failed")

    def __init__(self, writer_id: uuid.UUID, segment: str, container: SegmentContainer, claim: WriterClaim):
        self.writer_id = writer_id
        self.segment = segment
        self.container = container
        self.claim = claim  # dead once the writer is set up again, here or on another connection
        self.ready = False  # AppendSetup answered: the writer may append
        self.last_stored = 0  # highest event number submitted (the stored one once ready)
        self.last_acked = 0
        self.last_seen = 0  # the decoder's per-connection monotonicity counter starts at 0
        # (future, append) in submission order: the future of the offset the append lands at (of None for a duplicate)
        self.outstanding: deque[tuple[asyncio.Future[Any], _Append]] = deque()
        self.failed = False


class _Append:
    __slots__ = ("event_number", "request_id", "conditional", "size", "duplicate", "events", "arrived")

    def __init__(self, event_number: int, request_id: int, conditional: bool, size: int, duplicate: bool = False,
                 events: int = 0, arrived: float = 0.0):
        self.event_number = event_number
        self.request_id = request_id
        self.conditional = conditional
        self.size = size
        self.duplicate = duplicate
        self.events = events
        self.arrived = arrived  # perf_counter at arrival, when metrics are on


def _last_stored(container: SegmentContainer, command: wc.SetupAppend) -> int:
    """The writer's last event number stored in the segment, or in it when it was deleted: then AppendSetup
    names it, and the writer's appends after it are answered NoSuchSegment, so the writer sends only those to
    the successors (containers/state.py says why). Raises SegmentStoreError."""
    try:
        return container.get_attribute(command.segment, command.writer_id)
    except errors.NoSuchSegment:
        last = container.deleted_writer(command.segment, command.writer_id)
        if last is None:
            raise
        return last


class AppendProcessor:
    """Handles SetupAppend and appends for one connection.

    ``send(reply)`` writes a reply; ``close(reason)`` closes the connection;
    ``on_bytes_settled(n)`` tells the connection ``n`` append bytes are no longer outstanding.
    """

    def __init__(self, container_for: Callable[[str], SegmentContainer], send: Callable[[Reply], None],
                 close: Callable[[str], None],
                 on_bytes_settled: Callable[[int], None]):
        self._container_for = container_for
        self._send = send
        self._close = close
        self._settled = on_bytes_settled
        self._writers: dict[uuid.UUID, WriterState] = {}
        self._submitted_to: set[SegmentContainer] = set()  # containers given appends since flush_submitted

    def flush_submitted(self) -> None:
        """Hands the appends submitted since the last call to the log now if it is idle (see the pipeline)."""
        for container in self._submitted_to:
            container.flush_if_idle()
        self._submitted_to.clear()

    def setup_append(self, command: wc.SetupAppend) -> Reply | None:
        """Returns AppendSetup (or an error reply) for a SetupAppend; None while a mutation of the segment is
        still being logged: then ``setup_append_settled`` answers, once it is durable or failed (module docstring).
        The writer's claim on the segment is taken at once, before any wait: appends that reach the store by
        another connection from now on are refused (writer_attributes.py says why).
        """
        self._forget_writer(command.writer_id)
        try:
            container = self._container_for(command.segment)
            state = self._writers[command.writer_id] = WriterState(
                command.writer_id, command.segment, container, container.claim_writer(command.segment,
                                                                                      command.writer_id))
            if container.has_pending(command.segment):
                return None
            last = _last_stored(container, command)
        except errors.SegmentStoreError as error:  # raises CloseConnection if the error has no reply
            self._forget_writer(command.writer_id)
            return append_error_reply(error, command.writer_id, command.request_id, command.segment)
        return self._set_up(command, state, last)

    def setup_append_settled(self, command: wc.SetupAppend) -> Awaitable[Reply]:
        """The answer to a SetupAppend that ``setup_append`` left unanswered: ``setup_append`` once every mutation
        decided so far is durable or failed."""
        return self._settled_setup(command, self._writers[command.writer_id])

    async def _settled_setup(self, command: wc.SetupAppend, state: WriterState) -> Reply:
        try:
            await state.container.settled()
            last = _last_stored(state.container, command)
        except errors.SegmentStoreError as error:  # raises CloseConnection if the error has no reply
            if self._writers.get(command.writer_id) is state:
                self._forget_writer(command.writer_id)
            return append_error_reply(error, command.writer_id, command.request_id, command.segment)
        return self._set_up(command, state, last)

    def _set_up(self, command: wc.SetupAppend, state: WriterState, last: int) -> Reply:
        state.last_stored = state.last_acked = last
        state.ready = True  # (a state set up again meanwhile or closed with the connection stays refused)
        return wc.AppendSetup(command.request_id, command.segment, command.writer_id, last)

    def _forget_writer(self, writer_id: uuid.UUID) -> None:
        state = self._writers.pop(writer_id, None)
        if state is not None:
            state.container.release_writer(state.claim)

    def close(self) -> None:
        """The connection is gone: its writers are no longer set up (their attributes may expire)."""
        for writer_id in list(self._writers):
            self._forget_writer(writer_id)

    def append_block_end(self, command: wc.AppendBlockEnd) -> int:
        return self._append(command.writer_id, command.last_event_number, command.num_events, command.data,
                            command.request_id, None)

    def conditional_append(self, command: wc.ConditionalAppend) -> int:
        data = envelope(command.data)  # a ConditionalAppend's envelope is part of what is appended
        return self._append(command.writer_id, command.event_number, 1, data, command.request_id,
                            command.expected_offset)

    def conditional_block_end(self, command: wc.ConditionalBlockEnd) -> int:
        return self._append(command.writer_id, command.event_number, 1, command.data, command.request_id,
                            command.expected_offset)

    def _append(self, writer_id: uuid.UUID, event_number: int, event_count: int, data: BytesLike, request_id: int,
                expected_offset: int | None) -> int:
        """Submits one append; returns the bytes now outstanding for it. Raises CloseConnection."""
        state = self._writers.get(writer_id)
        if state is None or not state.ready:
            raise CloseConnection(f"append from writer {writer_id} without SetupAppend")
        if state.failed:
            return 0  # sent before the writer heard of the failure: dropped (module docstring)
        if not state.claim.live:
            # A zombie, as the attribute check would call it, answered as Java answers one, but the connection stays
            # open: other flows may share it (a reader's), and closing it stalled them (test_partitions, 5% loss).
            state.failed = True  # (its later appends are dropped)
            self._send(wc.InvalidEventNumber(writer_id, request_id, "", event_number))
            return 0
        if event_number < state.last_seen:
            raise CloseConnection(f"event numbers of writer {writer_id} went backwards")
        state.last_seen = event_number
        if event_number <= state.last_stored:
            return self._duplicate(state, event_number, request_id, expected_offset is not None)
        previous, state.last_stored = state.last_stored, event_number
        future = state.container.submit_event_append(state.segment, data, writer_id, event_number, previous,
                                                     event_count, expected_offset)
        self._submitted_to.add(state.container)
        append = _Append(event_number, request_id, expected_offset is not None, len(data), events=event_count,
                         arrived=time.perf_counter() if metrics.enabled else 0.0)
        state.outstanding.append((future, append))
        future.add_done_callback(lambda _: self._drain(state))
        return len(data)

    def _duplicate(self, state: WriterState, event_number: int, request_id: int, conditional: bool) -> int:
        """Queues the acknowledgement of an append already stored (or in flight); writes nothing."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        state.outstanding.append((done, _Append(event_number, request_id, conditional, 0, duplicate=True)))
        self._drain(state)
        return 0

    def _drain(self, state: WriterState) -> None:
        """Sends the replies of this writer's finished appends, oldest first."""
        outstanding = state.outstanding
        while outstanding and outstanding[0][0].done():
            future, append = outstanding.popleft()
            self._settled(append.size)
            if future.cancelled():
                continue
            error = future.exception()
            try:
                if append.duplicate:
                    self._acknowledge_duplicate(state, append)
                elif error is None:
                    self._acknowledge(state, append, future.result() + append.size)
                else:
                    self._reject(state, append, error)
            except CloseConnection as close:
                self._close(str(close))
                return

    def _acknowledge(self, state: WriterState, append: _Append, new_length: int) -> None:
        if append.arrived:
            metrics.APPEND_LATENCY.observe(time.perf_counter() - append.arrived)
            metrics.APPEND_EVENTS.inc(append.events)
            metrics.APPEND_BYTES.inc(append.size)
        previous = state.last_acked
        state.last_acked = max(previous, append.event_number)
        if previous < append.event_number:
            self._send(wc.DataAppended(state.writer_id, append.event_number, previous, append.request_id,
                                       new_length))

    def _acknowledge_duplicate(self, state: WriterState, append: _Append) -> None:
        if state.failed:
            return  # the original failed; the writer must set up again
        try:
            length = state.container.get_info(state.segment).length
        except errors.SegmentStoreError:
            length = -1
        self._send(wc.DataAppended(state.writer_id, append.event_number, state.last_acked, append.request_id,
                                   length))

    def _reject(self, state: WriterState, append: _Append, error: BaseException) -> None:
        """Answers a failed append; what happens to the writer depends on the reply (§3.4.3). After a failure
        that ends the writer's setup, its appends that were submitted with it fail as a consequence, unanswered:
        one more reply (InvalidEventNumber, for an append whose predecessor was refused) would close the
        connection, and with it the first reply before the client reads it (module docstring)."""
        if state.failed:
            return
        if not isinstance(error, errors.SegmentStoreError):
            raise CloseConnection(f"append to {state.segment} failed: {error!r}")
        reply = append_error_reply(error, state.writer_id, append.request_id, state.segment, append.event_number,
                                   append.conditional)
        self._send(reply)
        if type(reply) is wc.ConditionalCheckFailed:  # nothing was written; the writer stays set up
            if not state.outstanding:
                state.last_stored = state.last_acked
        elif type(reply) is wc.InvalidEventNumber:
            raise CloseConnection(f"writer {state.writer_id} does not own its event numbers on {state.segment}")
        else:  # the writer must set up again
            state.failed = True
