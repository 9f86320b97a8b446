"""Runs the metadata-store conformance suite in memory: the plain in-memory store and the same
store behind the call-counting proxy (which must be indistinguishable from what it wraps).

The table-segment implementation runs the same suite in tests/integration/test_table_metadata_store.py.
"""

from __future__ import annotations

import pytest

from controller.store import CountingKeyValueStore
from tests.support.doubles.key_value_store import InMemoryKeyValueStore

from .conformance_key_value import KeyValueConformance
from .conformance_records import RecordConformance
from .conformance_streams import StreamConformance

FACTORIES = {
    "memory": InMemoryKeyValueStore,
    "counting(memory)": lambda: CountingKeyValueStore(InMemoryKeyValueStore()),
}


@pytest.fixture(params=sorted(FACTORIES))
def kv(request):
    return FACTORIES[request.param]()


class TestKeyValueConformance(KeyValueConformance):
    pass


class TestStreamConformance(StreamConformance):
    pass


class TestRecordConformance(RecordConformance):
    pass
