"""Where segments live: the endpoint of each segment (the controller's getURI), cached.

Java caches endpoints for minutes and refreshes in the background; Rust asks the
controller on every reconnect (client reference §1.3). We cache for
``endpoint_cache_seconds`` and forget an entry when a store answers WrongHost,
so a moved container costs one extra lookup. The same object hands out the raw
segment-store client that management and reader-group calls share.
"""

from __future__ import annotations

import asyncio
import ssl

from coordination.retry import Backoff
from wire import naming

from .connection import ConnectionCache, Endpoint, WireConnection
from .controller_client import Controller
from .errors import InvalidArgument
from .model import Segment
from .security import DelegationTokens
from .segment_store_client import SegmentStoreClient


def segment_of(name: str) -> Segment:
    """The Segment named ``scope/stream/N.#epoch.E`` (a transaction's or transient's parent for those)."""
    try:
        parsed = naming.parse_segment_name(naming.parent_segment_name(name))
    except naming.InvalidName as error:
        raise InvalidArgument(str(error)) from None
    return Segment(parsed.scope, parsed.stream, parsed.segment_id)


class SegmentStores:
    """Endpoint lookup with a cache, the delegation tokens of the segments (clients.security), and the
    shared raw-call client. ``ssl_context``: TLS to the stores; ``authenticated``: the client has
    credentials, so requests carry delegation tokens."""

    def __init__(self, controller: Controller, *, cache_seconds: float = 60.0,
                 request_timeout: float = 30.0, connect_timeout: float = 10.0, keepalive_seconds: float | None = 1.0,
                 retry_policy: Backoff | None = None, ssl_context: ssl.SSLContext | None = None,
                 authenticated: bool = False):
        self._controller = controller
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive_seconds
        self._cache_seconds = cache_seconds
        self.ssl_context = ssl_context
        self._endpoints: dict[str, tuple[Endpoint, float]] = {}
        self.tokens = DelegationTokens(lambda scope, stream: controller.get_delegation_token(scope, stream),
                                       enabled=authenticated)
        self.token_for = self.tokens.token_for
        self.raw = SegmentStoreClient(self.endpoint_of, request_timeout=request_timeout,
                                      on_wrong_host=self.forget, connect_timeout=connect_timeout,
                                      keepalive_seconds=keepalive_seconds, retry_policy=retry_policy,
                                      token=self.token_for, ssl_context=ssl_context,
                                      on_token_expired=self.tokens.expired)

    async def endpoint_of(self, name: str) -> Endpoint:
        """The segment store that owns segment ``name`` (a qualified stream, transaction or table segment name).

        Every connection to a segment's store is preceded by this call, so it also makes sure a delegation
        token for the segment is held (when the client authenticates).
        """
        await self.tokens.ensure(name)
        key = naming.primary_segment_name(name)
        now = asyncio.get_running_loop().time()
        cached = self._endpoints.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        endpoint = await self._controller.get_endpoint(segment_of(name))
        self._endpoints[key] = (endpoint, now + self._cache_seconds)
        return endpoint

    def connection_cache(self) -> ConnectionCache:
        """Connections of their own for a writer or reader, with the client's timeouts, keep-alives and TLS."""
        return ConnectionCache(self._connect_timeout, self._keepalive, self.ssl_context)

    async def connect(self, endpoint: Endpoint) -> WireConnection:
        """A connection nobody else shares (closed by its user), with the client's timeouts and TLS."""
        return await WireConnection.connect(*endpoint, timeout=self._connect_timeout,
                                            keepalive_seconds=self._keepalive, ssl_context=self.ssl_context)

    def forget(self, name: str) -> None:
        """Drops the cached endpoint of ``name`` (after a WrongHost)."""
        self._endpoints.pop(naming.primary_segment_name(name), None)

    async def close(self) -> None:
        await self.tokens.close()
        await self.raw.close()
