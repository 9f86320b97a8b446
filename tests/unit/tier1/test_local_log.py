"""Behaviour specific to the local log: group commit, batch limits, files, recycling, fencing."""

from __future__ import annotations

import array
import asyncio
import os
import threading

import pytest

from server.tier1 import LocalDurableDataLog, LogAddress, LogBusy, LogClosed, LogFenced
from server.tier1.file_operations import FileOperations
from server.tier1.log_metadata import encode_metadata
from server.tier1.record_format import HEADER_SIZE
from tests.support.waiting import eventually

from .helpers import TEST_FILE_SIZE, live_file_paths, metadata, read_all, recover, small_local_log


class CountingFileOperations(FileOperations):
    """Real file I/O that records each write (its size and iovec count) and counts syncs."""

    def __init__(self):
        self.write_sizes: list[int] = []
        self.write_buffer_counts: list[int] = []
        self.syncs = 0

    def write(self, fd, buffers, offset):
        self.write_sizes.append(sum(len(buffer) for buffer in buffers))
        self.write_buffer_counts.append(len(buffers))
        super().write(fd, buffers, offset)

    def sync(self, fd):
        self.syncs += 1
        super().sync(fd)


async def test_concurrent_appends_are_group_committed(tmp_path):
    """200 appends issued together are written in a few batches, each one write sequence plus one fdatasync."""
    operations = CountingFileOperations()
    log = small_local_log(tmp_path, file_size=1 << 20, batch_bytes_max=1 << 20, file_operations=operations)
    await log.open()
    await asyncio.gather(*(log.append(b"x" * 100) for _ in range(200)))
    await log.close()
    assert operations.syncs == len(operations.write_sizes) <= 3
    assert sum(operations.write_sizes) == 200 * (HEADER_SIZE + 100)
    assert max(operations.write_buffer_counts) <= 2  # small payloads share the staging buffer


async def test_one_append_in_flight_is_one_batch_each(tmp_path):
    """Sequential appends cannot be grouped: each is its own write and fdatasync."""
    operations = CountingFileOperations()
    log = small_local_log(tmp_path, file_operations=operations)
    await log.open()
    for _ in range(10):
        await log.append(b"y" * 10)
    await log.close()
    assert operations.syncs == len(operations.write_sizes) == 10


async def test_batches_respect_the_byte_limit_without_splitting_records(tmp_path):
    """With a 4 KiB batch limit, 1 KiB records are grouped at most 3 to a batch; a larger record goes alone."""
    operations = CountingFileOperations()
    log = small_local_log(tmp_path, batch_bytes_max=4096, file_operations=operations)
    await log.open()
    payloads = [b"z" * 1024] * 40 + [b"big" * 3000] + [b"z" * 1024] * 5
    addresses = await asyncio.gather(*(log.append(p) for p in payloads))
    await log.close()
    assert addresses == [LogAddress(i) for i in range(1, 47)]
    assert all(size <= 4096 for size in operations.write_sizes if size != HEADER_SIZE + 9000)
    assert HEADER_SIZE + 9000 in operations.write_sizes
    assert operations.syncs >= 40 // 3
    records, _, _ = await recover(tmp_path)
    assert [p for _, p in records] == payloads


async def test_large_records_are_written_without_copying_into_one_buffer(tmp_path):
    """Records above the copy threshold go out as their own iovecs (header, then each part) and read back intact."""
    operations = CountingFileOperations()
    log = small_local_log(tmp_path, file_operations=operations)
    await log.open()
    parts = [os.urandom(9000), os.urandom(5000)]
    await log.append(parts)
    await log.close()
    assert operations.write_buffer_counts == [3]
    records, _, _ = await recover(tmp_path)
    assert records == [(1, parts[0] + parts[1])]


