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


async def test_compaction_keeps_keys_values_versions_and_survives_restart(tmp_path):
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks)
    await owner.start()
    await owner.create_segment(TABLE, SegmentType.TABLE)
    for round_number in range(20):
        await owner.update_table(TABLE, [(b"key-%d" % i, NO_VERSION, b"v%d" % round_number) for i in range(5)])
    await owner.remove_table_keys(TABLE, [(b"key-4", NO_VERSION)])
    before = sorted(owner.table(TABLE).table.items())
    length_before = owner.get_info(TABLE).length
    await owner.compact_table(TABLE)
    info = owner.get_info(TABLE)
    assert info.start_offset == length_before  # everything before the re-written live entries is gone
    assert info.length - info.start_offset == owner.table(TABLE).table.live_bytes
    assert sorted(owner.table(TABLE).table.items()) == before  # versions included
    # a conditional update on a compacted key uses the version it had before compaction
    version = dict((key, version) for key, version, _ in before)[b"key-0"]
    await owner.update_table(TABLE, [(b"key-0", version, b"after")])

    for _ in range(30):  # the storage metadata table compacts itself as flushes go on
        await owner.update_table(TABLE, [(b"key-1", NO_VERSION, b"x" * 100)])
        await owner.flush_to_storage()
    metadata = owner.committed_segment(owner.storage_metadata_name)
    assert metadata.start_offset > 0
    expected = sorted(owner.table(TABLE).table.items())
    await owner.stop()

    again = container(tmp_path, chunks)
    await again.start()
    assert sorted(again.table(TABLE).table.items()) == expected
    assert again.table(TABLE).table.get(b"key-0")[1] == b"after"
    await again.stop()
