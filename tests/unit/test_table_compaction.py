"""Table compaction: live entries re-written with explicit versions, everything before truncated."""

from __future__ import annotations

from server.containers import table
from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.metadata import SegmentType
from server.containers.storage_writer import StorageWriterConfig
from server.tier1 import LocalDurableDataLog
from server.tier2.config import StorageConfig
from server.tier2.memory import InMemoryChunkStorage
from wire.constants import NO_VERSION

TABLE = "scope/_tables/compacted"


def test_explicit_versions_survive_parsing_and_live_bytes_follow_the_index():
    data = b"".join(table.serialize_update(b"k", b"old") + table.serialize_update(b"k", b"new", 7)
                    + table.serialize_update(b"j", b"value") + table.serialize_removal(b"j"))
    entries = list(table.parse_entries(data, 100))
    assert [entry.version for entry in entries] == [100, 7, 142, 165]  # offsets, except the explicit one
    index = table.TableIndex()
    index.index_batch(data, 100)
    assert index.get(b"k") == (7, b"new")
    assert index.live_bytes == table.update_size(b"k", b"new")
    assert table.complete_length(data[:-1]) == len(data) - table.removal_size(b"j")


def container(tmp_path, chunks) -> SegmentContainer:
    return SegmentContainer(0, LocalDurableDataLog(tmp_path / "log", file_size=1 << 20, max_append_size=256 << 10),
                            checkpoint_every_bytes=4096, table_compaction_threshold=256,
                            tier2=Tier2Settings(chunks, CacheManager(1 << 20), storage=StorageConfig(max_chunk_size=512),
                                                writer=StorageWriterConfig(flush_size=64, flush_interval=0.01)))


def entries(owner) -> list:
    """Every (key, version, value) of the table, sorted."""
    page, token = owner.read_table_page(TABLE, b"", 1_000_000, 1 << 40)
    assert owner.read_table_page(TABLE, token, 1_000_000, 1 << 40)[0] == []
    return sorted((key, version, bytes(value)) for key, version, value in page)


async def test_compaction_keeps_keys_values_versions_and_survives_restart(tmp_path):
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks)
    await owner.start()
    await owner.create_segment(TABLE, SegmentType.TABLE)
    for round_number in range(20):
        await owner.update_table(TABLE, [(b"key-%d" % i, NO_VERSION, b"v%d" % round_number) for i in range(5)])
    await owner.remove_table_keys(TABLE, [(b"key-4", NO_VERSION)])
    before = entries(owner)
    length_before = owner.get_info(TABLE).length
    await owner.compact_table(TABLE)
    info = owner.get_info(TABLE)
    assert info.start_offset == length_before  # everything before the re-written live entries is gone
    assert info.length - info.start_offset == owner._committed(TABLE).table.live_bytes  # white box
    assert entries(owner) == before  # versions included
    # a conditional update on a compacted key uses the version it had before compaction
    version = dict((key, version) for key, version, _ in before)[b"key-0"]
    await owner.update_table(TABLE, [(b"key-0", version, b"after")])

    for _ in range(30):  # the storage metadata table compacts itself as flushes go on
        await owner.update_table(TABLE, [(b"key-1", NO_VERSION, b"x" * 100)])
        await owner.flush_to_storage()
    metadata = owner._committed(owner.storage_metadata_name)
    assert metadata.start_offset > 0
    expected = entries(owner)
    await owner.stop()

    again = container(tmp_path, chunks)
    await again.start()
    assert entries(again) == expected
    assert again.read_table(TABLE, [b"key-0"])[0].value == b"after"
    await again.stop()
