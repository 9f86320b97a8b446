"""Simulated TCP connections: two ``SimTransport`` ends and a ``Pipe`` for each direction.

Theory of operation
-------------------
A ``Pipe`` models the two kernels and the wire between the ends:

* ``write`` puts bytes in the sender's user-space buffer (``get_write_buffer_size``); as much as the
  window allows (``Network.window`` bytes per direction: the two kernels' buffers) moves at once onto
  the wire, cut at random boundaries into segments, each arriving after the link's latency (drawn
  from the world's RNG) and never before the segment ahead of it: bytes arrive in order, exactly
  once. The buffer above the high-water mark pauses the protocol (``pause_writing``); it resumes at
  the low-water mark (asyncio's own ``_FlowControlMixin`` does this part).
* Arrived bytes wait in the receiver's kernel buffer; the receiver's loop hands them to
  ``data_received`` (or a ``BufferedProtocol``'s buffer): all that arrived, coalesced, at most
  ``Network.max_read`` at a time, unless reading is paused. Consuming them opens the window again.
  So data may be split or coalesced arbitrarily, as TCP allows.
* ``close`` sends what is buffered, then a FIN (``eof_received`` at the peer; when it returns a false
  value the peer's transport closes too); ``connection_lost(None)`` follows the flush. ``abort``
  drops the buffer (what is on the wire still arrives, then the FIN). Bytes arriving at a closed end
  reset the connection (an RST). A protocol callback that raises is reported to the loop's
  exception handler and aborts its end with ``connection_lost(exc)``, as in asyncio.
* A blocked link (a partition) holds a direction's segments back: TCP retransmits, nothing is lost
  while the connection lives; after ``Network.stall_reset_after`` seconds of held data the
  connection resets. ``heal`` retransmits what was held, after a fresh latency.
* A reset gives both ends ``connection_lost(ConnectionResetError)``.

The kernel-side work (the pipes' timers, resets) runs in the network's own context, outside every
process, so it goes on while a process is paused; the protocol callbacks run in the context of
whoever created the end (the ``create_connection`` caller, the ``create_server`` caller), so they
are held while it is paused and dropped once it is dead. What a paused process writes (only the
callback that paused it can: a blocking call, ``Process.pause`` from inside, as a journal's slow
fsync does) stays in its buffer until the pause ends, as the real call would have returned only then.

Not simulated: bandwidth (only latency and windows), acknowledgement latency (window updates reach
the sender at once), TCP keepalive (an idle connection survives any partition, as it does by
default), a one-way partition's effect on acks (the other direction flows), loopback-only binding,
RST for unread data at close (it is dropped), writes after ``close`` while the buffer drains (dropped).
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
from asyncio.constants import _SendfileMode
from asyncio.transports import _FlowControlMixin
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tests.simulation.loop import Owner

if TYPE_CHECKING:
    from tests.simulation.network import Network, SimServer

_FIN = None  # the segment that ends a direction


class SimTransport(_FlowControlMixin):
    """One end of a simulated TCP connection, behaving as asyncio's socket transports do.

    Write-side flow control (water marks, ``pause_writing``/``resume_writing``) is asyncio's own
    ``_FlowControlMixin``, so it behaves exactly as in asyncio's socket transports."""

    _sendfile_compatible = _SendfileMode.FALLBACK  # loop.sendfile reads the file and writes it here

    if TYPE_CHECKING:  # _FlowControlMixin's own methods, which typeshed does not declare
        def _maybe_pause_protocol(self) -> None: ...

        def _maybe_resume_protocol(self) -> None: ...

    def __init__(self, connection: Connection, address: tuple[str, int], context: contextvars.Context,
                 owner: Owner | None) -> None:
        super().__init__(None, connection.network.loop)
        self._conn = connection
        self._network = connection.network
        self._loop = connection.network.loop
        self.address = address
        self.context = context
        self.owner = owner
        self.peer: SimTransport = self  # set once both ends exist
        self.inbound: Pipe | None = None  # set once both ends exist
        self.outbound: Pipe | None = None
        self._protocol: Any = None
        self._established = False  # connection_made has been called
        self._closing = False  # close/abort called, or the connection is lost
        self._socket_closed = False  # connection_lost is scheduled: the socket is gone
        self._eof_written = False
        self._reading_paused = False
        self._outbuf: deque[bytes] = deque()
        self._outbuf_size = 0
        self._rcvbuf = bytearray()
        self._fin_received = False
        self._eof_delivered = False
        self._delivery_scheduled = False
        self._pump_scheduled = False

    # -- asyncio.Transport ---------------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer.address
        if name == "sockname":
            return self.address
        if name == "socket":
            return None  # there is no real socket to hand out
        return default

    def is_closing(self) -> bool:
        return self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[no-any-return]

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    def pause_reading(self) -> None:
        if self._closing or self._reading_paused:
            return
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._closing or not self._reading_paused:
            return
        self._reading_paused = False
        self._schedule_delivery()

    def get_write_buffer_size(self) -> int:
        return self._outbuf_size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._eof_written:
            raise RuntimeError("Cannot call write() after write_eof()")
        if not data or self._socket_closed:
            return  # asyncio drops writes to a closed transport too (it only logs after a few)
        self._outbuf.append(bytes(data))
        self._outbuf_size += len(data)
        self._pump()
        self._maybe_pause_protocol()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._closing or self._eof_written:
            return
        self._eof_written = True
        self._pump()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._discard_received()
        self._pump()  # sends the FIN and schedules connection_lost once the buffer is flushed

    def abort(self) -> None:
        self._abort(None)

    def _abort(self, exc: BaseException | None) -> None:
        """Closes now: the buffer is dropped, the peer gets what is on the wire and then the FIN."""
        if self._socket_closed:
            return
        self._closing = True
        self._outbuf.clear()
        self._outbuf_size = 0
        self._discard_received()
        if self.outbound is not None and not self.outbound.fin_sent:
            self.outbound.send_fin()
        self._lose(exc)

    # -- sending -------------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Moves what the window allows from the user buffer onto the wire; FIN and close after a flush.

        Not while the owner is paused: a process blocked in a call (a journal's fsync on its loop) writes in the
        callback that blocked it only after the call returns, so what it wrote leaves when the pause ends."""
        pipe = self.outbound
        if pipe is None or self._socket_closed:
            return
        if self.owner is not None and self.owner.paused:
            if not self._pump_scheduled:
                self._pump_scheduled = True
                self._loop.call_soon(self._scheduled_pump, context=self.context)  # held until the pause ends
            return
        room = self._network.window - pipe.admitted
        while self._outbuf and room > 0:
            chunk = self._outbuf.popleft()
            if len(chunk) > room:
                self._outbuf.appendleft(chunk[room:])
                chunk = chunk[:room]
            self._outbuf_size -= len(chunk)
            room -= len(chunk)
            pipe.send(chunk)
        self._maybe_resume_protocol()  # may write more (and so pump again)
        if self._outbuf or self._socket_closed:
            return
        if (self._eof_written or self._closing) and not pipe.fin_sent:
            pipe.send_fin()
        if self._closing:
            self._lose(None)

    def _schedule_pump(self) -> None:
        if self._outbuf and not self._pump_scheduled and not self._socket_closed:
            self._pump_scheduled = True
            self._loop.call_soon(self._scheduled_pump, context=self.context)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    # -- receiving -----------------------------------------------------------------------------------

    def _arrived(self, data: bytes) -> None:
        """Kernel side: bytes reached this end (called by the pipe, outside every process)."""
        if self._closing:
            assert self.inbound is not None
            self.inbound.admitted -= len(data)  # nobody reads any more; the window stays open
            self.peer._schedule_pump()
            return
        self._rcvbuf += data
        self._schedule_delivery()

    def _fin_arrived(self) -> None:
        self._fin_received = True
        self._schedule_delivery()

    def _schedule_delivery(self) -> None:
        if self._delivery_scheduled or not self._established or self._closing or self._reading_paused:
            return
        if self._rcvbuf or (self._fin_received and not self._eof_delivered):
            self._delivery_scheduled = True
            self._loop.call_soon(self._deliver, context=self.context)

    def _deliver(self) -> None:
        """Process side: hands arrived bytes (then the EOF) to the protocol."""
        self._delivery_scheduled = False
        if self._closing or self._reading_paused:
            return
        if self._rcvbuf:
            try:
                self._read_some()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - handed on, as asyncio does
                self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")
                return
            self._schedule_delivery()
            return
        if self._fin_received and not self._eof_delivered:
            self._eof_delivered = True
            try:
                keep_open = self._protocol.eof_received()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - handed on, as asyncio does
                self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
                return
            if not keep_open:
                self.close()

    def _read_some(self) -> None:
        """One read: at most ``max_read`` bytes, into ``data_received`` or a BufferedProtocol's buffer."""
        size = min(len(self._rcvbuf), self._network.max_read)
        protocol = self._protocol
        if isinstance(protocol, asyncio.BufferedProtocol):
            buffer = memoryview(protocol.get_buffer(-1)).cast("B")
            if not len(buffer):
                raise RuntimeError("get_buffer() returned an empty buffer")
            size = min(size, len(buffer))
            buffer[:size] = self._rcvbuf[:size]
        else:
            data = bytes(self._rcvbuf[:size])
        del self._rcvbuf[:size]
        assert self.inbound is not None
        self.inbound.admitted -= size
        self.peer._schedule_pump()
        if isinstance(protocol, asyncio.BufferedProtocol):
            protocol.buffer_updated(size)
        else:
            protocol.data_received(data)

    def _discard_received(self) -> None:
        if self._rcvbuf and self.inbound is not None and not self._conn.dead:
            self.inbound.admitted -= len(self._rcvbuf)
            self.peer._schedule_pump()
        self._rcvbuf.clear()

    # -- the end of the end --------------------------------------------------------------------------

    def _establish(self, protocol: Any) -> None:
        self._protocol = protocol
        protocol.connection_made(self)
        self._established = True
        self._schedule_delivery()

    def _lose(self, exc: BaseException | None) -> None:
        """The socket is gone: ``connection_lost(exc)`` is called soon, in this end's context."""
        if self._socket_closed:
            return
        self._socket_closed = True
        self._closing = True
        self._outbuf.clear()
        self._outbuf_size = 0
        self._discard_received()
        self._loop.call_soon(self._call_connection_lost, exc, context=self.context)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            if self._established:
                self._protocol.connection_lost(exc)
        finally:
            self._protocol = None
            self._conn.maybe_forget()

    def _fatal_error(self, exc: BaseException, message: str) -> None:
        self._report(exc, message)
        self._conn.network._record("fatal", self._conn.id, type(exc).__name__)
        self._abort(exc)  # connection_lost(exc), as asyncio's _force_close does

    def _report(self, exc: BaseException, message: str) -> None:
        self._loop.call_exception_handler({"message": message, "exception": exc, "transport": self,
                                           "protocol": self._protocol})

    def __repr__(self) -> str:
        state = "closed" if self._socket_closed else "closing" if self._closing else "open"
        return f"<SimTransport #{self._conn.id} {self.address[0]}:{self.address[1]} -> " \
               f"{self.peer.address[0]}:{self.peer.address[1]} {state}>"


class Pipe:
    """One direction of a connection: the sender's kernel buffer, the wire, the receiver's kernel buffer."""

    def __init__(self, connection: Connection, src: SimTransport, dst: SimTransport, label: str) -> None:
        self.conn = connection
        self.network = connection.network
        self.src, self.dst, self.label = src, dst, label
        self.segments: deque[tuple[float, bytes | None]] = deque()  # (arrival time, bytes or _FIN), in order
        self.admitted = 0  # bytes on the wire or in the receiver's kernel buffer (<= the window)
        self.last_arrival = 0.0
        self.fin_sent = False
        self.timer: asyncio.TimerHandle | None = None
        self.stalled_since: float | None = None
        self.stall_timer: asyncio.TimerHandle | None = None

    def send(self, chunk: bytes) -> None:
        self.admitted += len(chunk)
        rng = self.network.world.random
        cuts: list[int] = []
        if len(chunk) > 1:
            cuts = sorted(rng.sample(range(1, len(chunk)), min(rng.randint(0, 2), len(chunk) - 1)))
        start = 0
        for end in [*cuts, len(chunk)]:
            self._queue(chunk[start:end])
            start = end

    def send_fin(self) -> None:
        self.fin_sent = True
        self._queue(_FIN)

    def _queue(self, segment: bytes | None) -> None:
        arrival = max(self.last_arrival, self.network.loop.time() + self.network.latency(self.src.address[0],
                                                                                         self.dst.address[0]))
        self.last_arrival = arrival
        self.segments.append((arrival, segment))
        self._arm()

    def _arm(self) -> None:
        if self.timer is None and self.segments and self.stalled_since is None and not self.conn.dead:
            self.timer = self.network.loop.call_at(self.segments[0][0], self._on_timer, context=self.network.context)

    def _on_timer(self) -> None:
        self.timer = None
        if self.conn.dead:
            return
        if self.network.is_blocked(self.src.address[0], self.dst.address[0]):
            self._stall()
            return
        now = self.network.loop.time()
        data: list[bytes] = []
        fin = False
        while self.segments and self.segments[0][0] <= now:
            segment = self.segments.popleft()[1]
            if segment is None:
                fin = True
            else:
                data.append(segment)
        size = sum(map(len, data))
        self.network._record("deliver", self.conn.id, self.label, size, int(fin))
        if self.dst._socket_closed:
            self.admitted -= size
            if size:  # bytes reached a closed socket: it answers with an RST
                self.conn.reset("data reached a closed socket")
                return
        else:
            if data:
                self.dst._arrived(b"".join(data))
            if fin:
                self.dst._fin_arrived()
        self._arm()
        self.conn.maybe_forget()

    def _stall(self) -> None:
        if self.stalled_since is not None:
            return
        self.stalled_since = self.network.loop.time()
        self.network._record("hold", self.conn.id, self.label)
        self.stall_timer = self.network.loop.call_later(self.network.stall_reset_after, self._stall_expired,
                                                        context=self.network.context)

    def _stall_expired(self) -> None:
        self.stall_timer = None
        if self.stalled_since is not None and not self.conn.dead:
            self.conn.reset(f"no delivery for {self.network.stall_reset_after:g} s across a partition")

    def unstall(self) -> None:
        """The link is open again: what was held back is retransmitted now."""
        if self.stalled_since is None:
            return
        self.stalled_since = None
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None
        self.network._record("release", self.conn.id, self.label)
        now = self.network.loop.time()
        last = now
        restamped: deque[tuple[float, bytes | None]] = deque()
        for _, segment in self.segments:
            last = max(last, now + self.network.latency(self.src.address[0], self.dst.address[0]))
            restamped.append((last, segment))
        self.segments = restamped
        self.last_arrival = max(self.last_arrival, last)
        self._arm()

    def stop(self) -> None:
        self.segments.clear()
        self.admitted = 0
        for timer in (self.timer, self.stall_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.stall_timer = None
        self.stalled_since = None


class Connection:
    """A TCP connection: two ends (``client``, ``server``) and their two pipes."""

    def __init__(self, network: Network, number: int, listener: SimServer) -> None:
        self.network = network
        self.id = number
        self.listener = listener  # the server that accepted it
        self.dead = False
        self.client: SimTransport
        self.server: SimTransport
        self.pipes: tuple[Pipe, Pipe]

    def join(self, client: SimTransport, server: SimTransport) -> None:
        self.client, self.server = client, server
        client.peer, server.peer = server, client
        up, down = Pipe(self, client, server, "c>s"), Pipe(self, server, client, "s>c")
        client.outbound = server.inbound = up
        server.outbound = client.inbound = down
        self.pipes = (up, down)

    def ends(self) -> tuple[SimTransport, SimTransport]:
        return self.client, self.server

    def reset(self, reason: str) -> None:
        if self.dead:
            return
        self.dead = True
        self.network._record("reset", self.id, reason)
        for pipe in self.pipes:
            pipe.stop()
        for end in self.ends():
            end._lose(ConnectionResetError(errno.ECONNRESET, f"Connection reset by peer ({reason})"))
        self.network._forget(self)

    def maybe_forget(self) -> None:
        if not self.dead and all(end._socket_closed for end in self.ends()) and \
                not any(pipe.segments for pipe in self.pipes):
            self.dead = True
            for pipe in self.pipes:
                pipe.stop()
            self.network._record("closed", self.id)
            self.network._forget(self)
