"""Table compaction: live entries re-written with explicit versions, everything before truncated; every
table segment of a container compacts itself once bloated."""

from __future__ import annotations

import asyncio

import pytest

from server import errors
from server.containers import table
from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.metadata import SegmentType
from server.containers.storage_writer import StorageWriterConfig
from server.tier1 import LocalDurableDataLog
from server.tier2.config import StorageConfig
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from wire.constants import NO_VERSION, NOT_EXISTS

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


def container(tmp_path, chunks, threshold: int = 256, max_chunk_size: int = 512,
              table_chunk_size: int = 4 << 20) -> SegmentContainer:
    """Log records of 256 KiB at most; compaction past ``threshold`` dead bytes; tables' chunks of
    min(``max_chunk_size``, ``table_chunk_size``)."""
    return SegmentContainer(0, LocalDurableDataLog(tmp_path / "log", file_size=1 << 20, max_append_size=256 << 10),
                            checkpoint_every_bytes=4096, table_compaction_threshold=threshold,
                            tier2=Tier2Settings(chunks, CacheManager(1 << 20),
                                                storage=StorageConfig(max_chunk_size=max_chunk_size),
                                                writer=StorageWriterConfig(flush_size=64, flush_interval=0.01,
                                                                           table_chunk_size=table_chunk_size)))


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
    # everything before the re-written live entries is gone (the pass after a flush may have compacted it first)
    assert info.start_offset >= length_before
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


def retained(owner, name: str = TABLE) -> tuple[int, int]:
    """(bytes the table keeps, bytes its live entries take): white box."""
    info = owner.get_info(name)
    return info.length - info.start_offset, owner._committed(name).table.live_bytes


async def test_a_table_other_than_storage_metadata_compacts_itself_and_keeps_entries_across_restart(tmp_path):
    """Many overwrites of a table (as the controller makes): once dead records outweigh live ones and the
    threshold, the pass after a flush compacts it; keys, values and versions stay (a conditional update
    with a version from before compaction works), Tier-2 keeps only its last chunks, and a restart sees
    the same entries."""
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks, max_chunk_size=1 << 20, table_chunk_size=512)
    await owner.start()
    await owner.create_segment(TABLE, SegmentType.TABLE)
    (once,) = await owner.update_table(TABLE, [(b"written-once", NO_VERSION, b"stays")])
    for round_number in range(200):
        await owner.update_table(TABLE, [(b"key-%d" % i, NO_VERSION, b"v%d" % round_number) for i in range(5)])
        if round_number % 25 == 0:
            await owner.flush_to_storage()
    await owner.remove_table_keys(TABLE, [(b"key-4", NO_VERSION)])
    await owner.flush_to_storage()
    await owner.flush_to_storage()  # the compaction's truncation reaches Tier-2
    kept, live = retained(owner)
    stored = sum(chunk.length for chunk in await owner.storage_chunks(TABLE))
    length = owner.get_info(TABLE).length
    print(f"table of {length} bytes written: {kept} kept, {live} live, {stored} in Tier-2")
    assert owner.get_info(TABLE).start_offset > 0
    assert kept - live <= max(256, live)  # the rule, checked after the last pass
    assert stored <= kept + 512  # its 512-byte chunks before the start offset are gone
    before = entries(owner)
    assert {key: version for key, version, _ in before}[b"written-once"] == once
    (changed,) = await owner.update_table(TABLE, [(b"written-once", once, b"changed")])
    with pytest.raises(errors.TableKeyBadVersion):
        await owner.update_table(TABLE, [(b"key-0", once, b"stale")])
    expected = entries(owner)
    await owner.stop()

    again = container(tmp_path, chunks, max_chunk_size=1 << 20, table_chunk_size=512)
    await again.start()
    assert entries(again) == expected
    await again.update_table(TABLE, [(b"written-once", changed, b"after restart")])
    assert again.read_table(TABLE, [b"written-once", b"key-4"]) == [
        (b"written-once", owner_version(again, b"written-once"), b"after restart"), None]
    await again.stop()


def owner_version(owner, key: bytes) -> int:
    return {key: version for key, version, _ in entries(owner)}[key]


