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
import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("tributary.compat.pravega_client")

T = TypeVar("T")

EXIT_CLOSE_SECONDS = 10.0


class Runtime:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="pravega-client-compat",
                                        daemon=True)
        self._thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        return self.pid == os.getpid() and self._thread.is_alive() and not self.loop.is_closed()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedules ``coro`` on the loop; the caller waits on (or wraps) the returned future."""
        if not self.alive:
            coro.close()
            raise RuntimeError("this pravega_client object belongs to another process (made before a fork), "
                               "or the interpreter is shutting down")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coro`` on the loop and waits for its result without holding the GIL."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a blocking pravega_client call cannot run on the client's own event loop")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:  # KeyboardInterrupt or a timeout: stop the work too
            future.cancel()
            raise

    def for_caller(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Starts ``coro`` now and returns a future of the caller's running loop (RuntimeError without one)."""
        caller = asyncio.get_running_loop()
        return asyncio.wrap_future(self.submit(coro), loop=caller)

    def later(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Runs ``coro`` without waiting for it (finalizers); nothing happens if the loop is gone."""
        if not self.alive:
            coro.close()
            return
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop closed meanwhile
            coro.close()
            return
        future.add_done_callback(_log_failure)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("background close failed", exc_info=future.exception())


_lock = threading.Lock()
_current: Runtime | None = None


def runtime() -> Runtime:
    """The process's runtime, started on first use (and again in a forked child)."""
    global _current
    current = _current
    if current is not None and current.pid == os.getpid():
        return current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = Runtime()
            _closers.clear()  # the parent's clients are not this process's to close
        return _current


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
    current = _current
    closers = [closer for closer in list(_closers) if not closer.closed]
    if current is None or not closers or not current.alive:
        return
    future = current.submit(_close_all(closers))
    try:
        future.result(EXIT_CLOSE_SECONDS)
    except BaseException:  # noqa: BLE001 - exiting anyway: whatever is left is dropped
        future.cancel()
