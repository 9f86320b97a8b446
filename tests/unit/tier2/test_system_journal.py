"""The system journal (J1): system segments' layouts survive restarts through Tier-2 alone, with torn
journal batches, torn snapshots, failed journal writes and zombie owners writing after a newer
owner's bootstrap."""

from __future__ import annotations

import pytest

from server.tier2.chunk_names import journal_prefix, parse_journal_file, parse_segment_chunk
from server.tier2.chunk_storage import ChunkStorageUnavailable
from server.tier2.chunked_storage import ChunkedSegmentStorage
from server.tier2.config import StorageConfig
from server.tier2.errors import SegmentExists, StorageNotPrimary
from server.tier2.metadata_store import MetadataStore
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.doubles.slts_metadata import InMemoryMetadataStore

pytestmark = pytest.mark.timeout(30)

SYSTEM = "_system/containers/storage_metadata_7"
ATTRIBUTES = SYSTEM + "$attributes.index"
CONFIG = StorageConfig(max_chunk_size=8, journal_snapshot_every=3, defrag_min_chunk_size=0)


class UnusableMetadataStore(MetadataStore):
    """Bootstrap must not touch the MetadataStore: it is stored in the system segments."""

    async def get(self, key):
        raise AssertionError("bootstrap read the metadata store")

    async def write(self, writes):
        raise AssertionError("bootstrap wrote the metadata store")

    async def keys(self):
        raise AssertionError("bootstrap listed the metadata store")


class JournalFaults(InMemoryChunkStorage):
    """Fails the next ``fail_journal_writes`` journal writes after performing them (the outcome is unknown)."""

    def __init__(self, **options):
        super().__init__(**options)
        self.fail_journal_writes = 0

    async def _maybe_fail(self, name):
        if self.fail_journal_writes and "/journal." in name:
            self.fail_journal_writes -= 1
            raise ChunkStorageUnavailable(name, "injected after the write")

    async def write(self, name, offset, data):
        written = await super().write(name, offset, data)
        await self._maybe_fail(name)
        return written

    async def create_with_content(self, name, data):
        written = await super().create_with_content(name, data)
        await self._maybe_fail(name)
        return written


async def start(chunks, epoch, metadata=None, config=CONFIG, finish=False) -> ChunkedSegmentStorage:
    storage = ChunkedSegmentStorage(7, chunks, metadata or UnusableMetadataStore(), config=config,
                                    system_segments=[SYSTEM, ATTRIBUTES])
    await storage.bootstrap(epoch)
    if finish:
        await storage.finish_bootstrap()
    return storage


async def layout(storage, name=SYSTEM):
    info = await storage.get_info(name)
    chunks = [(c.name, c.start_offset, c.length) for c in await storage.list_chunks(name)]
    return info.length, info.start_offset, info.sealed, chunks


async def append(storage, data, name=SYSTEM):
    await storage.write(name, (await storage.get_info(name)).length, data)


async def journal_files(chunks, kind="journal"):
    return [name for name in await chunks.list(journal_prefix(7)) if parse_journal_file(7, name).kind == kind]


async def cut_tail(chunks, name, byte_count):
    """Simulates a crash in the middle of the last write to ``name``."""
    data = await chunks.read(name, 0, (await chunks.get_info(name)).length)
    await chunks.delete(name)
    await chunks.create_with_content(name, data[:-byte_count])


async def test_bootstrap_of_an_empty_container_creates_empty_system_segments():
    """Without any journal, the system segments exist empty, owned by the new epoch; no metadata is used."""
    storage = await start(InMemoryChunkStorage(), epoch=1)
    for name in (SYSTEM, ATTRIBUTES):
        info = await storage.get_info(name)
        assert (info.length, info.chunk_count, info.owner_epoch) == (0, 0, 1)
        with pytest.raises(SegmentExists):
            await storage.create(name)


@pytest.mark.parametrize("supports_append", [True, False], ids=["append", "no append"])
async def test_the_layout_survives_restarts(supports_append):
    """Many writes and truncations, spanning snapshots; each restart rebuilds exactly the last layout."""
    chunks = InMemoryChunkStorage(supports_append=supports_append)
    storage = await start(chunks, epoch=1)
    expected = b""
    for round_number in range(1, 5):
        for size in (3, 9, 1, 20, 4):
            data = bytes([round_number * 16 + size]) * size
            await append(storage, data)
            await append(storage, data[:2], name=ATTRIBUTES)
            expected += data
        await storage.truncate(SYSTEM, len(expected) - 10)
        before = await layout(storage), await layout(storage, ATTRIBUTES)
        storage = await start(chunks, epoch=round_number + 1)
        assert (await layout(storage), await layout(storage, ATTRIBUTES)) == before
        assert await storage.read(SYSTEM, len(expected) - 10, 100) == expected[-10:]
    if not supports_append:  # every batch was its own journal file (the obsolete ones not yet collected)
        assert len(await journal_files(chunks)) == 4 * 11  # 10 writes and a truncation per round


async def test_the_first_write_after_a_restart_opens_a_chunk_of_the_new_epoch():
    chunks = InMemoryChunkStorage()
    storage = await start(chunks, epoch=1)
    await append(storage, b"abc")
    storage = await start(chunks, epoch=2)
    await append(storage, b"de")
    assert [(parse_segment_chunk(name).epoch, length) for name, _, length in (await layout(storage))[3]] == \
        [(1, 3), (2, 2)]
    assert await storage.read(SYSTEM, 0, 10) == b"abcde"


