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

from wire.retry import Backoff

log = logging.getLogger("tributary.zookeeper")

__all__ = ["BadVersionError", "NoNodeError", "NodeExistsError", "ZooKeeper", "ZooKeeperUnavailable"]

_RETRIABLE = (ConnectionLoss, OperationTimeoutError)
_RETRY = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=0.5, attempts=None)


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

    def __init__(self, hosts: str, session_timeout: float = 10.0, operation_timeout: float = 30.0):
        self.hosts = hosts
        self.operation_timeout = operation_timeout
        self._client = KazooClient(hosts=_repeated(hosts, HANDSHAKE_TRIES), timeout=session_timeout,
                                   connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
                                   logger=logging.getLogger("tributary.zookeeper.kazoo"))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_lost: list[Callable[[], None]] = []
        self._stopping = False
        self._client.add_listener(self._state_changed)

    async def start(self, timeout: float = 15.0) -> None:
        """Connects (raises ZooKeeperUnavailable if it cannot within ``timeout``)."""
        self._loop = asyncio.get_running_loop()
        try:
            await self._loop.run_in_executor(None, lambda: self._client.start(timeout=timeout))
        except Exception as error:  # kazoo raises its timeout type, or the handler's
            await self.stop()
            raise ZooKeeperUnavailable(f"cannot connect to ZooKeeper at {self.hosts}: {error}") from error

    async def stop(self) -> None:
        """Closes the session (its ephemeral nodes go at once)."""
        self._stopping = True
        await asyncio.get_running_loop().run_in_executor(None, self._stop_blocking)

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
            try:
                return await self._bridge(method(*args, **kwargs))
            except _RETRIABLE as error:
                attempted = True
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} unavailable: {error!r}") from error
                await asyncio.sleep(next(delays))
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


class _AppliedOnRetry(Exception):
    """A retried conditional write met a version conflict: maybe its first attempt was applied."""


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
