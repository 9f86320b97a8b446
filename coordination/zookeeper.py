"""ZooKeeper from asyncio: kazoo's client, its calls never blocking the event loop.

kazoo runs its own I/O thread. Each call here starts kazoo's ``*_async`` form and bridges its result
to an asyncio future (``rawlink`` + ``call_soon_threadsafe``), so the loop never waits on ZooKeeper.

While the connection is down (a ZooKeeper restart, a network blip), calls are retried with backoff
for up to ``operation_timeout`` seconds and then fail with ``ZooKeeperUnavailable``. kazoo keeps
reconnecting, and the session survives if it comes back within the session timeout. A conditional
write retried after a lost connection may have been applied the first time: ``set_if`` then sees a
version conflict, re-reads, and counts the write as done if the znode holds exactly its bytes.

``on_session_lost`` callbacks run (on the loop) when the session expires: every ephemeral node
this client created is gone, and whoever relied on one (an owner lock) must stop.

A call that kazoo queues while it is not connected is never sent until it connects again, so the
deadline is kept around the whole call, queued or sent. A call given up is not taken back from kazoo:
if the connection comes back within the session, it may still be applied (as one whose reply was lost).

Stopping: a process that stops calls ``begin_shutdown()`` first. From then on a call fails at once while
ZooKeeper is not connected, and no call waits past a short grace: what a stopping process still asks
of ZooKeeper is cleanup (deleting its registration, releasing an owner lock), and the session's end
removes those ephemeral nodes anyway (at once on a clean close, or when the session expires). ``stop()``
itself waits at most ``STOP_WAIT_SECONDS`` for kazoo to close the session.

kazoo logs every failed connection attempt (several a second while ZooKeeper is down, more at
info). Those lines are rate-limited: the first of each kind in an outage is logged, then one every
``RECONNECT_LOG_INTERVAL`` seconds carrying how many were left out (``repeated``); none after
``begin_shutdown()``, and none at all for a ``quiet`` client (a command that reports the failure itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.retry import KazooRetry

from coordination.retry import Backoff

log = logging.getLogger("tributary.zookeeper")

__all__ = ["BadVersionError", "NoNodeError", "NodeExistsError", "ZooKeeper", "ZooKeeperUnavailable"]

_RETRIABLE = (ConnectionLoss, OperationTimeoutError)
_RETRY = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=0.5, attempts=None)

SHUTDOWN_GRACE_SECONDS = 2.0  # after begin_shutdown(): no call waits longer than this
STOP_WAIT_SECONDS = 3.0  # stop() waits at most this long for kazoo to close the session
RECONNECT_LOG_INTERVAL = 30.0  # kazoo's connection-attempt lines: at most one of each kind per interval

# kazoo's lines for each failed or retried connection attempt (its message templates)
_RECONNECT_NOISE = frozenset({
    "Connection dropped: %s", "Connection time-out: %s", "Transition to CONNECTING",
    "Connecting to %s(%s):%s, use_ssl: %r", "Zookeeper connection lost", "Cannot resolve %s: %s",
})
# kazoo's line when a start that timed out, or a stop, ends its attempts: the caller reports that itself
_GAVE_UP = "Failed connecting to Zookeeper within the connection retry policy."
_CONNECTED = "Zookeeper connection established, state: %s"


# kazoo waits session_timeout / len(hosts) for the answer to its session handshake. A server that accepts
# connections but is not serving yet (restarting) would so use up a whole session timeout on one attempt and
# the session would expire; each host is listed this many times, so an attempt gives up after that fraction.
HANDSHAKE_TRIES = 4


def _repeated(hosts: str, times: int) -> str:
    servers, slash, chroot = hosts.partition("/")
    return ",".join([servers] * times) + slash + chroot


class ZooKeeperUnavailable(Exception):
    """ZooKeeper could not be reached within the operation timeout, or the session expired."""

    retriable = True


class ZooKeeper:
    """One session to a ZooKeeper ensemble (``hosts``: "host:port[,host:port][/chroot]")."""

    def __init__(self, hosts: str, session_timeout: float = 10.0, operation_timeout: float = 30.0,
                 quiet: bool = False):
        """``quiet``: log none of kazoo's connection-attempt lines (the caller reports a failure itself)."""
        self.hosts = hosts
        self.operation_timeout = operation_timeout
        self._kazoo_log = _KazooLog(hosts, quiet)
        self._client = KazooClient(hosts=_repeated(hosts, HANDSHAKE_TRIES), timeout=session_timeout,
                                   connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
                                   logger=self._kazoo_log)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_lost: list[Callable[[], None]] = []
        self._stopping = False
        self._shutdown_deadline: float | None = None
        self._client.add_listener(self._state_changed)

    async def start(self, timeout: float = 15.0) -> None:
        """Connects (raises ZooKeeperUnavailable if it cannot within ``timeout``)."""
        self._loop = asyncio.get_running_loop()
        try:
            await self._loop.run_in_executor(None, lambda: self._client.start(timeout=timeout))
        except Exception as error:  # kazoo raises its timeout type, or the handler's
            await self.stop()
            raise ZooKeeperUnavailable(f"cannot connect to ZooKeeper at {self.hosts}: {error}") from error

    def begin_shutdown(self, grace: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """The process is stopping: from now on calls fail at once while ZooKeeper is not connected, and none
        waits more than ``grace`` seconds (see the module docstring). Kazoo's reconnection lines stop."""
        deadline = time.monotonic() + grace
        if self._shutdown_deadline is None or deadline < self._shutdown_deadline:
            self._shutdown_deadline = deadline
        self._kazoo_log.quiet = True

    async def stop(self) -> None:
        """Closes the session (its ephemeral nodes go at once; when ZooKeeper cannot be reached they go when the
        session expires). Waits at most ``STOP_WAIT_SECONDS``: kazoo may take longer to give up on a server
        that does not answer, and is left to finish on its own thread."""
        self._stopping = True
        self._kazoo_log.quiet = True
        stopping = asyncio.get_running_loop().run_in_executor(None, self._stop_blocking)
        try:
            await asyncio.wait_for(asyncio.shield(stopping), STOP_WAIT_SECONDS)
        except TimeoutError:
            log.warning("zookeeper session did not close in time; leaving it to expire",
                        extra={"hosts": self.hosts, "seconds": STOP_WAIT_SECONDS})

    def _stop_blocking(self) -> None:
        try:
            self._client.stop()
            self._client.close()
        except Exception:
            log.debug("zookeeper client stop failed", exc_info=True)

    def on_session_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls ``callback`` on the loop when the session expires; returns a function that unregisters it."""
        self._session_lost.append(callback)
        return lambda: self._session_lost.remove(callback) if callback in self._session_lost else None

    @property
    def connected(self) -> bool:
        return bool(self._client.connected)

    # ------------------------------------------------------------------ calls

    async def get(self, path: str, watch: Callable[[], None] | None = None) -> tuple[bytes, int]:
        """``(data, version)``; raises NoNodeError. ``watch`` (see ``get_children``) fires once when the
        znode's data changes or it is deleted."""
        data, stat = await self._call(self._client.get_async, path, self._watcher(watch))
        return data, stat.version

    async def get_children(self, path: str, watch: Callable[[], None] | None = None) -> list[str]:
        """The child names. ``watch`` is called once, on the loop, when the children change next (or the
        znode goes, or the session is lost): ZooKeeper watches are one-shot, and one lost with a
        connection never fires, so callers also look again now and then."""
        children: list[str] = await self._call(self._client.get_children_async, path, self._watcher(watch))
        return children

    async def exists(self, path: str, watch: Callable[[], None] | None = None) -> bool:
        return await self._call(self._client.exists_async, path, self._watcher(watch)) is not None

    async def set(self, path: str, data: bytes) -> int:
        """Writes ``data`` whatever the version; returns the new version. Raises NoNodeError."""
        stat = await self._call(self._client.set_async, path, data, -1)
        version: int = stat.version
        return version

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = False) -> str:
        """Creates a znode and returns its path. Raises NodeExistsError (also when a retry finds the
        node the lost first attempt made: callers that retry creates use unique names or check)."""
        created: str = await self._call(self._client.create_async, path, data, ephemeral=ephemeral,
                                        sequence=sequence, makepath=makepath)
        return created

    async def ensure_path(self, path: str) -> None:
        await self._call(self._client.ensure_path_async, path)

    async def set_if(self, path: str, data: bytes, version: int) -> int:
        """Writes ``data`` if the znode is at ``version`` (compare-and-set); returns the new version.

        Raises BadVersionError when someone else changed it first.
        """
        try:
            stat = await self._call(self._client.set_async, path, data, version, retried=lambda: True)
        except _AppliedOnRetry:
            current, current_version = await self.get(path)
            if current == data and current_version == version + 1:
                return current_version
            raise BadVersionError() from None
        new_version: int = stat.version
        return new_version

    async def delete(self, path: str, version: int = -1) -> None:
        """Deletes a znode; a node already gone counts as deleted."""
        try:
            await self._call(self._client.delete_async, path, version)
        except NoNodeError:
            pass

    def _watcher(self, callback: Callable[[], None] | None) -> Callable[[Any], None] | None:
        """A kazoo watch (called on kazoo's thread) that calls ``callback`` on the loop."""
        if callback is None:
            return None
        loop = asyncio.get_running_loop()

        def fire(_event: Any) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(callback)

        return fire

    async def _call(self, method: Callable[..., Any], *args: Any, retried: Callable[[], bool] | None = None,
                    **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.operation_timeout
        delays = _RETRY.delays()
        attempted = False
        while True:
            if self._shutdown_deadline is not None:
                deadline = min(deadline, self._shutdown_deadline)
                if not self._client.connected or time.monotonic() >= self._shutdown_deadline:
                    why = "its grace is over" if self._client.connected else "it is not connected"
                    raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts}: the process is stopping and {why}")
            try:
                return await asyncio.wait_for(self._bridge(method(*args, **kwargs)),
                                              max(0.0, deadline - time.monotonic()))
            except TimeoutError as error:  # queued by kazoo while disconnected, or never answered
                raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} unavailable: no answer in time") from error
            except _RETRIABLE as error:
                attempted = True
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} unavailable: {error!r}") from error
                await asyncio.sleep(min(next(delays), deadline - time.monotonic()))
            except SessionExpiredError as error:
                raise ZooKeeperUnavailable(f"ZooKeeper session expired: {error!r}") from error
            except BadVersionError:
                if attempted and retried is not None and retried():
                    raise _AppliedOnRetry() from None
                raise

    def _bridge(self, result: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(_: Any) -> None:
            try:
                value = result.get_nowait()
            except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine
                loop.call_soon_threadsafe(_set_exception, future, error)
            else:
                loop.call_soon_threadsafe(_set_result, future, value)

        result.rawlink(settle)
        return future

    def _state_changed(self, state: str) -> None:  # on kazoo's thread
        if state == KazooState.LOST and not self._stopping and self._loop is not None and not self._loop.is_closed():
            log.warning("zookeeper session lost", extra={"hosts": self.hosts})
            self._loop.call_soon_threadsafe(self._notify_session_lost)

    def _notify_session_lost(self) -> None:
        for callback in list(self._session_lost):
            try:
                callback()
            except Exception:
                log.exception("session-lost callback failed")


class _KazooLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's logger for one session: its connection-attempt lines rate-limited (see the module docstring)."""

    def __init__(self, hosts: str, quiet: bool):
        super().__init__(logging.getLogger("tributary.zookeeper.kazoo"), {"hosts": hosts})
        self.quiet = quiet
        self._last: dict[str, float] = {}  # template -> when it was last logged (monotonic)
        self._left_out: dict[str, int] = {}  # template -> lines left out since

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg == _CONNECTED:
            self._last.clear()  # an outage is over: the next one's first lines are logged again
            self._left_out.clear()
        elif msg == _GAVE_UP:
            level = logging.DEBUG
        elif msg in _RECONNECT_NOISE and level >= logging.INFO:
            if self.quiet:
                return
            template = str(msg)
            now, last = time.monotonic(), self._last.get(template)
            if last is not None and now - last < RECONNECT_LOG_INTERVAL:
                self._left_out[template] = self._left_out.get(template, 0) + 1
                return
            self._last[template] = now
            repeated = self._left_out.pop(template, 0)
            if repeated:
                kwargs["extra"] = {**kwargs.get("extra", {}), "repeated": repeated}
        super().log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class _AppliedOnRetry(Exception):
    """A retried conditional write met a version conflict: maybe its first attempt was applied."""


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
