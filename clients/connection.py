"""A wire-protocol connection to a segment store, multiplexing requests and flows.

Theory of operation. ``connect`` opens TCP, exchanges Hello and from then on
every frame the server sends is decoded as it arrives (``data_received``) and
delivered without a task switch, to one of two kinds of receiver, both keyed by
request id:

* a one-shot *request*: ``request``/``expect`` register a future that the reply
  carrying that request id completes;
* a *flow* (as Java's clients call it): a long-lived receiver, such as a segment
  writer or a segment reader, that uses one request id for everything it sends
  and gets every reply carrying that id through ``reply_received``.

Requests may be pipelined; replies may come in any order. Losing the connection
fails every pending future with ConnectionFailed chained to its cause, and tells
every flow through ``connection_failed``. Writes go straight to the transport;
``drain`` waits while the transport's buffer is above its high-water mark.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias, cast

import wire
from wire import commands as wc
from wire.base import Command, Reply, Request

from .errors import ConnectionFailed, ProtocolViolation, RequestTimeout

log = logging.getLogger("tributary.client")

_request_ids = itertools.count(1)

WRITE_BUFFER_HIGH = 4 * 1024 * 1024
"""Unsent bytes above which ``drain`` waits."""

_KEEPALIVE_FRAME = wire.encode(wc.KeepAlive())
SILENT_PERIODS = 3  # keep-alive periods without a byte from the store before it is taken for gone
_ABANDONED_REMEMBERED = 4096


def next_request_id() -> int:
    """A process-wide increasing request id (as the Rust client does)."""
    return next(_request_ids)


class Flow(Protocol):
    """A long-lived receiver of the replies carrying one request id."""

    def reply_received(self, reply: Reply) -> None: ...

    def connection_failed(self, error: ConnectionFailed) -> None: ...


class WireConnection(asyncio.Protocol):
    """One TCP connection to a segment store. Create it with :meth:`connect`."""

    def __init__(self, endpoint: tuple[str, int] = ("", 0), max_pending: int = 100_000,
                 keepalive_seconds: float | None = None):
        self.endpoint = endpoint
        self._keepalive = keepalive_seconds
        self._keepalive_timer: asyncio.TimerHandle | None = None
        self._last_received = 0.0
        self._decoder = wire.Decoder()
        self._pending: dict[int, asyncio.Future[Reply]] = {}
        self._flows: dict[int, Flow] = {}
        self._abandoned: dict[int, None] = {}  # request ids given up (closed flows, timed-out requests)
        self._max_pending = max_pending
        self._failure: ConnectionFailed | None = None
        self._transport: asyncio.Transport | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self.server_versions: tuple[int, int] | None = None

    def __repr__(self) -> str:
        host, port = self.endpoint
        state = "closed" if self._failure is not None else "open"
        return f"<WireConnection {host}:{port} {state} pending={len(self._pending)} flows={len(self._flows)}>"

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 10.0,
                      keepalive_seconds: float | None = None, ssl_context: ssl.SSLContext | None = None
                      ) -> WireConnection:
        """Connects (over TLS with ``ssl_context``) and completes the Hello exchange.

        With ``keepalive_seconds``, a connection that received nothing for that long sends a
        KeepAlive (the server echoes it at once, even while it holds a tail read), and one that
        received nothing for three times that long is taken for dead and aborted, which fails its
        requests and flows (they reconnect): how a stalled, half-open connection is noticed. The
        connect itself is bounded the same way (a paused store's kernel still accepts the TCP
        connection, but no Hello comes back).

        Raises:
            ConnectionFailed: nothing accepted the connection, or no Hello came back in time.
        """
        loop = asyncio.get_running_loop()
        if keepalive_seconds:
            timeout = min(timeout, SILENT_PERIODS * keepalive_seconds)
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: cls((host, port), keepalive_seconds=keepalive_seconds), host, port, ssl=ssl_context,
                    server_hostname=host if ssl_context is not None else None)
                hello_future = connection._register(0)
                connection.send(wc.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
                hello = cast(wc.Hello, await hello_future)  # request id 0 is the handshake's

        except (TimeoutError, OSError) as error:
            raise ConnectionFailed(f"cannot connect to {host}:{port}: {error!r}") from error
        connection.server_versions = (hello.high_version, hello.low_version)
        return connection

    @property
    def closed(self) -> bool:
        return self._failure is not None

    # ------------------------------------------------------------------ sending

    def send(self, command: Command) -> None:
        """Writes one frame (no reply is awaited). Raises ConnectionFailed."""
        transport = self._transport
        if self._failure is not None or transport is None:
            raise ConnectionFailed(f"connection to {self._address} is closed") from self._failure
        transport.writelines(wire.encode_parts(command))

    def expect(self, request_id: int) -> asyncio.Future[Reply]:
        """Registers interest in the reply carrying ``request_id`` (before sending its request)."""
        if self._failure is not None:
            raise ConnectionFailed(f"connection to {self._address} is closed") from self._failure
        return self._register(request_id)

    async def request(self, command: Request, timeout: float | None = 30.0) -> Reply:
        """Sends ``command`` and returns its reply (error replies are returned, not raised).

        Raises:
            ConnectionFailed: the connection is or became closed.
            RequestTimeout: no reply within ``timeout`` seconds.
        """
        future = self.expect(command.request_id)
        self.send(command)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            self._pending.pop(command.request_id, None)
            self._abandon(command.request_id)
            raise RequestTimeout(f"no reply to {type(command).__name__} from {self._address} "
                                 f"within {timeout} s") from None

    async def drain(self) -> None:
        """Waits until the transport's unsent bytes fall below the high-water mark. Raises ConnectionFailed."""
        if self._failure is not None:
            raise ConnectionFailed(f"connection to {self._address} is closed") from self._failure
        if not self._write_paused:
            return
        if self._drain_waiter is None:
            self._drain_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drain_waiter)

    # ------------------------------------------------------------------ flows

    def open_flow(self, request_id: int, flow: Flow) -> None:
        """Routes every reply carrying ``request_id`` to ``flow`` until :meth:`close_flow`.

        Raises:
            ConnectionFailed: the connection is closed.
        """
        if self._failure is not None:
            raise ConnectionFailed(f"connection to {self._address} is closed") from self._failure
        if request_id in self._flows or request_id in self._pending:
            raise ProtocolViolation(f"request id {request_id} is already in use on {self._address}")
        self._flows[request_id] = flow

    def close_flow(self, request_id: int) -> None:
        """Stops routing replies to a flow; replies already on their way are dropped, not violations."""
        if self._flows.pop(request_id, None) is not None:
            self._abandon(request_id)

    def _abandon(self, request_id: int) -> None:
        abandoned = self._abandoned
        abandoned[request_id] = None
        if len(abandoned) > _ABANDONED_REMEMBERED:
            del abandoned[next(iter(abandoned))]

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Closes the connection; pending requests and flows fail with ConnectionFailed."""
        self._fail(ConnectionFailed(f"connection to {self._address} closed by the client"))
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Closes the connection at once (unsent data is dropped)."""
        self._fail(ConnectionFailed(f"connection to {self._address} aborted by the client"))
        if self._transport is not None:
            self._transport.abort()

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # create_connection makes stream transports
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        if self._keepalive:
            loop = asyncio.get_running_loop()
            self._last_received = loop.time()
            self._keepalive_timer = loop.call_later(self._keepalive, self._check_alive)

    def _check_alive(self) -> None:
        """Every ``keepalive_seconds``: ping a quiet connection; abort one silent for three periods."""
        if self._failure is not None:
            return
        loop = asyncio.get_running_loop()
        period = cast(float, self._keepalive)  # only scheduled with keep-alives on
        silent = loop.time() - self._last_received
        if silent >= SILENT_PERIODS * period:
            self._fail(ConnectionFailed(f"connection to {self._address} silent for {silent:.1f} s"))
            self._live_transport.abort()
            return
        if silent >= period:
            self._live_transport.write(_KEEPALIVE_FRAME)
        self._keepalive_timer = loop.call_later(period, self._check_alive)

    def data_received(self, data: bytes) -> None:
        if self._keepalive:
            self._last_received = asyncio.get_running_loop().time()
        decoder = self._decoder
        decoder.feed(data)
        try:
            # A server sends replies only (a request frame would fail here, as any malformed stream); no cast
            # call per reply on this path, the annotation says it.
            reply: Reply | None
            while (reply := decoder.next_command()) is not None:  # type: ignore[assignment]
                flow = self._flows.get(reply.request_id)
                if flow is not None:
                    flow.reply_received(reply)
                else:
                    self._deliver(reply)
        except wire.ProtocolError as error:
            self._fail(ProtocolViolation(f"undecodable reply from {self._address}: {error}"))
            self._live_transport.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, error: Exception | None) -> None:
        cause = f": {error!r}" if error is not None else ""
        if isinstance(error, ssl.SSLError):  # not a store going away: the TLS stream broke (flows retry, and fail)
            log.warning("TLS error on a segment store connection", extra={"store": self._address, "error": repr(error)})
        self._fail(ConnectionFailed(f"connection to {self._address} lost{cause}"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain()

    # ------------------------------------------------------------------ internals

    @property
    def _address(self) -> str:
        return f"{self.endpoint[0]}:{self.endpoint[1]}"

    @property
    def _live_transport(self) -> asyncio.Transport:
        """The transport (set by connection_made before anything is sent or received)."""
        return cast(asyncio.Transport, self._transport)

    def _register(self, request_id: int) -> asyncio.Future[Reply]:
        if len(self._pending) >= self._max_pending:
            raise ProtocolViolation(f"more than {self._max_pending} requests pending")
        if request_id in self._pending or request_id in self._flows:
            raise ProtocolViolation(f"request id {request_id} is already pending")
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    def _deliver(self, reply: Reply) -> None:
        future = self._pending.pop(reply.request_id, None)
        if future is None:
            if isinstance(reply, wc.KeepAlive) or reply.request_id in self._abandoned:
                return  # a ping's echo, or the answer to something this side gave up on
            self._fail(ProtocolViolation(f"unsolicited reply {reply!r} from {self._address}"))
            self._live_transport.close()
            return
        if not future.done():
            future.set_result(reply)

    def _wake_drain(self) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            if self._failure is not None:
                waiter.set_exception(self._failure)
            else:
                waiter.set_result(None)

    def _fail(self, error: ConnectionFailed | ProtocolViolation) -> None:
        if self._failure is not None:
            return
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
        if not isinstance(error, ConnectionFailed):
            failure = ConnectionFailed(str(error))
            failure.__cause__ = error
            error = failure
        self._failure = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        self._wake_drain()
        flows, self._flows = self._flows, {}
        for flow in flows.values():
            flow.connection_failed(error)


Endpoint: TypeAlias = tuple[str, int]
"""A segment store's (host, port)."""

EndpointResolver: TypeAlias = Callable[[str], Awaitable[Endpoint]]
"""The endpoint of the store owning a segment (by qualified segment name)."""

ConnectionFactory: TypeAlias = Callable[[Endpoint], Awaitable["WireConnection"]]
"""An open connection to an endpoint (a :class:`ConnectionCache`'s ``get``)."""


class ConnectionCache:
    """One live connection per endpoint, re-established on demand; concurrent callers share one connect.

    Each user of the SDK that needs its own sockets (an event writer, a reader) owns
    one of these, so a connection dropped under one user never disturbs another.
    """

    def __init__(self, connect_timeout: float = 10.0, keepalive_seconds: float | None = None,
                 ssl_context: ssl.SSLContext | None = None):
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive_seconds
        self._ssl = ssl_context  # TLS to the segment stores (None: plain TCP)
        self._connections: dict[Endpoint, WireConnection] = {}
        self._connecting: dict[Endpoint, asyncio.Future[WireConnection]] = {}


    async def get(self, endpoint: Endpoint) -> WireConnection:
        """The open connection to ``endpoint``, connecting if there is none. Raises ConnectionFailed."""
        connection = self._connections.get(endpoint)
        if connection is not None and not connection.closed:
            return connection
        pending = self._connecting.get(endpoint)
        if pending is None:
            pending = asyncio.ensure_future(WireConnection.connect(*endpoint, timeout=self._connect_timeout,
                                                                   keepalive_seconds=self._keepalive,
                                                                   ssl_context=self._ssl))
            self._connecting[endpoint] = pending
            pending.add_done_callback(lambda _: self._connecting.pop(endpoint, None))
        connection = await asyncio.shield(pending)
        self._connections[endpoint] = connection
        return connection

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for pending in list(self._connecting.values()):
            pending.cancel()
        for connection in connections.values():
            await connection.close()
