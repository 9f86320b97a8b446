"""PDP-32's promise: the hot segment queries cost a constant number of store calls, however long
the stream's history. Checked by counting primitive calls through CountingKeyValueStore on
streams of 1,000 and 100,000 epochs (seeded, see seeding.py), and by checking the answers."""

from __future__ import annotations

import pytest

from controller.store import ChunkSizes, CountingKeyValueStore, MetadataStore, queries, scale
from tests.support.doubles.key_value_store import InMemoryKeyValueStore

from .seeding import create_active_stream, epoch_time, scale_step, sealed_size, seed_stream

# Exact store calls per query (see controller/store/queries.py for what each call reads).
EXPECTED_CALLS = {
    "current_segments": 1,
    "successors_of_sealed": 2,
    "successors_of_active": 1,
    "segments_at_time": 3,
    "is_segment_valid": 1,
}


async def measure(stream, counter: CountingKeyValueStore, epoch_count: int) -> dict[str, int]:
    """Runs each query once (checking its answer) and returns the store calls it made."""
    calls = {}

    async def counted(name, coroutine):
        counter.reset()
        result = await coroutine
        calls[name] = counter.total
        return result

    current = await counted("current_segments", queries.current_segments(stream))
    assert current.epoch == epoch_count
    middle = await stream.get_epoch(epoch_count // 2)
    follower = await stream.get_epoch(epoch_count // 2 + 1)
    sealed_id = next(iter(middle.segment_ids - follower.segment_ids))
    found = await counted("successors_of_sealed", queries.successors(stream, sealed_id))
    assert found and all(successor in follower.segments for successor in found)
    assert all(sealed_id in predecessors for predecessors in found.values())
    assert await counted("successors_of_active", queries.successors(stream, current.segments[0].segment_id)) == {}
    at_time = await counted("segments_at_time", queries.segments_at_time(stream, epoch_time(0, epoch_count // 3) + 1))
    assert set(at_time) == set((await stream.get_epoch(epoch_count // 3)).segments)
    assert await counted("is_segment_valid", queries.is_segment_valid(stream, sealed_id))
    return calls


@pytest.mark.parametrize("epoch_count", [1_000, pytest.param(100_000, marks=pytest.mark.slow)])
async def test_hot_queries_cost_constant_store_calls(epoch_count):
    """After 1k and after 100k epochs, current segments, successors and segments-at-time each make
    exactly the same, small number of store calls."""
    counter = CountingKeyValueStore(InMemoryKeyValueStore())
    metadata = MetadataStore(counter)
    await metadata.initialize()
    stream = await seed_stream(metadata, "scale", f"stream{epoch_count}", epoch_count)
    assert await measure(stream, counter, epoch_count) == EXPECTED_CALLS


async def test_seeding_matches_the_scale_path():
    """The seeder writes byte-for-byte the records that running every scale step writes (small
    chunk sizes, so chunks, leaves, the root and shards all roll over)."""
    sizes = ChunkSizes(history_chunk_epochs=4, index_leaf_epochs=3, sealed_sizes_shard_epochs=5)
    seeded_kv, stepped_kv = InMemoryKeyValueStore(), InMemoryKeyValueStore()
    seeded = await seed_stream(MetadataStore(seeded_kv, sizes), "s", "t", 30)
    stepped_metadata = MetadataStore(stepped_kv, sizes)
    stepped = await create_active_stream(stepped_metadata, "s", "t", 4, 0)
    for epoch in range(1, 31):
        current = await queries.current_segments(stepped)
        to_seal, ranges = scale_step(current, 4)
        transition = await scale.submit_scale(stepped, to_seal, ranges, epoch_time(0, epoch))
        await scale.commit_scale(stepped, transition, {segment_id: sealed_size(segment_id) for segment_id in to_seal})
    assert await _dump(seeded_kv, seeded.tables.metadata) == await _dump(stepped_kv, stepped.tables.metadata)


async def _dump(kv, table) -> dict[str, bytes]:
    entries, token = {}, b""
    while True:
        page = await kv.list_entries(table, token, 1000)
        if not page.entries:
            return entries
        entries.update({key: value.value for key, value in page.entries})
        token = page.token
