"""The metadata-store conformance suite against table segments on a REAL segment store started
in-process (the controller keeps all its state there). The in-memory store runs the same suite in
tests/unit/controller_store/test_conformance.py."""

from __future__ import annotations

import pytest

from clients.segment_store_client import SegmentStoreClient
from controller.store import TableSegmentKeyValueStore
from tests.support.controller_harness import start_segment_store
from tests.unit.controller_store.conformance_key_value import KeyValueConformance
from tests.unit.controller_store.conformance_records import RecordConformance
from tests.unit.controller_store.conformance_streams import StreamConformance


@pytest.fixture
async def kv(tmp_path):
    service = start_segment_store(tmp_path, container_count=2)
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
