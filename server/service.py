"""The segment store service: its containers, its listener, and their lifecycle.

All containers of the configured count run in this process (the embedded
form); each has its own Tier-1 log under ``<data dir>/tier1/container-<id>``.
They share one Tier-2 chunk storage (by default the filesystem under
``<data dir>/tier2``; S3 by configuration) and one cache budget.
The container count is fixed per data directory: it decides which container
owns which segment, so starting with another count is refused. A container
whose log fails is replaced by a new instance that recovers from the log.

In cluster mode (``config.cluster``, docs/cluster.md) the store runs only the containers the
controller leader's map gives it (``cluster.ClusterMember`` starts and stops them), over the
replicated log and a Tier-2 every store shares; a request for a segment of any other container,
or of one still recovering, is answered WrongHost, and the client asks the controller again.
A store cut off from ZooKeeper past its session timeout stops serving (``ClusterMember``'s module
docstring says when and why): ``_stop_serving`` closes its client connections, so that their clients
ask the controller again at once instead of waiting on this store, and fails its running containers,
which the member then stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from coordination.retry import Backoff
from wire import naming

from . import errors
from .auth import TokenChecker
from .config import SegmentStoreConfig
from .connection import ConnectionLimits, SegmentStoreConnection
from .containers import CacheManager, ContainerStatus, ReplayBound, SegmentContainer, StorageWriterConfig, Tier2Settings
from .tier1 import MEMORY_LOGS, DurableDataLog, InMemoryDurableDataLog, LocalDurableDataLog, LogError, LogFenced
from .tier2.chunk_storage import ChunkStorage, ChunkStorageError, ChunkStorageUnavailable
from .tier2.config import StorageConfig
from .tier2.metadata_store import MetadataStoreError
from .tls import TlsConfigurationError, server_tls_context

if TYPE_CHECKING:
    from coordination.zookeeper import ZooKeeper

    from .cluster import ClusterMember
    from .tier1.replicated import ReplicatedTier1

log = logging.getLogger("tributary.segmentstore")
_LAYOUT_FILE = "segmentstore.json"
# A failed container, or a failed background task, is started again after these pauses (no bound: a store
# serves for as long as it runs).
RESTART_BACKOFF = Backoff(initial_seconds=0.5, multiplier=2.0, max_delay_seconds=10.0, attempts=None)


class StartupError(Exception):
    """The service cannot start (busy port, unusable data dir, changed container count)."""


def local_log_factory(config: SegmentStoreConfig, container_id: int) -> LocalDurableDataLog:
    """The embedded default: a local fsync'd log per container under the data dir."""
    return LocalDurableDataLog(config.data_dir / "tier1" / f"container-{container_id}",
                               file_size=config.log_file_size, spare_files_max=config.log_spare_files)


def memory_log_factory(config: SegmentStoreConfig, container_id: int) -> InMemoryDurableDataLog:
    """Tier-1 in this process's memory (``tier1="memory"``): a store started again in the same process finds
    its records under the same data dir; a process that exits loses them."""
    return MEMORY_LOGS.log(str(config.data_dir / "tier1" / f"container-{container_id}"))


_IN_PROCESS_LOGS = {"local": local_log_factory, "memory": memory_log_factory}  # tier-1s needing no other process


def configured_chunk_storage(config: SegmentStoreConfig) -> ChunkStorage | None:
    """The Tier-2 chunk storage the configuration names (None for "none")."""
    if config.tier2 == "filesystem":
        from .tier2.filesystem import FileSystemChunkStorage
        return FileSystemChunkStorage(config.tier2_dir or config.data_dir / "tier2")
    if config.tier2 == "s3":
        from .tier2.s3 import S3ChunkStorage
        return S3ChunkStorage(config.s3_bucket, prefix=config.s3_prefix, endpoint_url=config.s3_endpoint,
                              region=config.s3_region)
    return None


