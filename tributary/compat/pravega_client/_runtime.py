"""The event loop that runs the SDK for the synchronous API: one private thread per process.

Every object of the compatibility API lives on this loop (the SDK is asyncio). A blocking method
submits a coroutine with :func:`asyncio.run_coroutine_threadsafe` and waits on the concurrent
future: that wait releases the GIL, so other Python threads run meanwhile (the Rust binding holds
the GIL while it blocks). An ``*_async`` method submits the coroutine at once and returns an
asyncio future of the caller's running loop (:func:`asyncio.wrap_future`), so awaiting it never
blocks that loop; cancelling it cancels the work here.

The loop starts on first use. A forked child gets a fresh loop of its own on first use (objects made
before the fork belong to the parent and raise RuntimeError). At interpreter exit, the clients
still open are closed (writers flush, readers leave their groups), waiting at most
:data:`EXIT_CLOSE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import atexit
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from clients.loop_thread import LoopThread, PerProcess

T = TypeVar("T")

EXIT_CLOSE_SECONDS = 10.0


class Runtime(LoopThread):
    """The process's event-loop thread for the compatibility API (:class:`clients.loop_thread.LoopThread`)."""

    def __init__(self) -> None:
        super().__init__("pravega-client-compat")
        _closers.clear()  # a forked child's: the parent's clients are not this process's to close

    def for_caller(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Starts ``coro`` now and returns a future of the caller's running loop (RuntimeError without one)."""
        caller = asyncio.get_running_loop()
        return asyncio.wrap_future(self.submit(coro), loop=caller)


_runtimes: PerProcess[Runtime] = PerProcess(Runtime)


def runtime() -> Runtime:
    """The process's runtime, started on first use (and again in a forked child)."""
    return _runtimes.get()


# ---------------------------------------------------------------------- closing at exit

_closers: weakref.WeakSet[Closer] = weakref.WeakSet()


class Closer:
    """Something to close at interpreter exit (a client of the SDK), unless it was closed before."""

    def __init__(self, close: Callable[[], Awaitable[None]]):
        self._close = close
        self.closed = False
        _closers.add(self)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self._close()


async def _close_all(closers: list[Closer]) -> None:
    await asyncio.gather(*(closer.close() for closer in closers), return_exceptions=True)


@atexit.register
def _close_at_exit() -> None:
    current = _runtimes.peek()
    closers = [closer for closer in list(_closers) if not closer.closed]
    if current is None or not closers or not current.alive:
        return
    future = current.submit(_close_all(closers))
    try:
        future.result(EXIT_CLOSE_SECONDS)
    except BaseException:  # noqa: BLE001 - exiting anyway: whatever is left is dropped
        future.cancel()
