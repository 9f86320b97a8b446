"""A model of ZooKeeper, and of kazoo talking to it, behind ``coordination.zookeeper.ZooKeeper``, for the world.

kazoo runs an I/O thread on real sockets, which the world cannot host. Inside the world, ``patches(world)``
(``World.patched()`` applies it) replaces the name ``ZooKeeper`` in the modules that construct one by
``SimZooKeeper``: a subclass of the real wrapper whose kazoo client is ``SimKazooClient``, a port of the
parts of kazoo 2.11 the wrapper uses, over the world's TCP network (network.py, tcp.py). Everything the
wrapper itself does (its retries up to ``operation_timeout``, ``set_if``'s applied-on-retry check, the
shutdown grace, the watch and session-lost callbacks, the ``SessionClock`` fed by kazoo's log lines) is
the production code, unchanged; only ``start`` and ``stop`` are the model's, because kazoo's block a thread.
``World.zookeeper(host)`` makes a ``SimZooKeeperServer`` serving there (port 2181).

Theory of operation
-------------------
The server (``SimZooKeeperServer``) is one ensemble seen as one highly available service (no quorum,
no leader election, no followers lagging behind): a simulated process ``zookeeper@<host>`` listening on
``host:port``. Its state (the data tree, the sessions, the zxid) is an object outside the process, so it
survives a crash, as ZooKeeper's transaction log does (it is written before an answer goes out).

* Data tree: znodes with data, a data version, ctime/mtime (the world's wall clock, ms), czxid/mzxid/
  pzxid, an ephemeral owner, children. Sequential names take a per-parent counter of the creates made
  under it (10 digits, ``n_0000000003``: ZooKeeper 3.8 counts creates only, as a real server showed);
  the exposed ``cversion`` is ZooKeeper's ``2 * creates - children``. ``/zookeeper`` (with ``config`` and
  ``quota``) exists as on a real server. Errors, checked in ZooKeeper's order: NoNode, NodeExists,
  NoChildrenForEphemerals, BadVersion, NotEmpty; a request packet longer than ``jute.maxbuffer``
  (0xfffff bytes, jute's encoding of the create or setData request) makes the server drop the connection,
  as a real one does (kazoo then sees ConnectionLoss on every retry).
* Sessions: a connect asks for a timeout, clamped to [``min_session_timeout``, ``max_session_timeout``]
  (by default 2 and 20 ticks of ``tick`` = 2 s). Every packet received on the session's connection
  (request or ping) restarts its timer; as in ZooKeeper's ExpiryQueue the deadline is rounded up to the
  next multiple of ``tick`` after ``last heard + timeout``. A session not heard from by its deadline
  expires: its ephemeral nodes are deleted (their watches fire) and its connection is closed. A client
  that reconnects with an expired session id gets a timeout of 0 (kazoo: SessionExpiredError). A close
  request ends the session at once. A reconnect with a live session id moves the session to the new
  connection (the old one is closed).
* Watches are ZooKeeper's: set by ``exists`` (also on a missing node: it fires on create), ``get`` (data)
  and ``get_children`` (children), kept per connection, one-shot, and sent before the reply to the
  write that triggered them, on the same connection, so a client sees the event before the new data.
  ``get_children`` answers in a shuffled order (the world's RNG): a real server answers in hash order,
  so callers must not expect sorted names.
* ``crash()`` / ``restart()`` / ``down(seconds)`` / ``pause(seconds)``: the process's fate. While down,
  connections are reset and connects refused; on restart every session gets a fresh timeout from then
  (ZooKeeper resets session deadlines when a leader takes over) and watches are gone with the connections.
* ``reply_loss``: the probability (world's RNG) that the server, having applied a write (create, set,
  delete), drops the connection instead of answering, as when a connection breaks between the commit and
  the reply. kazoo then fails the call with ConnectionLoss and the wrapper retries it: ``set_if`` meets its
  own write (applied-on-retry), ``create`` gets NodeExistsError, a sequential create makes a second node.

The client (``SimKazooClient``) follows kazoo 2.11 (each point was checked against its source, and the
watch behaviour against a real server):

* A connection loop per client, as a task of the process that called ``start()`` (so it dies with it: a
  killed process stops pinging and its session expires on the server one timeout later). It goes through
  the hosts of the connect string (listed ``HANDSHAKE_TRIES`` times by the wrapper), each attempt a TCP
  connect (given up after the session timeout) and a handshake (given up after session timeout / hosts
  listed); after a full round it backs off as the wrapper's ``KazooRetry`` says (0.05 s doubling to 0.5 s,
  jitter +-40 %). Connected, it pings when it sent nothing for a third of the negotiated timeout (less
  0.01-0.4 s of jitter) and drops the connection when a ping is still unanswered at the next deadline.
* States: CONNECTED; a lost connection -> CONNECTING (listeners: SUSPENDED): the calls in flight and the
  queued ones fail with ConnectionLoss, and every watch fires at once (kazoo 2.11 calls each watcher with
  a NONE event and forgets it: watches never survive a reconnect); calls made while connecting are queued
  and sent once connected (the wrapper gives up on them at its deadline). A reconnect within the session
  timeout keeps the session. A reconnect after it learns the session expired: EXPIRED_SESSION (listeners:
  LOST; the wrapper calls its ``on_session_lost`` callbacks), pending calls fail with SessionExpiredError,
  watches fire, and the next attempt makes a new session. ``stop()`` sends a close request when connected
  (the session ends at once) and otherwise abandons the connection attempt (the session, if any, expires).
* What kazoo logs, it logs here with its own message templates to the wrapper's ``_KazooLog``, which feeds
  the ``SessionClock`` from them (pings sent and answered, the negotiated timeout) and rate-limits them.

The trace gets the server's ups and downs (``zk_up``, ``zk_down``), sessions made, closed and expired
(``zk_session``, ``zk_session_closed``, ``zk_session_expired``), replies lost and oversized packets
(``zk_reply_lost``, ``zk_too_big``) and each client's state changes (``zk_client``); the network adds its
own line per TCP connection. Requests are not traced.

Not simulated: a quorum (followers serving stale reads, leader elections other than a restart, a minority
partition of the ensemble), ACLs and authentication, ``sync``, multi/transactions, containers and TTL
nodes, persistent watches, observers, read-only mode, 4-letter words, ``jute.maxbuffer`` on replies, the
server's closing of idle connections that never handshake, session passwords, a client whose last zxid is
ahead of the server, kazoo's ``Lock``/``Election`` recipes and retrying ``KazooRetry`` calls (the wrapper
uses neither), a connect attempt in progress when ``stop()`` comes (kazoo finishes it, and then closes the
session it made: here it is abandoned, and such a session expires).
"""

