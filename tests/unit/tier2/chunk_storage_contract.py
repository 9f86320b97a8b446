"""The ChunkStorage contract suite: the rules of ``server/tier2/chunk_storage.py``, for every store.

Subclass ``ChunkStorageContract`` in a test module and provide two fixtures:

* ``make_storage``: a callable ``make_storage(namespace="main")`` returning a new instance on an
  empty store of its own for each namespace, usable from any event loop (the model test calls it
  inside ``asyncio.run``);
* ``storage``: ``make_storage()``, closed after the test.

Capabilities are honoured: a store without append is checked to refuse ``create``/``write``, and
fills chunks with ``create_with_content`` instead.
"""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.tier2.chunk_storage import (ChunkAlreadyExists, ChunkNotFound, ChunkReadOnly, ChunkStorage,
                                        InvalidOffset, NotSupported)

MODEL_EXAMPLES = 30
LIST_NAMES = ["scope/stream/0.#epoch.0.E-3-O-1048576.0123456789abcdef0123456789abcdef",
              "scope/stream/1.E-1-O-0.ff", "scope/stream2/0.E-1-O-0.aa", "scope/s", "scope",
              "_system/containers/2/journal.E-3.17", "a/b", "a/b/c", "a/bc", "ünïcødé/流/セグメント", "z"]
LONG_NAMES = ["long/" + "x" * 300 + "/" + "y" * 500, "long/" + "x" * 300, "long/" + "é" * 400]


async def fill(storage: ChunkStorage, name: str, data: bytes) -> None:
    """Creates ``name`` holding ``data`` the way SLTS would on this store."""
    if storage.supports_append:
        await storage.create(name)
        await storage.write(name, 0, data)
    else:
        await storage.create_with_content(name, data)


async def content(storage: ChunkStorage, name: str) -> bytes:
    return await storage.read(name, 0, (await storage.get_info(name)).length)


def needs_append(storage: ChunkStorage) -> None:
    if not storage.supports_append:
        pytest.skip("the store cannot append")


