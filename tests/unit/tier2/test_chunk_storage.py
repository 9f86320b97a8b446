"""Runs the ChunkStorage contract against every store, then tests what is particular to each.

The S3 store runs against a moto server (one per session, started only when an S3 test runs).
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiobotocore.config import AioConfig
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from server.tier2 import filesystem
from server.tier2.chunk_storage import (ChunkAlreadyExists, ChunkNotFound, ChunkStorage, ChunkStorageError,
                                        ChunkStorageUnavailable, InvalidOffset, NotSupported)
from server.tier2.filesystem import FileSystemChunkStorage, encode_name
from server.tier2.s3 import S3ChunkStorage, _translated, plan_parts
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.faults.tier2 import FaultyChunkStorage
from tests.support.processes import free_port
from tests.support.s3_server import MIN_PART_SIZE

from .chunk_storage_contract import ChunkStorageContract, content

PATH_CONFIG = AioConfig(s3={"addressing_style": "path"}, retries={"max_attempts": 2}, connect_timeout=2,
                        read_timeout=10)


def s3_storage(endpoint_url: str, bucket: str, prefix: str = "", **options) -> S3ChunkStorage:
    return S3ChunkStorage(bucket, prefix=prefix, endpoint_url=endpoint_url, min_part_size=MIN_PART_SIZE,
                          config=PATH_CONFIG, **options)


def factory(kind: str, request, tmp_path: Path) -> Callable[[str], ChunkStorage]:
    if kind == "memory":
        return lambda namespace: InMemoryChunkStorage()
    if kind == "memory(no append)":
        return lambda namespace: InMemoryChunkStorage(supports_append=False)
    if kind == "faulty(memory)":
        return lambda namespace: FaultyChunkStorage(InMemoryChunkStorage())
    if kind == "filesystem":
        return lambda namespace: FileSystemChunkStorage(tmp_path / namespace)
    endpoint_url, bucket = request.getfixturevalue("s3_bucket")
    return lambda namespace: s3_storage(endpoint_url, bucket, prefix=f"{namespace}/")


@pytest.fixture(params=["memory", "memory(no append)", "faulty(memory)", "filesystem",
                        pytest.param("s3", marks=pytest.mark.s3)])
def make_storage(request, tmp_path):
    make = factory(request.param, request, tmp_path)
    return lambda namespace="main": make(namespace)


@pytest.fixture
async def storage(make_storage):
    store = make_storage()
    yield store
    await store.close()


class TestChunkStorageContract(ChunkStorageContract):
    pass


# ---------------------------------------------------------------------- filesystem

@pytest.fixture
async def fs(tmp_path):
    store = FileSystemChunkStorage(tmp_path / "chunks")
    yield store
    await store.close()


def files_under(root: Path) -> list[Path]:
    return [Path(directory) / name for directory, _, names in os.walk(root) for name in names]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_fs_name_encoding():
    assert encode_name("scope/stream/0.E-1") == [b"scope.d", b"stream.d", b"0.E-1.f"]
    assert encode_name("a%\0") == [b"a%25%00.f"]
    assert encode_name("/") == [b".d", b".f"]
    assert encode_name("x" * 251) == [b"x" * 250 + b".s", b"x.f"]


async def test_fs_names_that_naive_mappings_confuse(fs):
    """Prefixes of each other, suffix look-alikes, dot and empty components, escapes, long components."""
    names = ["a", "a/b", "a/b/c", "a.f", "a.d/b", "a.s", "", "/", "//", "a//b", "a/", ".", "..", "../x", "./a",
             "%", "%25", "%00", "\0", "a\0b", "ü", "u\u0308", "A", "x" * 250, "x" * 251, "x" * 500 + "/y",
             "x" * 250 + "/y", "é" * 200, "\ud800lone surrogate"]
    for number, name in enumerate(names):
        await fs.create_with_content(name, str(number).encode())
    assert await fs.list() == sorted(names)
    for number, name in enumerate(names):
        assert await content(fs, name) == str(number).encode(), name
    root = fs.root.resolve()
    for path in files_under(root):
        assert path.resolve().is_relative_to(root)
        assert all(len(os.fsencode(part)) <= 255 for part in path.relative_to(root).parts)
    assert len(files_under(root)) == len(names)


async def test_fs_failed_create_with_content_leaves_no_trace(fs, monkeypatch):
    """A failure midway (here: disk full after half the data) leaves no chunk and no temporary file."""
    real_write_parts = filesystem.write_parts

    def half_then_enospc(fd, parts, offset):
        data = b"".join(parts)
        real_write_parts(fd, [data[:len(data) // 2]], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(filesystem, "write_parts", half_then_enospc)
    with pytest.raises(ChunkStorageUnavailable, match="No space"):
        await fs.create_with_content("s/chunk", b"x" * 1000)
    assert not await fs.exists("s/chunk") and await fs.list() == []
    assert files_under(fs.root) == []
    monkeypatch.undo()
    assert await fs.create_with_content("s/chunk", b"y" * 10) == 10
    assert await content(fs, "s/chunk") == b"y" * 10


async def test_fs_failed_fsync_in_create_with_content_leaves_no_chunk(fs, monkeypatch):
    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(ChunkStorageUnavailable):
        await fs.create_with_content("chunk", b"data")
    monkeypatch.undo()
    assert await fs.list() == [] and files_under(fs.root) == []


async def test_fs_create_with_content_does_not_replace_a_racing_creator(fs):
    """Two concurrent creators of one name: exactly one wins, the other gets ChunkAlreadyExists."""
    results = await asyncio.gather(*(fs.create_with_content("n", bytes([i]) * 100) for i in range(8)),
                                   return_exceptions=True)
    assert sum(isinstance(result, ChunkAlreadyExists) for result in results) == 7
    winner = next(i for i, result in enumerate(results) if result == 100)
    assert await content(fs, "n") == bytes([winner]) * 100
    assert len(files_under(fs.root)) == 1


async def test_fs_acknowledged_writes_are_synced(fs, monkeypatch):
    synced = []
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real_fdatasync(fd)))
    await fs.create("a")
    await fs.write("a", 0, b"abc")
    await fs.write("a", 3, [b"d", b"e"])
    assert len(synced) == 2


async def test_fs_stray_temporary_files_are_ignored(fs):
    await fs.create_with_content("s/t/chunk", b"abc")
    for directory in (fs.root, fs.root / "s.d" / "t.d"):
        (directory / ".0123abcd.tmp").write_bytes(b"left by a crash")
    assert await fs.list() == ["s/t/chunk"]
    assert await fs.used_space() == 3


async def test_fs_a_new_instance_sees_everything(fs):
    await fs.create("a/b")
    await fs.write("a/b", 0, b"abc")
    await fs.create_with_content("c", b"x")
    await fs.set_read_only("c")
    reopened = FileSystemChunkStorage(fs.root)
    try:
        assert await reopened.list() == ["a/b", "c"]
        assert await content(reopened, "a/b") == b"abc"
        assert (await reopened.get_info("c")).read_only
        await reopened.write("a/b", 3, b"d")
    finally:
        await reopened.close()
    assert await content(fs, "a/b") == b"abcd"


async def test_fs_open_descriptors_are_bounded_and_closed(tmp_path):
    baseline = open_descriptors()
    store = FileSystemChunkStorage(tmp_path, open_files=4)
    for number in range(20):
        await store.create(f"c/{number}")
        await store.write(f"c/{number}", 0, b"x")
        await store.read(f"c/{number - 1 if number else 0}", 0, 1)
        assert open_descriptors() <= baseline + 4
    await store.delete("c/19")
    await store.close()
    assert open_descriptors() == baseline


async def test_fs_concurrent_reads_survive_eviction(tmp_path):
    """Descriptors in use by a thread are closed only after it finishes, even when evicted."""
    store = FileSystemChunkStorage(tmp_path, open_files=1)
    names = [f"c{number}" for number in range(6)]
    for name in names:
        await store.create_with_content(name, name.encode() * 50_000)
    reads = [store.read(name, 0, 1 << 20) for name in names * 5]
    assert await asyncio.gather(*reads) == [name.encode() * 50_000 for name in names * 5]
    await store.close()


async def test_fs_os_errors_become_unavailable(fs, monkeypatch):
    await fs.create("a")

    def disk_full(fd, parts, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(filesystem, "write_parts", disk_full)
    with pytest.raises(ChunkStorageUnavailable) as raised:
        await fs.write("a", 0, b"abc")
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == errno.ENOSPC
    monkeypatch.undo()
    with pytest.raises(InvalidOffset):
        await fs.write("a", 1, b"abc")
    assert await fs.write("a", 0, b"abc") == 3


async def test_fs_failed_concat_restores_the_target(fs, monkeypatch):
    """A concat failing after copying some sources cuts the target back, so that a retry is exact."""
    await fs.create_with_content("target", b"T")
    await fs.create_with_content("one", b"111")
    await fs.create_with_content("two", b"222")
    real_copy, copies = filesystem._copy, []

    def fail_second(*args):
        copies.append(args)
        if len(copies) == 2:
            raise OSError(errno.EIO, "Input/output error")
        real_copy(*args)

    monkeypatch.setattr(filesystem, "_copy", fail_second)
    with pytest.raises(ChunkStorageUnavailable):
        await fs.concat("target", [("one", 3), ("two", 3)])
    assert await content(fs, "target") == b"T"
    monkeypatch.undo()
    assert await fs.concat("target", [("one", 3), ("two", 3)]) == 7
    assert await content(fs, "target") == b"T111222"


async def test_fs_concat_without_copy_file_range(fs, monkeypatch):
    def unsupported(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    await fs.create_with_content("target", b"T")
    await fs.create_with_content("source", b"abcdef")
    assert await fs.concat("target", [("source", 4)]) == 5
    assert await content(fs, "target") == b"Tabcd"


# ---------------------------------------------------------------------- S3

@given(lengths=st.lists(st.integers(0, 40), max_size=8), min_part=st.integers(1, 12))
@settings(max_examples=200, deadline=None)
def test_s3_part_plan(lengths, min_part):
    """Parts cover the ranges in order; every part but the last is big enough; copies are big."""
    pieces = [(f"c{number}", 0, length) for number, length in enumerate(lengths)]
    parts = plan_parts(pieces, min_part)
    flat = [(chunk, byte) for part in parts for chunk, start, end in (part if isinstance(part, list) else [part])
            for byte in range(start, end)]
    assert flat == [(chunk, byte) for chunk, start, end in pieces for byte in range(start, end)]
    sizes = [sum(end - start for _, start, end in (part if isinstance(part, list) else [part])) for part in parts]
    assert all(size >= min_part for size in sizes[:-1]) and all(size > 0 for size in sizes)
    assert all(end - start >= min_part for part in parts if isinstance(part, tuple) for _, start, end in [part])


async def test_s3_concat_mixes_copied_and_uploaded_parts(s3_bucket):
    """Sources above and below the minimum part size (moto enforces it), lengths cut short."""
    store = s3_storage(*s3_bucket)
    big, small = os.urandom(3 * MIN_PART_SIZE), os.urandom(100)
    await store.create_with_content("target", b"T" * 10)
    await store.create_with_content("big", big)
    await store.create_with_content("small", small)
    sources = [("big", 2 * MIN_PART_SIZE + 7), ("small", 60), ("big", MIN_PART_SIZE), ("small", 100),
               ("big", 3 * MIN_PART_SIZE)]
    expected = b"T" * 10 + b"".join((big if source == "big" else small)[:length] for source, length in sources)
    assert await store.concat("target", sources) == len(expected)
    assert await content(store, "target") == expected
    assert store.counters.bytes_concatenated == len(expected) - 10
    await store.close()


async def test_s3_create_without_conditional_put(s3_bucket):
    store = s3_storage(*s3_bucket, conditional_put=False)
    await store.create_with_content("a", b"1")
    with pytest.raises(ChunkAlreadyExists):
        await store.create_with_content("a", b"2")
    assert await content(store, "a") == b"1"
    await store.close()


async def test_s3_falls_back_when_conditional_put_is_not_implemented(s3_bucket):
    store = s3_storage(*s3_bucket)
    client = await store._s3()
    real_put = client.put_object

    async def put_without_conditions(**kwargs):
        if "IfNoneMatch" in kwargs:
            raise ClientError({"Error": {"Code": "NotImplemented"}, "ResponseMetadata": {"HTTPStatusCode": 501}},
                              "PutObject")
        return await real_put(**kwargs)

    client.put_object = put_without_conditions
    await store.create_with_content("a", b"1")
    assert not store.conditional_put
    with pytest.raises(ChunkAlreadyExists):
        await store.create_with_content("a", b"2")
    await store.close()


async def test_s3_append_operations_are_not_supported(s3_bucket):
    store = s3_storage(*s3_bucket)
    assert not store.supports_append and store.supports_concat
    with pytest.raises(NotSupported):
        await store.create("a")
    await store.create_with_content("a", b"x")
    with pytest.raises(NotSupported):
        await store.write("a", 1, b"y")
    await store.close()


async def test_s3_prefixes_separate_stores_in_one_bucket(s3_bucket):
    first, second = s3_storage(*s3_bucket, prefix="one/"), s3_storage(*s3_bucket, prefix="one-two/")
    await first.create_with_content("a", b"1")
    await second.create_with_content("a", b"2")
    assert await first.list() == ["a"] and await second.list() == ["a"]
    assert await content(first, "a") == b"1"
    await first.delete("a")
    assert await second.exists("a")
    await first.close()
    await second.close()


async def test_s3_client_is_created_lazily_and_closed(s3_bucket):
    store = s3_storage(*s3_bucket)
    assert store._client is None
    await store.close()
    assert not await store.exists("a")
    assert store._client is not None
    await store.close()
    assert store._client is None
    await store.close()


async def test_s3_unreachable_endpoint_is_unavailable(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = S3ChunkStorage("bucket", endpoint_url=f"http://127.0.0.1:{free_port()}", region="us-east-1",
                           config=AioConfig(retries={"total_max_attempts": 1}, connect_timeout=1))
    for call in (store.exists("a"), store.read("a", 0, 1), store.create_with_content("a", b"x"), store.list()):
        with pytest.raises(ChunkStorageUnavailable):
            await call
    await store.close()


@pytest.mark.parametrize("status, code, expected", [
    (503, "SlowDown", ChunkStorageUnavailable), (500, "InternalError", ChunkStorageUnavailable),
    (400, "RequestTimeout", ChunkStorageUnavailable), (429, "TooManyRequests", ChunkStorageUnavailable),
    (404, "NoSuchKey", ChunkNotFound), (412, "PreconditionFailed", ChunkAlreadyExists),
    (403, "AccessDenied", ChunkStorageError), (404, "NoSuchBucket", ChunkStorageError)])
def test_s3_error_translation(status, code, expected):
    with pytest.raises(ChunkStorageError) as raised:
        with _translated("chunk"):
            raise ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")
    assert type(raised.value) is expected and raised.value.chunk == "chunk"


# ---------------------------------------------------------------------- FaultyChunkStorage

@pytest.fixture
def faulty():
    return FaultyChunkStorage(InMemoryChunkStorage())


async def test_faulty_mirrors_the_inner_store():
    inner = InMemoryChunkStorage(supports_append=False)
    faulty = FaultyChunkStorage(inner)
    assert (faulty.supports_append, faulty.supports_concat, faulty.supports_truncation) == (False, True, False)
    assert faulty.counters is inner.counters
    await faulty.create_with_content("a", b"abc")
    assert inner.counters.bytes_written == 3 and faulty.calls == {"create_with_content": 1}


async def test_faulty_fails_the_next_calls_of_one_operation(faulty):
    await faulty.create_with_content("a", b"abc")
    faulty.fail_next(2, "read")
    for _ in range(2):
        with pytest.raises(ChunkStorageUnavailable):
            await faulty.read("a", 0, 3)
        assert await faulty.exists("a")
    assert await faulty.read("a", 0, 3) == b"abc"
    assert faulty.calls["read"] == 3 and faulty.inner.counters.reads == 1


async def test_faulty_fails_any_operation_with_a_chosen_error(faulty):
    faulty.fail_next(1, error=ChunkNotFound)
    with pytest.raises(ChunkNotFound, match="x: injected list"):
        await faulty.list("x")
    faulty.fail_next(1, "write", error=InvalidOffset("a", 5, 3))
    await faulty.create("a")
    with pytest.raises(InvalidOffset) as raised:
        await faulty.write("a", 0, b"z")
    assert raised.value.expected == 5
    with pytest.raises(ValueError):
        faulty.fail_next(1, "append")


async def test_faulty_failure_after_the_inner_call(faulty):
    """The operation happens, but the caller sees a failure (a lost acknowledgement)."""
    faulty.fail_next(1, "create_with_content", after_inner=True)
    with pytest.raises(ChunkStorageUnavailable):
        await faulty.create_with_content("a", b"abc")
    assert await content(faulty.inner, "a") == b"abc"
    with pytest.raises(ChunkAlreadyExists):
        await faulty.create_with_content("a", b"abc")


async def test_faulty_unavailable_switch(faulty):
    await faulty.create_with_content("a", b"abc")
    faulty.set_unavailable()
    for call in (faulty.exists("a"), faulty.read("a", 0, 1), faulty.delete("a"), faulty.list()):
        with pytest.raises(ChunkStorageUnavailable):
            await call
    faulty.set_unavailable(False)
    assert await faulty.list() == ["a"]


async def test_faulty_hang_times_out(faulty):
    faulty.hang(0.05)
    started = time.monotonic()
    with pytest.raises(ChunkStorageUnavailable, match="timed out"):
        await faulty.create("a")
    assert time.monotonic() - started >= 0.05
    assert not await faulty.inner.exists("a")
    faulty.hang(None)
    await faulty.create("a")


async def test_faulty_latency(faulty):
    faulty.latency_seconds = 0.03
    started = time.monotonic()
    await faulty.create_with_content("a", b"x")
    await faulty.read("a", 0, 1)
    assert time.monotonic() - started >= 0.06
    faulty.clear()
    assert faulty.latency_seconds == 0


async def test_faulty_torn_write(faulty):
    await faulty.create("a")
    faulty.tear_next_write(4)
    with pytest.raises(ChunkStorageUnavailable, match="torn"):
        await faulty.write("a", 0, [b"abc", b"defg"])
    assert await content(faulty, "a") == b"abcd"
    assert await faulty.write("a", 4, b"!") == 1


async def test_faulty_torn_create_with_content_leaves_a_short_chunk(faulty):
    faulty.tear_next_write(2)
    with pytest.raises(ChunkStorageUnavailable):
        await faulty.create_with_content("a", b"abcdef")
    assert await content(faulty.inner, "a") == b"ab"