async def test_files_are_preallocated_and_rolled(tmp_path):
    """Log files are full-size from the start, written with zeros, and a batch larger than the room left rolls over."""
    log = small_local_log(tmp_path)
    await log.open()
    [first] = live_file_paths(tmp_path)
    assert first.stat().st_size == TEST_FILE_SIZE and first.read_bytes() == bytes(TEST_FILE_SIZE)
    payloads = [bytes([i]) * 5000 for i in range(40)]  # about 3 files, in a few batches
    await asyncio.gather(*(log.append(p) for p in payloads))
    await log.close()
    files = metadata(tmp_path).files
    assert len(files) >= 3 and files[0].first_sequence == 1
    assert [f.first_sequence for f in files] == sorted({f.first_sequence for f in files})
    assert all(path.stat().st_size == TEST_FILE_SIZE for path in live_file_paths(tmp_path))
    records, _, _ = await recover(tmp_path)
    assert [p for _, p in records] == payloads


async def test_truncate_recycles_whole_files_only(tmp_path):
    """Files wholly at or below the truncation point leave the metadata and are kept as spares (up to the limit)."""
    log = small_local_log(tmp_path, spare_files_max=1)
    await log.open()
    addresses = [await log.append(bytes([i]) * 4000) for i in range(60)]  # 4 files
    live_before = [entry.name for entry in metadata(tmp_path).files]
    assert len(live_before) == 4
    await log.truncate(addresses[20])  # inside the second file: only the first goes
    assert [entry.name for entry in metadata(tmp_path).files] == live_before[1:]
    await log.truncate(addresses[-1])  # all but the last file go; one is kept as a spare
    assert [entry.name for entry in metadata(tmp_path).files] == live_before[3:]
    await log.close()
    log_files = sorted(name for name in os.listdir(tmp_path) if name.endswith(".tlog"))
    assert len(log_files) <= 1 + 1 + 1  # the live file, one kept spare, one prepared ahead
    records, _, truncation = await recover(tmp_path)
    assert records == [] and truncation == 60


@pytest.mark.parametrize("delta", [-2, -1, 0, 1])
async def test_truncate_around_a_file_boundary(tmp_path, delta):
    """Truncating just before, at, or just after the first record of a file keeps exactly the later records."""
    log = small_local_log(tmp_path)
    await log.open()
    payloads = [bytes([i]) * 3000 for i in range(50)]
    for payload in payloads:
        await log.append(payload)
    boundary = metadata(tmp_path).files[1].first_sequence
    await log.truncate(LogAddress(boundary + delta))
    await log.close()
    records, _, truncation = await recover(tmp_path)
    assert truncation == boundary + delta
    assert records == [(i + 1, p) for i, p in enumerate(payloads) if i + 1 > boundary + delta]


async def test_lock_holder_pid_is_reported(tmp_path):
    """LogBusy names the process holding the log (here: this one)."""
    first = small_local_log(tmp_path)
    await first.open()
    with pytest.raises(LogBusy, match=f"pid {os.getpid()}"):
        await small_local_log(tmp_path).open()
    await first.close()


async def test_replaced_metadata_fences_the_writer(tmp_path):
    """If another owner replaces the metadata (a newer epoch), this instance's next append fails with LogFenced."""
    log = small_local_log(tmp_path)
    epoch = await log.open()
    await log.append(b"mine")
    newer = metadata(tmp_path).with_epoch(epoch + 1)
    replacement = tmp_path / "METADATA.new"
    replacement.write_bytes(encode_metadata(newer))
    os.replace(replacement, tmp_path / "METADATA")
    with pytest.raises(LogFenced):
        await log.append(b"too late")
    with pytest.raises(LogFenced):  # and it stays fenced
        await log.append(b"later still")
    await log.close()
    with pytest.raises(LogFenced):
        await log.append(b"after close")


async def test_truncate_checks_the_epoch(tmp_path):
    """A truncation by an owner whose epoch is no longer current fails with LogFenced and changes nothing."""
    log = small_local_log(tmp_path)
    epoch = await log.open()
    address = await log.append(b"one")
    stored = metadata(tmp_path)
    (tmp_path / "METADATA").write_bytes(encode_metadata(stored.with_epoch(epoch + 1)))  # in place: same inode
    with pytest.raises(LogFenced):
        await log.truncate(address)
    await log.close()
    assert metadata(tmp_path).truncation_sequence == 0


