"""The client: the entry point of the SDK (``tributary.connect``).

A :class:`Client` holds one controller channel and the segment-store endpoint
cache; everything else (writers, readers, reader groups, byte streams) is made
from it and owns its own sockets. Stream management lives on the client itself
(:class:`~clients.stream_manager.StreamManagement`), reader-group management in
:class:`~clients.reader.reader_group.ReaderGroupManagement`.
"""

from __future__ import annotations

import weakref
from typing import Protocol, TypeVar

from .batch import BatchClient
from .byte_stream import ByteStreamReader, ByteStreamWriter
from .config import ClientConfig, ReaderConfig, WriterConfig
from .controller_client import ControllerClient
from .errors import ClosedError
from .kvt.management import KeyValueTableManagement
from .reader.reader_group import ReaderGroupManagement
from .security import tls_context
from .segment_store_client import SegmentStoreClient
from .segment_stores import SegmentStores
from .serializers import Serializer
from .stream_manager import StreamManagement
from .writer.event_writer import EventWriter
from .writer.transactions import TransactionalWriter


class _Closeable(Protocol):
    async def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closeable)


class Client(StreamManagement, ReaderGroupManagement, KeyValueTableManagement):
    """A connection to a Tributary (or Pravega) cluster, named by its controller URI.

    Use ``async with tributary.connect("tcp://127.0.0.1:9090") as client:``. The
    client connects lazily: the first call reaches the controller.
    """

    def __init__(self, controller_uri: str, config: ClientConfig | None = None):
        self.config = config or ClientConfig()
        self.controller_uri = controller_uri
        self._controller = ControllerClient(controller_uri, retry_policy=self.config.controller_retry,
                                            rpc_timeout_seconds=self.config.controller_rpc_timeout_seconds,
                                            credentials=self.config.credentials, tls_trust=self.config.tls_trust)
        self._stores = SegmentStores(self._controller, cache_seconds=self.config.endpoint_cache_seconds,
                                     request_timeout=self.config.request_timeout_seconds,
                                     connect_timeout=self.config.connect_timeout_seconds,
                                     keepalive_seconds=self.config.keepalive_seconds,
                                     retry_policy=self.config.segment_store_retry,
                                     ssl_context=tls_context(self.config.tls_trust) if self._controller.tls else None,
                                     authenticated=self.config.credentials is not None)
        self._closed = False
        self._children: weakref.WeakSet[_Closeable] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"<Client {self.controller_uri}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> Client:
        self._controller.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every writer and reader made from this client, then the client's own connections."""
        if self._closed:
            return
        self._closed = True
        for child in list(self._children):
            try:
                await child.close()
            except Exception:  # noqa: BLE001 - closing must go on; the child already reported its failure
                pass
        await self._stores.close()
        await self._controller.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"client of {self.controller_uri} is closed")

    def _adopt(self, child: _C) -> _C:

        self._children.add(child)
        return child

    @property
    def segment_store(self) -> SegmentStoreClient:
        """Raw segment and table-segment calls (for tools built on the SDK that keep their own tables)."""
        self._check_open()
        return self._stores.raw

    # ------------------------------------------------------------------ writers

    def create_writer(self, scope: str, stream: str, config: WriterConfig | None = None,
                      serializer: Serializer | None = None) -> EventWriter:
        """An event writer of ``scope/stream`` (starts on ``async with`` or on the first write)."""
        self._check_open()
        return self._adopt(EventWriter(self._controller, self._stores, scope, stream, config, serializer))

    def create_transactional_writer(self, scope: str, stream: str, config: WriterConfig | None = None,
                                    serializer: Serializer | None = None) -> TransactionalWriter:
        """A writer of transactions on ``scope/stream`` (``txn = await writer.begin()``)."""
        self._check_open()
        return self._adopt(TransactionalWriter(self._controller, self._stores, scope, stream, config, serializer))

    def create_batch_client(self, config: ReaderConfig | None = None) -> BatchClient:
        """Splits streams into segment slices between two cuts and reads them (``clients.batch``)."""
        self._check_open()
        return BatchClient(self._controller, self._stores, (config or ReaderConfig()).read_size_bytes)

    # ------------------------------------------------------------------ byte streams

    def create_byte_writer(self, scope: str, stream: str, config: WriterConfig | None = None) -> ByteStreamWriter:
        """A writer of the byte stream ``scope/stream`` (a one-segment stream of raw bytes), appending at its tail."""
        self._check_open()
        return self._adopt(ByteStreamWriter(self._controller, self._stores, scope, stream, config=config))

    def create_byte_reader(self, scope: str, stream: str, buffer_size: int = 1024 * 1024) -> ByteStreamReader:
        """A reader of the byte stream ``scope/stream``, from its head."""
        self._check_open()
        return self._adopt(ByteStreamReader(self._controller, self._stores, scope, stream, buffer_size=buffer_size))


def connect(controller_uri: str = "tcp://127.0.0.1:9090", config: ClientConfig | None = None) -> Client:
    """A :class:`Client` of the cluster whose controller listens at ``controller_uri``.

    Use it as ``async with tributary.connect(uri) as client:``.

    Raises:
        InvalidArgument: the URI is not ``tcp://host:port``.
    """
    return Client(controller_uri, config)


__all__ = ["Client", "connect", "ReaderConfig"]
