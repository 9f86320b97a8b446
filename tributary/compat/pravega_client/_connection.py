"""One SDK client per ``StreamManager``, shared by every writer, reader and byte stream made from it.

The client is closed when the manager and everything made from it are gone (or at interpreter
exit): closing it flushes and closes its writers and takes its readers out of their groups.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from clients.client import Client
from clients.config import ClientConfig

from ._runtime import Closer, Runtime, runtime

T = TypeVar("T")


async def _open(uri: str, config: ClientConfig) -> Client:
    client = Client(uri, config)
    await client.__aenter__()
    return client


def _close_later(loop_runtime: Runtime, closer: Closer) -> None:
    loop_runtime.later(closer.close())


def _closing(client: Client, writers: weakref.WeakSet[Any]) -> Callable[[], Awaitable[None]]:
    """Closes the client after its writers wrote what their queues still hold."""

    async def close() -> None:
        await asyncio.gather(*(writer.close() for writer in list(writers)), return_exceptions=True)
        await client.close()

    return close


class Connection:
    """The SDK client of one manager, on the process's runtime loop."""

    def __init__(self, uri: str, config: ClientConfig):
        self.runtime = runtime()
        self.client: Client = self.runtime.run(_open(uri, config))
        # this process's readers by (scope, group, reader): a group's reader_offline takes them out exactly
        self.readers: weakref.WeakValueDictionary[tuple[str, str, str], Any] = weakref.WeakValueDictionary()
        # the compatibility writers (``_writer._Writer``), whose queued events are written before closing
        self.writers: weakref.WeakSet[Any] = weakref.WeakSet()
        closer = Closer(_closing(self.client, self.writers))
        weakref.finalize(self, _close_later, self.runtime, closer)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coro`` on the runtime loop and waits for it (the GIL is released meanwhile)."""
        return self.runtime.run(coro, timeout)
