"""Fixed-key-length table segments (the layout of key-value tables) over the wire: CreateTableSegment's key
length is kept (TableSegmentInfo reports it, across a restart), keys of any other length are refused, and
iteration is in key order with the prefix and the key range asked for; a hash table refuses a range."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients.connection import WireConnection, next_request_id
from server.containers.table import TableIndex, serialize_removal, serialize_update
from server.errors import IllegalArgument
from tests.support.segment_store import running_segment_store
from wire import commands as c
from wire.constants import NO_VERSION

TABLE = "scope/kvt_kvtable/0.#epoch.0"
HASH_TABLE = "scope/rg_kvtable/0.#epoch.0"


def rid() -> int:
    return next_request_id()


async def page_all(connection, request_type, reply_field, name, **bounds) -> list[bytes]:
    seen, token = [], b""
    while True:
        page = await connection.request(request_type(rid(), name, "", 3, token, bounds.get("prefix", b""),
                                                     bounds.get("low", b""), bounds.get("high", b"")))
        items = getattr(page, reply_field)
        if not items:
            assert bytes(page.continuation_token) == b""
            return seen
        seen += [bytes(item.key) for item in items]
        token = bytes(page.continuation_token)


async def test_a_fixed_key_table_over_the_wire_and_across_a_restart(tmp_path):
    keys = [bytes([a, b]) + b"xx" for a in (1, 2, 3) for b in (0, 5, 9)]
    async with running_segment_store(tmp_path) as store:
        connection = await WireConnection.connect("127.0.0.1", store.port)
        assert isinstance(await connection.request(c.CreateTableSegment(rid(), TABLE, "", False, 4)),
                          c.SegmentCreated)
        await connection.request(c.UpdateTableEntries(rid(), TABLE, "",
                                                      [c.TableEntry(k, NO_VERSION, b"v" + k) for k in reversed(keys)]))
        info = await connection.request(c.GetTableSegmentInfo(rid(), TABLE, ""))
        assert (info.key_length, info.entry_count) == (4, 9)
        for bad in (c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"short", NO_VERSION, b"v")]),
                    c.RemoveTableKeys(rid(), TABLE, "", [c.TableKey(b"abc", NO_VERSION)]),
                    c.ReadTable(rid(), TABLE, "", [c.TableKey(b"toolong", NO_VERSION)])):
            reply = await connection.request(bad)
            assert isinstance(reply, c.ErrorMessage) and "4 bytes" in reply.message, reply
        assert await page_all(connection, c.ReadTableKeys, "keys", TABLE) == keys  # in key order
        assert await page_all(connection, c.ReadTableEntries, "entries", TABLE, prefix=b"\x02") == keys[3:6]
        assert await page_all(connection, c.ReadTableKeys, "keys", TABLE,
                              low=b"\x01\x05xx", high=b"\x03\x00xx") == keys[1:7]
        assert await page_all(connection, c.ReadTableKeys, "keys", TABLE, low=b"\x02\x06\x00\x00") == keys[5:]
        assert isinstance(await connection.request(c.CreateTableSegment(rid(), HASH_TABLE, "")), c.SegmentCreated)
        assert (await connection.request(c.GetTableSegmentInfo(rid(), HASH_TABLE, ""))).key_length == 0
        refused = await connection.request(c.ReadTableKeys(rid(), HASH_TABLE, "", 10, b"", b"", b"a", b"b"))
        assert isinstance(refused, c.ErrorMessage)
        bad_length = await connection.request(c.CreateTableSegment(rid(), "scope/x/0.#epoch.0", "", False, -1))
        assert isinstance(bad_length, c.ErrorMessage)
        await connection.close()
    async with running_segment_store(tmp_path) as store:  # recovered from the log: still a fixed-key table
        connection = await WireConnection.connect("127.0.0.1", store.port)
        assert (await connection.request(c.GetTableSegmentInfo(rid(), TABLE, ""))).key_length == 4
        assert await page_all(connection, c.ReadTableKeys, "keys", TABLE, prefix=b"\x03") == keys[6:]
        await connection.close()


KEY = st.binary(min_size=3, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(present=st.sets(KEY, max_size=40), removed=st.sets(KEY, max_size=10), prefix=st.binary(max_size=2),
       low=st.one_of(st.just(b""), KEY), high=st.one_of(st.just(b""), KEY), page_size=st.integers(1, 7))
def test_pages_of_a_fixed_key_index_are_the_model_slice(present, removed, prefix, low, high, page_size):
    """Paging a fixed-key-length index with any prefix and range returns exactly the sorted keys the model
    selects, each once, whatever the page size, after removals."""
    index = TableIndex(key_length=3)
    offset = 0
    for key in sorted(present | removed):
        record = b"".join(serialize_update(key, b"value"))
        index.index_batch(record, offset)
        offset += len(record)
    for key in removed - present:
        record = b"".join(bytes(part) for part in serialize_removal(key))
        index.index_batch(record, offset)
        offset += len(record)
    expected = sorted(key for key in present if key.startswith(prefix) and (not low or key >= low)
                      and (not high or key <= high))
    seen, token = [], b""
    while True:
        entries, token = index.page(token, page_size, 1 << 20, prefix, low, high)
        if not entries:
            assert token == b""
            break
        seen += [entry.key for entry in entries]
    assert seen == expected


def test_a_hash_index_filters_by_prefix_and_refuses_a_range():
    index = TableIndex()
    offset = 0
    for key in (b"apple", b"apricot", b"banana"):
        record = b"".join(serialize_update(key, b"v"))
        index.index_batch(record, offset)
        offset += len(record)
    entries, _ = index.page(b"", 10, 1 << 20, b"ap")
    assert sorted(entry.key for entry in entries) == [b"apple", b"apricot"]
    with pytest.raises(IllegalArgument):
        index.page(b"", 10, 1 << 20, b"", b"a", b"b")
