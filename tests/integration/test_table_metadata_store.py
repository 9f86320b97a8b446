"""The metadata-store conformance suite against every implementation, including table segments on
a REAL segment store started in-process (the controller keeps all its state there)."""

from __future__ import annotations

import pytest

from clients.segment_store_client import SegmentStoreClient
from controller.store import InMemoryKeyValueStore, TableSegmentKeyValueStore
from server.config import SegmentStoreConfig
from server.service import SegmentStoreService
from tests.unit.controller_store.conformance_key_value import KeyValueConformance
from tests.unit.controller_store.conformance_records import RecordConformance
from tests.unit.controller_store.conformance_streams import StreamConformance


@pytest.fixture(params=["memory", "table_segment"])
async def kv(request, tmp_path):
    if request.param == "memory":
        yield InMemoryKeyValueStore()
        return
    service = SegmentStoreService(SegmentStoreConfig(data_dir=tmp_path, port=0, container_count=2,
                                                     log_file_size=16 << 20))
    await service.start()
    client = SegmentStoreClient(("127.0.0.1", service.port))
    try:
        yield TableSegmentKeyValueStore(client)
    finally:
        await client.close()
        await service.stop()


class TestKeyValueConformance(KeyValueConformance):
    pass


class TestStreamConformance(StreamConformance):
    pass


class TestRecordConformance(RecordConformance):
    pass
