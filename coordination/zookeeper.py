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

When the session must be *presumed* expired (``SessionClock``; ``presumed_expiry``). kazoo learns that a
session expired only from the server, once it reaches one again: a client cut off from ZooKeeper hears
nothing, and may hold on to ephemeral nodes (owner locks) that the server has already removed. kazoo's
SUSPENDED state does not tell when either: it comes when a ping goes unanswered, up to two thirds of the
session timeout after the client last heard the server, and never while requests keep being sent more often
than kazoo pings (with a 10 s session a 1 s heartbeat suppresses every ping, so a silent connection may look
CONNECTED until TCP gives up, minutes later). So the moment is computed from what the client heard: the server
restarts a session's timer whenever it receives something from the client, so a request *sent* at time t that
was answered proves the timer restarted at or after t, and the session cannot expire before t + the
negotiated session timeout. That is the latest moment up to which the session is known to live: from it on,
the owner of the session (a segment store: server/cluster.py) must act as if it had expired. Heard are: the
answers to this wrapper's calls (by their send time; an error the server sent, such as NoNode, is an answer
too), kazoo's pings (by the time the ping was sent; seen through kazoo's log lines, as the reconnection noise
is) and every (re)connection (by the time its attempt began, also seen in kazoo's log: the server got the
handshake after that, while its answer arrives a link latency after the server restarted the timer). The
negotiated timeout, which the ensemble may clamp to its own minSessionTimeout/maxSessionTimeout, replaces the
requested one as soon as a session is made.

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
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.retry import KazooRetry

from coordination.retry import Backoff

log = logging.getLogger("tributary.zookeeper")

__all__ = ["BadVersionError", "NoNodeError", "NodeExistsError", "SessionClock", "ZooKeeper", "ZooKeeperUnavailable"]

_RETRIABLE = (ConnectionLoss, OperationTimeoutError)
_SERVER_ANSWERS = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)  # errors only a server sends
_RETRY = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=0.5, attempts=None)

SHUTDOWN_GRACE_SECONDS = 2.0  # after begin_shutdown(): no call waits longer than this
REGISTER_TRIES = 5  # register(): replacements of a node another session holds before giving up
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
# kazoo's lines that tell when the server was heard (SessionClock): a ping sent and answered, a session made
_SENDING = "Sending request(xid=%s): %s"
_PING_ANSWERED = "Received Ping"
_SESSION_CREATED_PREFIX = "Session created"
_PING_XID = -2
_CONNECTING = "Connecting to %s(%s):%s, use_ssl: %r"  # logged as an attempt begins, before its handshake is sent


# kazoo waits session_timeout / len(hosts) for the answer to its session handshake. A server that accepts
# connections but is not serving yet (restarting) would so use up a whole session timeout on one attempt and
# the session would expire; each host is listed this many times, so an attempt gives up after that fraction.
HANDSHAKE_TRIES = 4


def _repeated(hosts: str, times: int) -> str:
    servers, slash, chroot = hosts.partition("/")
    return ",".join([servers] * times) + slash + chroot


