"""The setup of an append flow, shared by the segment writer and the byte-stream writer: its states
and transitions as data, and the driver both writers inherit.

A writer appends over a *flow* of a connection (its request id). Before it may send appends it has
to be attached to a connection of its segment's store and set up (SetupAppend, answered by
AppendSetup(L), L the last event number the store has of this writer id); after a lost connection
it goes through the same steps again and re-sends what was not acknowledged.

The rules:

1. A flow is in exactly one :class:`State`. It moves only on an :class:`Event`, and only as
   :data:`TRANSITIONS` says; an event the table has no entry for in the current state is ignored
   (it comes late: an AppendSetup after a close, a lost connection after a seal), and the caller
   does nothing more about it.
2. Appends are sent only in READY, over the one connection the flow is attached to. In every other
   state they wait (``_pump`` checks READY, once per block, not per event).
3. ATTACHED (CONNECTING -> SETTING_UP) sends SetupAppend at once. An attachment that arrives in any
   other state is refused: its flow on that connection is closed.
4. SET_UP (SETTING_UP -> READY) first acknowledges everything numbered up to L (the store has it),
   then re-sends every unacknowledged append in order with its original number, before any new one:
   a reconnect neither loses nor duplicates (the store drops what it already has).
5. LOST (connection lost, WrongHost, an expired token, an ack timeout: SETTING_UP or READY ->
   CONNECTING) releases the connection and schedules the next attempt: after a lost connection or
   an expired token the retry policy's next delay; after WrongHost the writer's own
   ``_wrong_host_delay``. A reply showing the flow works (AppendSetup) restarts the policy's budget.
6. SEALED, FAILED and CLOSED end the flow and release its connection; only CLOSED follows them.
   What happens to unacknowledged appends (handed back, failed) is the writer's business.
7. A flow set up but silent (SETTING_UP, or READY with appends in flight) for longer than the ack
   timeout is aborted by its watchdog: the connection's loss is LOST for every flow on it.

The table drives only these steps; the per-append path is the writer's own and reads ``_state``
(an attribute of the writer itself, as this driver is its base class) with one identity test.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

from coordination.retry import Backoff
from wire import commands as wc
from wire.base import Reply
from wire.constants import NULL_ATTRIBUTE_VALUE

from .attach import FlowAttacher
from .connection import Endpoint, WireConnection
from .errors import ConnectionFailed, TokenRejected


class State(enum.Enum):
    """Where an append flow is (see the module docstring)."""

    NEW = "new"
    CONNECTING = "connecting"
    SETTING_UP = "setting-up"
    READY = "ready"
    SEALED = "sealed"
    FAILED = "failed"
    CLOSED = "closed"


class Event(enum.Enum):
    """What happens to an append flow."""

    OPEN = "open"  # the writer knows its segment and starts connecting
    ATTACHED = "attached"  # a connection carries the flow (SetupAppend is sent)
    SET_UP = "set-up"  # AppendSetup came
    LOST = "lost"  # the connection is gone or must be replaced
    SEALED = "sealed"  # the segment is sealed
    FAILED = "failed"  # retries spent, or a reply that ends the flow
    CLOSED = "closed"  # the writer is closed


_ENDS = {Event.SEALED: State.SEALED, Event.FAILED: State.FAILED, Event.CLOSED: State.CLOSED}

TRANSITIONS: dict[State, dict[Event, State]] = {
    State.NEW: {Event.OPEN: State.CONNECTING, Event.SEALED: State.SEALED, Event.CLOSED: State.CLOSED},
    State.CONNECTING: {Event.ATTACHED: State.SETTING_UP, **_ENDS},
    State.SETTING_UP: {Event.SET_UP: State.READY, Event.LOST: State.CONNECTING, **_ENDS},
    State.READY: {Event.LOST: State.CONNECTING, **_ENDS},
    State.SEALED: {Event.CLOSED: State.CLOSED},
    State.FAILED: {Event.CLOSED: State.CLOSED},
    State.CLOSED: {},
}
"""state -> {event: next state}; rule 1."""

LIVE = (State.CONNECTING, State.SETTING_UP, State.READY)
"""The states in which appends are (or will be) sent."""


class AppendFlow:
    """The driver of :data:`TRANSITIONS`: the base of the segment writer and the byte-stream pipeline.

    The writer sets ``_state``, ``_connection``, ``_attacher``, ``last_progress``, ``_request_id``,
    ``writer_id`` and ``_inflight`` (its unacknowledged appends, oldest first) and provides the hooks
    below; the driver attaches, sets up, re-sends and reconnects.
    """

    _state: State
    _connection: WireConnection | None
    _attacher: FlowAttacher | None
    _request_id: int
    _inflight: deque[Any]
    _wrong_host_delay: float | None = None  # rule 5
    writer_id: Any
    last_progress: float

    # ------------------------------------------------------------------ the writer's hooks

    def reply_received(self, reply: Reply) -> None:
        """A reply on the flow (the connection calls it); the writer handles its own and hands
        WrongHost and AuthTokenCheckFailed to :meth:`_reconnect_reply`."""
        raise NotImplementedError

    @property
    def _flow_segment(self) -> str:
        raise NotImplementedError

    def _now(self) -> float:
        raise NotImplementedError

    def _retry_policy(self) -> Backoff:
        raise NotImplementedError

    async def _endpoint_of(self, segment: str) -> Endpoint:
        raise NotImplementedError

    async def _connection_for(self, endpoint: Endpoint) -> WireConnection:
        raise NotImplementedError

    def _forget_endpoint(self, segment: str) -> None:
        raise NotImplementedError

    def _token_for(self, segment: str) -> str:
        raise NotImplementedError

    def _token_expired(self, segment: str) -> None:
        raise NotImplementedError

    def _acknowledge(self, event_number: int) -> None:
        raise NotImplementedError

    def _send(self, append: Any) -> None:
        raise NotImplementedError

    def _pump(self) -> None:
        raise NotImplementedError

    def _flow_failed(self, error: BaseException) -> None:
        """Retries spent or a fatal reply: the writer ends the flow (``_step(Event.FAILED)``) its way."""
        raise NotImplementedError

    def _disconnected(self) -> None:
        """The connection is released: nothing more is answered on it (a hook; nothing by default)."""

    def _flow_changed(self) -> None:
        """Something the writer's waiters may look at changed (a hook; nothing by default)."""

    # ------------------------------------------------------------------ moving

    def _step(self, event: Event) -> bool:
        """Moves as :data:`TRANSITIONS` says; False, and no move, where it has no entry (rule 1)."""
        target = TRANSITIONS[self._state].get(event)
        if target is None:
            return False
        self._state = target
        return True

    def _finish(self, event: Event) -> bool:
        """SEALED, FAILED or CLOSED: moves and releases the connection; False where the table refuses (rule 6)."""
        if not self._step(event):
            return False
        self._release_connection()
        return True

    def _release_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close_flow(self._request_id)
        self._disconnected()

    def _reconnect(self, delay: float | None) -> None:
        """LOST: releases the connection and schedules an attempt after ``delay`` (None: the policy's next)."""
        self._release_connection()
        if self._step(Event.LOST):
            self._connect_later(delay)

    def _connect_later(self, delay: float | None) -> None:
        """Schedules an attempt to attach after ``delay`` (None: the retry policy's next delay), in CONNECTING."""
        if self._state is not State.CONNECTING:
            return
        if self._attacher is None:
            segment = self._flow_segment
            self._attacher = FlowAttacher(segment, self._request_id, self, endpoint_of=self._endpoint_of,
                                          connection_for=self._connection_for, policy=self._retry_policy(),
                                          on_attached=self._attached, on_failed=self._flow_failed, purpose="append",
                                          forget_endpoint=self._forget_endpoint)
        self._attacher.attach(delay)

    def _stop_attaching(self) -> None:
        if self._attacher is not None:
            self._attacher.cancel()

    # ------------------------------------------------------------------ the steps (rules 3-5)

    def _attached(self, connection: WireConnection) -> None:
        if not self._step(Event.ATTACHED):
            connection.close_flow(self._request_id)
            return
        self._connection = connection
        self.last_progress = self._now()
        segment = self._flow_segment
        connection.send(wc.SetupAppend(self._request_id, self.writer_id, segment, self._token_for(segment)))

    def _setup_done(self, last_event_number: int) -> None:
        if self._state is not State.SETTING_UP:
            return  # rule 1: no entry (acknowledging below must not happen either)
        if last_event_number != NULL_ATTRIBUTE_VALUE:
            self._acknowledge(last_event_number)
        self._step(Event.SET_UP)
        assert self._attacher is not None, "set up through the attacher"
        self._attacher.progress()
        self.last_progress = self._now()
        for append in self._inflight:
            self._send(append)
        self._pump()
        self._flow_changed()

    def connection_failed(self, error: ConnectionFailed) -> None:
        """Reconnects after the connection was lost (called by the connection)."""
        self._disconnected()
        if self._step(Event.LOST):
            self._connection = None
            self._connect_later(None)
        self._flow_changed()

    def _reconnect_reply(self, reply: Reply) -> bool:
        """WrongHost and AuthTokenCheckFailed (rule 5); False for any other reply."""
        if isinstance(reply, wc.WrongHost):
            self._forget_endpoint(self._flow_segment)
            self._reconnect(self._wrong_host_delay)
        elif isinstance(reply, wc.AuthTokenCheckFailed):
            if reply.error_code != wc.AuthTokenCheckFailed.TOKEN_EXPIRED:
                self._flow_failed(TokenRejected(reply))
            else:
                self._token_expired(self._flow_segment)  # reconnecting fetches a new one
                self._reconnect(None)
        else:
            return False
        return True

    def _silent_too_long(self, now: float, timeout: float) -> bool:
        """Set up but unanswered for ``timeout`` seconds (rule 7)."""
        waiting = self._state is State.SETTING_UP or (self._state is State.READY and bool(self._inflight))
        return waiting and now - self.last_progress > timeout