async def test_a_table_larger_than_one_log_record_compacts_in_steps_while_it_changes(tmp_path):
    """Live entries of ~800 KB, log records of 256 KiB: the compaction re-writes them in steps, each durable
    before the next, while updates, removals and new keys go on; none is lost or undone, and everything
    before the compaction's start is truncated."""
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks, threshold=1 << 40, max_chunk_size=64 << 10)  # compacted on request only
    await owner.start()
    await owner.create_segment(TABLE, SegmentType.TABLE)
    for batch in range(10):
        await owner.update_table(TABLE, [(b"key-%03d" % (batch * 20 + i), NO_VERSION, b"x" * 4000)
                                         for i in range(20)])
    for batch in range(5):  # dead records too
        await owner.update_table(TABLE, [(b"key-%03d" % (batch * 40 + i), NO_VERSION, b"y" * 4000)
                                         for i in range(20)])
    model = {key: (version, value) for key, version, value in entries(owner)}
    length_before = owner.get_info(TABLE).length

    async def meanwhile():
        await asyncio.sleep(0)  # the compaction's first step is decided
        changes = [(b"key-000", NO_VERSION, b"changed"), (b"key-150", NO_VERSION, None),
                   (b"new-key", NOT_EXISTS, b"added"), (b"key-199", NO_VERSION, b"changed too")]
        for key, expected, value in changes:
            (version,) = await owner.update_table(TABLE, [(key, expected, value)])
            if value is None:
                del model[key]
            else:
                model[key] = (version, value)

    await asyncio.gather(owner.compact_table(TABLE), meanwhile())
    assert owner.get_info(TABLE).start_offset == length_before
    assert {key: (version, value) for key, version, value in entries(owner)} == model
    await owner.flush_to_storage()
    await owner.stop()
    again = container(tmp_path, chunks, threshold=1 << 40, max_chunk_size=64 << 10)
    await again.start()
    assert {key: (version, value) for key, version, value in entries(again)} == model
    await again.stop()


async def test_a_change_log_read_of_a_compacted_table_reaches_its_end(tmp_path):
    """ReadTableEntriesDelta over re-written records (whose versions are older than their offsets): the page
    ends at the table's end, so a reader that follows the positions stops."""
    owner = container(tmp_path, InMemoryChunkStorage(), threshold=1 << 40)
    await owner.start()
    await owner.create_segment(TABLE, SegmentType.TABLE)
    for round_number in range(5):
        await owner.update_table(TABLE, [(b"key-%d" % i, NO_VERSION, b"v%d" % round_number) for i in range(3)])
    await owner.compact_table(TABLE)
    delta = await owner.read_table_delta(TABLE, 0, 1000, 1 << 20)
    assert delta.reached_end and delta.last_position == owner.get_info(TABLE).length
    assert sorted((key, version, bytes(value)) for key, version, value in delta.entries) == entries(owner)
    await owner.stop()


async def test_a_pass_looks_only_at_tables_that_changed(tmp_path):
    """Compaction candidates are the tables appended to since the last pass (white box): a pass does not walk
    every table of the container, and drops the candidates that are not bloated."""
    owner = container(tmp_path, InMemoryChunkStorage())
    await owner.start()
    names = [f"scope/_tables/t{number}" for number in range(50)]
    for name in names:
        await owner.create_segment(name, SegmentType.TABLE)
        await owner.update_table(name, [(b"key", NO_VERSION, b"value")])
    await owner.flush_to_storage()
    metadata = {owner._committed(owner.storage_metadata_name).segment_id}
    assert owner._state.tables_changed <= metadata
    await owner.update_table(names[7], [(b"key", NO_VERSION, b"again")])
    assert owner._state.tables_changed - metadata == {owner._committed(names[7]).segment_id}
    await owner.flush_to_storage()
    assert owner._state.tables_changed <= metadata
    await owner.stop()


async def test_a_table_restored_bloated_is_compacted_after_a_restart_without_a_new_append(tmp_path):
    """A table left bloated by the previous owner (here: a threshold it never reached) is compacted by the
    next owner's first pass, though nothing appends to it (recovery makes every table it replays or
    rebuilds a candidate)."""
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks, threshold=1 << 30)
    await owner.start()
    await owner.create_segment(TABLE, SegmentType.TABLE)
    for round_number in range(40):
        await owner.update_table(TABLE, [(b"key-%d" % i, NO_VERSION, b"v%d" % round_number) for i in range(3)])
    await owner.flush_to_storage()
    kept, live = retained(owner)
    assert kept - live > max(256, live)  # bloated, and this owner's threshold never compacts it
    expected = entries(owner)
    await owner.stop()

    again = container(tmp_path, chunks, threshold=256)
    await again.start()
    await again.flush_to_storage()  # a pass, and nothing appended to the table
    kept, live = retained(again)
    assert kept - live <= max(256, live)
    assert entries(again) == expected
    await again.stop()
