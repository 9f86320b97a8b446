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
(``starting``), which ``tributary status`` reports.
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


class ClusterMember:
    """Registers a segment store and runs the containers the map gives it (see the module docstring).

    ``start_container(id)`` must recover and run a container, retrying while its log is busy, and
    may be cancelled; ``stop_container(id)`` must stop it and release its log.
    """

    def __init__(self, zk: ZooKeeper, paths: ClusterPaths, host: str, port: int,
                 start_container: Callable[[int], Awaitable[None]], stop_container: Callable[[int], Awaitable[None]],
                 poll_interval: float = 2.0):
        self._zk = zk
        self._paths = paths
        self._registration = StoreRegistration(host, port, started=time.time())
        self.store_id = self._registration.store_id
        self._start_container = start_container
        self._stop_container = stop_container
        self._poll_interval = poll_interval
        self.assigned: frozenset[int] = frozenset()  # what the map last said is ours
        self._running: set[int] = set()
        self._starting: dict[int, asyncio.Task] = {}
        self._stopping: dict[int, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._changed = asyncio.Event()  # something to reconcile or report
        self._published: bytes | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self._register()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow_map(), name="follow container map"),
                       loop.create_task(self._keep_registered(), name="keep registered")]

    async def stop(self) -> None:
        """Stops following the map (the containers themselves are the service's to stop) and leaves."""
        self._closed = True
        for task in [*self._tasks, *self._starting.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._starting.values(), *self._stopping.values(),
                             return_exceptions=True)
        with contextlib.suppress(ZooKeeperUnavailable):
            await self._zk.delete(self._paths.segment_store(self.store_id))

    def owns(self, container_id: int) -> bool:
        return container_id in self.assigned

    def container_stopped(self, container_id: int) -> None:
        """The service says a container stopped by itself (failed): it is started again if still ours."""
        self._running.discard(container_id)
        self._changed.set()

    # ------------------------------------------------------------------ the map

    async def _follow_map(self) -> None:
        while not self._closed:
            self._changed.clear()
            try:
                self.assigned = (await self._read_map()).containers_of(self.store_id)
            except ZooKeeperUnavailable as error:
                log.warning("cannot read the container map", extra={"error": str(error)})
            except ValueError as error:
                log.error("the container map does not parse", extra={"error": str(error)})
            else:
                self._reconcile()
            await self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self._poll_interval)

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
        try:
            await self._zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            # Ours from a retried create, or a previous process's whose session has not expired yet:
            # replace it so that it goes with this session.
            await self._zk.delete(path)
            await self._zk.create(path, data, ephemeral=True)
        self._published = data

    def _current_registration(self) -> StoreRegistration:
        return StoreRegistration(self._registration.host, self._registration.port, tuple(sorted(self._running)),
                                 tuple(sorted(self._starting)), self._registration.started)

    async def _publish(self) -> None:
        data = self._current_registration().to_json()
        if data == self._published:
            return
        try:
            await self._zk.set(self._paths.segment_store(self.store_id), data)
            self._published = data
        except (ZooKeeperUnavailable, NoNodeError):
            pass  # registered again (with the current data) by _keep_registered

    async def _keep_registered(self) -> None:
        """Makes the registration again if it went (a session that expired while the store was cut off)."""
        while not self._closed:
            await asyncio.sleep(min(1.0, self._poll_interval))
            try:
                if not await self._zk.exists(self._paths.segment_store(self.store_id)):
                    log.warning("segment store registration was lost; registering again")
                    await self._register()
                    self._changed.set()
            except (ZooKeeperUnavailable, NodeExistsError):
                continue