class SessionClock:
    """When the session was last known to live, and so from when it must be presumed expired (see the module
    docstring). All times are ``time.monotonic()`` seconds. Thread-safe: kazoo's thread reports pings.

    ``heard(sent_at)``: a request sent at ``sent_at`` was answered. Answers arrive out of order (a slow write
    answered after a later read), so the latest send time wins, never the latest answer.
    """

    def __init__(self, session_timeout: float, heard_at: float = 0.0):
        self.session_timeout = session_timeout
        self._heard_at = heard_at
        self._ping_sent_at: float | None = None
        self._connecting_at: float | None = None
        self._lock = threading.Lock()

    @property
    def heard_at(self) -> float:
        return self._heard_at

    @property
    def presumed_expiry(self) -> float:
        """The moment from which the session must be presumed expired, unless something is heard before it."""
        return self._heard_at + self.session_timeout

    def silent_for(self, now: float) -> float:
        """Seconds since the last moment the session was known to live."""
        return max(0.0, now - self._heard_at)

    def presumed_expired(self, now: float) -> bool:
        return now >= self.presumed_expiry

    def heard(self, sent_at: float) -> None:
        with self._lock:
            if sent_at > self._heard_at:
                self._heard_at = sent_at

    def ping_sent(self, at: float) -> None:
        self._ping_sent_at = at

    def connecting(self, at: float) -> None:
        """A connection attempt began (its handshake is sent after this moment)."""
        self._connecting_at = at

    def connected(self) -> None:
        """The handshake of the latest attempt was answered: the server heard it after the attempt began."""
        if self._connecting_at is not None:
            self.heard(self._connecting_at)

    def ping_answered(self) -> None:
        if self._ping_sent_at is not None:
            self.heard(self._ping_sent_at)

    def negotiated(self, session_timeout: float) -> None:
        """The server's session timeout for this session (it may differ from the one asked for)."""
        self.session_timeout = session_timeout


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
        self.clock = SessionClock(session_timeout)  # when the session was last known to live
        self._kazoo_log = _KazooLog(hosts, quiet, self.clock)
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
        starting = time.monotonic()
        try:
            await self._loop.run_in_executor(None, lambda: self._client.start(timeout=timeout))
        except Exception as error:  # kazoo raises its timeout type, or the handler's
            await self.stop()
            raise ZooKeeperUnavailable(f"cannot connect to ZooKeeper at {self.hosts}: {error}") from error
        self.clock.heard(starting)

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

    @property
    def shutting_down(self) -> bool:
        """Whether the process is stopping (``begin_shutdown`` or ``stop`` was called): its session ends with it, and
        its ephemeral nodes with the session."""
        return self._shutdown_deadline is not None or self._stopping

    @property
    def session_timeout(self) -> float:
        """The session's timeout in seconds: the negotiated one once a session was made."""
        return self.clock.session_timeout

    @property
    def presumed_expiry(self) -> float:
        """The monotonic moment from which the session must be presumed expired (see the module docstring)."""
        return self.clock.presumed_expiry

    # ------------------------------------------------------------------ calls

    async def get(self, path: str, watch: Callable[[], None] | None = None) -> tuple[bytes, int]:
        """``(data, version)``; raises NoNodeError. ``watch`` (see ``get_children``) fires once when the
        znode's data changes or it is deleted."""
        data, stat = await self._call(self._client.get_async, path, self._watcher(watch))
        return data, stat.version

    async def get_with_mtime(self, path: str) -> tuple[bytes, float]:
        """``(data, mtime)``: ``mtime`` is when the znode was last written, in seconds since the epoch by the
        clock of the ZooKeeper server that led the write. Raises NoNodeError."""
        data, stat = await self._call(self._client.get_async, path)
        return data, stat.mtime / 1000.0

    async def get_children(self, path: str, watch: Callable[[], None] | None = None) -> list[str]:
        """The child names. ``watch`` is called once, on the loop, when the children change next (or the
        znode goes, or the connection drops: kazoo 2.11 fires every watch then and does not set it again on
        the new connection, so a caller that looks again at once may find ZooKeeper unavailable). ZooKeeper
        watches are one-shot; callers also look again now and then."""
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

    async def register(self, path: str, data: bytes) -> None:
        """Creates the ephemeral znode ``path`` holding ``data`` (a process's registration; ``data`` must be unique to
        the process, e.g. carry its start time), replacing one a previous process left whose session has not
        expired yet. A create whose reply was lost and whose retry then found the node counts as done when the node
        holds ``data``. Raises NodeExistsError when another live session keeps taking the path."""
        for _ in range(REGISTER_TRIES):
            try:
                await self.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                current, _ = await self.get(path)
            except NoNodeError:
                continue  # its session ended meanwhile
            if current == data:
                return  # ours: the create was applied before its retry
            await self.delete(path)  # a previous process's: replace it, so that it goes with this session
        raise NodeExistsError(f"{path} is taken again each time it is replaced: another process registers it")

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
                sent_at = time.monotonic()
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the inner result (or raises its error)
                # when the caller is cancelled as the answer arrives, losing the cancellation. A log store's
                # registration loop, cancelled by its stop while a call's answer came, took the call's error for a
                # failed check and went on checking for ever: the stop never ended (found by the simulation).
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    return await self._bridge(method(*args, **kwargs), sent_at)
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

    def _bridge(self, result: Any, sent_at: float) -> asyncio.Future[Any]:
        """A future of kazoo's async ``result``; an answer from the server counts as heard at ``sent_at``, on
        kazoo's thread (at once, not when the loop gets to it: see SessionClock)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        clock = self.clock

        def settle(_: Any) -> None:
            try:
                value = result.get_nowait()
            except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine
                if isinstance(error, _SERVER_ANSWERS):
                    clock.heard(sent_at)
                loop.call_soon_threadsafe(_set_exception, future, error)
            else:
                clock.heard(sent_at)
                loop.call_soon_threadsafe(_set_result, future, value)

        result.rawlink(settle)
        return future

    def _state_changed(self, state: str) -> None:  # on kazoo's thread
        if state == KazooState.CONNECTED:  # a session made, or revalidated: its timer restarted when the server got
            self.clock.connected()  # the handshake, after the attempt began (not when its answer arrived: later)
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

    def __init__(self, hosts: str, quiet: bool, clock: SessionClock):
        super().__init__(logging.getLogger("tributary.zookeeper.kazoo"), {"hosts": hosts})
        self.quiet = quiet
        self._clock = clock
        self._last: dict[str, float] = {}  # template -> when it was last logged (monotonic)
        self._left_out: dict[str, int] = {}  # template -> lines left out since

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        self._observe(msg, args)
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

    def _observe(self, msg: object, args: tuple[Any, ...]) -> None:
        """Pings sent and answered, and a session's negotiated timeout, for the session clock. kazoo logs them
        (at its BLATHER level, below what is ever printed) and offers no other way to see them."""
        if msg == _SENDING:
            if args and args[0] == _PING_XID:
                self._clock.ping_sent(time.monotonic())
        elif msg == _CONNECTING:
            self._clock.connecting(time.monotonic())
        elif msg == _PING_ANSWERED:
            self._clock.ping_answered()
        elif isinstance(msg, str) and msg.startswith(_SESSION_CREATED_PREFIX) and len(args) >= 3:
            try:
                self._clock.negotiated(float(args[2]) / 1000.0)
            except (TypeError, ValueError):
                pass


class _AppliedOnRetry(Exception):
    """A retried conditional write met a version conflict: maybe its first attempt was applied."""


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
