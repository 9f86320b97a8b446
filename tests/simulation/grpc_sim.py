"""A simulated gRPC (the ``grpc.aio`` API) over the world's network, for the controller and the SDK.

grpcio's asyncio API runs on C-core threads and real sockets, which the world cannot host. Inside the
world, ``install(world)`` (or ``patches(world)``, for ``World.patched()``) replaces ``grpc.aio.server``
and ``grpc.aio.insecure_channel`` by ``SimGrpcServer`` and ``SimChannel``; ``grpc.aio.secure_channel``
and ``add_secure_port`` raise ``NotSimulated``; the SDK's TLS probe (``clients.controller_probe.diagnose``)
answers as it does for a plaintext controller. Production code goes on calling the real grpc names
(``grpc.unary_unary_rpc_method_handler``, ``method_handlers_generic_handler``, the generated stubs and
servicers, ``grpc.StatusCode``, ``grpc.aio.AioRpcError``/``AbortError``/``UsageError``/``Metadata``), which
are plain Python and unchanged.

Theory of operation
-------------------
A channel holds at most one connection (``loop.create_connection`` to its target's host and port); its
calls are multiplexed on it by stream id, one length-prefixed frame each way (``_Frame``: this is a
simulation of gRPC's semantics, not of HTTP/2). The connection is ready once the server answered the
client's HELLO with SETTINGS, so a paused server process stalls connects as a SIGSTOPped one does.

What follows grpcio 1.85 (each point was checked against the real library):

* Channel states: IDLE until the first call; CONNECTING (calls wait, within their deadline); READY; a
  failed connect -> TRANSIENT_FAILURE: the waiting calls and the new ones fail at once with UNAVAILABLE
  "failed to connect to all addresses; ...", while the channel tries again in the background after a
  backoff (1 s, x1.6, jitter +-20 % from the world's RNG, at most 120 s; ``grpc.initial_reconnect_backoff_ms``
  and ``grpc.max_reconnect_backoff_ms`` are honoured) for as long as it was used in the last 30 minutes
  (``grpc.client_idle_timeout_ms``). A connect attempt lasts at most max(20 s, the backoff). A READY
  connection that is lost (reset, EOF, ping timeout, GOAWAY) takes the channel back to IDLE: its calls in
  flight fail UNAVAILABLE ("Stream removed (Socket closed)"), the next call connects again at once.
* Keep-alive: with ``grpc.keepalive_time_ms``, every that often from the connection's start a PING goes
  out while calls are open (or always, with ``grpc.keepalive_permit_without_calls``); no PONG within
  ``grpc.http2.ping_timeout_ms`` (60 s by default: ``grpc.keepalive_timeout_ms`` is not what bounds the
  wait in grpcio 1.85) closes the connection: UNAVAILABLE "Stream removed (ping timeout)". Without
  keep-alive a call to a silent peer ends DEADLINE_EXCEEDED "Deadline Exceeded".
* Calls start when the multicallable is called (a task of the caller) and are awaitable. A deadline
  cancels the call on the server too. Cancelling the call or the task awaiting it, or closing the channel
  (``close(grace)``: calls get ``grace`` seconds, then are cancelled), makes ``await call`` raise
  ``asyncio.CancelledError`` (not an AioRpcError: grpcio does the same; ``call.code()`` is CANCELLED).
  A call on a closed channel raises ``grpc.aio.UsageError("Channel is closed.")``.
* Server: handlers are looked up among the registered method handlers, then the generic handlers
  (UNIMPLEMENTED "Method not found!"); each call runs as a task of the server's process with a
  ``SimServicerContext``. ``abort`` raises ``grpc.aio.AbortError`` and ends the call with its code;
  another exception ends it with the code set (or UNKNOWN) and "Unexpected <class ...>: ..." (logged
  as grpcio logs it); ``abort`` with OK sends nothing (the client waits for its deadline, as with
  grpcio). The client's cancel, its deadline and a lost connection cancel the handler's task.
  ``stop(grace)`` closes the listeners, sends GOAWAY (calls that cross it are refused and retried by
  the client on a new connection, transparently), waits ``grace``, then ends what is left with
  UNAVAILABLE "Cancelling all calls".
* Message limits: ``grpc.max_receive_message_length`` (4 MiB by default) on both sides:
  RESOURCE_EXHAUSTED; ``maximum_concurrent_rpcs``: RESOURCE_EXHAUSTED.

The trace gets one ``grpc_call`` line per client call (source host, target, method, code), one
``grpc_serve`` line per call a server ended (address, method, code), channel state changes
(``grpc_channel``) and server starts and stops (``grpc_server``).

Not simulated: TLS (secure channels and ports), call credentials, interceptors, compression, streaming
RPCs (``unary_stream``/``stream_*``: the Controller API has none), HTTP/2 flow control and headers, name
resolution to several addresses and load balancing, retry policies from a service config, two servers on
one port through SO_REUSEPORT (grpc's default: refused with NotSimulated unless ``grpc.so_reuseport`` is
0), the server's ping policing (``grpc.http2.min_ping_interval_without_data_ms``, too_many_pings). A
paused process answers no PING: real grpc answers pings from C-core threads during a mere GC pause, so a
world pause is a SIGSTOP for gRPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import errno
import inspect
import logging
import math
import struct
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, cast

import grpc
import grpc.aio

from tests.simulation.errors import NotSimulated, SimulationError
from tests.simulation.loop import OWNER
from tests.simulation.network import OUTSIDE_HOST

if TYPE_CHECKING:
    from tests.simulation.network import SimServer
    from tests.simulation.world import World

Code = grpc.StatusCode
State = grpc.ChannelConnectivity
MetadataLike = grpc.aio.Metadata | Sequence[tuple[str, str | bytes]] | None

_SERVICER_LOG = logging.getLogger("grpc._cython.cygrpc")  # where grpcio logs what a servicer raised
_USER_AGENT = f"grpc-python-asyncio/{grpc.__version__} (simulated)"
_LOCAL_CANCELLATION = "Locally cancelled by application!"
_SOCKET_CLOSED = "Stream removed (Socket closed)"
_MAX_RECEIVE_DEFAULT = 4 * 1024 * 1024
_CODES = {code.value[0]: code for code in Code}

# --------------------------------------------------------------------------------------------- the wire


class _Frame(enum.IntEnum):
    HELLO = 1  # client -> server: the connection's preface
    SETTINGS = 2  # server -> client: the preface answered; the connection is ready
    REQUEST = 3  # client -> server: method, timeout, metadata, request message
    RESPONSE = 4  # server -> client: code, details, initial and trailing metadata, response message
    CANCEL = 5  # client -> server: the call is cancelled (RST_STREAM)
    REFUSED = 6  # server -> client: the call was not started (going away): try it on another connection
    GOAWAY = 7  # server -> client: no new calls on this connection
    PING = 8
    PONG = 9


_HEADER = struct.Struct(">IBI")  # payload length, frame type, stream id
_LENGTH = struct.Struct(">I")
_TIMEOUT = struct.Struct(">d")
_STATUS = struct.Struct(">i")


def _pack(*parts: bytes) -> bytes:
    return b"".join(_LENGTH.pack(len(part)) + part for part in parts)


def _unpack(data: bytes) -> list[bytes]:
    parts, at = [], 0
    while at < len(data):
        (size,) = _LENGTH.unpack_from(data, at)
        parts.append(data[at + 4:at + 4 + size])
        at += 4 + size
    return parts


def _pack_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> bytes:
    return _pack(*(_pack(key.encode(), b"b" + value if isinstance(value, bytes) else b"s" + value.encode())
                   for key, value in metadata))


def _unpack_metadata(data: bytes) -> tuple[tuple[str, str | bytes], ...]:
    pairs: list[tuple[str, str | bytes]] = []
    for entry in _unpack(data):
        key, value = _unpack(entry)
        pairs.append((key.decode(), value[1:] if value[:1] == b"b" else value[1:].decode()))
    return tuple(pairs)


class _Reply(NamedTuple):
    """How a call ended, as the client sees it."""

    code: grpc.StatusCode
    details: str = ""
    initial: tuple[tuple[str, str | bytes], ...] = ()
    trailing: tuple[tuple[str, str | bytes], ...] = ()
    message: bytes = b""

    def encode(self) -> bytes:
        return _pack(_STATUS.pack(self.code.value[0]), self.details.encode(), _pack_metadata(self.initial),
                     _pack_metadata(self.trailing), self.message)

    @classmethod
    def decode(cls, data: bytes) -> _Reply:
        code, details, initial, trailing, message = _unpack(data)
        return cls(_CODES[_STATUS.unpack(code)[0]], details.decode(), _unpack_metadata(initial),
                   _unpack_metadata(trailing), message)


_REFUSED = _Reply(Code.UNAVAILABLE, "refused: the server is going away")  # tried again on a new connection


class _Peer(asyncio.Protocol):
    """One end of a gRPC connection: frames in, frames out."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, kind: _Frame, stream: int, payload: bytes = b"") -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_HEADER.pack(len(payload), kind, stream) + payload)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while len(buffer) >= _HEADER.size:
            size, kind, stream = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + size:
                return
            payload = bytes(buffer[_HEADER.size:_HEADER.size + size])
            del buffer[:_HEADER.size + size]
            self.on_frame(_Frame(kind), stream, payload)

    def on_frame(self, kind: _Frame, stream: int, payload: bytes) -> None:
        raise NotImplementedError

    def eof_received(self) -> bool:
        return False  # the transport closes, connection_lost follows


