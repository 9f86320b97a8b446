"""The controller process: metadata store over the segment stores' table segments, services,
transaction service, gRPC server, and their lifecycle.

Start order: connect the metadata store (``TableSegmentKeyValueStore`` over a
``SegmentStoreClient`` routed by the locator) and create its global tables; start the transaction
service (it re-drives its own commits and aborts); re-drive every pending workflow intent left by
a previous controller; then serve gRPC. The controller keeps no state of its own, so any
number of restarts over the same segment stores see the same streams.

In a cluster (``cluster``, docs/cluster.md) the controller first joins ZooKeeper: segments are
found through the container map the leader keeps, getControllerServerList lists every live
controller, periodic work covers the streams of the buckets this controller owns, and workflows
and transaction commits run under leases. If its ZooKeeper session expires, it stops its
background work and starts it again under the new session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from clients.segment_store_client import SegmentStoreClient
from coordination.retry import Backoff

from .endpoints import Endpoint, SegmentLocator
from .grpc_server import DEFAULT_PORT, GrpcStartupError, start_grpc_server
from .grpc_service import ControllerServicer
from .rest.server import RestServer
from .security import Security, TlsFiles
from .service.context import DEFAULT_SETTINGS, ControllerContext, ServiceSettings, wall_clock_ms
from .service.fault_points import FaultPoints
from .service.services import ControllerServices
from .service.transactions import TransactionService, TransactionSettings
from .store import MetadataStore, TableSegmentKeyValueStore

if TYPE_CHECKING:
    from .cluster.zk import ControllerCluster

log = logging.getLogger("tributary.controller")
SHUTDOWN_GRACE_SECONDS = 2.0
REPORT_READ_TIMEOUT_SECONDS = 90.0  # over a segment store's tail-read limit (60 s): the store ends a parked read first
CLUSTER_SEGMENT_CALLS = Backoff(initial_seconds=0.01, multiplier=3.0, max_delay_seconds=1.0, attempts=None,
                                total_seconds=20.0)


class ContainerCountMismatch(Exception):
    """The controller's container count is not the segment store's."""


class ControllerApp:
    """One controller. ``segment_store`` (all containers on one store) or ``locator`` says where segments live."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, segment_store: Endpoint | None = None,
                 locator: SegmentLocator | None = None, container_count: int = 4,
                 settings: ServiceSettings = DEFAULT_SETTINGS, fault_points: FaultPoints | None = None,
                 now_ms: Callable[[], int] = wall_clock_ms, advertised_host: str | None = None,
                 verify_container_count: bool = False, cluster: ControllerCluster | None = None,
                 rest_port: int | None = None, security: Security | None = None, tls: TlsFiles | None = None,
                 transaction_settings: TransactionSettings | None = None) -> None:
        self.cluster = cluster
        if cluster is not None:
            if locator is not None or segment_store is not None:
                raise ValueError("a clustered controller finds segment stores through the cluster")
            locator = SegmentLocator(cluster.container_count, cluster.endpoint_of_container)
        if locator is None:
            if segment_store is None:
                raise ValueError("give exactly one of segment_store and locator")
            locator = SegmentLocator.single_host(container_count, segment_store)
        elif segment_store is not None:
            raise ValueError("give exactly one of segment_store and locator")
        self.host = host
        self.port = port
        self.locator = locator
        # A controller started beside a separate segment store checks that both count containers alike.
        self._verify_with = segment_store if verify_container_count else None
        self.settings = settings
        self.transaction_settings = transaction_settings  # leases and their grace (None: the defaults)
        self.fault_points = fault_points or FaultPoints.from_environment()
        self._now_ms = now_ms
        self._advertised_host = advertised_host or host
        self.client: SegmentStoreClient | None = None
        self.report_reads: SegmentStoreClient | None = None
        self.context: ControllerContext | None = None
        self.services: ControllerServices | None = None
        self.transactions: TransactionService | None = None
        self.server: grpc.aio.Server | None = None
        self.pending_workflows_at_start = 0
        self._restarting: asyncio.Task | None = None
        self.rest_port = rest_port  # the REST admin API and console (None: off); the bound port once started
        self.rest: RestServer | None = None
        self.security = security  # authentication, permissions and delegation tokens (None: off)
        self.tls = tls  # certificate and key of the gRPC and REST listeners, CA to trust in segment stores

    async def start(self) -> None:
        """Connects, re-drives pending workflows and starts serving.

        Raises:
            GrpcStartupError: the gRPC port is busy or not available (everything started is stopped).
            ContainerCountMismatch: the segment store runs another number of containers.
            clients.errors.ClientError: the segment store cannot be reached.
            coordination.tls_files.TlsFileError: a bad certificate, key or trust file (checked before anything starts).
        """
        if self.tls is not None:
            self.tls.check()
        if self.cluster is not None:
            await self.cluster.start()
            self.cluster.on_session_lost(self._session_lost)
        # In a cluster, calls ride out a segment store's failover (its containers move within seconds).
        security = self.security
        self.client = SegmentStoreClient(
            self.locator.endpoint_for, retry_policy=CLUSTER_SEGMENT_CALLS if self.cluster is not None else None,
            token=(lambda _segment: security.internal_token()) if security is not None else (lambda _segment: ""),
            ssl_context=self.tls.client_context() if self.tls is not None else None)
        # Load reports are read with tail reads the store holds until reports come (or its tail-read limit,
        # 60 s, when it closes the connection): on connections of their own, with a longer request timeout.
        self.report_reads = SegmentStoreClient(
            self.locator.endpoint_for, request_timeout=REPORT_READ_TIMEOUT_SECONDS,
            retry_policy=CLUSTER_SEGMENT_CALLS if self.cluster is not None else None,
            token=(lambda _segment: security.internal_token()) if security is not None else (lambda _segment: ""),
            ssl_context=self.tls.client_context() if self.tls is not None else None)
        if self._verify_with is not None:
            await self._verify_container_count(self.client, self._verify_with)
        store = MetadataStore(TableSegmentKeyValueStore(self.client))
        self.context = ControllerContext(store, self.client, self.locator, self._now_ms, self.settings,
                                         self.fault_points, report_reads=self.report_reads)
        if self.cluster is not None:
            self.context.coordination = self.cluster
        try:
            await store.initialize()
            self.transactions = TransactionService(self.context, settings=self.transaction_settings)
            self.services = ControllerServices(self.context, self.transactions.abort_open_transaction)
            await self.transactions.start()  # first: a re-driven scale may wait for a commit to finish
            self.pending_workflows_at_start = await self.services.start()
            servicer = ControllerServicer(self.services, self.transactions,
                                          bucket_mapping=self.context.coordination.bucket_mapping)
            servicer.security = self.security
            self.server, self.port = await start_grpc_server(
                servicer, self.host, self.port, self.security,
                self.tls.server_pair() if self.tls is not None else None,
                self.cluster.cut_off if self.cluster is not None else None)
            if self.cluster is not None:
                await self.cluster.register(self._advertised_host, self.port)
                servicer.advertised_endpoints = self.cluster.controller_endpoints
            else:
                own = ((self._advertised_host, self.port),)
                servicer.advertised_endpoints = lambda: own
            if self.rest_port is not None:
                self.rest = RestServer(self.services, self.transactions, self.describe_cluster, self.host,
                                       self.rest_port, security=self.security,
                                       ssl_context=self.tls.server_context() if self.tls is not None else None)
                self.rest_port = await self.rest.start()
        except BaseException:
            await self._stop_parts()
            raise
        log.info("controller listening", extra={"host": self.host, "port": self.port,
                                                "pending_workflows": self.pending_workflows_at_start})

    async def _verify_container_count(self, client: SegmentStoreClient, endpoint: Endpoint) -> None:
        """Container ``count - 1`` must run on the store and container ``count`` must not."""
        count = self.locator.container_count
        try:
            matches = (await client.runs_container(endpoint, count - 1)
                       and not await client.runs_container(endpoint, count))
        except BaseException:
            await self._stop_parts()
            raise
        if not matches:
            await self._stop_parts()
            raise ContainerCountMismatch(f"--containers {count} does not match the segment store at "
                                         f"{endpoint[0]}:{endpoint[1]} (give both the same count)")

    async def describe_cluster(self) -> dict:
        """Where containers run, and the controllers (for the REST API and the console)."""
        count = self.locator.container_count
        if self.cluster is None:
            host, port = self.locator.endpoint_for_container(0)
            return {"containerCount": count, "segmentStores": [{"address": f"{host}:{port}",
                                                                "containers": list(range(count))}],
                    "controllers": [{"address": f"{self._advertised_host}:{self.port}", "leader": True}]}
        owners = self.cluster.container_map.owners
        return {"containerCount": count,
                "segmentStores": [{"address": store, "containers": sorted(c for c, owner in owners.items()
                                                                          if owner == store)}
                                  for store in self.cluster.segment_stores],
                "controllers": [{"address": f"{host}:{port}"} for host, port in self.cluster.controller_endpoints()]}

    async def stop(self) -> None:
        """Stops serving, then the background work (pending intents stay for the next controller)."""
        if self.cluster is not None:
            self.cluster.begin_shutdown()
        if self.rest is not None:
            await self.rest.stop()
            self.rest = None
        if self.server is not None:
            await self.server.stop(SHUTDOWN_GRACE_SECONDS)
            self.server = None
        await self._stop_parts()

    def _session_lost(self) -> None:
        """Our leases are gone, and another controller may be running our work: stop ours, start afresh."""
        if self._restarting is None or self._restarting.done():
            self._restarting = asyncio.get_running_loop().create_task(self._restart_work(), name="restart work")

    async def _restart_work(self) -> None:
        if self.services is None or self.transactions is None:
            return
        await self.transactions.stop()
        await self.services.stop()
        await self.transactions.start()
        await self.services.start()
        log.info("controller work restarted under a new ZooKeeper session")

    async def _stop_parts(self) -> None:
        if self._restarting is not None:
            self._restarting.cancel()
            await asyncio.gather(self._restarting, return_exceptions=True)
        if self.transactions is not None:
            try:
                await self.transactions.stop()
            except Exception as error:  # noqa: BLE001 - stopping must go on
                log.warning("transaction service did not stop cleanly", extra={"error": repr(error)})
            self.transactions = None
        if self.services is not None:
            await self.services.stop()
            self.services = None
        if self.client is not None:
            await self.client.close()
            self.client = None
        if self.report_reads is not None:
            await self.report_reads.close()
            self.report_reads = None
        if self.cluster is not None:
            await self.cluster.stop()


__all__ = ["ContainerCountMismatch", "ControllerApp", "GrpcStartupError"]
