"""A segment store's part in a cluster (docs/cluster.md): its registration, and following the container map.

Theory of operation. The store registers ``cluster/segmentstores/<host:port>`` (ephemeral: it goes
with the store's ZooKeeper session) and keeps it there: if the session expires (the store was
paused or cut off), the node is made again under the new session. The controller leader watches
these nodes and writes ``cluster/container-map``; the store watches the map (and reads it again
every ``poll_interval`` seconds, since a watch lost with a connection never fires) and
*reconciles*: it starts the containers the map gives it and stops the ones it no longer has.

Starting a container recovers it from its replicated log, whose ``open`` takes the log's owner
lock (an ephemeral znode) and fences the previous owner's ledger. While the previous owner still
holds the lock (it is stopping the container, or its session has not expired yet), ``open`` is
LogBusy and the start is retried, for as long as the map gives the container to this store. So two
stores never run one container at once, and a store that lost its session (a zombie) can change
nothing: the replicas refuse its ledger, ZooKeeper its metadata writes (docs/replicated-log.md).

The registration says which containers run (``containers``) and which are being recovered
(``starting``), which ``tributary status`` reports. It is also the store's heartbeat: it is written again
every ``heartbeat_interval`` seconds (1 s, or a quarter of the session timeout if that is shorter), even
unchanged; ``tributary status`` reads the node's modification time and reports a store not heard
from for a few seconds as unknown (a paused or cut-off store, whose session has not expired yet). One write
per store and interval: nobody watches these nodes' data, so a write costs ZooKeeper one small transaction
and wakes no one. The heartbeat is also what keeps the session clock below moving.

Cut off from ZooKeeper. A store that cannot reach ZooKeeper cannot know whether it still owns its
containers: once its session expires, the leader gives them to other stores. Fencing keeps its writes
out of the replicated log whatever it does, but clients connected to it would wait on it. So the store
watches its session clock (``coordination.zookeeper.SessionClock``; that module's docstring says why the
moment is computed from what was last heard and not from kazoo's SUSPENDED, which comes late or, on a
busy session, not at all): the session must be presumed expired one negotiated session timeout after the
send time of the last request ZooKeeper answered (or of its last answered ping). From then on, unless
one last request is answered within ``PROBE_SECONDS`` (this store's own event loop may have been too
busy to send its heartbeat in time; kazoo's thread records answers even then), it *stops serving*:
``owns()`` is false for every container (requests get WrongHost), its client connections are closed
(``on_cut_off``: their clients ask the controller again at once), and every
container fails (its owner can no longer vouch for its log) and is stopped, its log's owner lock
released if ZooKeeper lets it (else it goes with the session). The probe delays this by at most
``PROBE_SECONDS``, no longer than the leader's rebalance grace (2 s by default) before it moves them.
If ZooKeeper answers before that moment, nothing changes. A session found expired (kazoo
reconnects and is told so: a store paused past its session) stops the store the same way, if the
clock has not already. Once ZooKeeper answers after that, the store *resumes*: the heartbeat finds
its registration (the session lived, as through a ZooKeeper restart) or registers again (a new
session), then the map is read afresh and the store starts what it gives it, like any store that
joins. A map read begun while cut off is never applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from coordination.cluster import ClusterPaths, ContainerMap, StoreRegistration
from coordination.zookeeper import NodeExistsError, NoNodeError, ZooKeeper, ZooKeeperUnavailable

log = logging.getLogger("tributary.cluster")
_WATCH_MIN_SECONDS, _WATCH_MAX_SECONDS = 0.05, 0.5  # how often the session clock is looked at, at most and least
STOP_WAIT_SECONDS = 2.0  # stop(): how long containers being stopped are waited for
PROBE_SECONDS = 0.5  # past the presumed expiry: how long a last request to ZooKeeper may take to be answered


class ClusterMember:
    """Registers a segment store and runs the containers the map gives it (see the module docstring).

    ``start_container(id)`` must recover and run a container, retrying while its log is busy, and
    may be cancelled; ``stop_container(id)`` must stop it and release its log. ``on_cut_off()`` is called
    when the store stops serving because its session expired, or ZooKeeper has been silent past the session
    timeout: it must close the client connections and fail the running containers (this member then stops
    them), and return how many connections it closed.
    """

    def __init__(self, zk: ZooKeeper, paths: ClusterPaths, host: str, port: int,
                 start_container: Callable[[int], Awaitable[None]], stop_container: Callable[[int], Awaitable[None]],
                 poll_interval: float = 2.0, on_cut_off: Callable[[], int] | None = None,
                 heartbeat_interval: float | None = None):
        self._zk = zk
        self._paths = paths
        self._registration = StoreRegistration(host, port, started=time.time())
        self.store_id = self._registration.store_id
        self._start_container = start_container
        self._stop_container = stop_container
        self._poll_interval = poll_interval
        self._on_cut_off = on_cut_off
        self._heartbeat_interval = heartbeat_interval
        self._cut_off = False  # not serving: the session expired, or ZooKeeper was silent past its timeout
        self._forget_session_listener: Callable[[], None] | None = None
        self._confirmations = 0  # times the store resumed after a cut-off: a map read spanning one is not applied
        self.assigned: frozenset[int] = frozenset()  # what the map last said is ours
        self._running: set[int] = set()
        self._starting: dict[int, asyncio.Task] = {}
        self._stopping: dict[int, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._changed = asyncio.Event()  # something to reconcile or report
        self._published: bytes | None = None  # the registration last written
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self._register()
        self._forget_session_listener = self._zk.on_session_lost(self._session_expired)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow_map(), name="follow container map"),
                       loop.create_task(self._keep_registered(), name="keep registered"),
                       loop.create_task(self._watch_session(), name="watch zookeeper session")]

    async def stop(self) -> None:
        """Stops following the map (the containers themselves are the service's to stop) and leaves.

        Containers being stopped are waited for; while cut off from ZooKeeper only ``STOP_WAIT_SECONDS``: they
        may still wait on it to release their logs' owner locks (which go with the session anyway)."""
        self._closed = True
        if self._forget_session_listener is not None:
            self._forget_session_listener()
        for task in [*self._tasks, *self._starting.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._starting.values(), return_exceptions=True)
        if self._stopping:
            await asyncio.wait(list(self._stopping.values()), timeout=STOP_WAIT_SECONDS if self._cut_off else None)
        with contextlib.suppress(ZooKeeperUnavailable):
            await self._zk.delete(self._paths.segment_store(self.store_id))

    def owns(self, container_id: int) -> bool:
        return container_id in self.assigned

    @property
    def cut_off(self) -> bool:
        """Not serving: the session expired, or ZooKeeper was silent past its timeout; no registration confirmed
        since."""
        return self._cut_off

    @property
    def heartbeat_interval(self) -> float:
        """1 s, or a quarter of the session timeout if shorter: the session clock needs answers well within it."""
        if self._heartbeat_interval is not None:
            return self._heartbeat_interval
        return min(1.0, self._zk.session_timeout / 4)

    def container_stopped(self, container_id: int) -> None:
        """The service says a container stopped by itself (failed): it is started again if still ours."""
        self._running.discard(container_id)
        self._changed.set()

    # ------------------------------------------------------------------ the map

    async def _follow_map(self) -> None:
        while not self._closed:
            self._changed.clear()
            confirmations = self._confirmations
            try:
                assigned = (await self._read_map()).containers_of(self.store_id)
            except ZooKeeperUnavailable as error:
                if not self._cut_off:
                    log.warning("cannot read the container map", extra={"error": str(error)})
            except ValueError as error:
                log.error("the container map does not parse", extra={"error": str(error)})
            else:
                if not self._cut_off and confirmations == self._confirmations:
                    self.assigned = assigned
                    self._reconcile()
            await self._publish()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval):  # not wait_for: 3.11's loses a cancel meeting a set
                    await self._changed.wait()

    async def _read_map(self) -> ContainerMap:
        try:
            data, _ = await self._zk.get(self._paths.container_map, watch=self._changed.set)
        except NoNodeError:
            if await self._zk.exists(self._paths.container_map, watch=self._changed.set):
                return await self._read_map()
            return ContainerMap()
        return ContainerMap.from_json(data)

    def _reconcile(self) -> None:
        for container_id in sorted(self.assigned):
            if container_id not in self._running and container_id not in self._starting \
                    and container_id not in self._stopping:
                log.info("starting container", extra={"container": container_id})
                self._starting[container_id] = asyncio.get_running_loop().create_task(
                    self._run(container_id), name=f"start container {container_id}")
        for container_id in sorted((self._running | self._starting.keys()) - self.assigned):
            if container_id in self._stopping:
                continue
            starting = self._starting.pop(container_id, None)
            if starting is not None:
                starting.cancel()
            log.info("stopping container: no longer ours", extra={"container": container_id})
            self._stopping[container_id] = asyncio.get_running_loop().create_task(
                self._stop(container_id, starting), name=f"stop container {container_id}")

    async def _run(self, container_id: int) -> None:
        try:
            await self._start_container(container_id)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - reported; the next reconcile tries again
            log.error("container start failed", extra={"container": container_id, "error": repr(error)})
            await asyncio.sleep(1.0)
        else:
            self._running.add(container_id)
            log.info("container running", extra={"container": container_id})
        finally:
            if self._starting.get(container_id) is asyncio.current_task():
                del self._starting[container_id]
            self._changed.set()

    async def _stop(self, container_id: int, starting: asyncio.Task | None) -> None:
        try:
            if starting is not None:
                await asyncio.gather(starting, return_exceptions=True)
            await self._stop_container(container_id)
        except Exception as error:  # noqa: BLE001 - a container that fails to stop cleanly is fenced anyway
            log.warning("container did not stop cleanly", extra={"container": container_id, "error": repr(error)})
        finally:
            self._running.discard(container_id)
            del self._stopping[container_id]
            self._changed.set()

    # ------------------------------------------------------------------ registration

    async def _register(self) -> None:
        data = self._current_registration().to_json()
        path = self._paths.segment_store(self.store_id)
        await self._zk.register(path, data)  # (replacing a previous process's: its data holds our start time)
        self._published = data

    def _current_registration(self) -> StoreRegistration:
        """What the store runs now."""
        return StoreRegistration(self._registration.host, self._registration.port, tuple(sorted(self._running)),
                                 tuple(sorted(self._starting)), self._registration.started)

    async def _write_registration(self) -> None:
        """Writes the registration (a new modification time even when unchanged: the heartbeat). Raises NoNodeError
        (it went with a session) and ZooKeeperUnavailable."""
        data = self._current_registration().to_json()
        await self._zk.set(self._paths.segment_store(self.store_id), data)
        self._published = data

    async def _publish(self) -> None:
        if self._current_registration().to_json() == self._published:
            return
        try:
            await self._write_registration()
        except (ZooKeeperUnavailable, NoNodeError):
            pass  # registered again (with the current data) by _keep_registered

    async def _keep_registered(self) -> None:
        """The heartbeat: every interval, writes the registration again, or makes it again if it went (a session
        that expired while the store was cut off); once that succeeds after a cut-off, the store resumes."""
        while not self._closed:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self._write_registration()
            except NoNodeError:
                try:
                    log.warning("segment store registration was lost; registering again")
                    await self._register()
                except (ZooKeeperUnavailable, NodeExistsError):
                    continue
                self._changed.set()
            except ZooKeeperUnavailable:
                continue
            if self._cut_off:
                self._resume()

    # ------------------------------------------------------------------ cut off from ZooKeeper

    async def _watch_session(self) -> None:
        """Stops serving once the session must be presumed expired (see the module docstring)."""
        while not self._closed:
            if self._cut_off:  # until the heartbeat resumes it
                await asyncio.sleep(_WATCH_MAX_SECONDS)
                continue
            # kazoo's thread moves the clock as answers arrive, even while this loop is busy
            delay = self._zk.presumed_expiry - time.monotonic()
            if delay > 0:
                await asyncio.sleep(min(max(delay, _WATCH_MIN_SECONDS), _WATCH_MAX_SECONDS))
            elif not await self._answered_now() and not self._cut_off:
                self._stop_serving("ZooKeeper has been silent for the session timeout, so the session must be "
                                   "presumed expired (and its containers may be given to other stores)")

    async def _answered_now(self) -> bool:
        """Asks ZooKeeper once more, for at most ``PROBE_SECONDS``: True if it answers (the session lives: this
        store's own loop was too busy to send its heartbeat in time, or the answer came meanwhile)."""
        try:
            await asyncio.wait_for(self._zk.exists(self._paths.segment_store(self.store_id)), PROBE_SECONDS)
        except (TimeoutError, ZooKeeperUnavailable):
            pass
        return self._zk.presumed_expiry > time.monotonic()

    def _session_expired(self) -> None:
        """ZooKeeper said the session expired (found on reconnecting): as for a presumed expiry, the store stops
        serving until it has registered again and read the map."""
        if not self._closed and not self._cut_off:
            self._stop_serving("its ZooKeeper session expired (its containers may run on other stores)")

    def _stop_serving(self, why: str) -> None:
        containers = sorted(self._running | self._starting.keys())
        silent = self._zk.clock.silent_for(time.monotonic())
        self._cut_off = True
        self.assigned = frozenset()  # owns() is false from here on: WrongHost
        closed = self._on_cut_off() if self._on_cut_off is not None else 0
        self._reconcile()
        log.warning(f"segment store stops serving: {why}",
                    extra={"silent_seconds": round(silent, 3), "session_timeout": self._zk.session_timeout,
                           "containers": containers, "connections_closed": closed})

    def _resume(self) -> None:
        self._cut_off = False
        self._confirmations += 1
        log.warning("segment store serves again: ZooKeeper answers and its registration is confirmed; "
                    "starting what the container map gives it", extra={"store": self.store_id})
        self._changed.set()