class SegmentStoreService:
    def __init__(self, config: SegmentStoreConfig, log_factory=None, chunk_storage: ChunkStorage | None = None):
        self.config = config
        self._replicated: ReplicatedTier1 | None = None  # a replicated tier-1: ZooKeeper and log-store connections
        self._zk: ZooKeeper | None = None  # cluster mode: this store's session (registration, map, log owner locks)
        self.member: ClusterMember | None = None  # cluster mode: registration and the containers the map gives us
        if log_factory is None:
            log_factory = self._replicated_log if config.tier1 == "replicated" else _IN_PROCESS_LOGS[config.tier1]
        self._log_factory = log_factory
        self.chunk_storage = chunk_storage if chunk_storage is not None else configured_chunk_storage(config)
        self.cache = CacheManager(config.cache_size) if self.chunk_storage is not None else None
        self.containers: dict[int, SegmentContainer] = {}
        self.container_failures = 0  # containers that failed (and were restarted or given up) since start
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[SegmentStoreConnection, None] = {}  # (in accept order: closed in it)
        self._background: set[asyncio.Task] = set()
        self._stopping = False
        self.port = config.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Recovers every container, then starts listening. Raises StartupError.

        The TLS files are loaded first: a bad certificate is refused before recovery, not after it."""
        try:
            tls = server_tls_context(self.config.tls_cert, self.config.tls_key) \
                if self.config.tls_cert and self.config.tls_key else None
        except TlsConfigurationError as error:
            raise StartupError(str(error)) from None
        self._prepare_data_dir()
        self._check_s3_settings()
        await self._start_cluster_session()
        await self._start_replicated_tier1()
        try:
            if not self.config.cluster:
                await self._open_containers()
        except (ChunkStorageError, MetadataStoreError, LogError, OSError) as error:
            await self._stop_containers()
            if self.chunk_storage is not None:
                await self.chunk_storage.close()
            await self._stop_replicated_tier1()
            await self._stop_cluster_session()
            if isinstance(error, (LogError, OSError)):  # (OSError: the local log's files, a full disk say)
                raise StartupError(f"tier-1 ({self.config.tier1}) is not usable: {error}") from error
            raise StartupError(f"tier-2 ({self.config.tier2}) is not usable: {error}") from error
        limits = ConnectionLimits(append_bytes_outstanding_max=self.config.append_bytes_outstanding_max,
                                  write_buffer_high=self.config.write_buffer_high,
                                  tail_read_timeout=self.config.tail_read_timeout)
        loop = asyncio.get_running_loop()
        tokens = TokenChecker(self.config.token_key) if self.config.token_key else None
        try:
            self._server = await loop.create_server(
                lambda: self._track(SegmentStoreConnection(self, limits, self._forget, tokens)),
                self.config.host, self.config.port, reuse_address=True, ssl=tls)
        except OSError as error:
            await self._stop_containers()
            await self._stop_replicated_tier1()
            await self._stop_cluster_session()
            raise StartupError(f"cannot listen on {self.config.host}:{self.config.port}: {error.strerror}") from error
        self.port = self._server.sockets[0].getsockname()[1]
        await self._join_cluster()
        self._supervise("transient-segment expiry", self._expire_transients_forever)
        if self.config.writer_retention_seconds > 0:
            self._supervise("writer-attribute expiry", lambda: self._for_each_container_forever(
                self.config.writer_retention_seconds / 4, lambda container: container.expire_writers()))
        if self.config.segment_idle_seconds > 0:
            self._supervise("idle segments", lambda: self._for_each_container_forever(
                self.config.segment_idle_seconds / 2, lambda container: container.dormancy.sweep()))
        log.info("segment store listening", extra={"host": self.config.host, "port": self.port,
                                                    "containers": self.config.container_count})

    async def stop(self) -> None:
        self._stopping = True
        if self._replicated is not None:
            self._replicated.begin_shutdown()  # no stalls on a broken ledger; short ZooKeeper grace, none if down
        if self._zk is not None:
            self._zk.begin_shutdown()
        if self.member is not None:
            await self.member.stop()
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        for task in list(self._background):
            task.cancel()
        await self._stop_containers()
        if self.chunk_storage is not None:
            await self.chunk_storage.close()
        await self._stop_replicated_tier1()
        await self._stop_cluster_session()
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ cluster mode

    async def _start_cluster_session(self) -> None:
        """Cluster mode: this store's ZooKeeper session, and the cluster's settings agreed."""
        if not self.config.cluster:
            return
        from coordination.cluster import ClusterMismatch, ClusterPaths, agree_on_settings
        from coordination.zookeeper import ZooKeeper, ZooKeeperUnavailable

        zk = ZooKeeper(self.config.zk_hosts, session_timeout=self.config.zk_session_timeout)
        try:
            await zk.start()
            await agree_on_settings(zk, ClusterPaths(self.config.zk_root), self.config.container_count)
        except (ZooKeeperUnavailable, ClusterMismatch, ValueError) as error:
            await zk.stop()
            raise StartupError(str(error)) from None
        self._zk = zk

    async def _join_cluster(self) -> None:
        """Cluster mode: registers this store (listening by now) and starts following the container map."""
        if self._zk is None:
            return
        from coordination.cluster import ClusterPaths
        from coordination.zookeeper import ZooKeeperUnavailable

        from .cluster import ClusterMember

        self.member = ClusterMember(self._zk, ClusterPaths(self.config.zk_root), self.config.advertised_host,
                                    self.port, self._run_assigned_container, self._stop_container,
                                    poll_interval=self.config.cluster_poll_interval, on_cut_off=self._stop_serving)
        try:
            await self.member.start()
        except ZooKeeperUnavailable as error:
            self.member = None
            await self.stop()
            raise StartupError(str(error)) from None

    async def _stop_cluster_session(self) -> None:
        if self._zk is not None:
            await self._zk.stop()
            self._zk = None

    async def _run_assigned_container(self, container_id: int) -> None:
        """Cluster mode: recovers a container the map gives this store, retrying while its log is busy (the
        previous owner has not let go yet) or unavailable; ``ClusterMember`` cancels it if the map changes."""
        delays = Backoff(initial_seconds=0.1, multiplier=2.0, max_delay_seconds=1.0, attempts=None).delays()
        while True:
            try:
                await self._start_container(container_id)  # (one that fails is closed and forgotten)
                return
            except LogError as error:
                if not error.retriable:
                    raise
                log.info("container log not available yet; retrying",
                         extra={"container": container_id, "error": str(error)})
            await asyncio.sleep(next(delays))

    def _stop_serving(self) -> int:
        """Cluster mode, the ZooKeeper session expired or silent past its timeout (``ClusterMember`` no longer
        owns anything): closes every client connection (first, so that no client waits on what follows: the store
        serves no container now, so each would only meet WrongHost), then fails its running containers; the member
        stops them (and, once ZooKeeper answers again, starts what the map gives it). Returns how many connections
        were closed."""
        connections = list(self._connections)
        for connection in connections:
            connection.close()
        for container_id, container in list(self.containers.items()):
            if container.status == ContainerStatus.RUNNING:
                container.fail(LogFenced(f"container {container_id}: this segment store's ZooKeeper session "
                                         "expired or must be presumed expired; the container may run elsewhere"))
        return len(connections)

    async def _stop_container(self, container_id: int) -> None:
        """Stops a container (its log closed, its owner lock released) and forgets it."""
        container = self.containers.pop(container_id, None)
        if container is not None:
            await container.stop()

    # ------------------------------------------------------------------ tier-1

    async def _start_replicated_tier1(self) -> None:
        if self.config.tier1 != "replicated":
            return
        from coordination.zookeeper import ZooKeeperUnavailable

        from .tier1.replicated import ReplicatedTier1, ReplicationSettings

        ensemble, write_quorum, ack_quorum = self.config.log_quorum
        settings = ReplicationSettings(ensemble_size=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
                                       ledger_size_max=self.config.ledger_size_max)
        replicated = ReplicatedTier1(self.config.zk_hosts, settings, root=self.config.zk_root,
                                     session_timeout=self.config.zk_session_timeout, zk=self._zk)
        try:
            await replicated.start()
        except ZooKeeperUnavailable as error:
            await self._stop_cluster_session()
            raise StartupError(str(error)) from None
        self._replicated = replicated

    async def _stop_replicated_tier1(self) -> None:
        if self._replicated is not None:
            await self._replicated.stop()
            self._replicated = None

    def _replicated_log(self, config: SegmentStoreConfig, container_id: int) -> DurableDataLog:
        assert self._replicated is not None
        return self._replicated.log(f"container-{container_id}")

    async def _open_containers(self) -> None:
        """Starts every container at service start (standalone). When one fails, the others still starting are
        cancelled and waited for before the error goes on: a start that fails leaves no container opening in the
        background, holding its log (an embedding process may start a store again on the same data)."""
        openings = [asyncio.ensure_future(self._open_container(cid)) for cid in range(self.config.container_count)]
        try:
            await asyncio.gather(*openings)
        except BaseException:
            for opening in openings:
                opening.cancel()
            await asyncio.gather(*openings, return_exceptions=True)
            raise

    async def _open_container(self, container_id: int) -> None:
        """Starts a container at service start; a log that is busy (its previous owner's ZooKeeper session has
        not expired yet) or unavailable (too few log stores yet), or whose disk fails (full: an operator may free
        it), is tried again for ``log_open_wait`` seconds, and
        a Tier-2 that does not answer (an object store's outage, throttling) for ``tier2_open_wait`` seconds (short:
        an endpoint that never answers is more often a mistake in the settings, which start should report soon)."""
        started = time.monotonic()
        delays = Backoff(initial_seconds=0.25, multiplier=2.0, max_delay_seconds=2.0, attempts=None).delays()
        while True:
            try:
                await self._start_container(container_id)
                return
            except LogError as error:
                if not error.retriable or time.monotonic() >= started + self.config.log_open_wait:
                    raise
                log.info("container log not available yet; retrying",
                         extra={"container": container_id, "error": str(error)})
            except OSError as error:  # the local log's disk (full, failing): an operator may free it meanwhile
                if time.monotonic() >= started + self.config.log_open_wait:
                    raise
                log.warning("container log's disk failed at start; retrying",
                            extra={"container": container_id, "error": str(error)})
            except ChunkStorageUnavailable as error:
                if time.monotonic() >= started + self.config.tier2_open_wait:
                    raise
                log.warning("tier-2 not answering at container start; retrying",
                            extra={"container": container_id, "error": str(error)})
            await asyncio.sleep(next(delays))  # (the failed start closed its container: _start_container)

    async def _stop_containers(self) -> None:
        await asyncio.gather(*(container.stop() for container in self.containers.values()),
                             return_exceptions=True)

    def _check_s3_settings(self) -> None:
        """An S3 endpoint that is not a URL, or no credentials at all, fail start with one clear line."""
        if self.config.tier2 != "s3":
            return
        endpoint = self.config.s3_endpoint
        if endpoint is not None:
            parsed = urllib.parse.urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise StartupError(f"--s3-endpoint {endpoint!r} is not an http(s) URL (e.g. http://127.0.0.1:5000)")
        import botocore.session

        if botocore.session.get_session().get_credentials() is None:
            raise StartupError("tier-2 (s3) has no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                               "(or AWS_PROFILE, or a credentials file)")

    def _prepare_data_dir(self) -> None:
        data_dir = self.config.data_dir
        if self.config.tier2 == "filesystem" and self.config.tier2_dir is not None:
            try:
                self.config.tier2_dir.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StartupError(f"tier-2 dir {self.config.tier2_dir} is not usable: "
                                   f"{error.strerror or error}") from error
        try:
            (data_dir / "tier1").mkdir(parents=True, exist_ok=True)
            if self.config.tier2 == "filesystem":
                (self.config.tier2_dir or data_dir / "tier2").mkdir(parents=True, exist_ok=True)
            layout_file = data_dir / _LAYOUT_FILE
            if layout_file.exists():
                layout = json.loads(layout_file.read_text())
                if layout.get("container_count") != self.config.container_count:
                    raise StartupError(f"{data_dir} was created with {layout.get('container_count')} containers; "
                                       f"it cannot be opened with {self.config.container_count}")
            else:
                temporary = layout_file.with_suffix(".tmp")
                temporary.write_text(json.dumps({"container_count": self.config.container_count}))
                temporary.replace(layout_file)
        except OSError as error:
            raise StartupError(f"data dir {data_dir} is not usable: {error.strerror or error}") from error

    async def _start_container(self, container_id: int) -> None:
        durable_log = self._log_factory(self.config, container_id)
        container = SegmentContainer(container_id, durable_log, on_failure=self._container_failed,
                                     checkpoint_every_operations=self.config.checkpoint_every_operations,
                                     checkpoint_every_bytes=self.config.checkpoint_every_bytes,
                                     checkpoint_interval_seconds=self.config.checkpoint_interval_seconds,
                                     table_compaction_threshold=self.config.table_compaction_threshold,
                                     tier2=self._tier2_settings(container_id), load=self.config.load,
                                     writer_retention_seconds=self.config.writer_retention_seconds,
                                     max_segments=self.config.max_segments_per_container,
                                     segment_idle_seconds=self.config.segment_idle_seconds,
                                     segment_working_set=self.config.segment_working_set)
        self.containers[container_id] = container
        try:
            await container.start()
        except BaseException:  # (the container stopped itself, closing its log: start says why)
            if self.containers.get(container_id) is container:
                del self.containers[container_id]
            raise

    def _tier2_settings(self, container_id: int) -> Tier2Settings | None:
        chunk_storage, cache = self.chunk_storage, self.cache
        if chunk_storage is None or cache is None:  # no Tier-2 (the cache exists exactly when Tier-2 does)
            return None
        count = self.config.container_count
        return Tier2Settings(
            chunk_storage, cache,
            storage=StorageConfig(max_chunk_size=self.config.max_chunk_size,
                                  gc_delay_seconds=self.config.gc_delay_seconds),
            writer=StorageWriterConfig(flush_size=self.config.flush_size, flush_interval=self.config.flush_interval,
                                       operation_timeout=self.config.tier2_timeout),
            owns_segment=lambda name: naming.container_of(name, count) == container_id,
            replay_bound=ReplayBound(self.config.replay_bytes_max, self.config.replay_operations_max))

    def _container_failed(self, container: SegmentContainer, error: BaseException) -> None:
        if self._stopping:
            return
        self.container_failures += 1
        if self.member is not None and self.member.cut_off:
            return  # cut off from ZooKeeper: the member is stopping every container already
        if self.member is not None:  # cluster mode: started again only if the map still gives it to us
            self._spawn(self._drop_failed(container), f"stop of failed container {container.container_id}")
        else:
            self._spawn(self._restart(container), f"restart of container {container.container_id}")

    async def _drop_failed(self, failed: SegmentContainer) -> None:
        if self.containers.get(failed.container_id) is failed:
            del self.containers[failed.container_id]
        try:
            await failed.stop()
        except Exception:  # noqa: BLE001 - the failed log may refuse to close cleanly; the new owner fences it
            log.warning("failed container did not stop cleanly", extra={"container": failed.container_id})
        assert self.member is not None
        if failed.container_id not in self.containers:  # else the member started a new instance meanwhile
            self.member.container_stopped(failed.container_id)

    async def _restart(self, failed: SegmentContainer) -> None:
        """Replaces a failed container with a new instance recovered from its log."""
        try:
            await failed.stop()
        except Exception:  # noqa: BLE001 - the failed log may refuse to close cleanly; the new owner fences it
            log.warning("failed container did not stop cleanly", extra={"container": failed.container_id})
        for delay in RESTART_BACKOFF.delays():
            await asyncio.sleep(delay)
            if self._stopping:
                return
            try:
                await self._start_container(failed.container_id)
                return
            except Exception as error:  # noqa: BLE001 - whatever stops a restart is logged and retried
                log.error("container restart failed", extra={"container": failed.container_id, "error": repr(error),
                                                              "retry_in": round(delay, 3)})

    # ------------------------------------------------------------------ routing

    def container_for(self, segment: str) -> SegmentContainer:
        """The running container that owns ``segment``. Raises ContainerUnavailable, or in cluster mode
        WrongHost (a container this store does not own, or one it is still recovering)."""
        container_id = naming.container_of(segment, self.config.container_count)
        container = self.containers.get(container_id)
        if container is None or container.status != ContainerStatus.RUNNING:
            if self.member is not None:
                raise errors.WrongHost(segment, f"container {container_id} is not running here")
            raise errors.ContainerUnavailable(segment, f"the container of {segment} is not running")
        if self.member is not None and not self.member.owns(container_id):
            raise errors.WrongHost(segment, f"container {container_id} has moved to another segment store")
        return container

    def container_by_id(self, container_id: int) -> list[SegmentContainer]:
        """The running container ``container_id``, or every running one for a negative id."""
        return [container for cid, container in sorted(self.containers.items())
                if (container_id < 0 or cid == container_id) and container.status == ContainerStatus.RUNNING]

    # ------------------------------------------------------------------ what metrics and health read

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def unflushed_bytes(self) -> int:
        """Bytes only Tier-1 holds, over every running container (the Tier-2 flush lag)."""
        return sum(container.unflushed_bytes() for container in list(self.containers.values())
                   if container.status == ContainerStatus.RUNNING)

    @property
    def ready(self) -> bool:
        """Serving: listening, and every container it should run is running (none is recovering)."""
        if self._server is None or self._stopping or (self.member is not None and self.member.cut_off):
            return False
        wanted = self.member.assigned if self.member is not None else range(self.config.container_count)
        return all(container_id in self.containers and
                   self.containers[container_id].status == ContainerStatus.RUNNING for container_id in wanted)

    # ------------------------------------------------------------------ connections and housekeeping

    def _track(self, connection: SegmentStoreConnection) -> SegmentStoreConnection:
        self._connections[connection] = None
        return connection

    def _forget(self, connection: SegmentStoreConnection) -> None:
        self._connections.pop(connection, None)

    def _spawn(self, coroutine, name: str = "background task") -> asyncio.Task:
        """Runs a one-shot background coroutine; an unexpected error is logged, never lost."""
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(self._report)
        return task

    def _report(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", extra={"task": task.get_name(), "error": repr(task.exception())})

    def _supervise(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Runs ``run()`` for as long as the service runs: when it fails (it is logged by ``_spawn``), it is
        started again after a pause."""
        async def forever() -> None:
            delays = RESTART_BACKOFF.delays()
            while not self._stopping:
                try:
                    await run()
                except Exception:
                    log.exception("background task failed; restarting it", extra={"task": name})
                    await asyncio.sleep(next(delays))

        self._spawn(forever(), name)

    def writer_attribute_count(self) -> int:
        """Writer attributes kept by the containers (their expiry: SegmentContainer.expire_writers)."""
        return sum(container.writer_attribute_count() for container in list(self.containers.values()))

    async def _for_each_container_forever(self, period: float,
                                          action: Callable[[SegmentContainer], Awaitable[object]]) -> None:
        """Every ``period`` seconds (bounded to [0.05, 60]), ``action`` on each container in turn."""
        period = min(60.0, max(0.05, period))
        while True:
            await asyncio.sleep(period)
            for container in list(self.containers.values()):
                await action(container)

    async def _expire_transients_forever(self) -> None:
        idle_ms = int(self.config.transient_idle_seconds * 1000)
        while True:
            now_ms = int(time.time() * 1000)
            for container in list(self.containers.values()):
                if container.status != ContainerStatus.RUNNING:
                    continue
                for name in container.transients_to_expire(now_ms, idle_ms):
                    try:
                        await container.delete(name)
                    except errors.SegmentStoreError:
                        pass
            await asyncio.sleep(min(30.0, max(0.05, self.config.transient_idle_seconds / 4)))