async def test_a_torn_last_journal_batch_is_ignored():
    """A crash in the middle of a journal write: the layout is the one before that batch."""
    chunks = InMemoryChunkStorage()
    storage = await start(chunks, epoch=1, config=StorageConfig(max_chunk_size=8, defrag_min_chunk_size=0))
    await append(storage, b"abcdef")
    await append(storage, b"ghijkl")
    before = await layout(storage)
    await append(storage, b"mn")
    last_journal = sorted(await journal_files(chunks), key=lambda name: parse_journal_file(7, name).index)[-1]
    await cut_tail(chunks, last_journal, 3)
    storage = await start(chunks, epoch=2)
    assert await layout(storage) == before
    assert await storage.read(SYSTEM, 0, 100) == b"abcdefghijkl"


async def test_a_torn_snapshot_falls_back_to_the_previous_one():
    """A crash while writing a snapshot: the previous snapshot and the journal after it rebuild the layout."""
    chunks = InMemoryChunkStorage()
    storage = await start(chunks, epoch=1)
    for number in range(8):  # snapshots after batches 3 and 6
        await append(storage, bytes([number]) * 5)
    expected = await layout(storage)
    snapshots = sorted(await journal_files(chunks, "snapshot"), key=lambda name: parse_journal_file(7, name).index)
    assert len(snapshots) == 3  # the bootstrap's and two more; none collected yet
    await cut_tail(chunks, snapshots[-1], 1)
    storage = await start(chunks, epoch=2)
    assert await layout(storage) == expected


async def test_a_failed_journal_write_is_followed_by_a_snapshot():
    """A journal write that failed but reached storage cannot corrupt the layout: the next batch
    starts after a fresh snapshot, so the failed batch is never replayed (a truncation here)."""
    chunks = JournalFaults()
    storage = await start(chunks, epoch=1)
    await append(storage, b"x" * 20)
    chunks.fail_journal_writes = 1
    with pytest.raises(ChunkStorageUnavailable):
        await storage.truncate(SYSTEM, 17)
    assert (await storage.get_info(SYSTEM)).start_offset == 0
    await append(storage, b"yz")
    expected = await layout(storage)
    storage = await start(chunks, epoch=2)
    assert await layout(storage) == expected
    assert await storage.read(SYSTEM, 0, 100) == b"x" * 20 + b"yz"


async def test_zombie_journal_writes_after_a_newer_bootstrap_are_ignored():
    """J1: epoch 1 keeps writing after epoch 2 bootstrapped; epoch 3 sees epoch 2's history only, and
    the zombie's chunks are collected while epoch 2's stay."""
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    zombie = await start(chunks, epoch=1)
    await append(zombie, b"aaaa")
    owner = await start(chunks, epoch=2)
    await append(owner, b"bb")
    await append(zombie, b"ZZZZZZZZZZ")  # a chunk of its own and journal batches of epoch 1
    await zombie.truncate(SYSTEM, 4)
    expected = await layout(owner)
    successor = await start(chunks, epoch=3, metadata=metadata, finish=True)
    assert await layout(successor) == expected
    assert await successor.read(SYSTEM, 0, 100) == b"aaaabb"
    await successor.collect_garbage()
    referenced = {name for name, _, _ in expected[3]}
    assert {name for name in await chunks.list() if parse_segment_chunk(name)} == referenced
    await successor.close()


async def test_bootstrap_refuses_when_a_newer_epoch_wrote_the_journal():
    chunks = InMemoryChunkStorage()
    await start(chunks, epoch=5)
    with pytest.raises(StorageNotPrimary):
        await start(chunks, epoch=4)


async def test_obsolete_journal_files_are_collected_and_system_chunks_are_not():
    """After a snapshot older journal files and snapshots go to the collector; live system chunks stay."""
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    storage = await start(chunks, epoch=1)
    for number in range(10):
        await append(storage, bytes([number]) * 3)
    storage = await start(chunks, epoch=2, metadata=metadata, finish=True)
    await storage.truncate(SYSTEM, 9)
    await storage.collect_garbage()
    files = [parse_journal_file(7, name) for name in await chunks.list(journal_prefix(7))]
    assert {(f.kind, f.epoch) for f in files} == {("snapshot", 2), ("journal", 2)}
    data_chunks = [name for name in await chunks.list() if parse_segment_chunk(name)]
    assert sorted(data_chunks) == sorted(name for name, _, _ in (await layout(storage))[3])
    assert await storage.read(SYSTEM, 9, 100) == b"".join(bytes([n]) * 3 for n in range(3, 10))
    expected = await layout(storage)
    await storage.close()
    storage = await start(chunks, epoch=3)
    assert await layout(storage) == expected


async def test_a_zombie_collector_never_deletes_chunks_the_new_owner_uses():
    """System segment records are pinned, not fenced: a zombie that truncates its pinned layout must not
    delete the chunks the newer owner's layout still references."""
    chunks = InMemoryChunkStorage()
    zombie = await start(chunks, epoch=1, metadata=InMemoryMetadataStore())
    await append(zombie, b"0123456789abcdef")
    owner = await start(chunks, epoch=2)
    await zombie.truncate(SYSTEM, 16)
    assert await zombie.collect_garbage() == 0
    assert await owner.read(SYSTEM, 0, 100) == b"0123456789abcdef"
    assert all(chunk.exists_in_storage for chunk in await owner.list_chunks(SYSTEM))
