"""The controller process: metadata store over the segment stores' table segments, services,
transaction service, gRPC server, and their lifecycle.

Start order: connect the metadata store (``TableSegmentKeyValueStore`` over a
``SegmentStoreClient`` routed by the locator) and create its global tables; start the transaction
service (it re-drives its own commits and aborts); re-drive every pending workflow intent left by
a previous controller; then serve gRPC. The controller keeps no state of its own, so any
number of restarts over the same segment stores see the same streams.
"""

from __future__ import annotations

import logging
import uuid
from typing import Callable

from clients.segment_store_client import SegmentStoreClient

from .endpoints import Endpoint, SegmentLocator
from .grpc_api import controller_pb2 as pb
from .grpc_server import DEFAULT_PORT, GrpcStartupError, start_grpc_server
from .grpc_service import ControllerServicer
from .service.context import ControllerContext, ServiceSettings, wall_clock_ms
from .service.fault_points import FaultPoints
from .service.services import ControllerServices
from .store import MetadataStore, TableSegmentKeyValueStore

log = logging.getLogger("tributary.controller")
SHUTDOWN_GRACE_SECONDS = 2.0
TRANSACTIONS_MODULE = "controller.service.transactions"


def load_transaction_service_type():
    """``TransactionService`` if its module is present, else None (the transaction RPCs then say UNIMPLEMENTED).

    Raises:
        ImportError: the module exists but fails to import (a bug, not an absence).
    """
    try:
        from .service.transactions import TransactionService
    except ModuleNotFoundError as error:
        if error.name != TRANSACTIONS_MODULE:
            raise
        return None
    return TransactionService


def _signed_64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def transaction_id_message(transaction_id: uuid.UUID) -> pb.TxnId:
    """A txn UUID as the wire's (highBits, lowBits), both signed 64-bit."""
    return pb.TxnId(highBits=_signed_64(transaction_id.int >> 64),
                    lowBits=_signed_64(transaction_id.int & ((1 << 64) - 1)))


class ControllerApp:
    """One controller. ``segment_store`` (all containers on one store) or ``locator`` says where segments live."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, segment_store: Endpoint | None = None,
                 locator: SegmentLocator | None = None, container_count: int = 4,
                 settings: ServiceSettings = ServiceSettings(), fault_points: FaultPoints | None = None,
                 now_ms: Callable[[], int] = wall_clock_ms, advertised_host: str | None = None,
                 transactions_enabled: bool = True):
        if (segment_store is None) == (locator is None):
            raise ValueError("give exactly one of segment_store and locator")
        self.host = host
        self.port = port
        self.locator = locator or SegmentLocator.single_host(container_count, segment_store)
        self.settings = settings
        self.fault_points = fault_points or FaultPoints()
        self._now_ms = now_ms
        self._advertised_host = advertised_host or host
        self._transactions_enabled = transactions_enabled
        self.client: SegmentStoreClient | None = None
        self.context: ControllerContext | None = None
        self.services: ControllerServices | None = None
        self.transactions = None
        self.server = None
        self.pending_workflows_at_start = 0

    async def start(self) -> None:
        """Connects, re-drives pending workflows and starts serving.

        Raises:
            GrpcStartupError: the gRPC port is busy or not available (everything started is stopped).
            clients.errors.ClientError: the segment store cannot be reached.
        """
        self.client = SegmentStoreClient(self.locator.endpoint_for)
        store = MetadataStore(TableSegmentKeyValueStore(self.client))
        self.context = ControllerContext(store, self.client, self.locator, self._now_ms, self.settings,
                                         self.fault_points)
        try:
            await store.initialize()
            transaction_type = load_transaction_service_type() if self._transactions_enabled else None
            if transaction_type is not None:
                self.transactions = transaction_type(self.context)
            self.services = ControllerServices(self.context, self._abort if self.transactions else None)
            if self.transactions is not None:  # first: a re-driven scale may wait for a commit to finish
                await self.transactions.start()
            self.pending_workflows_at_start = await self.services.start()
            servicer = ControllerServicer(self.services, self.transactions)
            self.server, self.port = await start_grpc_server(servicer, self.host, self.port)
            servicer.advertised_endpoints = ((self._advertised_host, self.port),)
        except BaseException:
            await self._stop_parts()
            raise
        log.info("controller listening", extra={"host": self.host, "port": self.port,
                                                "pending_workflows": self.pending_workflows_at_start})

    async def _abort(self, scope: str, stream: str, transaction_id: uuid.UUID) -> None:
        """Sealing's way to abort an open transaction: through the transaction service (its own
        ``abort_open_transaction`` if it has one, else the abortTransaction RPC's method)."""
        abort_open = getattr(self.transactions, "abort_open_transaction", None)
        if abort_open is not None:
            await abort_open(scope, stream, transaction_id)
            return
        await self.transactions.abort_transaction(pb.TxnRequest(
            streamInfo=pb.StreamInfo(scope=scope, stream=stream), txnId=transaction_id_message(transaction_id)))

    async def stop(self) -> None:
        """Stops serving, then the background work (pending intents stay for the next controller)."""
        if self.server is not None:
            await self.server.stop(SHUTDOWN_GRACE_SECONDS)
            self.server = None
        await self._stop_parts()

    async def _stop_parts(self) -> None:
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


__all__ = ["ControllerApp", "GrpcStartupError", "load_transaction_service_type", "transaction_id_message"]
