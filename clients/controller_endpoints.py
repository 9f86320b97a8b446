"""Which controller the SDK talks to, and which it moves to when that one fails.

A client is given one or more controller URIs (``tcp://a:9090,b:9090`` or ``tcp://a:9090,tcp://b:9090``);
a name in them may resolve to several addresses, and each is a controller to try. Once a controller has
answered, the client also learns the others from it (getControllerServerList, as Pravega's clients do),
so a client given one address still has somewhere to go when that controller dies.

:class:`ControllerEndpoints` holds that list in order (the given ones first, then the learnt ones) and
which one is in use. :meth:`ControllerEndpoints.failed` says the one in use failed: the next one that
has not failed recently becomes current (every one failed recently: the one that failed longest ago),
so that calls go round the list instead of waiting on a dead controller. The list is pure bookkeeping
(no I/O): resolving names (:func:`resolve`) and asking a controller for the others is the client's.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator

from .errors import InvalidArgument
from .security import TLS_SCHEMES

FAILED_RECENTLY_SECONDS = 5.0  # an endpoint that failed this recently is tried again only when all did

Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclasses.dataclass(frozen=True)
class ControllerEndpoint:
    """One controller address: ``host`` to connect to, and ``name`` the address was given as (a DNS name
    that resolved to ``host``; None when ``host`` is what was given). TLS checks the certificate against
    ``name`` when there is one."""

    host: str
    port: int
    name: str | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def given_address(self) -> str:
        """host:port as the user gave it (the name, where ``host`` is an address it resolved to): for messages."""
        return ControllerEndpoint(self.name, self.port).address if self.name is not None else self.address

    @property
    def server_name(self) -> str:
        """The host name a TLS certificate must be for."""
        return self.name or self.host

    @property
    def is_literal(self) -> bool:
        """Whether ``host`` is an IP address (nothing to resolve)."""
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                socket.inet_pton(family, self.host)
                return True
            except OSError:
                continue
        return False


def parse_controller_uris(uri: str) -> tuple[bool, list[ControllerEndpoint]]:
    """``[tcp://|tls://]host:port[,[scheme://]host:port...]`` -> (TLS, the endpoints in the order given).

    An entry without a scheme takes the first entry's. Every entry must agree on TLS.

    Raises:
        InvalidArgument: an entry that is not host:port, an unknown scheme, or TLS on some entries only.
    """
    entries = [entry.strip() for entry in uri.split(",")]
    if not all(entries):
        raise InvalidArgument(f"controller URI {uri!r} has an empty entry (a list is tcp://host:port,host:port)")
    first_scheme = None
    tls_of: list[bool] = []
    endpoints: list[ControllerEndpoint] = []
    for entry in entries:
        scheme, separator, rest = entry.partition("://")
        if not separator:
            scheme, rest = first_scheme or "tcp", entry
        scheme = scheme.lower()
        if scheme not in ("tcp", "pravega", *TLS_SCHEMES):
            raise InvalidArgument(f"unsupported controller URI scheme {scheme!r} in {uri!r} "
                                  "(use tcp://host:port, or tls://host:port for TLS)")
        first_scheme = first_scheme or scheme
        tls_of.append(scheme in TLS_SCHEMES)
        host, colon, port = rest.rstrip("/").rpartition(":")
        if not colon or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise InvalidArgument(f"controller URI {uri!r} is not tcp://host:port")
        endpoints.append(ControllerEndpoint(host.strip("[]"), int(port)))
    if len(set(tls_of)) > 1:
        raise InvalidArgument(f"controller URI {uri!r} mixes TLS and plaintext controllers")
    return tls_of[0], endpoints


async def resolve(endpoint: ControllerEndpoint, resolver: Resolver) -> list[ControllerEndpoint]:
    """``endpoint`` with a name replaced by one endpoint per address the name resolves to (in the resolver's
    order); an IP address, or a name that does not resolve now, as it is (gRPC resolves it again itself)."""
    if endpoint.is_literal or endpoint.name is not None:
        return [endpoint]
    try:
        addresses = await resolver(endpoint.host, endpoint.port)
    except OSError:
        return [endpoint]
    unique = list(dict.fromkeys(addresses))
    if not unique:
        return [endpoint]
    return [ControllerEndpoint(address, endpoint.port, endpoint.host) for address in unique]


class ControllerEndpoints:
    """The controllers a client knows, in order, and the one in use (see the module docstring)."""

    def __init__(self, given: Iterable[ControllerEndpoint]):
        self._known: list[ControllerEndpoint] = list(dict.fromkeys(given))
        if not self._known:
            raise InvalidArgument("no controller endpoint")
        self._current = 0
        self._failed_at: dict[ControllerEndpoint, float] = {}

    def __iter__(self) -> Iterator[ControllerEndpoint]:
        return iter(list(self._known))

    @property
    def current(self) -> ControllerEndpoint:
        return self._known[self._current]

    def replace(self, endpoint: ControllerEndpoint, by: list[ControllerEndpoint]) -> None:
        """Puts ``by`` (what ``endpoint`` resolved to) in its place, without duplicates; the current one stays
        current if it is among them, else the first of them."""
        if endpoint not in self._known or by == [endpoint]:
            return
        current = self.current
        index = self._known.index(endpoint)
        rest = [known for known in self._known if known != endpoint and known not in by]
        self._known = [*[known for known in rest if self._known.index(known) < index], *by,
                       *[known for known in rest if self._known.index(known) > index]]
        self._current = self._known.index(current) if current in self._known else self._known.index(by[0])

    def learn(self, endpoints: Iterable[ControllerEndpoint]) -> list[ControllerEndpoint]:
        """Adds the controllers another controller told of (after those known); returns the new ones."""
        known_addresses = {(known.host, known.port) for known in self._known} | {
            (known.name, known.port) for known in self._known if known.name is not None}
        new = [endpoint for endpoint in dict.fromkeys(endpoints)
               if (endpoint.host, endpoint.port) not in known_addresses]
        self._known.extend(new)
        return new

    def succeeded(self, endpoint: ControllerEndpoint) -> None:
        self._failed_at.pop(endpoint, None)

    def failed(self, endpoint: ControllerEndpoint, now: float) -> bool:
        """``endpoint`` failed at ``now`` (monotonic seconds). If it is the one in use, the next to try becomes
        current; returns whether the current one changed."""
        self._failed_at[endpoint] = now
        if endpoint != self.current or len(self._known) == 1:
            return False
        count = len(self._known)
        order = [(self._current + step) % count for step in range(1, count)]
        fresh = [index for index in order
                 if now - self._failed_at.get(self._known[index], float("-inf")) >= FAILED_RECENTLY_SECONDS]
        self._current = fresh[0] if fresh else min(order, key=lambda index: self._failed_at[self._known[index]])
        return True

    def all_failed_recently(self, now: float) -> bool:
        return all(now - self._failed_at.get(known, float("-inf")) < FAILED_RECENTLY_SECONDS for known in self._known)
