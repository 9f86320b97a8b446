"""The segment reader (server/containers/segment_reader.py) over a fake Tier-2: misses fetch aligned
blocks once however many readers ask, the next blocks are prefetched, transient Tier-2 failures are
retried, bytes found nowhere stop the container, and a read at the tail waits for an append."""

from __future__ import annotations

import asyncio

import pytest

from server import errors
from server.containers.metadata import SegmentMetadata, SegmentType
from server.containers.segment_reader import READ_AHEAD_BLOCKS, READ_AHEAD_BYTES, SegmentReader
from server.containers.state import ContainerState, InconsistentState, wake_readers
from server.tier2.chunk_storage import ChunkStorageUnavailable

from .fakes import settle

BLOCK = READ_AHEAD_BYTES


def pattern(offset: int, length: int) -> bytes:
    return bytes((offset + index) % 251 for index in range(length))


class FakeTier2:
    """Serves ``pattern`` bytes; records each read; fails the first ``failures`` reads; ``gate`` holds them."""

    def __init__(self, failures: int = 0):
        self.reads: list[tuple[str, int, int]] = []
        self.failures = failures
        self.gate: asyncio.Event | None = None

    async def read(self, name: str, offset: int, length: int) -> bytes:
        if self.gate is not None:
            await self.gate.wait()
        self.reads.append((name, offset, length))
        if self.failures:
            self.failures -= 1
            raise ChunkStorageUnavailable("injected")
        return pattern(offset, length)


def reader_over(length: int, tier2: FakeTier2, *, stored: int | None = None):
    """A reader of segment "s" of ``length`` bytes, of which Tier-2 holds the first ``stored``."""
    state = ContainerState()
    segment = SegmentMetadata(1, "s", SegmentType.STREAM, {}, 0, length=length)
    segment.data.storage_length = length if stored is None else stored
    state.by_name["s"], state.by_id[1] = segment, segment
    failures: list[BaseException] = []

    def lookup(name: str) -> SegmentMetadata:
        if name not in state.by_name:
            raise errors.NoSuchSegment(name)
        return state.by_name[name]

    return SegmentReader(0, state, tier2, lookup, failures.append), segment, failures


async def test_a_miss_reads_one_aligned_block_and_prefetches_the_next_ones():
    tier2 = FakeTier2()
    reader, _, _ = reader_over(8 * BLOCK, tier2)
    result = await reader.read("s", BLOCK + 100, 1000)
    assert bytes(result.data()) == pattern(BLOCK + 100, 1000)
    await settle()
    fetched = sorted(offset for _, offset, _ in tier2.reads)
    assert fetched == [BLOCK * n for n in range(1, 2 + READ_AHEAD_BLOCKS)]  # the block, then four ahead
    tier2.reads.clear()
    assert bytes((await reader.read("s", 3 * BLOCK, 10)).data()) == pattern(3 * BLOCK, 10)
    await settle()
    # block 3 was cached; of the four after it, 4 and 5 were too: only 6 and 7 (the last) are read now
    assert sorted(tier2.reads) == [("s", 6 * BLOCK, BLOCK), ("s", 7 * BLOCK, BLOCK)]


async def test_concurrent_readers_of_one_block_share_one_tier2_read():
    tier2 = FakeTier2()
    tier2.gate = asyncio.Event()
    reader, _, _ = reader_over(BLOCK, tier2)
    reads = [asyncio.ensure_future(reader.read("s", offset, 100)) for offset in (0, 10, 5000)]
    await settle()
    tier2.gate.set()
    results = await asyncio.gather(*reads)
    assert [bytes(result.data()) for result in results] == [pattern(0, 100), pattern(10, 100), pattern(5000, 100)]
    assert tier2.reads == [("s", 0, BLOCK)]


async def test_transient_tier2_failures_are_retried():
    tier2 = FakeTier2(failures=2)
    reader, _, failures = reader_over(1000, tier2)
    assert bytes((await reader.read("s", 0, 1000)).data()) == pattern(0, 1000)
    assert len(tier2.reads) == 3 and not failures


async def test_bytes_neither_cached_nor_in_tier2_stop_the_container():
    tier2 = FakeTier2()
    reader, _, failures = reader_over(1000, tier2, stored=0)  # no redirect, nothing cached, nothing stored
    with pytest.raises(errors.ContainerUnavailable):
        await reader.read("s", 10, 100)
    assert len(failures) == 1 and isinstance(failures[0], InconsistentState)


async def test_a_read_at_the_tail_waits_for_an_append_and_times_out_without_one():
    tier2 = FakeTier2()
    reader, segment, _ = reader_over(0, tier2)
    with pytest.raises(asyncio.TimeoutError):
        await reader.read("s", 0, 100, wait_timeout=0.01)
    parked = asyncio.ensure_future(reader.read("s", 0, 100))
    await settle()
    assert not parked.done() and segment.waiters
    segment.data.append(b"hello")
    wake_readers(segment)
    result = await parked
    assert bytes(result.data()) == b"hello" and result.at_tail and not result.end_of_segment
    assert not tier2.reads
