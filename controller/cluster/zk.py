"""A controller in a cluster: membership, leadership, the container map, buckets and leases in ZooKeeper
(layout in ``coordination.cluster``; docs/cluster.md).

Theory of operation. One loop (``_follow``) reads what the cluster looks like -- the live
controllers, the live segment stores, the leader candidates, the container map -- whenever a watch
fires and at least every ``poll_interval`` seconds, and acts on it:

* every controller answers getURI from the map it read (a container the map gives nobody yet goes
  to any live store, whose WrongHost makes the client ask again), getControllerServerList from
  the live controllers, and owns the buckets rendezvous hashing gives it among them;
* the leader -- the candidate with the lowest sequence number under ``cluster/leader`` -- also
  balances the containers (``balancer.balance``): a store gone for less than ``grace_seconds`` keeps
  its containers (a restart or a short pause moves nothing); after that they go to the others. The
  map is written conditionally on the version read, so a stale leader's write fails;
* when a controller leaves, ``on_controllers_lost`` callbacks run: the services re-drive what the
  dead controller left (its leases went with its session).

The controller's ZooKeeper session is its liveness: registration, candidacy and leases are
ephemeral. If the session expires (the process was paused or cut off), they are gone and another
controller may already run this one's work; ``on_session_lost`` callbacks run so the services
stop theirs, and the loop registers again under the new session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

from coordination.cluster import ClusterPaths, ContainerMap, ControllerRegistration, agree_on_settings, endpoint_of
from coordination.zookeeper import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper, ZooKeeperUnavailable

from .balancer import balance
from .buckets import BUCKET_COUNT, bucket_of, bucket_owners
from .coordination import Coordination, LeaseBusy

log = logging.getLogger("tributary.controller.cluster")

Endpoint = tuple[str, int]


class NoSegmentStore(Exception):
    """No segment store is registered: nothing can serve the segment now (retriable: one may register soon, as
    when the cluster is starting)."""

    retriable = True


class ControllerCluster(Coordination):
    def __init__(self, zk_hosts: str, container_count: int, root: str = "/tributary", session_timeout: float = 10.0,
                 grace_seconds: float = 2.0, poll_interval: float = 1.0, bucket_count: int = BUCKET_COUNT):
        super().__init__(uuid.uuid4().hex)
        self.zk = ZooKeeper(zk_hosts, session_timeout=session_timeout)
        self.paths = ClusterPaths(root)
        self.container_count = container_count
        self.grace_seconds = grace_seconds
        self.poll_interval = poll_interval
        self.bucket_count = bucket_count
        self.controllers: dict[str, ControllerRegistration] = {}
        self.segment_stores: list[str] = []
        self.container_map = ContainerMap()
        self.is_leader = False
        self._registration: ControllerRegistration | None = None
        self._candidate: str | None = None  # our node under cluster/leader
        self._owners: dict[int, str] = {}  # bucket -> controller
        self._missing_since: dict[str, float] = {}  # leader: store -> monotonic time it was first seen gone
        self._held: dict[str, int] = {}  # lease path -> holders in this process
        self._lost_callbacks: list[Callable[[], None]] = []
        self._session_callbacks: list[Callable[[], None]] = []
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connects, agrees on the cluster settings, stands for leader and follows the cluster (the leader
        assigns containers before any controller serves: a controller's own metadata lives in them).
        Raises ZooKeeperUnavailable or server.cluster.ClusterMismatch."""
        await self.zk.start()
        try:
            await agree_on_settings(self.zk, self.paths, self.container_count)
            self.zk.on_session_lost(self._session_lost)
            await self._stand_for_leader()
            await self._look()
        except BaseException:
            await self.zk.stop()
            raise
        self._task = asyncio.get_running_loop().create_task(self._follow(), name="follow cluster")

    async def register(self, host: str, port: int) -> None:
        """Joins as a live controller serving gRPC at ``host:port``: listed to clients, owning buckets."""
        self._registration = ControllerRegistration(host, port, time.time())
        await self._register()
        await self._look()

    def begin_shutdown(self) -> None:
        """The controller is stopping: no more following the cluster, and the leases its work releases on the way
        out get a short grace from ZooKeeper (none while it is unreachable: they go with the session)."""
        self._closed = True
        self.zk.begin_shutdown()

    async def stop(self) -> None:
        self.begin_shutdown()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.zk.stop()  # our ephemeral nodes go with the session

    # ------------------------------------------------------------------ what the services ask

    def endpoint_of_container(self, container: int) -> Endpoint:
        owner = self.container_map.owners.get(container)
        if owner is None:
            if not self.segment_stores:
                raise NoSegmentStore(f"no segment store is registered (container {container})")
            owner = self.segment_stores[container % len(self.segment_stores)]
        return endpoint_of(owner)

    def controller_endpoints(self) -> tuple[Endpoint, ...]:
        ordered = sorted(self.controllers.items(), key=lambda item: item[0] != self.controller_id)
        found = tuple((registration.host, registration.port) for _, registration in ordered)
        if not found and self._registration is not None:
            found = ((self._registration.host, self._registration.port),)
        return found

    def owns(self, scope: str, stream: str) -> bool:
        owner = self._owners.get(bucket_of(scope, stream, self.bucket_count))
        return owner == self.controller_id or (owner is None and not self.controllers)

    def cut_off(self) -> str | None:
        """The controller's ZooKeeper session must be presumed expired (coordination.zookeeper.SessionClock):
        it answers UNAVAILABLE, so that clients move to another controller, until ZooKeeper is heard again."""
        now = time.monotonic()
        if self._task is None or self._closed or self.zk.presumed_expiry > now:
            return None
        silent = self.zk.clock.silent_for(now)
        return f"this controller has not heard ZooKeeper for {silent:.1f} s: ask another controller"

    def bucket_mapping(self) -> dict[str, list[int]]:
        mapping: dict[str, list[int]] = {}
        for bucket, controller in sorted(self._owners.items()):
            mapping.setdefault(controller, []).append(bucket)
        return mapping

    def on_controllers_lost(self, callback: Callable[[], None]) -> None:
        self._lost_callbacks.append(callback)

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        self._session_callbacks.append(callback)

    @contextlib.asynccontextmanager
    async def lease(self, kind: str, name: str) -> AsyncIterator[None]:
        path = self.paths.lease(kind, name)
        if self._held.get(path, 0) == 0:
            await self._take(path)
        self._held[path] = self._held.get(path, 0) + 1
        try:
            yield
        finally:
            holders = self._held.pop(path, 0) - 1  # (the table is emptied when the session is lost)
            if holders > 0:
                self._held[path] = holders
            else:
                await self._give_back(path)

    async def _take(self, path: str) -> None:
        mine = self.controller_id.encode()
        try:
            await self.zk.create(path, mine, ephemeral=True)
            return
        except NodeExistsError:
            pass
        except ZooKeeperUnavailable as error:
            raise LeaseBusy(f"cannot take {path}: {error}") from None
        try:
            holder, _ = await self.zk.get(path)
        except NoNodeError:
            raise LeaseBusy(f"{path} changed hands; try again") from None
        if holder != mine:  # (ours: a create retried after a lost reply)
            raise LeaseBusy(f"{path} is held by controller {holder.decode(errors='replace')}")

    async def _give_back(self, path: str) -> None:
        try:
            holder, version = await self.zk.get(path)
            if holder == self.controller_id.encode():
                await self.zk.delete(path, version)
        except (NoNodeError, BadVersionError, ZooKeeperUnavailable):
            pass  # gone already, or it goes with the session

    # ------------------------------------------------------------------ following the cluster

    async def _follow(self) -> None:
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):  # not wait_for: 3.11's loses a cancel meeting a set
                    await self._changed.wait()
            try:
                await self._look()
            except ZooKeeperUnavailable as error:
                log.warning("cannot read the cluster from ZooKeeper", extra={"error": str(error)})
            except Exception:
                log.exception("following the cluster failed")

    async def _look(self) -> None:
        """One reading of the cluster, and what follows from it."""
        self._changed.clear()
        watch = self._changed.set
        if self._candidate is not None:
            await self._ensure_registered()
        controllers = await self._read_controllers(watch)
        lost = set(self.controllers) - set(controllers)
        self.controllers = controllers
        self._owners = bucket_owners(list(controllers), self.bucket_count)
        self.segment_stores = sorted(await self.zk.get_children(self.paths.segment_stores, watch=watch))
        self.container_map, version = await self._read_map(watch)
        candidates = sorted(await self.zk.get_children(self.paths.leader, watch=watch))
        was_leader, self.is_leader = self.is_leader, bool(candidates) and candidates[0] == self._candidate
        if self.is_leader and not was_leader:
            log.info("this controller leads the cluster", extra={"controller": self.controller_id})
        if self.is_leader:
            await self._balance(version)
        if lost:
            log.info("controllers left the cluster", extra={"controllers": sorted(lost)})
            for callback in list(self._lost_callbacks):
                callback()

    async def _read_controllers(self, watch: Callable[[], None]) -> dict[str, ControllerRegistration]:
        found = {}
        for controller in await self.zk.get_children(self.paths.controllers, watch=watch):
            try:
                data, _ = await self.zk.get(self.paths.controller(controller))
                found[controller] = ControllerRegistration.from_json(data)
            except (NoNodeError, ValueError):
                continue
        return found

    async def _read_map(self, watch: Callable[[], None]) -> tuple[ContainerMap, int | None]:
        try:
            data, version = await self.zk.get(self.paths.container_map, watch=watch)
        except NoNodeError:
            await self.zk.exists(self.paths.container_map, watch=watch)
            return ContainerMap(), None
        try:
            return ContainerMap.from_json(data), version
        except ValueError as error:
            log.error("the container map does not parse; it will be rewritten", extra={"error": str(error)})
            return ContainerMap(), version

    async def _balance(self, version: int | None) -> None:
        """The leader's duty: a map that gives every container to a live store (within the grace period)."""
        now = time.monotonic()
        live = set(self.segment_stores)
        owners = set(self.container_map.owners.values())
        self._missing_since = {store: self._missing_since.get(store, now) for store in owners - live}
        keep = {store for store, since in self._missing_since.items() if now - since < self.grace_seconds}
        if keep:  # look again when the grace runs out
            asyncio.get_running_loop().call_later(self.grace_seconds, self._changed.set)
        wanted = balance(self.container_count, self.container_map.owners, live, keep)
        if wanted == dict(self.container_map.owners):
            return
        new_map = ContainerMap(wanted)
        try:
            if version is None:
                await self.zk.create(self.paths.container_map, new_map.to_json())
            else:
                await self.zk.set_if(self.paths.container_map, new_map.to_json(), version)
        except (BadVersionError, NodeExistsError):
            self._changed.set()  # someone else wrote it: read again
            return
        moved = sorted(container for container, owner in wanted.items()
                       if self.container_map.owners.get(container) != owner)
        log.info("container map changed", extra={"moved": moved, "stores": sorted(live)})
        self.container_map = new_map

    # ------------------------------------------------------------------ registration

    async def _register(self) -> None:
        assert self._registration is not None
        try:
            await self.zk.create(self.paths.controller(self.controller_id), self._registration.to_json(),
                                 ephemeral=True)
        except NodeExistsError:
            pass  # ours, from a create retried after a lost reply

    async def _stand_for_leader(self) -> None:
        created = await self.zk.create(f"{self.paths.leader}/n_", self.controller_id.encode(), ephemeral=True,
                                       sequence=True)
        self._candidate = created.rsplit("/", 1)[1]
        # A create retried after a lost reply makes a second node. The first, lower, would stand in our place
        # while we wait for ours to come first: no controller would ever lead (found by the simulation's
        # ZooKeeper). Every other candidate node holding our id is dropped.
        for name in await self.zk.get_children(self.paths.leader):
            if name == self._candidate:
                continue
            try:
                data, _ = await self.zk.get(f"{self.paths.leader}/{name}")
            except NoNodeError:
                continue
            if data == self.controller_id.encode():
                await self.zk.delete(f"{self.paths.leader}/{name}")

    async def _ensure_registered(self) -> None:
        """After a session expiry our nodes are gone: register and stand again under the new session."""
        if self._candidate is None or not await self.zk.exists(f"{self.paths.leader}/{self._candidate}"):
            log.warning("leader candidacy was lost; standing again", extra={"controller": self.controller_id})
            await self._stand_for_leader()
        if self._registration is not None and not await self.zk.exists(self.paths.controller(self.controller_id)):
            log.warning("controller registration was lost; registering again",
                        extra={"controller": self.controller_id})
            await self._register()

    def _session_lost(self) -> None:
        log.error("ZooKeeper session expired: this controller's leases are gone; stopping its work",
                  extra={"controller": self.controller_id})
        self._held.clear()
        self.is_leader = False
        self._changed.set()
        for callback in list(self._session_callbacks):
            callback()
