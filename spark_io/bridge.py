"""The synchronous side of the asyncio SDK, for Spark's Python workers.

Spark calls ``read``/``write`` (executors) and ``partitions``/``commit`` (driver-side workers)
as plain blocking functions, in worker processes it forks and then reuses across tasks and
queries. Each such process gets one :class:`Bridge`: a daemon thread running an event loop
that holds one SDK :class:`~clients.client.Client` per server access (controller, credentials,
TLS trust: :mod:`spark_io.access`) and the writers made from
it, so every task of the process shares the same connections (never a connection per row or
per task), and background work -- reconnects, keep-alives, transaction lease pings -- goes on
while the task's thread is blocked or between tasks.

A call crosses threads once per chunk of work (a read of up to 2 MiB, an Arrow batch to
write), never per event. The loop's thread is the SDK's :class:`~clients.loop_thread.LoopThread`;
``Bridge.get()`` is one per process: a process forked from one that already had a bridge makes
its own (the loop thread does not survive a fork).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from clients.client import Client
from clients.config import ClientConfig
from clients.loop_thread import LoopThread, PerProcess

from .access import ServerAccess

T = TypeVar("T")


class Bridge:
    """One event-loop thread and its SDK clients, for the process that made it."""

    def __init__(self) -> None:
        self._thread = LoopThread("tributary-spark-bridge")
        self.pid = self._thread.pid
        self._clients: dict[ServerAccess, Client] = {}
        self._cache: dict[tuple, Any] = {}

    @classmethod
    def get(cls) -> Bridge:
        """The bridge of this process (made on first use)."""
        return _bridges.get()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coroutine`` on the bridge's loop and returns its result (raises what it raises)."""
        try:
            return self._thread.run(coroutine, timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no answer from Tributary within {timeout} s") from None

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """The items of an async iterator, one loop hop each, the next one fetched while the caller
        works on the current one; closing the generator closes the async iterator."""
        task: asyncio.Future | None = self.run(_next(iterator))
        try:
            while task is not None:  # always, until the end returns
                try:
                    item, task = self.run(_take(task, iterator))

                except StopAsyncIteration:
                    task = None
                    return
                yield item
        finally:
            self.run(_finish(task, iterator))

    def client(self, access: ServerAccess) -> Client:
        """The process's client of the server ``access`` reaches (opened on first use; the password, if
        any, is read then, in this process)."""
        client = self._clients.get(access)
        if client is None:
            client = self._clients[access] = self.run(_open(access.controller, access.client_config()))
        return client

    def cached(self, key: tuple, make: Callable[[], T]) -> T:
        """A process-wide object (a writer, say) made once by ``make`` on the loop's thread."""
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = self.run(_call(make))
        return value

    def once(self, key: tuple, make: Callable[[], Coroutine[Any, Any, object]]) -> None:

        """Runs ``make()`` the first time ``key`` is asked for in this process (later calls do nothing)."""
        if key not in self._cache:
            self.run(make())
            self._cache[key] = True

    def forget(self, key: tuple) -> None:
        """Drops a process-wide object (the next ``cached`` call makes a new one)."""
        self._cache.pop(key, None)


_bridges: PerProcess[Bridge] = PerProcess(Bridge)


async def _open(controller: str, config: ClientConfig) -> Client:
    client = Client(controller, config)
    await client.__aenter__()
    return client


async def _call(make: Callable[[], T]) -> T:
    return make()


async def _next(iterator: AsyncIterator[T]) -> asyncio.Future:
    return asyncio.ensure_future(iterator.__anext__())


async def _take(task: asyncio.Future, iterator: AsyncIterator[T]) -> tuple[T, asyncio.Future]:
    item = await task  # StopAsyncIteration at the end
    return item, asyncio.ensure_future(iterator.__anext__())


async def _finish(task: asyncio.Future | None, iterator: AsyncIterator) -> None:
    """Stops a prefetch still running, then closes the iterator (an async generator's finally runs)."""
    if task is not None:
        task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001 - the iterator is being abandoned; its outcome is moot
            pass
    closer = getattr(iterator, "aclose", None)
    if closer is not None:
        await closer()


__all__ = ["Bridge"]
