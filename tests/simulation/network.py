"""An in-memory TCP network between simulated hosts, behind ``loop.create_connection``/``create_server``.

Theory of operation
-------------------
Hosts are plain strings ("10.0.0.1"); a host exists as soon as something listens on it or connects
from it. "localhost", "127.0.0.1" and "::1" name the caller's own host; a server bound to None, "",
"0.0.0.0", "::" or a loopback name listens on its own host (and is reachable from every host:
loopback-only binding is not modelled). A process's servers and connections are on its host; code
outside any process (the test driving the world) is on ``OUTSIDE_HOST`` unless ``local_addr`` says
otherwise. Port 0 allocates a port (per host, from 49152 on, deterministically).

``create_connection`` sends a SYN (a link latency), finds the listener, makes the connection (both
ends, see tcp.py), has the server's protocol made in the server's context, and returns after the
SYN-ACK's latency with the client protocol's ``connection_made`` called. A connect to a port nobody
listens on fails with ``ConnectionRefusedError``; one across a blocked link retries its SYN (1, 2,
4 s...) and fails with ``TimeoutError`` (ETIMEDOUT) after ``connect_timeout``.

The nemesis's faults: ``partition(a, b)`` (both ways) and ``partition_one_way(src, dst)`` block
links, ``heal()`` unblocks them all; ``reset(host)`` resets every connection of a host; ``crash``
(called by ``Process.crash``) closes a dead process's servers and resets its connections. Per-link
latency (``set_latency``) is drawn uniformly from the world's RNG.

Not simulated: TLS (``ssl=`` is refused), UDP, unix sockets, DNS (every name is a host), packet loss
other than partitions, bandwidth.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tests.simulation.errors import NotSimulated
from tests.simulation.loop import OWNER, Owner, is_local_name
from tests.simulation.tcp import Connection, SimTransport

if TYPE_CHECKING:
    from tests.simulation.world import World

OUTSIDE_HOST = "10.0.0.254"
_ANY_HOST = (None, "", "0.0.0.0", "::")
_EPHEMERAL = (49152, 65535)


def _hosts(hosts: str | Iterable[str]) -> list[str]:
    return [hosts] if isinstance(hosts, str) else list(hosts)


class SimSocket:
    """What ``server.sockets`` holds: enough of a socket to ask where it is bound."""

    family = socket.AF_INET
    type = socket.SOCK_STREAM

    def __init__(self, address: tuple[str, int]) -> None:
        self._address = address

    def getsockname(self) -> tuple[str, int]:
        return self._address

    def fileno(self) -> int:
        return -1

    def setsockopt(self, *args: Any) -> None:
        pass

    def getsockopt(self, *args: Any) -> int:
        return 0

    def __repr__(self) -> str:
        return f"<SimSocket {self._address[0]}:{self._address[1]}>"


class SimServer(asyncio.AbstractServer):
    """A listening server on a simulated host (what ``loop.create_server`` returns)."""

    def __init__(self, network: Network, address: tuple[str, int], protocol_factory: Callable[[], Any],
                 context: contextvars.Context, owner: Owner | None) -> None:
        self._network = network
        self.address = address
        self.protocol_factory = protocol_factory
        self.context = context
        self.owner = owner
        self._serving = False
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []
        self._forever: asyncio.Future[None] | None = None

    @property
    def sockets(self) -> tuple[SimSocket, ...]:
        return () if self._closed else (SimSocket(self.address),)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._network.loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._start()

    def _start(self) -> None:
        if self._closed:
            raise RuntimeError(f"server {self!r} is closed")
        if not self._serving:
            self._serving = True
            self._network._record("listen", *self.address)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._serving:
            self._network._record("unlisten", *self.address)
        self._serving = False
        self._network._unbind(self)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        if self._forever is not None and not self._forever.done():
            self._forever.cancel()

    def close_clients(self) -> None:
        for end in self._network.accepted_by(self):
            end.close()

    def abort_clients(self) -> None:
        for end in self._network.accepted_by(self):
            end.abort()

    async def wait_closed(self) -> None:
        """Returns once the server is closed (its connections may live on, as in Python 3.11)."""
        if self._closed:
            return
        waiter: asyncio.Future[None] = self._network.loop.create_future()
        self._waiters.append(waiter)
        await waiter

    async def serve_forever(self) -> None:
        if self._forever is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        self._start()
        self._forever = self._network.loop.create_future()
        try:
            await self._forever
        except asyncio.CancelledError:
            self.close()
            raise
        finally:
            self._forever = None

    def __repr__(self) -> str:
        return f"<SimServer {self.address[0]}:{self.address[1]}{' closed' if self._closed else ''}>"


class Network:
    """The world's network: listeners, connections, latencies and the nemesis's faults."""

    def __init__(self, world: World, *, latency: tuple[float, float] = (0.0005, 0.0025),
                 loopback_latency: tuple[float, float] = (0.00002, 0.00005), window: int = 256 * 1024,
                 max_read: int = 256 * 1024, connect_timeout: float = 10.0, stall_reset_after: float = 30.0) -> None:
        self.world = world
        self.loop = world.loop
        self.default_latency = latency
        self.loopback_latency = loopback_latency
        self.window = window
        self.max_read = max_read
        self.connect_timeout = connect_timeout
        self.stall_reset_after = stall_reset_after
        self.context = contextvars.Context()  # the kernels' and the wire's work belongs to no process
        self._link_latency: dict[tuple[str, str], tuple[float, float]] = {}
        self._blocked: dict[tuple[str, str], None] = {}  # an ordered set of blocked (src, dst) links
        self._bound: dict[tuple[str, int], SimServer] = {}
        self._servers: list[SimServer] = []
        self._connections: dict[int, Connection] = {}  # live connections, in the order they were made
        self._next_port: dict[str, int] = {}
        self._next_connection = 1

    def _record(self, kind: str, *fields: Any) -> None:
        self.world.record(kind, *fields)

    # -- latencies and faults (the nemesis) ----------------------------------------------------------

    def latency(self, src: str, dst: str) -> float:
        low, high = self.loopback_latency if src == dst else self._link_latency.get((src, dst),
                                                                                    self.default_latency)
        return self.world.random.uniform(low, high)

    def set_latency(self, src: str, dst: str, low: float, high: float, *, both_ways: bool = True) -> None:
        self._link_latency[(src, dst)] = (low, high)
        if both_ways:
            self._link_latency[(dst, src)] = (low, high)

    def partition(self, a_hosts: str | Iterable[str], b_hosts: str | Iterable[str]) -> None:
        """Cuts every link between the two groups, both ways."""
        a_list, b_list = _hosts(a_hosts), _hosts(b_hosts)
        self._record("partition", ",".join(a_list), ",".join(b_list))
        for a in a_list:
            for b in b_list:
                if a != b:
                    self._blocked[(a, b)] = None
                    self._blocked[(b, a)] = None

    def partition_one_way(self, src: str, dst: str) -> None:
        """Cuts the link from ``src`` to ``dst`` only."""
        self._record("partition_one_way", src, dst)
        if src != dst:
            self._blocked[(src, dst)] = None

    def heal(self) -> None:
        """Unblocks every link; what was held back is delivered after a fresh latency."""
        self._record("heal")
        self._blocked.clear()
        for connection in list(self._connections.values()):
            for pipe in connection.pipes:
                pipe.unstall()

    def is_blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self._blocked

    def reset(self, host: str) -> None:
        """Resets every connection with an end on ``host`` (both ends get ConnectionResetError)."""
        self._record("reset_host", host)
        for connection in list(self._connections.values()):
            if any(end.address[0] == host for end in connection.ends()):
                connection.reset(f"reset of host {host}")

    def crash(self, owner: Owner) -> None:
        """What the operating system does when a process dies: its sockets close, its peers get an RST."""
        for server in list(self._servers):
            if server.owner is owner:
                server.close()
        for connection in list(self._connections.values()):
            if any(end.owner is owner for end in connection.ends()):
                connection.reset(f"process {owner.label} died")

    def accepted_by(self, server: SimServer) -> list[SimTransport]:
        """The live ends ``server`` accepted, oldest first."""
        return [connection.server for connection in self._connections.values() if connection.listener is server]

    def connections(self, host: str | None = None) -> list[SimTransport]:
        """The live ends (on ``host``, or all), in the order their connections were made."""
        return [end for connection in self._connections.values() for end in connection.ends()
                if host is None or end.address[0] == host]

    # -- addresses -----------------------------------------------------------------------------------

    def _own_host(self, owner: Owner | None) -> str:
        return owner.host if owner is not None and owner.host is not None else OUTSIDE_HOST

    def _allocate_port(self, host: str) -> int:
        low, high = _EPHEMERAL
        port = self._next_port.get(host, low)
        for _ in range(high - low + 1):
            candidate = port
            port = low if port >= high else port + 1
            if (host, candidate) not in self._bound:
                self._next_port[host] = port
                return candidate
        raise OSError(errno.EADDRNOTAVAIL, f"no free port on {host}")

    def _unbind(self, server: SimServer) -> None:
        if self._bound.get(server.address) is server:
            del self._bound[server.address]
        if server in self._servers:
            self._servers.remove(server)

    def _forget(self, connection: Connection) -> None:
        self._connections.pop(connection.id, None)

    # -- create_server / create_connection -----------------------------------------------------------

    async def create_server(self, protocol_factory: Callable[[], Any], host: Any = None, port: int | None = None,
                            *, ssl: Any = None, sock: Any = None, start_serving: bool = True,
                            **ignored: Any) -> SimServer:
        """``loop.create_server`` on the caller's host (family, backlog, reuse_* are accepted and ignored)."""
        if ssl is not None:
            raise NotSimulated("TLS is not simulated yet: create_server(ssl=...) is refused")
        if sock is not None:
            raise NotSimulated("create_server(sock=...) would serve a real socket")
        owner = OWNER.get()
        own = self._own_host(owner)
        if not isinstance(host, (str, type(None))):  # a sequence of hosts: all must be this one
            names = {own if h in _ANY_HOST or is_local_name(h) else h for h in host}
            if len(names) != 1:
                raise NotSimulated(f"a server on several hosts ({sorted(names)}) is not simulated")
            host = names.pop()
        name = own if host in _ANY_HOST or is_local_name(host) else host
        if owner is not None and name != own:
            raise OSError(errno.EADDRNOTAVAIL, f"cannot bind {name}: process {owner.label} runs on {own}")
        number = int(port or 0)
        if number == 0:
            number = self._allocate_port(name)
        elif (name, number) in self._bound:
            raise OSError(errno.EADDRINUSE, f"[Errno {errno.EADDRINUSE}] error while attempting to bind on address "
                                            f"('{name}', {number}): address already in use")
        server = SimServer(self, (name, number), protocol_factory, contextvars.copy_context(), owner)
        self._bound[server.address] = server
        self._servers.append(server)
        if start_serving:
            server._start()
        return server

    async def create_connection(self, protocol_factory: Callable[[], Any], host: str | None = None,
                                port: int | None = None, *, ssl: Any = None, sock: Any = None,
                                local_addr: tuple[str, int] | None = None, **ignored: Any
                                ) -> tuple[SimTransport, Any]:
        """``loop.create_connection``: a SYN, a SYN-ACK, then the protocol's ``connection_made``."""
        if ssl:
            raise NotSimulated("TLS is not simulated yet: create_connection(ssl=...) is refused")
        if sock is not None:
            raise NotSimulated("create_connection(sock=...) would use a real socket")
        if host is None or port is None:
            raise ValueError("host and port was not specified and no sock specified")
        owner = OWNER.get()
        src = self._own_host(owner)
        if owner is None and local_addr is not None and local_addr[0] not in _ANY_HOST:
            src = local_addr[0]
        dst = src if is_local_name(host) else str(host)
        number = int(port)
        failed = f"Connect call failed ('{dst}', {number})"
        loop = self.loop
        deadline = loop.time() + self.connect_timeout
        retry = 1.0
        while self.is_blocked(src, dst) or self.is_blocked(dst, src):  # the SYN or its answer is lost
            if loop.time() >= deadline:
                self._record("connect_timeout", src, dst, number)
                raise OSError(errno.ETIMEDOUT, failed)
            await asyncio.sleep(min(retry, deadline - loop.time()))
            retry *= 2
        await asyncio.sleep(self.latency(src, dst))  # the SYN travels
        server = self._bound.get((dst, number))
        if server is None or not server.is_serving():
            self._record("refused", src, dst, number)
            await asyncio.sleep(self.latency(dst, src))  # the RST travels back
            raise OSError(errno.ECONNREFUSED, failed)
        connection = Connection(self, self._next_connection, server)
        self._next_connection += 1
        local_port = self._allocate_port(src)
        client = SimTransport(connection, (src, local_port), contextvars.copy_context(), owner)
        accepted = SimTransport(connection, server.address, server.context, server.owner)
        connection.join(client, accepted)
        self._connections[connection.id] = connection
        self._record("accept", connection.id, src, local_port, dst, number)
        loop.call_soon(self._accept, accepted, server, context=server.context)
        await asyncio.sleep(self.latency(dst, src))  # the SYN-ACK travels back
        if connection.dead:
            raise OSError(errno.ECONNRESET, f"{failed}: connection reset during the handshake")
        self._record("connect", connection.id)
        try:
            protocol = protocol_factory()
            client._establish(protocol)
        except BaseException:
            client.abort()
            raise
        return client, protocol

    def _accept(self, transport: SimTransport, server: SimServer) -> None:
        if transport._socket_closed:
            return
        try:
            protocol = server.protocol_factory()
            transport._establish(protocol)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - handed on, as asyncio does
            transport._report(exc, "Error in the protocol factory or connection_made of an accepted connection")
            transport.abort()