class ChunkStorageContract:
    # ------------------------------------------------------------------ create / exists / get_info

    async def test_create_makes_an_empty_chunk(self, storage):
        """create makes a zero-length, writable chunk; stores without append refuse it."""
        if not storage.supports_append:
            with pytest.raises(NotSupported):
                await storage.create("a")
            assert not await storage.exists("a")
            return
        assert await storage.create("a") is None
        assert await storage.exists("a")
        info = await storage.get_info("a")
        assert (info.name, info.length, info.read_only) == ("a", 0, False)
        assert await storage.read("a", 0, 10) == b""

    async def test_create_with_content_stores_parts_back_to_back(self, storage):
        """Parts of any bytes-like type are concatenated; the return value is the length."""
        parts = [b"ab", bytearray(b"cd"), memoryview(b"ef"), b"", memoryview(b"xgh")[1:]]
        assert await storage.create_with_content("a", parts) == 8
        assert (await storage.get_info("a")).length == 8
        assert await storage.read("a", 0, 100) == b"abcdefgh"
        assert await storage.create_with_content("b", b"single") == 6
        assert await storage.create_with_content("empty", []) == 0
        assert (await storage.get_info("empty")).length == 0

    async def test_creating_an_existing_chunk_fails_and_keeps_it(self, storage):
        await storage.create_with_content("a", b"original")
        with pytest.raises(ChunkAlreadyExists) as raised:
            await storage.create_with_content("a", b"replacement")
        assert raised.value.chunk == "a"
        if storage.supports_append:
            with pytest.raises(ChunkAlreadyExists):
                await storage.create("a")
        assert await content(storage, "a") == b"original"

    # ------------------------------------------------------------------ missing chunks

    @pytest.mark.parametrize("operation", ["get_info", "delete", "read", "write", "set_read_only", "clear_read_only",
                                           "concat_target", "concat_source"])
    async def test_every_operation_on_a_missing_chunk_raises_not_found(self, storage, operation):
        await storage.create_with_content("present", b"data")
        calls = {
            "get_info": lambda: storage.get_info("missing"),
            "delete": lambda: storage.delete("missing"),
            "read": lambda: storage.read("missing", 0, 1),
            "write": lambda: storage.write("missing", 0, b"x"),
            "set_read_only": lambda: storage.set_read_only("missing"),
            "clear_read_only": lambda: storage.set_read_only("missing", False),
            "concat_target": lambda: storage.concat("missing", [("present", 4)]),
            "concat_source": lambda: storage.concat("present", [("missing", 0)]),
        }
        if operation == "write" and not storage.supports_append:
            with pytest.raises(NotSupported):
                await calls[operation]()
            return
        with pytest.raises(ChunkNotFound) as raised:
            await calls[operation]()
        assert raised.value.chunk == "missing"
        assert not await storage.exists("missing")
        assert await content(storage, "present") == b"data"
        assert await storage.list() == ["present"]

    # ------------------------------------------------------------------ write

    async def test_writes_append_and_are_visible_at_once(self, storage):
        needs_append(storage)
        await storage.create("a")
        assert await storage.write("a", 0, b"abc") == 3
        assert (await storage.get_info("a")).length == 3
        assert await storage.write("a", 3, [b"de", bytearray(b"f"), memoryview(b"ghi")]) == 6
        assert await storage.write("a", 9, []) == 0
        assert await storage.write("a", 9, [b"", b"j"]) == 1
        assert (await storage.get_info("a")).length == 10
        assert await storage.read("a", 0, 100) == b"abcdefghij"

    async def test_write_to_a_chunk_created_with_content(self, storage):
        needs_append(storage)
        await storage.create_with_content("a", b"head")
        await storage.write("a", 4, b"+tail")
        assert await content(storage, "a") == b"head+tail"

    @pytest.mark.parametrize("offset", [0, 2, 4, 100])
    async def test_write_at_another_offset_raises_invalid_offset(self, storage, offset):
        needs_append(storage)
        await storage.create("a")
        await storage.write("a", 0, b"abc")
        with pytest.raises(InvalidOffset) as raised:
            await storage.write("a", offset, b"zz")
        assert (raised.value.chunk, raised.value.expected, raised.value.given) == ("a", 3, offset)
        assert await content(storage, "a") == b"abc"

    async def test_stores_without_append_refuse_writes(self, storage):
        if storage.supports_append:
            pytest.skip("the store appends")
        await storage.create_with_content("a", b"abc")
        with pytest.raises(NotSupported):
            await storage.write("a", 3, b"d")
        assert await content(storage, "a") == b"abc"

    # ------------------------------------------------------------------ read

    async def test_reads_return_exactly_what_exists(self, storage):
        await storage.create_with_content("a", b"0123456789")
        assert await storage.read("a", 0, 10) == b"0123456789"
        assert await storage.read("a", 2, 3) == b"234"
        assert await storage.read("a", 7, 100) == b"789"
        assert await storage.read("a", 9, 1) == b"9"
        assert await storage.read("a", 10, 5) == b""
        assert await storage.read("a", 4, 0) == b""
        for offset, length in ((11, 1), (1000, 5), (11, 0)):
            with pytest.raises(ValueError):
                await storage.read("a", offset, length)

    async def test_reads_of_an_empty_chunk(self, storage):
        await storage.create_with_content("empty", b"")
        assert await storage.read("empty", 0, 100) == b""
        assert await storage.read("empty", 0, 0) == b""
        with pytest.raises(ValueError):
            await storage.read("empty", 1, 1)

    async def test_large_chunks_round_trip(self, storage):
        data = bytes(range(256)) * 4096  # 1 MiB
        await storage.create_with_content("big", [data[:300_000], data[300_000:]])
        assert await storage.read("big", 0, len(data)) == data
        assert await storage.read("big", 123_457, 500_000) == data[123_457:623_457]

    async def test_regions_lend_the_bytes_until_released_or_are_not_supported(self, storage):
        data = bytes(range(256)) * 64
        await fill(storage, "lent", data)
        if not storage.supports_regions:
            with pytest.raises(NotSupported):
                await storage.open_region("lent", 0, 10)
            return
        region = await storage.open_region("lent", 1000, 5000)
        assert (region.offset, region.length) == (1000, 5000)
        await storage.delete("lent")  # the lent descriptor still reads the chunk's bytes
        await storage.create_with_content("lent", b"new content")
        assert os.pread(region.fd, region.length, region.offset) == data[1000:6000]
        region.release()
        assert await storage.read("lent", 0, 100) == b"new content"
        with pytest.raises(ChunkNotFound):
            await storage.open_region("missing", 0, 1)

    # ------------------------------------------------------------------ read-only

    async def test_read_only_chunks_refuse_writes_and_concat_but_not_reads_or_delete(self, storage):
        await fill(storage, "a", b"abc")
        await storage.create_with_content("source", b"xyz")
        await storage.set_read_only("a")
        assert (await storage.get_info("a")).read_only
        assert await storage.read("a", 0, 10) == b"abc"
        if storage.supports_append:
            with pytest.raises(ChunkReadOnly):
                await storage.write("a", 3, b"d")
        if storage.supports_concat:
            with pytest.raises(ChunkReadOnly):
                await storage.concat("a", [("source", 3)])
        assert await content(storage, "a") == b"abc"
        await storage.set_read_only("a", False)
        assert not (await storage.get_info("a")).read_only
        if storage.supports_append:
            await storage.write("a", 3, b"d")
        await storage.set_read_only("a")
        await storage.delete("a")
        assert not await storage.exists("a")

    async def test_read_only_sources_can_be_concatenated(self, storage):
        if not storage.supports_concat:
            pytest.skip("the store cannot concat")
        await storage.create_with_content("target", b"t")
        await storage.create_with_content("source", b"s")
        await storage.set_read_only("source")
        assert await storage.concat("target", [("source", 1)]) == 2

    # ------------------------------------------------------------------ delete

    async def test_delete_is_not_idempotent(self, storage):
        await storage.create_with_content("a", b"abc")
        await storage.delete("a")
        assert not await storage.exists("a")
        with pytest.raises(ChunkNotFound):
            await storage.read("a", 0, 1)
        with pytest.raises(ChunkNotFound):
            await storage.delete("a")
        assert await storage.list() == []

    async def test_a_deleted_name_can_be_created_again(self, storage):
        await fill(storage, "a/b", b"first life")
        assert await storage.read("a/b", 0, 5) == b"first"
        await storage.delete("a/b")
        await storage.create_with_content("a/b", b"second")
        assert await content(storage, "a/b") == b"second"
        assert not (await storage.get_info("a/b")).read_only

    # ------------------------------------------------------------------ list

    async def test_list_returns_sorted_names_by_prefix(self, storage):
        for number, name in enumerate(reversed(LIST_NAMES)):
            await storage.create_with_content(name, str(number).encode())
        assert await storage.list() == sorted(LIST_NAMES)
        assert await storage.list("") == sorted(LIST_NAMES)
        expected = {
            "scope": [n for n in sorted(LIST_NAMES) if n.startswith("scope")],
            "scope/": [n for n in sorted(LIST_NAMES) if n.startswith("scope/")],
            "scope/stream/": sorted(LIST_NAMES[:2]),
            "scope/stream": sorted(LIST_NAMES[:3]),
            "scope/stream/0.#": LIST_NAMES[:1],
            "a/b": ["a/b", "a/b/c", "a/bc"],
            "a/b/": ["a/b/c"],
            "ünïcødé/": ["ünïcødé/流/セグメント"],
            "_system/containers/2/journal.E-3.1": ["_system/containers/2/journal.E-3.17"],
            "nothing": [],
            "z/": [],
        }
        for prefix, names in expected.items():
            assert await storage.list(prefix) == names, prefix

    async def test_long_names(self, storage):
        for number, name in enumerate(LONG_NAMES):
            await storage.create_with_content(name, str(number).encode())
        assert await storage.list("long/") == sorted(LONG_NAMES)
        assert await storage.list("long/" + "x" * 300 + "/") == [LONG_NAMES[0]]
        for number, name in enumerate(LONG_NAMES):
            assert await content(storage, name) == str(number).encode()
        await storage.delete(LONG_NAMES[0])
        assert await storage.list("long/") == sorted(LONG_NAMES[1:])

    # ------------------------------------------------------------------ concat

    async def test_concat_appends_the_given_lengths_and_keeps_the_sources(self, storage):
        if not storage.supports_concat:
            pytest.skip("the store cannot concat")
        await fill(storage, "target", b"T" * 10)
        await storage.create_with_content("s/1", b"first-source-extra")
        await storage.create_with_content("s/2", b"second")
        await storage.create_with_content("s/3", b"")
        before = storage.counters.snapshot()
        assert await storage.concat("target", [("s/1", 12), ("s/3", 0), ("s/2", 6), ("s/1", 5)]) == 33
        assert storage.counters.bytes_concatenated - before.bytes_concatenated == 23
        assert await content(storage, "target") == b"T" * 10 + b"first-source" + b"second" + b"first"
        assert (await storage.get_info("target")).length == 33
        assert await content(storage, "s/1") == b"first-source-extra"
        assert await content(storage, "s/2") == b"second"
        assert await storage.concat("target", []) == 33
        if storage.supports_append:
            await storage.write("target", 33, b"!")
            assert await storage.read("target", 30, 10) == b"rst!"

    async def test_concat_into_an_empty_target(self, storage):
        if not storage.supports_concat:
            pytest.skip("the store cannot concat")
        await storage.create_with_content("target", b"")
        await storage.create_with_content("source", b"abc")
        assert await storage.concat("target", [("source", 3)]) == 3
        assert await content(storage, "target") == b"abc"

    async def test_concat_beyond_a_source_raises_value_error_and_changes_nothing(self, storage):
        if not storage.supports_concat:
            pytest.skip("the store cannot concat")
        await storage.create_with_content("target", b"t")
        await storage.create_with_content("source", b"abc")
        with pytest.raises(ValueError):
            await storage.concat("target", [("source", 2), ("source", 4)])
        with pytest.raises(ChunkNotFound):
            await storage.concat("target", [("source", 2), ("missing", 0)])
        assert await content(storage, "target") == b"t"

    # ------------------------------------------------------------------ counters and space

    async def test_counters_count_what_moved(self, storage):
        before = storage.counters.snapshot()
        await storage.create_with_content("a", [b"12345", b"678"])
        await fill(storage, "b", b"abcd")
        await storage.read("a", 2, 100)
        await storage.read("b", 0, 2)
        await storage.delete("b")
        after = storage.counters
        assert after.bytes_written - before.bytes_written == 12
        assert after.bytes_read - before.bytes_read == 8
        assert after.chunks_created - before.chunks_created == 2
        assert after.chunks_deleted - before.chunks_deleted == 1
        assert after.writes - before.writes == 2
        assert after.reads - before.reads == 2
        assert after.bytes_concatenated == before.bytes_concatenated

    async def test_used_space_sums_the_chunk_lengths(self, storage):
        assert await storage.used_space() == 0
        await storage.create_with_content("a/1", b"x" * 10)
        await storage.create_with_content("a/2", b"x" * 5)
        assert await storage.used_space() == 15

    async def test_close_is_idempotent(self, storage):
        await storage.create_with_content("a", b"x")
        await storage.close()
        await storage.close()

    # ------------------------------------------------------------------ model

    def test_random_operations_match_a_dict_model(self, make_storage):
        """Random operation sequences give the results and errors of a dict of bytearrays."""
        namespaces = itertools.count()

        @settings(max_examples=MODEL_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(operations=st.lists(OPERATION, max_size=12))
        def check(operations):
            asyncio.run(run_against_model(make_storage(f"model-{next(namespaces)}"), operations))

        check()


MODEL_NAMES = ["a", "a/b", "a/b/c", "é/x"]
_name = st.sampled_from(MODEL_NAMES)
_data = st.binary(max_size=20)
OPERATION = st.one_of(
    st.tuples(st.just("create"), _name),
    st.tuples(st.just("create_with_content"), _name, st.lists(_data, max_size=3)),
    st.tuples(st.just("write"), _name, st.integers(-2, 2), _data),
    st.tuples(st.just("read"), _name, st.integers(0, 25), st.integers(0, 25)),
    st.tuples(st.just("delete"), _name),
    st.tuples(st.just("set_read_only"), _name, st.booleans()),
    st.tuples(st.just("concat"), _name, st.lists(st.tuples(_name, st.integers(0, 25)), max_size=3)),
    st.tuples(st.just("list"), st.sampled_from(["", "a", "a/", "a/b/", "é"])),
)


def model_outcome(model: dict[str, bytearray], read_only: set[str], storage: ChunkStorage, operation):
    """What the operation must do: (set of acceptable error types, expected result). Updates the model."""
    kind, name, *args = operation
    if kind == "create" or kind == "create_with_content":
        if kind == "create" and not storage.supports_append:
            return {NotSupported}, None
        if name in model:
            return {ChunkAlreadyExists}, None
        model[name] = bytearray(b"".join(args[0]) if args else b"")
        read_only.discard(name)
        return set(), len(model[name]) if args else None
    if kind == "list":
        return set(), sorted(n for n in model if n.startswith(name))
    if kind == "write" and not storage.supports_append:
        return {NotSupported}, None
    if name not in model:
        return {ChunkNotFound}, None
    chunk = model[name]
    if kind == "write":
        delta, data = args
        if name in read_only:
            return {ChunkReadOnly}, None
        if delta:
            return {InvalidOffset}, None
        chunk += data
        return set(), len(data)
    if kind == "read":
        offset, length = args
        if offset > len(chunk):
            return {ValueError}, None
        return set(), bytes(chunk[offset:offset + length])
    if kind == "delete":
        del model[name]
        read_only.discard(name)
        return set(), None
    if kind == "set_read_only":
        (read_only.add if args[0] else read_only.discard)(name)
        return set(), None
    errors = set()  # concat: a missing source, a read-only target or a source too short; any may be first
    for source, length in args[0]:
        if source not in model:
            errors.add(ChunkNotFound)
        elif length > len(model[source]):
            errors.add(ValueError)
    if name in read_only:
        errors.add(ChunkReadOnly)
    if errors:
        return errors, None
    chunk += b"".join(bytes(model[source][:length]) for source, length in args[0])
    return set(), len(chunk)


async def run_against_model(storage: ChunkStorage, operations) -> None:
    model: dict[str, bytearray] = {}
    read_only: set[str] = set()
    try:
        for operation in operations:
            kind, name, *args = operation
            if kind == "write":
                args = [len(model.get(name, b"")) + args[0], args[1]]
            errors, expected = model_outcome(model, read_only, storage, operation)
            try:
                result = await getattr(storage, kind)(name, *args)
            except Exception as error:  # noqa: BLE001 - compared with the model below
                assert type(error) in errors, f"{operation}: raised {error!r}, model expects {errors or expected!r}"
            else:
                assert not errors, f"{operation}: returned {result!r}, model expects one of {errors}"
                assert result == expected, operation
        for name, chunk in model.items():
            info = await storage.get_info(name)
            assert (info.length, info.read_only) == (len(chunk), name in read_only)
            assert await storage.read(name, 0, len(chunk) + 1) == chunk
        assert await storage.list() == sorted(model)
    finally:
        await storage.close()