from __future__ import annotations

import asyncio
import logging
import math
import pickle
import posixpath
import struct
import time
from binascii import hexlify
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from kazoo.exceptions import (
    EXCEPTIONS,
    BadArgumentsError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionDropped,
    ConnectionLoss,
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.hosts import collect_hosts
from kazoo.loggingsupport import BLATHER
from kazoo.protocol.connection import CHANGED_EVENT, CHILD_EVENT, CREATED_EVENT, DELETED_EVENT
from kazoo.protocol.paths import _prefix_root, normpath
from kazoo.protocol.states import EVENT_TYPE_MAP, EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from coordination import zookeeper as zookeeper_module
from coordination.zookeeper import STOP_WAIT_SECONDS, ZooKeeper, ZooKeeperUnavailable
from tests.simulation.errors import SimulationError
from tests.simulation.loop import OWNER
from tests.simulation.network import OUTSIDE_HOST

if TYPE_CHECKING:
    from tests.simulation.world import World

DEFAULT_PORT = 2181
JUTE_MAXBUFFER = 0xFFFFF  # a request packet longer than this closes the connection (ZooKeeper's default)
_LENGTH = struct.Struct(">I")
_ACL_BYTES = 31  # jute's encoding of kazoo's default ACL (world:anyone, all), with its vector length
_CLOSED_STATES = (KeeperState.EXPIRED_SESSION, KeeperState.AUTH_FAILED, KeeperState.CLOSED)
_STOP = "stop connecting"  # kazoo's STOP_CONNECTING
_CLOSE_RESPONSE = "close response"
_PING_XID = -2
_EPHEMERAL, _SEQUENCE = 1, 2  # kazoo's create flags

log = logging.getLogger("tributary.simulation.zookeeper")

# --------------------------------------------------------------------------------------------- the wire


def _frame(message: tuple[Any, ...]) -> bytes:
    """One message (a tuple of plain values) as a length-prefixed frame: this is a model of ZooKeeper's
    protocol, not jute (pickle of plain values is the same bytes in every run)."""
    body = pickle.dumps(message, protocol=5)
    return _LENGTH.pack(len(body)) + body


class _Framer:
    """Cuts the received bytes back into messages, whatever TCP did to them."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[Any, ...]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < _LENGTH.size + size:
                break
            messages.append(pickle.loads(bytes(self._buffer[_LENGTH.size:_LENGTH.size + size])))
            del self._buffer[:_LENGTH.size + size]
        return messages


def _request_bytes(op: str, path: str, data: bytes) -> int:
    """The length of jute's encoding of a create or setData request (header, path, data, ACL, flags)."""
    body = 8 + 4 + len(path.encode()) + 4 + len(data)
    return body + _ACL_BYTES + 4 if op == "create" else body + 4


# --------------------------------------------------------------------------------------------- the server


class _ServerError(Exception):
    def __init__(self, error: type[KazooException]) -> None:
        super().__init__(error.__name__)
        self.code: int = getattr(error, "code")


class _Znode:
    __slots__ = ("data", "version", "creates", "ephemeral_owner", "children", "czxid", "mzxid", "pzxid", "ctime",
                 "mtime")

    def __init__(self, data: bytes, zxid: int, now_ms: int, ephemeral_owner: int = 0) -> None:
        self.data = data
        self.version = 0
        self.creates = 0  # children ever created here: the next sequential suffix
        self.ephemeral_owner = ephemeral_owner
        self.children: dict[str, None] = {}
        self.czxid = self.mzxid = self.pzxid = zxid
        self.ctime = self.mtime = now_ms

    def stat(self) -> tuple[int, ...]:
        cversion = 2 * self.creates - len(self.children)  # ZooKeeper's DataNode.copyStat
        return (self.czxid, self.mzxid, self.ctime, self.mtime, self.version, cversion, 0, self.ephemeral_owner,
                len(self.data), len(self.children), self.pzxid)


class _Session:
    __slots__ = ("id", "timeout", "expires_at", "connection", "ephemerals", "timer")

    def __init__(self, session_id: int, timeout: float) -> None:
        self.id = session_id
        self.timeout = timeout
        self.expires_at = 0.0
        self.connection: _ServerConnection | None = None
        self.ephemerals: dict[str, None] = {}
        self.timer: asyncio.TimerHandle | None = None


class _ServerConnection(asyncio.Protocol):
    """One client connection, as the server sees it."""

    def __init__(self, server: SimZooKeeperServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.framer = _Framer()
        self.session: _Session | None = None
        self.closed = False
        self.watching: dict[tuple[str, str], None] = {}  # ("data" | "child", path)

    @property
    def peer(self) -> str:
        return str(self.transport.get_extra_info("peername")[0]) if self.transport is not None else "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for message in self.framer.feed(data):
            if self.closed:
                return
            self.server._receive(self, message)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.server._disconnected(self)

    def send(self, message: tuple[Any, ...]) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(_frame(message))

    def close(self, *, abort: bool = False) -> None:
        if self.closed or self.transport is None:
            return
        self.closed = True
        if abort:
            self.transport.abort()
        else:
            self.transport.close()
        self.server._disconnected(self)


class SimZooKeeperServer:
    """One ZooKeeper ensemble serving on ``host:port`` (see the module docstring); started when made."""

    def __init__(self, world: World, host: str, port: int = DEFAULT_PORT, *, tick: float = 2.0,
                 min_session_timeout: float | None = None, max_session_timeout: float | None = None,
                 reply_loss: float = 0.01) -> None:
        self.world = world
        self.host = host
        self.port = port
        self.tick = tick
        self.min_session_timeout = 2 * tick if min_session_timeout is None else min_session_timeout
        self.max_session_timeout = 20 * tick if max_session_timeout is None else max_session_timeout
        self.reply_loss = reply_loss
        self.zxid = 0
        self.nodes: dict[str, _Znode] = {"/": _Znode(b"", 0, 0)}
        self.sessions: dict[int, _Session] = {}
        self._next_session = 1
        self._data_watches: dict[str, dict[_ServerConnection, None]] = {}
        self._child_watches: dict[str, dict[_ServerConnection, None]] = {}
        for path in ("/zookeeper", "/zookeeper/config", "/zookeeper/quota"):
            self._add_node(path, _Znode(b"", 0, 0))
        self.nodes["/"].creates = 0  # ZooKeeper's own nodes are not counted in the root's cversion
        self.process = world.process(f"zookeeper@{host}", host)
        self.process.start(self._serve)

    # -- the nemesis's handles -----------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self.process.alive

    def crash(self) -> None:
        """The ensemble stops answering (connections reset, connects refused); its data and sessions stay."""
        if self.process.alive:
            self.world.record("zk_down", self.host)
            self.process.crash()

    def restart(self) -> None:
        """Serves again (crashing first if up); every session gets a fresh timeout from now."""
        self.crash()
        self.process.start(self._serve)

    def down(self, seconds: float) -> None:
        """``crash()`` now, ``restart()`` after ``seconds``."""
        self.crash()
        self.world.loop.call_later(seconds, self._back_up, context=self.world.context)

    def _back_up(self) -> None:
        if not self.process.alive:
            self.process.start(self._serve)

    def pause(self, seconds: float) -> None:
        """A stall of the whole ensemble (SIGSTOP, a long GC): nothing is processed, sessions' timers too."""
        self.process.pause(seconds)

    # -- looking at the state (tests) -------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return path in self.nodes

    def data(self, path: str) -> bytes | None:
        node = self.nodes.get(path)
        return None if node is None else node.data

    def children(self, path: str) -> list[str]:
        node = self.nodes.get(path)
        return [] if node is None else list(node.children)

    def ephemeral_owner(self, path: str) -> int:
        node = self.nodes.get(path)
        return 0 if node is None else node.ephemeral_owner

    def ensure_path(self, path: str) -> None:
        """Creates ``path`` and its parents (persistent, empty), as an administrator would before a run."""
        path = normpath(path)
        parts = [part for part in path.split("/") if part]
        for depth in range(1, len(parts) + 1):
            here = "/" + "/".join(parts[:depth])
            if here not in self.nodes:
                self.zxid += 1
                self._add_node(here, _Znode(b"", self.zxid, self._now_ms()))

    # -- serving ------------------------------------------------------------------------------------------

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_server(lambda: _ServerConnection(self), self.host, self.port)
        self._data_watches.clear()  # connections (and so watches) did not survive the crash
        self._child_watches.clear()
        for session in self.sessions.values():
            session.connection = None
            session.timer = None
            self._touch(session)  # a fresh timeout, as after a leader election
        self.world.record("zk_up", self.host, self.port, len(self.sessions))
        await loop.create_future()  # serves until the process dies

    def _now_ms(self) -> int:
        return int(self.world.wall_time() * 1000)

    def _touch(self, session: _Session) -> None:
        loop = self.world.loop
        deadline = loop.time() + session.timeout
        if self.tick > 0:
            deadline = (math.floor(deadline / self.tick) + 1) * self.tick
        session.expires_at = deadline
        if session.timer is None:
            session.timer = loop.call_at(deadline, self._check_expiry, session)

    def _check_expiry(self, session: _Session) -> None:
        session.timer = None
        if self.sessions.get(session.id) is not session:
            return
        if self.world.loop.time() < session.expires_at:
            session.timer = self.world.loop.call_at(session.expires_at, self._check_expiry, session)
            return
        self.world.record("zk_session_expired", self.host, f"{session.id:#x}")
        connection = session.connection
        self._end_session(session)
        if connection is not None:
            connection.close()

    def _end_session(self, session: _Session) -> None:
        self.zxid += 1
        for path in list(session.ephemerals):
            self._delete_node(path, self.zxid)
        del self.sessions[session.id]
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None

    def _disconnected(self, connection: _ServerConnection) -> None:
        for kind, path in connection.watching:
            table = self._data_watches if kind == "data" else self._child_watches
            watchers = table.get(path)
            if watchers is not None:
                watchers.pop(connection, None)
                if not watchers:
                    del table[path]
        connection.watching.clear()
        session = connection.session
        if session is not None and session.connection is connection:
            session.connection = None

    def _receive(self, connection: _ServerConnection, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if connection.session is None:
            if kind == "connect":
                self._handshake(connection, *message[1:])
            else:
                connection.close(abort=True)
            return
        session = connection.session
        if self.sessions.get(session.id) is not session or session.connection is not connection:
            connection.close()  # the session ended, or moved to another connection
            return
        if kind == "ping":
            self._touch(session)
            connection.send(("pong",))
            return
        _, xid, op, *args = message
        if op in ("create", "set") and _request_bytes(op, args[0], args[1]) > JUTE_MAXBUFFER:
            self.world.record("zk_too_big", self.host, connection.peer, op)
            connection.close(abort=True)  # "Len error": the packet is never read
            return
        self._touch(session)
        if op == "close":
            self.world.record("zk_session_closed", self.host, f"{session.id:#x}")
            self._end_session(session)
            connection.send(("reply", xid, self.zxid, 0, None))
            connection.close()
            return
        try:
            result = self._apply(connection, op, args)
        except _ServerError as error:
            connection.send(("reply", xid, self.zxid, error.code, None))
            return
        if op in ("create", "set", "delete") and self.reply_loss > 0 and self.world.random.random() < self.reply_loss:
            self.world.record("zk_reply_lost", self.host, connection.peer, op)
            connection.close(abort=True)
            return
        connection.send(("reply", xid, self.zxid, 0, result))

    def _handshake(self, connection: _ServerConnection, last_zxid: int, timeout_ms: int, session_id: int) -> None:
        if session_id:
            session = self.sessions.get(session_id)
            if session is None:  # expired or closed: a timeout of 0 says so, then the server hangs up
                connection.send(("connected", 0, 0))
                connection.close()
                return
            old = session.connection
            if old is not None and old is not connection:
                old.close(abort=True)
        else:
            timeout = min(max(timeout_ms / 1000.0, self.min_session_timeout), self.max_session_timeout)
            self.zxid += 1
            session = _Session((1 << 56) | self._next_session, timeout)
            self._next_session += 1
            self.sessions[session.id] = session
            self.world.record("zk_session", self.host, f"{session.id:#x}", connection.peer, timeout)
        session.connection = connection
        connection.session = session
        self._touch(session)
        connection.send(("connected", round(session.timeout * 1000), session.id))

    # -- the data tree --------------------------------------------------------------------------------------

    def _node(self, path: str) -> _Znode:
        node = self.nodes.get(path)
        if node is None:
            raise _ServerError(NoNodeError)
        return node

    def _watch(self, connection: _ServerConnection, kind: str, path: str) -> None:
        table = self._data_watches if kind == "data" else self._child_watches
        table.setdefault(path, {})[connection] = None
        connection.watching[(kind, path)] = None

    def _trigger(self, kind: str, path: str, event: int,
                 done: dict[_ServerConnection, None] | None = None) -> dict[_ServerConnection, None]:
        table = self._data_watches if kind == "data" else self._child_watches
        watchers = table.pop(path, {})
        for connection in watchers:
            connection.watching.pop((kind, path), None)
            if done is None or connection not in done:
                connection.send(("event", event, path))
        return watchers

    def _add_node(self, path: str, node: _Znode) -> None:
        parent_path, name = posixpath.split(path)
        parent = self.nodes[parent_path]
        self.nodes[path] = node
        parent.children[name] = None
        parent.creates += 1
        parent.pzxid = node.czxid

    def _delete_node(self, path: str, zxid: int) -> None:
        node = self.nodes.pop(path)
        parent_path, name = posixpath.split(path)
        parent = self.nodes[parent_path]
        parent.children.pop(name, None)
        parent.pzxid = zxid
        if node.ephemeral_owner:
            owner = self.sessions.get(node.ephemeral_owner)
            if owner is not None:
                owner.ephemerals.pop(path, None)
        done = self._trigger("data", path, DELETED_EVENT)
        self._trigger("child", path, DELETED_EVENT, done)
        self._trigger("child", parent_path, CHILD_EVENT)

    def _apply(self, connection: _ServerConnection, op: str, args: list[Any]) -> Any:
        path: str = args[0]
        if op == "exists":
            if args[1]:
                self._watch(connection, "data", path)  # also on a missing node: it fires on create
            return self._node(path).stat()
        if op == "get":
            node = self._node(path)
            if args[1]:
                self._watch(connection, "data", path)
            return node.data, node.stat()
        if op == "children":
            node = self._node(path)
            if args[1]:
                self._watch(connection, "child", path)
            names = list(node.children)
            self.world.random.shuffle(names)  # a real server answers in hash order: never rely on any
            return names
        if op == "create":
            return self._create(connection, path, args[1], args[2])
        if op == "set":
            return self._set(path, args[1], args[2])
        if op == "delete":
            return self._delete(path, args[1])
        raise _ServerError(BadArgumentsError)

    def _create(self, connection: _ServerConnection, path: str, data: bytes, flags: int) -> str:
        if path == "/":
            raise _ServerError(NodeExistsError)
        parent_path = posixpath.split(path)[0]
        parent = self._node(parent_path)
        if flags & _SEQUENCE:
            path = f"{path}{parent.creates:010d}"
        if path in self.nodes:
            raise _ServerError(NodeExistsError)
        if parent.ephemeral_owner:
            raise _ServerError(NoChildrenForEphemeralsError)
        assert connection.session is not None
        owner = connection.session.id if flags & _EPHEMERAL else 0
        self.zxid += 1
        self._add_node(path, _Znode(data, self.zxid, self._now_ms(), owner))
        if owner:
            connection.session.ephemerals[path] = None
        self._trigger("data", path, CREATED_EVENT)
        self._trigger("child", parent_path, CHILD_EVENT)
        return path

    def _set(self, path: str, data: bytes, version: int) -> tuple[int, ...]:
        node = self._node(path)
        if version != -1 and version != node.version:
            raise _ServerError(BadVersionError)
        self.zxid += 1
        node.data = data
        node.version += 1
        node.mzxid = self.zxid
        node.mtime = self._now_ms()
        self._trigger("data", path, CHANGED_EVENT)
        return node.stat()

    def _delete(self, path: str, version: int) -> bool:
        if path == "/" or path == "/zookeeper":
            raise _ServerError(BadArgumentsError)
        node = self._node(path)
        if version != -1 and version != node.version:
            raise _ServerError(BadVersionError)
        if node.children:
            raise _ServerError(NotEmptyError)
        self.zxid += 1
        self._delete_node(path, self.zxid)
        return True

    def __repr__(self) -> str:
        return f"<SimZooKeeperServer {self.host}:{self.port} {'up' if self.up else 'down'} " \
               f"{len(self.nodes)} znodes {len(self.sessions)} sessions>"


# --------------------------------------------------------------------------------------------- the client


class SimAsyncResult:
    """kazoo's ``IAsyncResult`` as the wrapper and kazoo's own composite calls use it; callbacks run at once."""

    def __init__(self) -> None:
        self.value: Any = None
        self.exception: BaseException | None = None
        self._ready = False
        self._callbacks: list[Callable[[SimAsyncResult], None]] = []

    def ready(self) -> bool:
        return self._ready

    def successful(self) -> bool:
        return self._ready and self.exception is None

    def set(self, value: Any = None) -> None:
        self._settle(value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(None, exception)

    def _settle(self, value: Any, exception: BaseException | None) -> None:
        if self._ready:
            return
        self.value, self.exception, self._ready = value, exception, True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not self._ready:
            raise SimulationError("a blocking get() on a kazoo result would stop the world: use rawlink")
        if self.exception is not None:
            raise self.exception
        return self.value

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def rawlink(self, callback: Callable[[SimAsyncResult], None]) -> None:
        if self._ready:
            callback(self)
        else:
            self._callbacks.append(callback)

    def unlink(self, callback: Callable[[SimAsyncResult], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)


class _Request:
    __slots__ = ("op", "path", "args", "watcher")

    def __init__(self, op: str, path: str, *args: Any, watcher: Callable[[WatchedEvent], None] | None = None) -> None:
        self.op = op
        self.path = path
        self.args = args
        self.watcher = watcher

    def wire(self, xid: int) -> tuple[Any, ...]:
        if self.op in ("exists", "get", "children"):
            return ("request", xid, self.op, self.path, self.watcher is not None)
        return ("request", xid, self.op, self.path, *self.args)

    def __repr__(self) -> str:
        return f"{self.op}({self.path!r})"


_CLOSE = _Request("close", "")


class _ClientConnection(asyncio.Protocol):
    """One TCP connection of a client: the frames that arrived, and whether it is gone."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.framer = _Framer()
        self.inbox: deque[tuple[Any, ...]] = deque()
        self.lost = False
        self.waiter: asyncio.Future[bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.inbox.extend(self.framer.feed(data))
        self.wake()

    def eof_received(self) -> bool:
        self.lost = True
        self.wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        self.wake()

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(True)

    async def wait(self, timeout: float, more: Callable[[], bool]) -> bool:
        """Whether something came in (or ``more()``) within ``timeout`` seconds: kazoo's select."""
        if self.inbox or self.lost or more():
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self.waiter = waiter
        timer = loop.call_later(timeout, _resolve, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self.waiter = None

    async def read(self, timeout: float) -> tuple[Any, ...]:
        """The next frame; KazooTimeoutError or ConnectionDropped as kazoo's blocking read raises them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.inbox and not self.lost and loop.time() < deadline:
            await self.wait(deadline - loop.time(), lambda: False)
        if self.inbox:
            return self.inbox.popleft()
        if self.lost:
            raise ConnectionDropped("socket connection broken")
        raise KazooTimeoutError("socket time-out during read")

    def send(self, message: tuple[Any, ...]) -> None:
        if self.lost or self.transport is None or self.transport.is_closing():
            raise ConnectionDropped("socket connection error: Broken pipe")
        self.transport.write(_frame(message))

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _close_abandoned(attempt: asyncio.Task[Any]) -> None:
    """A connect given up on (its timeout, or stop()) that went through after all: hang up."""
    if attempt.cancelled() or attempt.exception() is not None:
        return
    transport, _ = attempt.result()
    transport.close()


class SimKazooClient:
    """The part of ``kazoo.client.KazooClient`` (2.11) that ``coordination.zookeeper.ZooKeeper`` uses, on the
    world's network (see the module docstring). Made by ``SimZooKeeper`` with the wrapper's own arguments."""

    def __init__(self, world: World, hosts: str, timeout: float = 10.0, connection_retry: KazooRetry | None = None,
                 logger: logging.Logger | logging.LoggerAdapter[Any] | None = None, **ignored: Any) -> None:
        self.world = world
        self.hosts, chroot = collect_hosts(hosts)
        self.chroot: str = normpath(chroot) if chroot else ""
        self._session_timeout_ms = int(timeout * 1000)
        retry = connection_retry or KazooRetry(max_tries=-1)
        self._retry_delay, self._retry_backoff = retry.delay, retry.backoff
        self._retry_jitter, self._retry_max_delay = retry.max_jitter, retry.max_delay
        self._cur_delay = retry.delay
        self.logger: Any = logger or logging.getLogger("kazoo.client")
        self.state: str = KazooState.LOST  # what listeners were last told
        self._state: str = KeeperState.CLOSED  # kazoo's own, finer state
        self._listeners: list[Callable[[str], Any]] = []
        self._live = False
        self._live_waiters: list[asyncio.Future[None]] = []
        self._stopped = True
        self._queue: deque[tuple[_Request, SimAsyncResult | None]] = deque()
        self._pending: deque[tuple[_Request, SimAsyncResult | None, int]] = deque()
        self._data_watchers: dict[str, dict[Callable[[WatchedEvent], None], None]] = {}
        self._child_watchers: dict[str, dict[Callable[[WatchedEvent], None], None]] = {}
        self._session_id: int | None = None
        self.last_zxid = 0
        self._xid = 0
        self._host = OUTSIDE_HOST  # where this client runs: the host of the process that started it
        self._task: asyncio.Task[None] | None = None
        self._done: asyncio.Future[None] | None = None
        self._connection: _ClientConnection | None = None

    # -- kazoo's public surface --------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._live

    @property
    def client_state(self) -> str:
        return self._state

    @property
    def session_id(self) -> int | None:
        return self._session_id

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def unchroot(self, path: str) -> str:
        if not self.chroot:
            return path
        if self.chroot == path:
            return "/"
        return path[len(self.chroot):] if path.startswith(self.chroot) else path

    async def connect(self, timeout: float = 15.0) -> None:
        """kazoo's ``start(timeout)`` without the blocked thread: connects, or stops and raises
        KazooTimeoutError after ``timeout`` seconds."""
        if self._live:
            return
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            owner = OWNER.get()
            self._host = owner.host if owner is not None and owner.host is not None else OUTSIDE_HOST
            self._stopped = False
            self._done = loop.create_future()
            self._task = loop.create_task(self._zk_loop(), name=f"kazoo {self._host}")
            self._task.add_done_callback(self._loop_ended)
        waiter: asyncio.Future[None] = loop.create_future()
        self._live_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            await self.stop_async()
            raise KazooTimeoutError("Connection time-out") from None
        if self.chroot:
            exists = self.exists_async("/")
            answered: asyncio.Future[Any] = loop.create_future()
            exists.rawlink(lambda result: _settle_future(answered, result))
            try:
                if not await answered:
                    log.warning("No chroot path exists, the chroot path should be created before normal use.",
                                extra={"chroot": self.chroot})
            except KazooException:
                pass

    async def stop_async(self) -> None:
        """kazoo's ``stop()``: a connected session is closed (its ephemeral nodes go at once); a client not
        connected gives up its connection attempts. Returns when the connection loop ended."""
        task, done = self._task, self._done
        if task is None or done is None:
            return
        if not self._stopped:
            self._stopped = True
            self._queue.append((_CLOSE, None))
            if self._live:
                self._wake()
            else:
                task.cancel()
        await asyncio.shield(done)

    def stop(self) -> None:
        raise SimulationError("kazoo's blocking stop() would stop the world: SimZooKeeper.stop() awaits stop_async()")

    def start(self, timeout: float = 15.0) -> None:
        raise SimulationError("kazoo's blocking start() would stop the world: SimZooKeeper.start() awaits connect()")

    def close(self) -> None:
        pass

    # -- calls -------------------------------------------------------------------------------------------

    def exists_async(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> SimAsyncResult:
        _check_path_and_watch(path, watch)
        result = SimAsyncResult()
        self._call(_Request("exists", _prefix_root(self.chroot, path), watcher=watch), result)
        return result

    def get_async(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> SimAsyncResult:
        _check_path_and_watch(path, watch)
        result = SimAsyncResult()
        self._call(_Request("get", _prefix_root(self.chroot, path), watcher=watch), result)
        return result

    def get_children_async(self, path: str, watch: Callable[[WatchedEvent], None] | None = None,
                           include_data: bool = False) -> SimAsyncResult:
        _check_path_and_watch(path, watch)
        if include_data:
            raise NotImplementedError("get_children(include_data=True) is not modelled")
        result = SimAsyncResult()
        self._call(_Request("children", _prefix_root(self.chroot, path), watcher=watch), result)
        return result

    def set_async(self, path: str, value: bytes, version: int = -1) -> SimAsyncResult:
        if not isinstance(path, str):
            raise TypeError("Invalid type for 'path' (string expected)")
        if not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")
        if not isinstance(version, int):
            raise TypeError("Invalid type for 'version' (int expected)")
        result = SimAsyncResult()
        self._call(_Request("set", _prefix_root(self.chroot, path), value, version), result)
        return result

    def delete_async(self, path: str, version: int = -1) -> SimAsyncResult:
        if not isinstance(path, str):
            raise TypeError("Invalid type for 'path' (string expected)")
        if not isinstance(version, int):
            raise TypeError("Invalid type for 'version' (int expected)")
        result = SimAsyncResult()
        self._call(_Request("delete", _prefix_root(self.chroot, path), version), result)
        return result

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False, include_data: bool = False) -> SimAsyncResult:
        """kazoo's create: with ``makepath``, a NoNode answer ensures the parent and creates again."""
        if not isinstance(path, str):
            raise TypeError("Invalid type for 'path' (string expected)")
        if value is not None and not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")
        for name, flag in (("ephemeral", ephemeral), ("sequence", sequence), ("makepath", makepath)):
            if not isinstance(flag, bool):
                raise TypeError(f"Invalid type for '{name}' (bool expected)")
        if include_data:
            raise NotImplementedError("create(include_data=True) is not modelled")
        flags = (_EPHEMERAL if ephemeral else 0) | (_SEQUENCE if sequence else 0)
        async_result = SimAsyncResult()

        @_capture(async_result)
        def do_create() -> None:
            inner = SimAsyncResult()
            request = _Request("create", _prefix_root(self.chroot, path, trailing=sequence), value or b"", flags)
            if self._call(request, inner) is False and inner.exception is not None:
                raise inner.exception
            inner.rawlink(create_completion)

        @_capture(async_result)
        def retry_completion(result: SimAsyncResult) -> None:
            result.get()
            do_create()

        @_wrap(async_result)
        def create_completion(result: SimAsyncResult) -> Any:
            try:
                return self.unchroot(result.get())
            except NoNodeError:
                if not makepath:
                    raise
                parent = path.rstrip("/") if sequence and path.endswith("/") else posixpath.split(path)[0]
                self.ensure_path_async(parent).rawlink(retry_completion)
                return None

        do_create()
        return async_result

    def ensure_path_async(self, path: str, acl: Any = None) -> SimAsyncResult:
        """kazoo's ensure_path: exists, else ensure the parent and create (NodeExists counts as done)."""
        async_result = SimAsyncResult()

        @_wrap(async_result)
        def create_completion(result: SimAsyncResult) -> Any:
            try:
                return result.get()
            except NodeExistsError:
                return True

        @_capture(async_result)
        def prepare_completion(next_path: str, result: SimAsyncResult) -> None:
            result.get()
            self.create_async(next_path).rawlink(create_completion)

        @_wrap(async_result)
        def exists_completion(here: str, result: SimAsyncResult) -> Any:
            if result.get():
                return True
            parent, node = posixpath.split(here)
            if node:
                self.ensure_path_async(parent).rawlink(partial(prepare_completion, here))
            else:
                self.create_async(here).rawlink(create_completion)
            return None

        self.exists_async(path).rawlink(partial(exists_completion, path))
        return async_result

    def _call(self, request: _Request, async_object: SimAsyncResult) -> bool | None:
        """Queues ``request`` (sent once connected), or fails it at once in a closed or expired state."""
        if self._state == KeeperState.CLOSED:
            async_object.set_exception(ConnectionClosedError("Connection has been closed"))
            return False
        if self._state == KeeperState.EXPIRED_SESSION:
            async_object.set_exception(SessionExpiredError())
            return False
        self._queue.append((request, async_object))
        self._wake()
        return None

    def _wake(self) -> None:
        if self._connection is not None:
            self._connection.wake()

    # -- states ------------------------------------------------------------------------------------------

    def _make_state_change(self, state: str) -> None:
        if self.state == state:
            return
        self.state = state
        session = f"{self._session_id:#x}" if self._session_id else None
        self.world.record("zk_client", self._host, str(state), session)
        for listener in list(self._listeners):
            try:
                if listener(state) is True:
                    self.remove_listener(listener)
            except Exception:
                self.logger.exception("Error in connection state listener")

    def _session_callback(self, state: str) -> None:
        if state == self._state:
            return
        closed_state = self._state in _CLOSED_STATES
        self._state = state
        if closed_state and state == KeeperState.CONNECTING:
            return
        if state in (KeeperState.CONNECTED, KeeperState.CONNECTED_RO):
            self.logger.info("Zookeeper connection established, state: %s", state)
            self._live = True
            waiters, self._live_waiters = self._live_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._make_state_change(KazooState.CONNECTED)
        elif state in _CLOSED_STATES:
            self.logger.info("Zookeeper session closed, state: %s", state)
            self._live = False
            self._make_state_change(KazooState.LOST)
            self._notify_pending(state)
            self._queue, self._pending = deque(), deque()
            self._reset_watchers()
            self._session_id = None
            self.last_zxid = 0
        else:
            self.logger.info("Zookeeper connection lost")
            self._live = False
            self._notify_pending(state)
            self._make_state_change(KazooState.SUSPENDED)
            self._reset_watchers()

    def _notify_pending(self, state: str) -> None:
        error_type = SessionExpiredError if state == KeeperState.EXPIRED_SESSION else ConnectionLoss
        while self._pending:
            _, async_object, _ = self._pending.popleft()
            if async_object is not None:
                async_object.set_exception(error_type())
        while self._queue:
            _, queued = self._queue.popleft()
            if queued is not None:
                queued.set_exception(error_type())

    def _reset_watchers(self) -> None:
        """kazoo 2.11: every watch is called (a NONE event) and forgotten; none is set again on a reconnect."""
        watchers = [watch for table in (self._child_watchers, self._data_watchers)
                    for per_path in table.values() for watch in per_path]
        self._child_watchers, self._data_watchers = {}, {}
        event = WatchedEvent(EventType.NONE, self._state, None)
        for watch in watchers:
            self._dispatch(watch, event)

    def _dispatch(self, watch: Callable[[WatchedEvent], None], event: WatchedEvent) -> None:
        try:
            watch(event)
        except Exception:
            self.logger.exception("Exception in worker queue thread")

    # -- the connection loop (kazoo's ConnectionHandler) -------------------------------------------------

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        self._connection = None
        self._session_callback(KeeperState.CLOSED)
        self.logger.log(BLATHER, "Connection stopped")
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        waiters, self._live_waiters = self._live_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionClosedError("Connection has been closed"))
        if not task.cancelled() and task.exception() is not None:
            log.error("the simulated kazoo connection loop failed", exc_info=task.exception())

    async def _zk_loop(self) -> None:
        self.logger.log(BLATHER, "ZK loop started")
        rng = self.world.random
        self._cur_delay = self._retry_delay
        while not self._stopped:
            if await self._connect_loop() == _STOP:
                break
            jitter = rng.uniform(1.0 - self._retry_jitter, 1.0 + self._retry_jitter)
            sleeptime = self._cur_delay * jitter
            await asyncio.sleep(sleeptime)
            self._cur_delay = min(sleeptime * self._retry_backoff, self._retry_max_delay)

    async def _connect_loop(self) -> str | None:
        host_ports = list(self.hosts)
        self.world.random.shuffle(host_ports)  # kazoo's randomize_hosts
        for host, port in host_ports:
            if self._stopped:
                return _STOP
            if await self._connect_attempt(host, port) == _STOP:
                return _STOP
        return None

    async def _connect_attempt(self, host: str, port: int) -> str | None:
        loop = asyncio.get_running_loop()
        rng = self.world.random
        if self._state != KeeperState.CONNECTING:
            self._session_callback(KeeperState.CONNECTING)
        connection: _ClientConnection | None = None
        try:
            connection, read_timeout = await self._connect(host, port)
            self._cur_delay = self._retry_delay  # retry.reset()
            ping_outstanding = False
            last_send = loop.time()
            while True:
                jitter = rng.randint(1, 40) / 100.0
                deadline = last_send + read_timeout / 2.0 - jitter
                timeout = max(deadline - loop.time(), jitter)
                if not await connection.wait(timeout, lambda: bool(self._queue)):
                    if ping_outstanding:
                        raise ConnectionDropped("outstanding heartbeat ping not received")
                else:
                    if connection.inbox or connection.lost:
                        frame = await connection.read(0.0)
                        if frame[0] == "pong":
                            self.logger.log(BLATHER, "Received Ping")
                            ping_outstanding = False
                        elif self._read(frame) == _CLOSE_RESPONSE:
                            break
                    if self._queue:
                        self._send_request(connection)
                        last_send = loop.time()
                        continue
                if loop.time() >= deadline:
                    ping_outstanding = True
                    self.logger.log(BLATHER, "Sending request(xid=%s): %s", _PING_XID, "Ping()")
                    connection.send(("ping",))
                    last_send = loop.time()
            self.logger.info("Closing connection to %s:%s", host, port)
            self._session_callback(KeeperState.CLOSED)
            return _STOP
        except (ConnectionDropped, KazooTimeoutError) as error:
            if isinstance(error, ConnectionDropped):
                self.logger.warning("Connection dropped: %s", error)
            else:
                self.logger.warning("Connection time-out: %s", error)
            if self._state != KeeperState.CONNECTING:
                self.logger.warning("Transition to CONNECTING")
                self._session_callback(KeeperState.CONNECTING)
        except SessionExpiredError:
            self._cur_delay = self._retry_delay
            self.logger.warning("Session has expired")
            self._session_callback(KeeperState.EXPIRED_SESSION)
        finally:
            self._connection = None
            if connection is not None:
                connection.close()
        return None

    async def _connect(self, host: str, port: int) -> tuple[_ClientConnection, float]:
        """A TCP connection and the session handshake; returns the connection and kazoo's read timeout."""
        loop = asyncio.get_running_loop()
        self.logger.info("Connecting to %s(%s):%s, use_ssl: %r", host, host, port, False)
        self.logger.log(BLATHER, "    Using session_id: %r session_passwd: %s", self._session_id,
                        hexlify(b"\x00" * 16))
        connection = _ClientConnection()
        attempt = loop.create_task(loop.create_connection(lambda: connection, host, port))
        try:
            await asyncio.wait_for(asyncio.shield(attempt), self._session_timeout_ms / 1000.0)
        except BaseException as error:
            attempt.add_done_callback(_close_abandoned)
            if isinstance(error, TimeoutError):
                raise ConnectionDropped("socket connection error: timed out") from None
            if isinstance(error, OSError):
                raise ConnectionDropped(f"socket connection error: {error.strerror}") from None
            raise
        self._xid = 0
        connection.send(("connect", self.last_zxid, self._session_timeout_ms, self._session_id or 0))
        _, negotiated_ms, session_id = await connection.read(self._session_timeout_ms / 1000.0 / len(self.hosts))
        if negotiated_ms <= 0:
            raise SessionExpiredError("Session has expired")
        self._session_id = session_id
        connect_timeout = negotiated_ms / len(self.hosts)
        read_timeout = negotiated_ms * 2.0 / 3.0
        self._connection = connection  # from now on a call wakes the loop up
        self.logger.log(BLATHER, "Session created, session_id: %r session_passwd: %s\n"
                        "    negotiated session timeout: %s\n    connect timeout: %s\n    read timeout: %s",
                        session_id, hexlify(b"\x00" * 16), negotiated_ms, connect_timeout, read_timeout)
        self._session_callback(KeeperState.CONNECTED)
        return connection, read_timeout / 1000.0

    def _send_request(self, connection: _ClientConnection) -> None:
        request, async_object = self._queue[0]
        xid = self._xid
        self._xid = (self._xid % 2147483647) + 1
        self.logger.log(BLATHER, "Sending request(xid=%s): %s", xid, request)
        connection.send(request.wire(xid))
        self._queue.popleft()
        self._pending.append((request, async_object, xid))

    def _read(self, frame: tuple[Any, ...]) -> str | None:
        if frame[0] == "event":
            self._read_watch_event(frame[1], frame[2])
            return None
        _, xid, zxid, error, result = frame
        if zxid and zxid > 0:
            self.last_zxid = zxid
        try:
            request, async_object, expected = self._pending.popleft()
        except IndexError:
            return None
        if xid != expected:
            raise SimulationError(f"xids do not match, expected {expected} received {xid}")
        exists_error = error == getattr(NoNodeError, "code") and request.op == "exists"
        if error and not exists_error:
            exception = EXCEPTIONS[error]()
            self.logger.debug("Received error(xid=%s) %r", xid, exception)
            if async_object is not None:
                async_object.set_exception(exception)
        elif async_object is not None:
            if exists_error:
                async_object.set(None)
            else:
                async_object.set(_decode(request.op, result))
            if not self._stopped and request.watcher is not None:
                table = self._child_watchers if request.op == "children" else self._data_watchers
                table.setdefault(request.path, {})[request.watcher] = None
        return _CLOSE_RESPONSE if request.op == "close" else None

    def _read_watch_event(self, event_type: int, path: str) -> None:
        watchers: list[Callable[[WatchedEvent], None]] = []
        if event_type in (CREATED_EVENT, CHANGED_EVENT):
            watchers.extend(self._data_watchers.pop(path, {}))
        elif event_type == DELETED_EVENT:
            watchers.extend(self._data_watchers.pop(path, {}))
            watchers.extend(self._child_watchers.pop(path, {}))
        elif event_type == CHILD_EVENT:
            watchers.extend(self._child_watchers.pop(path, {}))
        event = WatchedEvent(EVENT_TYPE_MAP[event_type], self._state, self.unchroot(path))
        for watch in watchers:
            self._dispatch(watch, event)


def _capture(async_result: SimAsyncResult) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """kazoo's ``capture_exceptions``: what the decorated function raises fails ``async_result``."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        def captured(*args: Any) -> Any:
            try:
                return function(*args)
            except Exception as error:
                async_result.set_exception(error)
                return None

        return captured

    return decorate


def _wrap(async_result: SimAsyncResult) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """kazoo's ``wrap``: a value the decorated function returns (other than None) settles ``async_result``."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @_capture(async_result)
        def wrapped(*args: Any) -> Any:
            value = function(*args)
            if value is not None:
                async_result.set(value)
            return value

        return wrapped

    return decorate


def _decode(op: str, result: Any) -> Any:
    if op in ("exists", "set"):
        return ZnodeStat(*result)
    if op == "get":
        return result[0], ZnodeStat(*result[1])
    return result  # children: a list; create: the path; delete: True


def _check_path_and_watch(path: Any, watch: Any) -> None:
    if not isinstance(path, str):
        raise TypeError("Invalid type for 'path' (string expected)")
    if watch is not None and not callable(watch):
        raise TypeError("Invalid type for 'watch' (must be a callable)")


def _settle_future(future: asyncio.Future[Any], result: SimAsyncResult) -> None:
    if future.done():
        return
    if result.exception is not None:
        future.set_exception(result.exception)
    else:
        future.set_result(result.value)


# --------------------------------------------------------------------------------------------- the wrapper


class SimZooKeeper(ZooKeeper):
    """``coordination.zookeeper.ZooKeeper`` on ``SimKazooClient``: the real wrapper, whose ``start`` and
    ``stop`` await the model instead of blocking a thread on kazoo. Made through a class bound to a world
    (``bind(world)``; ``World.patched()`` puts one in place of ``ZooKeeper``), with the real one's signature."""

    world: ClassVar[World | None] = None

    def __init__(self, hosts: str, session_timeout: float = 10.0, operation_timeout: float = 30.0,
                 quiet: bool = False):
        world = type(self).world
        if world is None:
            raise SimulationError("SimZooKeeper is made through zookeeper_sim.bind(world) (World.patched() does it)")

        def kazoo_client(**kwargs: Any) -> SimKazooClient:
            return SimKazooClient(world, **kwargs)

        real = getattr(zookeeper_module, "KazooClient")
        setattr(zookeeper_module, "KazooClient", kazoo_client)  # for this call only: nothing else runs meanwhile
        try:
            super().__init__(hosts, session_timeout=session_timeout, operation_timeout=operation_timeout,
                             quiet=quiet)
        finally:
            setattr(zookeeper_module, "KazooClient", real)

    @property
    def sim_client(self) -> SimKazooClient:
        client = self._client
        assert isinstance(client, SimKazooClient)
        return client

    @property
    def session_id(self) -> int | None:
        """The session's id (the model's; tests compare it with the server's sessions)."""
        return self.sim_client.session_id

    async def start(self, timeout: float = 15.0) -> None:
        """Connects (raises ZooKeeperUnavailable if it cannot within ``timeout``), as the real one."""
        self._loop = asyncio.get_running_loop()
        starting = time.monotonic()
        try:
            await self.sim_client.connect(timeout)
        except Exception as error:
            await self.stop()
            raise ZooKeeperUnavailable(f"cannot connect to ZooKeeper at {self.hosts}: {error}") from error
        self.clock.heard(starting)

    async def stop(self) -> None:
        """Closes the session (see the real one); waits at most ``STOP_WAIT_SECONDS``."""
        self._stopping = True
        self._kazoo_log.quiet = True
        try:
            await asyncio.wait_for(asyncio.shield(self.sim_client.stop_async()), STOP_WAIT_SECONDS)
        except TimeoutError:
            zookeeper_module.log.warning("zookeeper session did not close in time; leaving it to expire",
                                         extra={"hosts": self.hosts, "seconds": STOP_WAIT_SECONDS})


def bind(world: World) -> type[SimZooKeeper]:
    """A ``SimZooKeeper`` class whose instances live in ``world``."""
    return type("SimZooKeeper", (SimZooKeeper,), {"world": world, "__module__": __name__})


# Where production code looks ``ZooKeeper`` up when it makes one (server/service.py imports it from
# coordination.zookeeper inside a function, so the first module covers it).
_CONSTRUCTED_IN = ("coordination.zookeeper", "controller.cluster.zk", "server.tier1.replicated",
                   "server.tier1.logstore.service", "tributary.cluster_status")


def patches(world: World) -> list[tuple[Any, str, Any]]:
    """(object, attribute, replacement): ``ZooKeeper`` is the world's model wherever production code makes one."""
    import importlib

    bound = bind(world)
    return [(importlib.import_module(name), "ZooKeeper", bound) for name in _CONSTRUCTED_IN]


__all__ = ["DEFAULT_PORT", "JUTE_MAXBUFFER", "SimAsyncResult", "SimKazooClient", "SimZooKeeper", "SimZooKeeperServer",
           "bind", "patches"]