def _method_name(method: str) -> str:
    return method.rpartition("/")[2]


def _split_address(address: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, ``dns:///host:port``, ``ipv4:host:port`` -> (host, port)."""
    if address.startswith("unix:"):
        raise NotSimulated(f"unix-socket gRPC targets are not simulated ({address})")
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if address.startswith(prefix):
            address = address[len(prefix):]
            break
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif address.count(":") == 1:
        host, port = address.split(":")
    else:
        host, port = address, ""
    if not port:
        if default_port is None:
            raise ValueError(f"no port in gRPC address {address!r}")
        return host, default_port
    return host, int(port)


def _owner_context() -> contextvars.Context:
    """A fresh context that belongs to the calling process (or to none)."""
    context = contextvars.Context()
    context.run(OWNER.set, OWNER.get())
    return context


def _own_host() -> str:
    owner = OWNER.get()
    return owner.host if owner is not None and owner.host is not None else OUTSIDE_HOST


def _as_metadata(metadata: MetadataLike) -> tuple[tuple[str, str | bytes], ...]:
    return tuple((str(key), value) for key, value in (metadata or ()))


def _limit(options: dict[str, Any], name: str) -> int | None:
    value = int(options.get(name, _MAX_RECEIVE_DEFAULT))
    return None if value < 0 else value


# --------------------------------------------------------------------------------------------- client


class _CallFailed(Exception):
    def __init__(self, reply: _Reply) -> None:
        super().__init__(reply.details)
        self.reply = reply


class _ClientConnection(_Peer):
    """A channel's connection: calls by stream id, the keep-alive pings."""

    def __init__(self, channel: SimChannel) -> None:
        super().__init__()
        self.channel = channel
        loop = channel._loop
        self.ready: asyncio.Future[str | None] = loop.create_future()  # None: ready; else why not
        self.streams: dict[int, asyncio.Future[_Reply]] = {}
        self.next_stream = 1
        self.draining = False  # GOAWAY received: no new calls here
        self.lost = False
        self.reason = _SOCKET_CLOSED
        self._keepalive: asyncio.TimerHandle | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.send(_Frame.HELLO, 0)

    @property
    def usable(self) -> bool:
        return self.ready.done() and self.ready.result() is None and not self.draining and not self.lost

    def open(self, method: str, timeout: float | None, metadata: tuple[tuple[str, str | bytes], ...],
             message: bytes) -> tuple[int, asyncio.Future[_Reply]]:
        stream = self.next_stream
        self.next_stream += 2
        reply: asyncio.Future[_Reply] = self.channel._loop.create_future()
        self.streams[stream] = reply
        limit = _TIMEOUT.pack(math.nan if timeout is None else timeout)
        self.send(_Frame.REQUEST, stream, _pack(method.encode(), limit, _pack_metadata(metadata), message))
        return stream, reply

    def cancel(self, stream: int) -> None:
        if self.streams.pop(stream, None) is not None:
            self.send(_Frame.CANCEL, stream)
            self._maybe_close()

    def on_frame(self, kind: _Frame, stream: int, payload: bytes) -> None:
        if kind is _Frame.SETTINGS:
            if not self.ready.done():
                self.ready.set_result(None)
                self._arm_keepalive()
        elif kind is _Frame.RESPONSE or kind is _Frame.REFUSED:
            reply = self.streams.pop(stream, None)
            if reply is not None and not reply.done():
                reply.set_result(_Reply.decode(payload) if kind is _Frame.RESPONSE else _REFUSED)
            self._maybe_close()
        elif kind is _Frame.GOAWAY:
            self.draining = True
            self.channel._detach(self, "GOAWAY")
            self._maybe_close()
        elif kind is _Frame.PONG and self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _maybe_close(self) -> None:
        if self.draining and not self.streams and self.transport is not None:
            self.transport.close()

    def _arm_keepalive(self) -> None:
        if self.channel._keepalive_time is not None and not self.lost:
            self._keepalive = self.channel._loop.call_later(self.channel._keepalive_time, self._keepalive_due)

    def _keepalive_due(self) -> None:
        if self.lost:
            return
        if (self.streams or self.channel._keepalive_without_calls) and self._watchdog is None:
            self.send(_Frame.PING, 0, b"keepaliv")
            self._watchdog = self.channel._loop.call_later(self.channel._ping_timeout, self._ping_timed_out)
        self._arm_keepalive()

    def _ping_timed_out(self) -> None:
        self._watchdog = None
        if not self.lost and self.transport is not None:
            self.reason = "Stream removed (ping timeout)"
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        for timer in (self._keepalive, self._watchdog):
            if timer is not None:
                timer.cancel()
        if not self.ready.done():
            self.ready.set_result("the connection closed during the handshake")
        streams, self.streams = self.streams, {}
        for reply in streams.values():
            if not reply.done():
                reply.set_result(_Reply(Code.UNAVAILABLE, self.reason))
        self.channel._detach(self, self.reason)


class SimChannel(grpc.aio.Channel):
    """What ``grpc.aio.insecure_channel(target, options=...)`` returns in the world (module docstring)."""

    def __init__(self, world: World, target: str, options: Sequence[tuple[str, Any]] | None = None, *,
                 interceptors: Sequence[Any] | None = None) -> None:
        if interceptors:
            raise NotSimulated("client interceptors are not simulated")
        self._world = world
        self._loop = world.loop
        self.target = target
        self._host, self._port = _split_address(target, 443)
        self._source = _own_host()
        self._context = _owner_context()
        opts = dict(options or ())
        self._options = opts
        keepalive = opts.get("grpc.keepalive_time_ms")
        self._keepalive_time = None if keepalive is None or int(keepalive) >= 2**31 - 1 else int(keepalive) / 1000
        self._keepalive_without_calls = bool(opts.get("grpc.keepalive_permit_without_calls", 0))
        self._ping_timeout = int(opts.get("grpc.http2.ping_timeout_ms", 60_000)) / 1000
        self._max_receive = _limit(opts, "grpc.max_receive_message_length")
        self._initial_backoff = int(opts.get("grpc.initial_reconnect_backoff_ms", 1_000)) / 1000
        self._max_backoff = int(opts.get("grpc.max_reconnect_backoff_ms", 120_000)) / 1000
        self._min_connect_timeout = int(opts.get("grpc.min_reconnect_backoff_ms", 20_000)) / 1000
        self._idle_timeout = int(opts.get("grpc.client_idle_timeout_ms", 30 * 60_000)) / 1000
        self._backoff = self._initial_backoff
        self._state = State.IDLE
        self._changed: list[asyncio.Future[None]] = []
        self._connection: _ClientConnection | None = None
        self._attempt: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._last_error = ""
        self._last_call = self._loop.time()
        self._calls: dict[SimUnaryUnaryCall, None] = {}  # in flight, in the order they were made
        self._closed = False

    def __repr__(self) -> str:
        return f"<SimChannel {self._source} -> {self.target} {self._state.name}>"

    # -- the multicallables ------------------------------------------------------------------------------

    def unary_unary(self, method: str, request_serializer: Callable[[Any], bytes] | None = None,
                    response_deserializer: Callable[[bytes], Any] | None = None,
                    _registered_method: bool | None = False) -> _UnaryUnaryMultiCallable:
        return _UnaryUnaryMultiCallable(self, method, request_serializer, response_deserializer)

    def unary_stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSimulated("streaming gRPC calls (unary_stream) are not simulated")

    def stream_unary(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSimulated("streaming gRPC calls (stream_unary) are not simulated")

    def stream_stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSimulated("streaming gRPC calls (stream_stream) are not simulated")

    # -- state -------------------------------------------------------------------------------------------

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        if try_to_connect and self._state is State.IDLE:
            self._connect()
        return self._state

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        while self._state is last_observed_state:
            await self._state_changed()

    async def channel_ready(self) -> None:
        while self._state is not State.READY:
            if self._state is State.SHUTDOWN:
                raise grpc.aio.UsageError("Channel is closed.")
            self.get_state(try_to_connect=True)
            await self._state_changed()

    def _state_changed(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._changed.append(waiter)
        return waiter

    def _set_state(self, state: grpc.ChannelConnectivity, reason: str = "") -> None:
        if state is self._state:
            return
        self._state = state
        self._world.record("grpc_channel", self._source, self.target, state.name, reason)
        waiters, self._changed = self._changed, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- connecting --------------------------------------------------------------------------------------

    async def _connection_for_call(self, wait_for_ready: bool) -> _ClientConnection:
        self._last_call = self._loop.time()
        while True:
            connection = self._connection
            if self._state is State.READY:
                if connection is not None and connection.usable:
                    return connection
                self._connection = None
                self._set_state(State.IDLE, _SOCKET_CLOSED)
            if self._state is State.IDLE:
                self._connect()
            elif self._state is State.TRANSIENT_FAILURE and not wait_for_ready:
                raise _CallFailed(_Reply(Code.UNAVAILABLE, self._last_error))
            elif self._state is State.SHUTDOWN:
                raise _CallFailed(_Reply(Code.CANCELLED, "the channel is closed"))
            await self._state_changed()

    def _connect(self) -> None:
        self._set_state(State.CONNECTING)
        self._attempt = self._loop.create_task(self._connect_once(), context=self._context)

    async def _connect_once(self) -> None:
        transport: asyncio.Transport | None = None
        connection: _ClientConnection | None = None
        try:
            async with asyncio.timeout(max(self._min_connect_timeout, self._backoff)):
                opened = await self._loop.create_connection(lambda: _ClientConnection(self), self._host, self._port)
                transport, connection = opened[0], cast(_ClientConnection, opened[1])
                problem = await connection.ready
        except OSError as error:  # refused, ETIMEDOUT, reset, and our own timeout (TimeoutError)
            problem = _connect_error(error)
        except BaseException:  # the channel closed meanwhile
            if transport is not None:
                transport.abort()
            raise
        if problem is None and (connection is None or connection.lost):
            problem = "Socket closed"
        if problem is not None:
            if transport is not None:
                transport.abort()
            self._last_error = (f"failed to connect to all addresses; last error: UNKNOWN: "
                                f"ipv4:{self._host}:{self._port}: {problem}")
            self._set_state(State.TRANSIENT_FAILURE, problem)
            delay = self._backoff * (1 + self._world.random.uniform(-0.2, 0.2))
            self._backoff = min(self._backoff * 1.6, self._max_backoff)
            self._retry = self._loop.call_later(delay, self._reconnect)
            return
        self._connection = cast(_ClientConnection, connection)
        self._backoff = self._initial_backoff
        self._set_state(State.READY)

    def _reconnect(self) -> None:
        self._retry = None
        if self._state is not State.TRANSIENT_FAILURE:
            return
        if self._loop.time() - self._last_call > self._idle_timeout:
            self._set_state(State.IDLE, "idle")
        else:
            self._connect()

    def _detach(self, connection: _ClientConnection, reason: str) -> None:
        """``connection`` takes no new calls any more (lost, or the server is going away)."""
        if connection is self._connection:
            self._connection = None
            if self._state is State.READY:
                self._set_state(State.IDLE, reason)

    # -- closing -----------------------------------------------------------------------------------------

    async def close(self, grace: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        calls = list(self._calls)
        if grace and calls:
            await asyncio.wait([call._done for call in calls], timeout=grace)
        for call in calls:
            call.cancel()
        if self._attempt is not None and not self._attempt.done():
            self._attempt.cancel()
        if self._retry is not None:
            self._retry.cancel()
        if self._connection is not None and self._connection.transport is not None:
            self._connection.transport.close()
        self._connection = None
        self._set_state(State.SHUTDOWN)

    async def __aenter__(self) -> SimChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(None)


def _connect_error(error: OSError) -> str:
    if isinstance(error, ConnectionRefusedError) or error.errno == errno.ECONNREFUSED:
        return "Failed to connect to remote host: Connection refused"
    if isinstance(error, TimeoutError) or error.errno == errno.ETIMEDOUT:
        return "Failed to connect to remote host: Connection timed out"
    return f"Failed to connect to remote host: {error.strerror or error}"


class _UnaryUnaryMultiCallable(grpc.aio.UnaryUnaryMultiCallable[Any, Any]):
    def __init__(self, channel: SimChannel, method: str, serializer: Callable[[Any], bytes] | None,
                 deserializer: Callable[[bytes], Any] | None) -> None:
        self._channel = channel
        self._method = method
        self._serializer = serializer
        self._deserializer = deserializer

    def __call__(self, request: Any, *, timeout: float | None = None, metadata: MetadataLike = None,
                 credentials: grpc.CallCredentials | None = None, wait_for_ready: bool | None = None,
                 compression: grpc.Compression | None = None) -> SimUnaryUnaryCall:
        if credentials is not None:
            raise NotSimulated("call credentials are not simulated (they need a secure channel)")
        if self._channel._closed:
            raise grpc.aio.UsageError("Channel is closed.")
        return SimUnaryUnaryCall(self._channel, self._method, request, timeout, _as_metadata(metadata),
                                 bool(wait_for_ready), self._serializer, self._deserializer)


class _Eof:
    """What the call's task returns when there is no response (as grpcio's ``cygrpc.EOF``)."""


_EOF = _Eof()


class SimUnaryUnaryCall(grpc.aio.UnaryUnaryCall[Any, Any]):
    """One unary-unary call: started at once (a task of the caller), awaitable for its response."""

    def __init__(self, channel: SimChannel, method: str, request: Any, timeout: float | None,
                 metadata: tuple[tuple[str, str | bytes], ...], wait_for_ready: bool,
                 serializer: Callable[[Any], bytes] | None, deserializer: Callable[[bytes], Any] | None) -> None:
        loop = channel._loop
        self._channel = channel
        self._loop = loop
        self._method = method
        self._request = request
        self._deadline = None if timeout is None else loop.time() + timeout
        self._metadata = metadata
        self._wait_for_ready = wait_for_ready
        self._serializer = serializer
        self._deserializer = deserializer
        self._status: _Reply | None = None
        self._locally_cancelled = False
        self._done: asyncio.Future[None] = loop.create_future()
        self._callbacks: list[Callable[[Any], None]] = []
        channel._calls[self] = None
        self._task: asyncio.Task[Any] = loop.create_task(self._invoke())

    async def _invoke(self) -> Any:
        try:
            message = self._serializer(self._request) if self._serializer is not None else self._request
        except Exception:
            self._finish(_Reply(Code.INTERNAL, "Exception serializing request!"))
            raise
        connection: _ClientConnection | None = None
        stream: int | None = None
        try:
            async with asyncio.timeout_at(self._deadline):
                while True:
                    connection = await self._channel._connection_for_call(self._wait_for_ready)
                    stream, pending = connection.open(self._method, self.time_remaining(), self._metadata, message)
                    reply = await pending
                    stream = None
                    if reply is not _REFUSED:
                        break
        except TimeoutError:
            reply = _Reply(Code.DEADLINE_EXCEEDED, "Deadline Exceeded")
        except _CallFailed as failure:
            reply = failure.reply
        except asyncio.CancelledError:
            self._locally_cancelled = True
            self._finish(_Reply(Code.CANCELLED, _LOCAL_CANCELLATION))
            return _EOF
        finally:
            if connection is not None and stream is not None:
                connection.cancel(stream)  # RST_STREAM: the server cancels its side too
        limit = self._channel._max_receive
        if reply.code is Code.OK and limit is not None and len(reply.message) > limit:
            reply = _Reply(Code.RESOURCE_EXHAUSTED, f"Received message larger than max ({len(reply.message)} vs. "
                                                    f"{limit})", reply.initial, reply.trailing)
        self._finish(reply)
        if reply.code is not Code.OK:
            return _EOF
        return self._deserializer(reply.message) if self._deserializer is not None else reply.message

    def _finish(self, reply: _Reply) -> None:
        if self._status is not None:
            return
        self._status = reply
        self._channel._calls.pop(self, None)
        self._channel._world.record("grpc_call", self._channel._source, self._channel.target,
                                    _method_name(self._method), reply.code.name)
        self._done.set_result(None)
        for callback in self._callbacks:
            self._loop.call_soon(callback, self)

    def _error(self) -> grpc.aio.AioRpcError:
        status = self._status
        assert status is not None
        return grpc.aio.AioRpcError(status.code, grpc.aio.Metadata(*status.initial),
                                    grpc.aio.Metadata(*status.trailing), details=status.details,
                                    debug_error_string=f"{status.code.name}:{status.details}")

    def __await__(self) -> Generator[Any, None, Any]:
        try:
            response = yield from self._task
        except asyncio.CancelledError:
            if not self.cancelled():
                self.cancel()
            raise
        if response is _EOF:
            if self._locally_cancelled:
                raise asyncio.CancelledError()
            raise self._error()
        return response

    def cancel(self) -> bool:
        if self._status is not None:
            return False
        self._locally_cancelled = True
        self._finish(_Reply(Code.CANCELLED, _LOCAL_CANCELLATION))
        self._task.cancel()
        return True

    def cancelled(self) -> bool:
        return self._status is not None and self._status.code is Code.CANCELLED

    def done(self) -> bool:
        return self._status is not None

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._status is not None:
            self._loop.call_soon(callback, self)
        else:
            self._callbacks.append(callback)

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - self._loop.time())

    async def _status_now(self) -> _Reply:
        await asyncio.shield(self._done)
        assert self._status is not None
        return self._status

    async def code(self) -> grpc.StatusCode:
        return (await self._status_now()).code

    async def details(self) -> str:
        return (await self._status_now()).details

    async def initial_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata(*(await self._status_now()).initial)

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata(*(await self._status_now()).trailing)

    async def wait_for_connection(self) -> None:
        await asyncio.shield(self._task)
        if self._locally_cancelled:
            raise asyncio.CancelledError()
        if self._status is not None and self._status.code is not Code.OK:
            raise self._error()

    def __repr__(self) -> str:
        state = self._status.code.name if self._status is not None else "running"
        return f"<SimUnaryUnaryCall {self._method} {state}>"


# --------------------------------------------------------------------------------------------- server


class Metadatum(NamedTuple):
    """One entry of ``invocation_metadata()`` (grpcio's ``_Metadatum``)."""

    key: str
    value: str | bytes


class _CallDetails(grpc.HandlerCallDetails):
    def __init__(self, method: str, invocation_metadata: tuple[Metadatum, ...]) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


class SimServicerContext(grpc.aio.ServicerContext[Any, Any]):
    """The servicer context of one call on a ``SimGrpcServer``."""

    def __init__(self, call: _ServerCall, metadata: tuple[Metadatum, ...]) -> None:
        self._call = call
        self._metadata = metadata
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._initial: tuple[tuple[str, str | bytes], ...] = ()
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._aborted = False
        self._callbacks: list[Callable[[Any], None]] = []

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: MetadataLike = ()) -> NoReturn:
        if self._aborted:
            raise grpc.aio.UsageError("Abort already called!")
        self._aborted = True
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = _as_metadata(trailing_metadata)
        raise grpc.aio.AbortError("Locally aborted.")

    async def abort_with_status(self, status: grpc.Status) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:  # type: ignore[override]  # None until set, as in grpcio
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, trailing_metadata: MetadataLike) -> None:
        self._trailing = _as_metadata(trailing_metadata)

    def trailing_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata(*self._trailing)

    async def send_initial_metadata(self, initial_metadata: MetadataLike) -> None:
        self._initial = _as_metadata(initial_metadata)

    def invocation_metadata(self) -> tuple[Metadatum, ...]:  # type: ignore[override]  # what grpcio returns
        return self._metadata

    def peer(self) -> str:
        return self._call.connection.peer

    def time_remaining(self) -> float | None:  # type: ignore[override]  # None: no deadline
        deadline = self._call.deadline
        return None if deadline is None else max(0.0, deadline - self._call.server._loop.time())

    def cancelled(self) -> bool:
        return self._call.cancelled

    def done(self) -> bool:
        return self._call.finished

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._call.finished:
            self._call.server._loop.call_soon(callback, self)
        else:
            self._callbacks.append(callback)

    def auth_context(self) -> dict[str, Any]:
        return {}

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def set_compression(self, compression: grpc.Compression) -> None:
        pass

    def disable_next_message_compression(self) -> None:
        pass

    async def read(self) -> NoReturn:
        raise NotSimulated("streaming gRPC calls are not simulated (context.read)")

    async def write(self, message: Any) -> NoReturn:
        raise NotSimulated("streaming gRPC calls are not simulated (context.write)")


class _ServerCall:
    """One call being served: its handler's task, its deadline, how it ended."""

    def __init__(self, server: SimGrpcServer, connection: _ServerConnection, stream: int, method: str,
                 handler: grpc.RpcMethodHandler[Any, Any], timeout: float | None, metadata: tuple[Metadatum, ...],
                 message: bytes) -> None:
        loop = server._loop
        self.server = server
        self.connection = connection
        self.stream = stream
        self.method = method
        self.handler = handler
        self.finished = False
        self.cancelled = False
        self.deadline = None if timeout is None else loop.time() + timeout
        self.context = SimServicerContext(self, metadata)
        self._message = message
        self._timer = None if timeout is None else loop.call_later(timeout, self.cancel, Code.DEADLINE_EXCEEDED)
        server._calls[self] = None
        connection.calls[stream] = self
        self.task: asyncio.Task[None] = loop.create_task(self._run())

    async def _run(self) -> None:
        context, handler = self.context, self.handler
        try:
            request = handler.request_deserializer(self._message) if handler.request_deserializer else self._message
        except Exception:  # noqa: BLE001 - grpcio answers INTERNAL
            _SERVICER_LOG.exception("Exception deserializing request for %s", self.method)
            self.finish(Code.INTERNAL, "Exception deserializing request!")
            return
        behaviour = cast(Callable[[Any, SimServicerContext], Any] | None, handler.unary_unary)  # (typed for sync grpc)
        assert behaviour is not None  # streaming handlers are refused before a call is made
        try:
            result = behaviour(request, context)
            if inspect.isawaitable(result):
                result = await result
        except grpc.aio.AbortError:
            if context._code in (None, Code.OK):
                _SERVICER_LOG.error("abort() called with StatusCode.OK in %s: no status is sent", self.method)
                return  # grpcio 1.85 sends nothing either: the client waits for its deadline
            self.finish(context._code, context._details)
            return
        except asyncio.CancelledError:
            if not self.finished:  # the handler cancelled itself
                self.finish(Code.CANCELLED, "Cancelled")
            return
        except Exception as error:  # noqa: BLE001 - grpcio answers it and logs it
            _SERVICER_LOG.exception("Unexpected [%s] raised by servicer method [%s]", type(error).__name__,
                                    self.method)
            code = context._code if context._code not in (None, Code.OK) else Code.UNKNOWN
            self.finish(code, f"Unexpected {type(error)}: {error}")
            if isinstance(error, SimulationError):  # the world's own refusal must not pass for a call's failure
                self.server._loop.call_exception_handler({"message": f"{self.method} hit the simulation's limits",
                                                          "exception": error})
            return
        if context._code not in (None, Code.OK):
            self.finish(context._code, context._details)
            return
        try:
            data = handler.response_serializer(result) if handler.response_serializer else result
        except Exception:  # noqa: BLE001 - as grpcio
            _SERVICER_LOG.exception("Failed to serialize the response of %s", self.method)
            self.finish(Code.INTERNAL, "Failed to serialize response!")
            return
        self.finish(Code.OK, "", data)

    def finish(self, code: grpc.StatusCode, details: str, message: bytes = b"") -> None:
        """Ends the call with this status (sent to the client unless the call was cancelled)."""
        if self.finished:
            return
        self._end(code)
        context = self.context
        self.connection.send(_Frame.RESPONSE, self.stream, _Reply(code, details, context._initial, context._trailing,
                                                                  message).encode())

    def cancel(self, code: grpc.StatusCode = Code.CANCELLED) -> None:
        """The client cancelled, its deadline passed or its connection was lost: the handler is cancelled."""
        if self.finished:
            return
        self.cancelled = True
        self._end(code)
        self.task.cancel()

    def _end(self, code: grpc.StatusCode) -> None:
        self.finished = True
        if self._timer is not None:
            self._timer.cancel()
        self.server._calls.pop(self, None)
        self.connection.calls.pop(self.stream, None)
        self.server._record_served(self.method, code)
        for callback in self.context._callbacks:
            self.server._loop.call_soon(callback, self.context)


class _ServerConnection(_Peer):
    def __init__(self, server: SimGrpcServer) -> None:
        super().__init__()
        self.server = server
        self.calls: dict[int, _ServerCall] = {}
        self.peer = "ipv4:unknown"
        self.going_away = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        host, port = transport.get_extra_info("peername")
        self.peer = f"ipv4:{host}:{port}"
        self.server._connections[self] = None

    def on_frame(self, kind: _Frame, stream: int, payload: bytes) -> None:
        if kind is _Frame.HELLO:
            self.send(_Frame.GOAWAY if self.going_away else _Frame.SETTINGS, 0)
        elif kind is _Frame.PING:
            self.send(_Frame.PONG, 0, payload)
        elif kind is _Frame.REQUEST:
            self.server._accept(self, stream, payload)
        elif kind is _Frame.CANCEL:
            call = self.calls.get(stream)
            if call is not None:
                call.cancel()

    def go_away(self) -> None:
        self.going_away = True
        self.send(_Frame.GOAWAY, 0)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.pop(self, None)
        for call in list(self.calls.values()):
            call.cancel()


def _run_now(coroutine: Any) -> Any:
    """The result of a coroutine that never suspends (the network's ``create_server``), from sync code."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise SimulationError("the network's create_server suspended: add_insecure_port cannot bind synchronously")


class SimGrpcServer(grpc.aio.Server):
    """What ``grpc.aio.server(...)`` returns in the world (see the module docstring)."""

    def __init__(self, world: World, *, handlers: Sequence[grpc.GenericRpcHandler] | None = None,
                 interceptors: Sequence[Any] | None = None, options: Sequence[tuple[str, Any]] | None = None,
                 maximum_concurrent_rpcs: int | None = None) -> None:
        if interceptors:
            raise NotSimulated("server interceptors are not simulated")
        self._world = world
        self._loop = world.loop
        self._options = dict(options or ())
        self._max_receive = _limit(self._options, "grpc.max_receive_message_length")
        self._max_calls = maximum_concurrent_rpcs
        self._generic: list[grpc.GenericRpcHandler] = list(handlers or ())
        self._registered: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}
        self._listeners: list[SimServer] = []
        self._connections: dict[_ServerConnection, None] = {}
        self._calls: dict[_ServerCall, None] = {}
        self._state = "new"  # -> serving -> stopping -> stopped
        self._terminated: asyncio.Future[None] = self._loop.create_future()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The (host, port) pairs it listens on."""
        return [listener.address for listener in self._listeners]

    def __repr__(self) -> str:
        where = ",".join(f"{host}:{port}" for host, port in self.addresses)
        return f"<SimGrpcServer {where} {self._state}>"

    # -- set-up ------------------------------------------------------------------------------------------

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: str,
                                       method_handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]) -> None:
        self._registered.setdefault(service_name, {}).update(method_handlers)

    def add_insecure_port(self, address: str) -> int:
        if self._state != "new":
            raise RuntimeError(f"cannot add port {address} to a server that was started")
        host, port = _split_address(address)
        try:
            listener = _run_now(self._loop.create_server(lambda: _ServerConnection(self), host, port,
                                                         start_serving=False))
        except OSError as error:
            if error.errno == errno.EADDRINUSE and int(self._options.get("grpc.so_reuseport", 1)):
                raise NotSimulated(f"{address} is in use: servers sharing a port through SO_REUSEPORT (grpc's "
                                   f"default) are not simulated; pass the option ('grpc.so_reuseport', 0)") from error
            raise RuntimeError(f"Failed to bind to address {address}; set GRPC_VERBOSITY=debug environment "
                               f"variable to see detailed error message.") from error
        self._listeners.append(listener)
        return int(listener.address[1])

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> NoReturn:
        raise NotSimulated(f"TLS is not simulated yet: add_secure_port({address!r}) is refused")

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"the server was already started ({self._state})")
        self._state = "serving"
        for listener in self._listeners:
            await listener.start_serving()
            self._world.record("grpc_server", "start", *listener.address)

    async def stop(self, grace: float | None) -> None:
        if self._state in ("stopping", "stopped"):
            await asyncio.shield(self._terminated)
            return
        self._state = "stopping"
        for listener in self._listeners:
            self._world.record("grpc_server", "stop", *listener.address)
            listener.close()
        for connection in list(self._connections):
            connection.go_away()
        calls = list(self._calls)
        if grace and calls:
            await asyncio.wait([call.task for call in calls], timeout=grace)
        for call in list(self._calls):
            call.finish(Code.UNAVAILABLE, "Cancelling all calls")
            call.task.cancel()
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.close()
        self._state = "stopped"
        if not self._terminated.done():
            self._terminated.set_result(None)

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        """True if ``timeout`` passed first (as grpcio)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._terminated), timeout)
        except TimeoutError:
            return True
        return False

    # -- serving -----------------------------------------------------------------------------------------

    def _handler(self, method: str, metadata: tuple[Metadatum, ...]) -> grpc.RpcMethodHandler[Any, Any] | None:
        service, _, name = method.lstrip("/").rpartition("/")
        handler = self._registered.get(service, {}).get(name)
        if handler is None:
            details = _CallDetails(method, metadata)
            for generic in self._generic:
                handler = generic.service(details)
                if handler is not None:
                    break
        return handler

    def _accept(self, connection: _ServerConnection, stream: int, payload: bytes) -> None:
        method_bytes, timeout_bytes, metadata_bytes, message = _unpack(payload)
        method = method_bytes.decode()
        if self._state != "serving" or connection.going_away:
            connection.send(_Frame.REFUSED, stream)
            return
        (timeout,) = _TIMEOUT.unpack(timeout_bytes)
        metadata = (Metadatum("user-agent", _USER_AGENT),
                    *(Metadatum(key, value) for key, value in _unpack_metadata(metadata_bytes)))
        handler = self._handler(method, metadata)
        refusal: tuple[grpc.StatusCode, str] | None = None
        if handler is None:
            refusal = Code.UNIMPLEMENTED, "Method not found!"
        elif handler.request_streaming or handler.response_streaming:
            refusal = Code.UNIMPLEMENTED, "streaming RPCs are not simulated"
        elif self._max_receive is not None and len(message) > self._max_receive:
            refusal = Code.RESOURCE_EXHAUSTED, f"Received message larger than max ({len(message)} vs. " \
                                               f"{self._max_receive})"
        elif self._max_calls is not None and len(self._calls) >= self._max_calls:
            refusal = Code.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!"
        if refusal is not None:
            self._record_served(method, refusal[0])
            connection.send(_Frame.RESPONSE, stream, _Reply(*refusal).encode())
            return
        assert handler is not None
        _ServerCall(self, connection, stream, method, handler, None if math.isnan(timeout) else timeout, metadata,
                    message)

    def _record_served(self, method: str, code: grpc.StatusCode) -> None:
        where = ",".join(f"{host}:{port}" for host, port in self.addresses)
        self._world.record("grpc_serve", where, _method_name(method), code.name)


# --------------------------------------------------------------------------------------------- installing


def patches(world: World) -> list[tuple[Any, str, Any]]:
    """(object, attribute, replacement) for every grpc.aio name production code reaches the network by."""

    def server(migration_thread_pool: Any = None, handlers: Sequence[grpc.GenericRpcHandler] | None = None,
               interceptors: Sequence[Any] | None = None, options: Sequence[tuple[str, Any]] | None = None,
               maximum_concurrent_rpcs: int | None = None, compression: Any = None) -> SimGrpcServer:
        return SimGrpcServer(world, handlers=handlers, interceptors=interceptors, options=options,
                             maximum_concurrent_rpcs=maximum_concurrent_rpcs)

    def insecure_channel(target: str, options: Sequence[tuple[str, Any]] | None = None, compression: Any = None,
                         interceptors: Sequence[Any] | None = None) -> SimChannel:
        return SimChannel(world, target, options, interceptors=interceptors)

    def secure_channel(target: str, credentials: Any, options: Any = None, compression: Any = None,
                       interceptors: Any = None) -> NoReturn:
        raise NotSimulated(f"TLS is not simulated yet: grpc.aio.secure_channel({target!r}) is refused")

    from clients import controller_probe  # (here: importing the SDK takes a while, and only this needs it)

    return [(grpc.aio, "server", server), (grpc.aio, "insecure_channel", insecure_channel),
            (grpc.aio, "secure_channel", secure_channel), (controller_probe, "diagnose", _diagnose_without_tls)]


async def _diagnose_without_tls(host: str, port: int, tls: bool, trust: str | None, timeout: float = 3.0, *,
                                server_name: str | None = None) -> str | None:
    """``clients.controller_probe.diagnose`` in a world without TLS.

    The SDK explains an UNAVAILABLE controller it has never reached by a TLS handshake of its own, which the
    world's network refuses (NotSimulated) instead of failing it as a plaintext server would. For a
    ``tcp://`` client, where every server is plaintext, the real probe's answer is always None (no TLS
    mistake): this one gives it after the same kind of connection attempt, so the world sees the probe."""
    if tls:
        raise NotSimulated("TLS is not simulated yet: the SDK's TLS probe (controller_probe) is refused")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError):
        return None
    writer.close()
    return None


@contextlib.contextmanager
def install(world: World) -> Iterator[World]:
    """While open, ``grpc.aio.server``/``insecure_channel`` make the simulated ones of ``world``; restored on exit."""
    replacements = patches(world)
    saved = [(target, name, getattr(target, name)) for target, name, _ in replacements]
    for target, name, value in replacements:
        setattr(target, name, value)
    try:
        yield world
    finally:
        for target, name, value in saved:
            setattr(target, name, value)


installed = install  # the name tests/simulation/scenario.py uses
