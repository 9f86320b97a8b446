"""Where segments live: the endpoint of each segment (the controller's getURI), cached.

Java caches endpoints for minutes and refreshes in the background; Rust asks the
controller on every reconnect (client reference §1.3). We cache for
``endpoint_cache_seconds`` and forget an entry when a store answers WrongHost,
so a moved container costs one extra lookup. The same object hands out the raw
segment-store client that management and reader-group calls share.
"""

from __future__ import annotations

import asyncio

from wire import naming
from wire.retry import Backoff

from .connection import ConnectionCache, Endpoint
from .controller_client import Controller
from .errors import InvalidArgument
from .model import Segment
from .segment_store_client import SegmentStoreClient


def segment_of(name: str) -> Segment:
    """The Segment named ``scope/stream/N.#epoch.E`` (a transaction's or transient's parent for those)."""
    try:
        parsed = naming.parse_segment_name(naming.parent_segment_name(name))
    except naming.InvalidName as error:
        raise InvalidArgument(str(error)) from None
    return Segment(parsed.scope, parsed.stream, parsed.segment_id)


class SegmentStores:
    """Endpoint lookup with a cache, plus the shared raw-call client."""

    def __init__(self, controller: Controller, *, cache_seconds: float = 60.0,
                 request_timeout: float = 30.0, connect_timeout: float = 10.0, keepalive_seconds: float | None = 10.0,
                 retry_policy: Backoff | None = None):
        self._controller = controller
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive_seconds
        self._cache_seconds = cache_seconds
        self._endpoints: dict[str, tuple[Endpoint, float]] = {}
        self.raw = SegmentStoreClient(self.endpoint_of, request_timeout=request_timeout,
                                      on_wrong_host=self.forget, connect_timeout=connect_timeout,
                                      keepalive_seconds=keepalive_seconds, retry_policy=retry_policy)

    async def endpoint_of(self, name: str) -> Endpoint:
        """The segment store that owns segment ``name`` (a qualified stream, transaction or table segment name)."""
        key = naming.primary_segment_name(name)
        now = asyncio.get_running_loop().time()
        cached = self._endpoints.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        endpoint = await self._controller.get_endpoint(segment_of(name))
        self._endpoints[key] = (endpoint, now + self._cache_seconds)
        return endpoint

    def connection_cache(self) -> ConnectionCache:
        """Connections of their own for a writer or reader, with the client's timeouts and keep-alives."""
        return ConnectionCache(self._connect_timeout, self._keepalive)

    def forget(self, name: str) -> None:
        """Drops the cached endpoint of ``name`` (after a WrongHost)."""
        self._endpoints.pop(naming.primary_segment_name(name), None)

    async def close(self) -> None:
        await self.raw.close()