async def test_reading_more_than_one_chunk(tmp_path):
    """Reads cross several 1 MiB read chunks and files without losing or repeating records."""
    log = LocalDurableDataLog(tmp_path, file_size=2 << 20, max_append_size=64 << 10)
    await log.open()
    payloads = [os.urandom(50_000) for _ in range(100)]  # 5 MB
    await asyncio.gather(*(log.append(p) for p in payloads))
    assert [p for _, p in await read_all(log)] == payloads
    await log.close()


async def test_instance_cannot_be_reopened(tmp_path):
    """open() is once per instance; a new owner means a new instance."""
    log = small_local_log(tmp_path)
    await log.open()
    await log.close()
    with pytest.raises(LogClosed):
        await log.open()


async def test_epoch_is_unavailable_before_open(tmp_path):
    """Reading the epoch of an instance that was never opened is an error, not a made-up number."""
    with pytest.raises(LogClosed):
        small_local_log(tmp_path).epoch


class BlockingOpenFileOperations(FileOperations):
    """Real file I/O whose first open_for_update (recovery opening the last file) waits for a go-ahead."""

    def __init__(self):
        self.entered = threading.Event()
        self.go_ahead = threading.Event()

    def open_for_update(self, path):
        if not self.entered.is_set():
            self.entered.set()
            self.go_ahead.wait(10)
        return super().open_for_update(path)


def open_descriptors_under(directory) -> list[str]:
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:  # the descriptor listdir itself used
            pass
    return [target for target in targets if target.startswith(str(directory))]


async def test_open_cancelled_during_recovery_leaves_no_file_open(tmp_path):
    """Cancelling open() while recovery runs closes what recovery opened and gives up the lock."""
    operations = BlockingOpenFileOperations()
    log = small_local_log(tmp_path / "log", file_operations=operations)
    opening = asyncio.ensure_future(log.open())
    await asyncio.get_running_loop().run_in_executor(None, operations.entered.wait, 10)
    opening.cancel()
    await asyncio.sleep(0)
    operations.go_ahead.set()
    with pytest.raises(asyncio.CancelledError):
        await opening
    recovered = []

    async def lock_given_up() -> bool:  # the abandoned open gives up the lock once its thread closed the files
        try:
            recovered.append(await recover(tmp_path / "log"))
        except LogBusy:
            return False
        return True

    await eventually(lock_given_up, "the abandoned open to give up the lock", timeout=5, interval=0.05)
    records, epoch, _ = recovered[0]
    assert records == [] and epoch == 2
    assert open_descriptors_under(tmp_path) == []


async def test_buffer_shapes_are_checked_on_the_loop(tmp_path):
    """Typed buffers count in bytes, also inside a list; a strided view is refused up front and the log stays open."""
    log = small_local_log(tmp_path)
    await log.open()
    numbers = array.array("H", [1, 2, 3])
    await log.append([b"head", numbers, memoryview(bytes(range(16))).cast("B", (4, 4))])
    for strided in (memoryview(bytes(10_000))[::2], [b"ok", memoryview(b"abcdef")[::2]]):
        with pytest.raises(ValueError, match="contiguous"):
            await log.append(strided)
    assert await log.append(b"still open") == LogAddress(2)
    assert await read_all(log) == [(1, b"head" + numbers.tobytes() + bytes(range(16))), (2, b"still open")]
    await log.close()


async def test_cancelled_append_still_lands(tmp_path):
    """Cancelling the caller does not withdraw a queued record (design §7.3): it is written, later ones follow."""
    log = small_local_log(tmp_path)
    await log.open()
    task = asyncio.ensure_future(log.append(b"abandoned"))
    await asyncio.sleep(0)
    task.cancel()
    assert await log.append(b"next") == LogAddress(2)
    await log.close()
    records, _, _ = await recover(tmp_path)
    assert records == [(1, b"abandoned"), (2, b"next")]


def test_settings_are_validated(tmp_path):
    """A file too small for the largest record, or a zero record limit, is refused at construction."""
    with pytest.raises(ValueError):
        LocalDurableDataLog(tmp_path, file_size=1024, max_append_size=2048)
    with pytest.raises(ValueError):
        LocalDurableDataLog(tmp_path, max_append_size=0)
