"""Conformance suite, part 1: the VersionedKeyValueStore contract (habit 9: one suite, every implementation).

Subclass ``KeyValueConformance`` in a test module and give it a ``kv`` fixture yielding a fresh,
empty store. test_conformance.py runs it in memory; tests/integration/test_table_metadata_store.py
runs it against table segments on a real segment store.
"""

from __future__ import annotations

import asyncio

import pytest

from controller.store import (ABSENT, ANY, AlreadyExists, NotFound, RecordTooLarge, VersionedKeyValueStore, Write,
                              WriteConflict)
from controller.store.key_value import KEY_BYTES_MAX, VALUE_BYTES_MAX

TABLE = "_system/_tables/conformance"


async def all_entries(kv: VersionedKeyValueStore, table: str, page_size: int) -> list[str]:
    """Every key, by paging with tokens; checks page sizes and that the listing terminates."""
    keys, token = [], b""
    for _ in range(10_000):
        page = await kv.list_entries(table, token, page_size)
        assert len(page.entries) <= page_size
        if not page.entries:
            assert page.token == b""
            return keys
        keys += [key for key, _ in page.entries]
        token = page.token
    raise AssertionError("the listing did not end")


class KeyValueConformance:
    async def test_tables_are_created_and_deleted_idempotently(self, kv):
        """create_table/delete_table report whether they did anything; a deleted table's keys are gone."""
        assert await kv.create_table(TABLE) is True
        assert await kv.create_table(TABLE) is False
        await kv.put(TABLE, "k", b"v")
        assert await kv.delete_table(TABLE) is True
        assert await kv.delete_table(TABLE) is False
        assert await kv.create_table(TABLE) is True
        assert await kv.get_many(TABLE, ["k"]) == [None]

    async def test_every_operation_on_a_missing_table_raises_not_found(self, kv):
        """Reads, writes, removals and listings of a table that does not exist raise NotFound."""
        for call in (kv.get_many(TABLE, ["k"]), kv.get(TABLE, "k"), kv.put(TABLE, "k", b"v"),
                     kv.remove(TABLE, "k"), kv.list_entries(TABLE)):
            with pytest.raises(NotFound):
                await call

    async def test_create_then_get_and_create_again_conflicts(self, kv):
        """A created key reads back with its version; creating it again is AlreadyExists (a WriteConflict)."""
        await kv.create_table(TABLE)
        version = await kv.create(TABLE, "key", b"value")
        assert version >= 0
        assert await kv.get(TABLE, "key") == (version, b"value")
        with pytest.raises(AlreadyExists):
            await kv.create(TABLE, "key", b"other")
        with pytest.raises(WriteConflict):
            await kv.create(TABLE, "key", b"other")
        assert await kv.get(TABLE, "key") == (version, b"value")

    async def test_replace_is_compare_and_swap(self, kv):
        """replace succeeds only at the current version, and versions grow with every write."""
        await kv.create_table(TABLE)
        first = await kv.create(TABLE, "key", b"1")
        second = await kv.replace(TABLE, "key", b"2", first)
        assert second > first
        with pytest.raises(WriteConflict) as raised:
            await kv.replace(TABLE, "key", b"3", first)
        assert not isinstance(raised.value, AlreadyExists)
        assert await kv.get(TABLE, "key") == (second, b"2")
        with pytest.raises(NotFound):
            await kv.replace(TABLE, "missing", b"x", first)
        third = await kv.put(TABLE, "key", b"4")
        assert third > second and (await kv.get(TABLE, "key")).value == b"4"

    async def test_get_of_missing_key_raises_and_get_many_keeps_order(self, kv):
        """get raises NotFound for an absent key; get_many answers None there, in the order asked."""
        await kv.create_table(TABLE)
        with pytest.raises(NotFound):
            await kv.get(TABLE, "absent")
        versions = await kv.write_batch(TABLE, [Write("a", b"A"), Write("b", b"B")])
        found = await kv.get_many(TABLE, ["b", "absent", "a"])
        assert found == [(versions[1], b"B"), None, (versions[0], b"A")]

    async def test_a_batch_is_all_or_nothing(self, kv):
        """One failed condition in a batch writes none of its entries."""
        await kv.create_table(TABLE)
        version = await kv.create(TABLE, "held", b"0")
        with pytest.raises(WriteConflict):
            await kv.write_batch(TABLE, [Write("new", b"1", ABSENT), Write("held", b"1", version + 1000)])
        assert await kv.get_many(TABLE, ["new", "held"]) == [None, (version, b"0")]
        versions = await kv.write_batch(TABLE, [Write("new", b"1", ABSENT), Write("held", b"1", version)])
        assert [found.value for found in await kv.get_many(TABLE, ["new", "held"])] == [b"1", b"1"]
        assert len(set(versions)) == 2

    async def test_conflict_errors_are_typed_with_a_fixed_precedence(self, kv):
        """A versioned write to a missing key is NotFound, even next to a failing create; a failing
        create is AlreadyExists even next to a version mismatch."""
        await kv.create_table(TABLE)
        version = await kv.create(TABLE, "present", b"x")
        with pytest.raises(NotFound):
            await kv.write_batch(TABLE, [Write("present", b"y", ABSENT), Write("missing", b"y", version)])
        with pytest.raises(AlreadyExists):
            await kv.write_batch(TABLE, [Write("other", b"y", ABSENT), Write("present", b"y", ABSENT)])
        await kv.create(TABLE, "second", b"x")
        with pytest.raises(AlreadyExists):
            await kv.write_batch(TABLE, [Write("present", b"y", version + 1000), Write("second", b"y", ABSENT)])

    async def test_removal_semantics(self, kv):
        """Unconditional removal of an absent key is a no-op; versioned removal checks the version;
        a removed key can be created again."""
        await kv.create_table(TABLE)
        await kv.remove(TABLE, "absent")
        with pytest.raises(NotFound):
            await kv.remove(TABLE, "absent", 5)
        version = await kv.create(TABLE, "key", b"v")
        with pytest.raises(WriteConflict):
            await kv.remove(TABLE, "key", version + 1000)
        await kv.remove(TABLE, "key", version)
        with pytest.raises(NotFound):
            await kv.get(TABLE, "key")
        assert await kv.create(TABLE, "key", b"again") > version
        await kv.remove_batch(TABLE, [("key", ANY), ("absent", ANY)])
        assert await kv.get_many(TABLE, ["key"]) == [None]

    async def test_listing_pages_through_every_key_once(self, kv):
        """Paging with tokens returns every live key exactly once, pages no larger than asked,
        and ends with an empty page and an empty token."""
        await kv.create_table(TABLE)
        assert await all_entries(kv, TABLE, 5) == []
        keys = [f"key-{number}" for number in range(23)]
        await kv.write_batch(TABLE, [Write(key, key.encode()) for key in keys])
        await kv.remove(TABLE, "key-7")
        listed = await all_entries(kv, TABLE, 5)
        assert sorted(listed) == sorted(set(keys) - {"key-7"}) and len(listed) == len(set(listed))
        page = await kv.list_entries(TABLE, b"", 100)
        assert {key: value.value for key, value in page.entries} == {key: key.encode() for key in listed}

    async def test_listing_survives_writes_between_pages(self, kv):
        """Keys present throughout a listing are all returned once even if others change between pages."""
        await kv.create_table(TABLE)
        await kv.write_batch(TABLE, [Write(f"stable-{number}", b"s") for number in range(12)])
        seen, token = [], b""
        for round_number in range(100):
            page = await kv.list_entries(TABLE, token, 4)
            if not page.entries:
                break
            seen += [key for key, _ in page.entries]
            token = page.token
            await kv.put(TABLE, f"churn-{round_number}", b"c")
            await kv.put(TABLE, "stable-0", b"rewritten")
        stable = [key for key in seen if key.startswith("stable-")]
        assert sorted(stable) == sorted(f"stable-{number}" for number in range(12))

    async def test_concurrent_read_modify_write_loses_no_update(self, kv):
        """Twenty tasks incrementing one counter with CAS and retry-on-conflict end at twenty."""
        await kv.create_table(TABLE)
        await kv.create(TABLE, "counter", b"0")
        conflicts = 0

        async def increment():
            nonlocal conflicts
            while True:
                found = await kv.get(TABLE, "counter")
                await asyncio.sleep(0)
                try:
                    await kv.replace(TABLE, "counter", str(int(found.value) + 1).encode(), found.version)
                    return
                except WriteConflict:
                    conflicts += 1

        await asyncio.gather(*(increment() for _ in range(20)))
        assert (await kv.get(TABLE, "counter")).value == b"20"
        assert conflicts > 0  # the tasks really raced

    async def test_limits_and_programmer_errors(self, kv):
        """Over-long keys and values are RecordTooLarge; a key twice in one batch is a ValueError."""
        await kv.create_table(TABLE)
        with pytest.raises(RecordTooLarge):
            await kv.put(TABLE, "k" * (KEY_BYTES_MAX + 1), b"v")
        with pytest.raises(RecordTooLarge):
            await kv.put(TABLE, "k", b"v" * (VALUE_BYTES_MAX + 1))
        with pytest.raises(ValueError):
            await kv.write_batch(TABLE, [Write("k", b"1"), Write("k", b"2")])
        await kv.put(TABLE, "k" * KEY_BYTES_MAX, b"v" * VALUE_BYTES_MAX)
        assert len((await kv.get(TABLE, "k" * KEY_BYTES_MAX)).value) == VALUE_BYTES_MAX
