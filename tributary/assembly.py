"""The processes Tributary runs, assembled from the server and the controller: one object each.

* :class:`SegmentStore`: one segment store (``server.service.SegmentStoreService``);
* :class:`Controller`: one controller against one segment store, retrying while the store is
  unreachable; :class:`ClusteredController`: one controller of a cluster (through ZooKeeper);
* :class:`LogStore`: one replica of the replicated Tier-1 log;
* :class:`Standalone`: a segment store, then a controller against it, in one process.

Each has ``start()`` (returns once it serves), ``stop()`` and ``ready`` (serving: what an operations
endpoint's /health/ready reports). A start that fails raises :class:`StartupFailed`, naming the part
that failed and why, with nothing of that part left running: this module holds the one mapping of
the server's and the controller's startup errors to those reasons. The ``tributary`` command line
(``tributary.cli``: options, banners, signals) and the embeddable server (``tributary.testing``)
both run these objects. :func:`operations_endpoint` is the ``--metrics-port`` endpoint around them.

Part of the composition root: it imports ``server`` and ``controller``, but only when an object is
made or started, so importing it is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordination.retry import Backoff, retry

if TYPE_CHECKING:
    from controller.app import ControllerApp
    from server.config import SegmentStoreConfig

SEGMENT_STORE = "segment store"  # StartupFailed.part of each part
CONTROLLER = "controller"
LOG_STORE = "log store"
OPERATIONS_ENDPOINT = "operations endpoint"


class StartupFailed(Exception):
    """A part could not start; ``str()`` says why, ``part`` names it ("segment store", "controller", ...)."""

    def __init__(self, part: str, reason: str):
        super().__init__(reason)
        self.part = part


def _start_policy(wait_seconds: float) -> Backoff:
    """Tries to start a controller over ``wait_seconds`` (0: once)."""
    return Backoff(initial_seconds=0.25, multiplier=2.0, max_delay_seconds=2.0, attempts=None,
                   total_seconds=wait_seconds)


async def _stop_quietly(part) -> None:
    try:
        await part.stop()
    except Exception:  # noqa: BLE001 - the start failure is what the caller needs to see
        pass


class SegmentStore:
    """One segment store. ``metrics``: its numbers are registered for an operations endpoint."""

    def __init__(self, config: SegmentStoreConfig, *, metrics: bool = False):
        from server.service import SegmentStoreService

        self.config = config
        self.service = SegmentStoreService(config)
        if metrics:
            from server.service_metrics import register_segment_store
            register_segment_store(self.service)

    @property
    def port(self) -> int:
        return self.service.port

    @property
    def ready(self) -> bool:
        return self.service.ready

    async def start(self, timeout: float | None = None) -> None:
        """Recovers the containers and listens; within ``timeout`` seconds when given. Raises StartupFailed."""
        from server.service import StartupError

        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                await self.service.start()
        except BaseException as error:
            await _stop_quietly(self.service)
            if isinstance(error, StartupError):
                raise StartupFailed(SEGMENT_STORE, str(error)) from error
            if scope.expired():
                raise StartupFailed(SEGMENT_STORE, f"did not start within {timeout}s "
                                                   f"(data dir {self.config.data_dir})") from None
            raise

    async def stop(self) -> None:
        await self.service.stop()


class Controller:
    """One controller whose segment store (``segment_store``, (host, port)) owns every container.

    ``advertised``: the address clients are told to use; ``app_options``: ControllerApp's other
    options (settings, security, REST port). :meth:`start` keeps trying for ``wait_seconds`` while the
    store cannot be reached, and checks the store runs ``container_count`` containers."""

    def __init__(self, host: str, advertised: str, port: int, segment_store: tuple[str, int], container_count: int,
                 *, wait_seconds: float = 0.0, app_options: dict[str, Any] | None = None):
        self.host, self.advertised, self._port = host, advertised, port
        self.segment_store, self.container_count = segment_store, container_count
        self.wait_seconds = wait_seconds
        self._app_options = app_options or {}
        self.app: ControllerApp | None = None  # while serving

    @property
    def port(self) -> int:
        return self._serving_app().port

    @property
    def ready(self) -> bool:
        return self.app is not None and self.app.server is not None

    def _serving_app(self) -> ControllerApp:
        if self.app is None:
            raise RuntimeError("the controller is not running")
        return self.app

    async def start(self, timeout: float | None = None) -> None:
        """Starts serving; within ``timeout`` seconds when given. Raises StartupFailed."""
        from clients.errors import ClientError
        from controller.app import ContainerCountMismatch, ControllerApp, GrpcStartupError
        from controller.rest.server import RestStartupError

        async def start() -> ControllerApp:
            app = ControllerApp(host=self.host, port=self._port, segment_store=self.segment_store,
                                container_count=self.container_count, verify_container_count=True,
                                advertised_host=self.advertised, **self._app_options)
            await app.start()  # a failed start stops what it started
            return app

        unreachable = (TimeoutError, ClientError, OSError)
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                self.app = await retry(start, _start_policy(self.wait_seconds),
                                       retriable=lambda error: isinstance(error, unreachable))
        except BaseException as error:  # a failed start stopped what it had started
            if scope.expired():  # the deadline, not a call's own timeout
                raise StartupFailed(CONTROLLER, f"did not start within {timeout}s") from None
            if isinstance(error, (GrpcStartupError, RestStartupError, ContainerCountMismatch)):
                raise StartupFailed(CONTROLLER, str(error)) from error
            if isinstance(error, unreachable):
                raise StartupFailed(CONTROLLER, f"cannot reach the segment store at {self.segment_store[0]}:"
                                                f"{self.segment_store[1]}: {error}") from error
            raise

    async def stop(self) -> None:
        """Stops serving (``ready`` turns false first)."""
        app, self.app = self.app, None
        if app is not None:
            await app.stop()


class ClusteredController:
    """One controller of a cluster: ZooKeeper (``zk_hosts``, ``zk_root``) says where containers run.

    :meth:`start` keeps trying for ``wait_seconds`` while the cluster's segment stores cannot be reached.
    ``metrics``: the cluster's numbers are registered for an operations endpoint once it runs."""

    def __init__(self, host: str, advertised: str, port: int, zk_hosts: str, zk_root: str, session_timeout: float,
                 grace_seconds: float, container_count: int, *, wait_seconds: float = 0.0, metrics: bool = False,
                 app_options: dict[str, Any] | None = None):
        self.host, self.advertised, self._port = host, advertised, port
        self.zk_hosts, self.zk_root = zk_hosts, zk_root
        self._session_timeout, self._grace_seconds = session_timeout, grace_seconds
        self.container_count, self.wait_seconds, self._metrics = container_count, wait_seconds, metrics
        self._app_options = app_options or {}
        self.app: ControllerApp | None = None  # while serving

    @property
    def ready(self) -> bool:
        return self.app is not None and self.app.server is not None

    async def start(self) -> None:
        """Joins the cluster and starts serving. Raises StartupFailed."""
        from clients.errors import ClientError
        from controller.app import ControllerApp, GrpcStartupError
        from controller.cluster.zk import ControllerCluster, NoSegmentStore
        from controller.metrics import register_cluster
        from controller.rest.server import RestStartupError
        from coordination.cluster import ClusterMismatch
        from coordination.zookeeper import ZooKeeperUnavailable

        async def start() -> ControllerApp:
            cluster = ControllerCluster(self.zk_hosts, self.container_count, root=self.zk_root,
                                        session_timeout=self._session_timeout, grace_seconds=self._grace_seconds)
            app = ControllerApp(host=self.host, port=self._port, cluster=cluster, advertised_host=self.advertised,
                                **self._app_options)
            await app.start()
            return app

        unreachable = (TimeoutError, ClientError, NoSegmentStore)  # (none registered yet: the cluster is starting)
        try:
            app = await retry(start, _start_policy(self.wait_seconds),
                              retriable=lambda error: isinstance(error, unreachable))
        except (GrpcStartupError, RestStartupError, ClusterMismatch, ZooKeeperUnavailable) as error:
            raise StartupFailed(CONTROLLER, str(error)) from error
        except unreachable as error:
            raise StartupFailed(CONTROLLER, f"cannot reach the cluster's segment stores: {error}") from error
        assert app.cluster is not None
        if self._metrics:
            register_cluster(app.cluster)
        self.app = app

    async def stop(self) -> None:
        """Stops serving (``ready`` turns false first)."""
        app, self.app = self.app, None
        if app is not None:
            await app.stop()


