"""The clients' raw segment and table-segment calls against the real segment store: typed errors,
idempotent create/seal/delete, conditional table updates, paging, reconnect after a lost connection."""

from __future__ import annotations

import pytest

from clients import errors
from clients.segment_store_client import SegmentStoreClient
from wire.constants import NO_VERSION, NOT_EXISTS
from tests.support.segment_store import running_segment_store

TABLE = "_system/_tables/test"
SEGMENT = "client/test/0.#epoch.0"


@pytest.fixture
async def client(tmp_path):
    async with running_segment_store(tmp_path) as service:
        client = SegmentStoreClient(("127.0.0.1", service.port))
        yield client
        await client.close()


async def test_segment_calls(client):
    """create is idempotent (False the second time), seal tolerates a sealed segment, delete reports
    absence, info reflects state, errors are typed."""
    assert await client.create_segment(SEGMENT) is True
    assert await client.create_segment(SEGMENT) is False
    await client.seal_segment(SEGMENT)
    await client.seal_segment(SEGMENT)
    info = await client.segment_info(SEGMENT)
    assert info.is_sealed and info.write_offset == 0
    with pytest.raises(errors.NoSuchSegment):
        await client.segment_info("client/test/9.#epoch.0")
    assert await client.delete_segment(SEGMENT) is True
    assert await client.delete_segment(SEGMENT) is False


async def test_table_calls(client):
    """Conditional updates succeed on matching versions and raise typed errors otherwise; reads and
    paging see exactly the live entries."""
    assert await client.create_table(TABLE) is True
    (version,) = await client.update_table(TABLE, [(b"a", NOT_EXISTS, b"1")])
    with pytest.raises(errors.TableKeyBadVersion):
        await client.update_table(TABLE, [(b"a", NOT_EXISTS, b"2")])
    with pytest.raises(errors.TableKeyDoesNotExist):
        await client.update_table(TABLE, [(b"zzz", 5, b"2")])
    (new_version,) = await client.update_table(TABLE, [(b"a", version, b"2")])
    assert new_version > version
    await client.update_table(TABLE, [(f"k{n}".encode(), NO_VERSION, b"v") for n in range(25)])
    assert await client.read_table(TABLE, [b"a", b"missing"]) == [(new_version, b"2"), None]
    await client.remove_table_keys(TABLE, [(b"k0", NO_VERSION)])
    keys = sorted([key async for key, _, _ in client.table_entries(TABLE, page_size=7)])
    assert keys == sorted([b"a"] + [f"k{n}".encode() for n in range(1, 25)])
    with pytest.raises(errors.TableNotEmpty):
        await client.delete_table(TABLE, must_be_empty=True)
    assert await client.delete_table(TABLE) is True


async def test_reconnects_after_a_lost_connection(client):
    """A dropped connection is re-established transparently on the next call."""
    await client.create_segment(SEGMENT)
    (connection,) = client._connections._connections.values()
    await connection.close()
    assert (await client.segment_info(SEGMENT)).write_offset == 0
