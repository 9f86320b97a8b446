"""The synchronous side of the asyncio SDK: an event loop running in a daemon thread of its process.

Code that cannot await (Spark's Python workers, the ``pravega_client`` compatibility API) hands coroutines
to a :class:`LoopThread` and waits on a :class:`concurrent.futures.Future`, which releases the GIL while
it waits, so the process's other threads run meanwhile. :class:`PerProcess` keeps one such object per
process: a forked child makes its own on first use, since the loop's thread does not survive a fork
(objects the parent made raise RuntimeError in the child).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

import uvloop

log = logging.getLogger(__name__)

T = TypeVar("T")


class _OfProcess(Protocol):
    pid: int


P = TypeVar("P", bound=_OfProcess)

_pid = os.getpid()  # this process's, kept up to date across forks (os.getpid() is a system call)


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    """This process's id, without a system call."""
    return _pid


class LoopThread:
    """An event loop (uvloop's) running forever in a daemon thread named ``name``."""

    def __init__(self, name: str):
        self.pid = _pid
        self.loop = uvloop.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name=name, daemon=True)
        self._thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        """Whether the loop runs for this process (not a parent's, before a fork; not closed at exit)."""
        return self.pid == _pid and not self.loop.is_closed() and self._thread.is_alive()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def check_alive(self) -> None:
        """Raises RuntimeError if the loop does not run for this process."""
        if not self.alive:
            raise RuntimeError("this object's event loop belongs to another process (it was made before a "
                               "fork), or the interpreter is shutting down")

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedules ``coroutine`` on the loop; the caller waits on (or wraps) the returned future."""
        if not self.alive:
            coroutine.close()
            self.check_alive()
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coroutine`` on the loop and returns its result, waiting without the GIL; raises what it
        raises, or TimeoutError after ``timeout`` seconds (the coroutine is cancelled then, and on
        KeyboardInterrupt)."""
        if self.in_loop_thread():
            coroutine.close()
            raise RuntimeError("a blocking call cannot run on the event loop it waits for")
        future = self.submit(coroutine)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def later(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Runs ``coroutine`` without waiting for it (finalizers); nothing happens if the loop is gone, and a
        failure is only logged (at debug)."""
        if not self.alive:
            coroutine.close()
            return
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        except RuntimeError:  # the loop closed meanwhile
            coroutine.close()
            return
        future.add_done_callback(_log_failure)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("background work failed", exc_info=future.exception())


class PerProcess(Generic[P]):
    """One object per process, made by ``make`` on first use (again in a forked child); ``make`` returns
    something with the ``pid`` it was made in."""

    def __init__(self, make: Callable[[], P]):
        self._make = make
        self._lock = threading.Lock()
        self._current: P | None = None

    def get(self) -> P:
        current = self._current
        if current is not None and current.pid == _pid:
            return current
        with self._lock:
            current = self._current
            if current is None or current.pid != _pid:
                current = self._current = self._make()
            return current

    def peek(self) -> P | None:
        """This process's object, if it was made (None in a child that has not made its own)."""
        current = self._current
        return current if current is not None and current.pid == _pid else None