class LogStore:
    """One log store (a replica of the replicated Tier-1 log) registered in ZooKeeper."""

    def __init__(self, data_dir, zk_hosts: str, *, host: str, port: int, advertise_host: str | None, zk_root: str,
                 gc_interval: float, journal_file_size: int):
        from server.tier1.logstore.service import LogStoreService

        self.data_dir, self.host, self._port = data_dir, host, port
        self.service = LogStoreService(data_dir, zk_hosts, host=host, port=port, advertise_host=advertise_host,
                                       root=zk_root, gc_interval=gc_interval, journal_file_size=journal_file_size)
        self.ready = False

    async def start(self) -> None:
        """Opens the journal, listens and registers. Raises StartupFailed."""
        from coordination.zookeeper import ZooKeeperUnavailable
        from server.tier1.logstore.journal_format import JournalCorrupted

        try:
            await self.service.start()
        except (ZooKeeperUnavailable, JournalCorrupted) as error:
            raise StartupFailed(LOG_STORE, str(error)) from error
        except OSError as error:
            raise StartupFailed(LOG_STORE, f"cannot start the log store on {self.host}:{self._port} "
                                           f"(data dir {self.data_dir}): {error.strerror or error}") from error
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        await self.service.stop()


class Standalone:
    """A segment store, then a controller against it (``controller_port``), on the same host.

    ``app_options`` and ``metrics`` as for :class:`Controller` and :class:`SegmentStore`."""

    def __init__(self, config: SegmentStoreConfig, controller_port: int, *, metrics: bool = False,
                 app_options: dict[str, Any] | None = None):
        self.config = config
        self._controller_port = controller_port
        self._metrics = metrics
        self._app_options = app_options
        self.store: SegmentStore | None = None  # while running
        self.controller: Controller | None = None  # while running

    @property
    def ready(self) -> bool:
        return self.store is not None and self.store.ready and self.controller is not None and self.controller.ready

    async def start(self, timeout: float | None = None) -> None:
        """Starts the segment store, then the controller; both within ``timeout`` seconds when given.

        Raises:
            StartupFailed: either could not start (whatever had started is stopped again).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        store = SegmentStore(self.config, metrics=self._metrics)
        await store.start(timeout)
        controller = Controller(self.config.host, self.config.advertised_host, self._controller_port,
                                (self.config.advertised_host, store.port), self.config.container_count,
                                app_options=self._app_options)
        try:
            await controller.start(None if deadline is None else max(0.0, deadline - loop.time()))
        except BaseException:
            await _stop_quietly(store)
            raise
        self.store, self.controller = store, controller

    async def stop(self) -> None:
        """Stops the controller, then the segment store (idempotent); a failure of either is raised after both."""
        controller, store = self.controller, self.store
        self.controller = self.store = None
        failure: BaseException | None = None
        for part in (controller, store):
            if part is None:
                continue
            try:
                await part.stop()
            except Exception as error:  # noqa: BLE001 - stop the other part anyway, then report
                failure = failure or error
        if failure is not None:
            raise failure


@contextlib.asynccontextmanager
async def operations_endpoint(port: int | None, host: str, process: str, ready: Callable[[], bool]):
    """``--metrics-port``: /metrics and /health/* for the life of the block (nothing without a port).

    Raises:
        StartupFailed: the port cannot be bound.
    """
    if port is None:
        yield None
        return
    from server import metrics as server_metrics

    from .ops_http import OpsServer

    server_metrics.enable()
    endpoint = OpsServer(host, port, process, ready)
    try:
        await endpoint.start()
    except OSError as error:
        raise StartupFailed(OPERATIONS_ENDPOINT,
                            f"cannot serve metrics on {host}:{port}: {error.strerror or error}") from None
    try:
        yield endpoint
    finally:
        await endpoint.stop()
