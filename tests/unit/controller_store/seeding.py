"""Builds long stream histories quickly, for the scalability test and the benchmark.

Running 100,000 scales through the store one step at a time would rewrite a history chunk and
an index leaf per epoch. The seeder instead applies the same pure functions the scale steps use
(``plan_epoch_transition``, ``next_epoch``, ``append_to_chunk``, ``index_epoch``,
``sealed_size_writes``) in memory and writes each final record once, in large batches.
test_seeding_matches_the_scale_path checks that the result is byte-for-byte what the real scale
steps write.

The scale pattern keeps the segment count between n and n + 1 and the ranges from shrinking:
split one segment in two, then merge the two halves back, moving along the key space.
"""

from __future__ import annotations

from controller.store import ChunkSizes, MetadataStore, State, StreamStore, Write, layout
from controller.store.history import append_to_chunk, index_epoch
from controller.store.key_space import next_epoch, plan_epoch_transition
from controller.store.records import EpochRecord, HistoryChunk, HistoryIndexLeaf, HistoryIndexRoot, SealedEpochRecord
from controller_api.model import ScalingPolicy, StreamConfiguration
from controller.store.scale import sealed_size_writes

EPOCH_INTERVAL = 1000  # ms between seeded epochs
BATCH_BYTES_MAX = 512 * 1024  # per write batch: well under one wire frame


def epoch_time(start_time: int, epoch: int) -> int:
    return start_time + epoch * EPOCH_INTERVAL


def scale_step(current: EpochRecord, segment_count: int) -> tuple[list[int], list[tuple[float, float]]]:
    """The next scale of the pattern: (segments to seal, new ranges)."""
    segments = current.segments
    if len(segments) > segment_count:  # merge the two halves the previous epoch split off
        first, second = [segment for segment in segments if segment.creation_epoch == current.epoch]
        return [first.segment_id, second.segment_id], [(first.key_start, second.key_end)]
    segment = segments[(current.epoch // 2) % len(segments)]
    middle = segment.key_start + (segment.key_end - segment.key_start) / 2
    return [segment.segment_id], [(segment.key_start, middle), (middle, segment.key_end)]


def sealed_size(segment_id: int) -> int:
    return (segment_id % 9973) * 100


async def create_active_stream(metadata: MetadataStore, scope: str, stream: str, segment_count: int,
                               start_time: int) -> StreamStore:
    await metadata.initialize()
    await metadata.scopes.create_scope(scope)
    configuration = StreamConfiguration(ScalingPolicy(min_num_segments=segment_count))
    handle, _ = await metadata.create_stream(scope, stream, configuration, start_time)
    await handle.transition_state(State.ACTIVE)
    return handle


class _Pending:
    """Writes waiting for the next batch."""

    def __init__(self, handle: StreamStore):
        self.handle = handle
        self.writes: list[Write] = []
        self.size = 0

    async def add(self, key: str, value: bytes) -> None:
        self.writes.append(Write(key, value))
        self.size += len(key) + len(value)
        if self.size >= BATCH_BYTES_MAX or len(self.writes) >= 2000:
            await self.flush()

    async def flush(self) -> None:
        if self.writes:
            await self.handle.write(self.writes)
        self.writes, self.size = [], 0


async def seed_stream(metadata: MetadataStore, scope: str, stream: str, epoch_count: int, segment_count: int = 4,
                      start_time: int = 0) -> StreamStore:
    """An ACTIVE stream whose current epoch is ``epoch_count``, built with the scale pattern above."""
    handle = await create_active_stream(metadata, scope, stream, segment_count, start_time)
    sizes: ChunkSizes = handle.sizes
    (current, _), (root, _), (chunk, _), (leaf, _) = await handle.read_many([
        (layout.CURRENT_EPOCH, EpochRecord), (layout.HISTORY_INDEX_ROOT, HistoryIndexRoot),
        (layout.history_chunk_key(0), HistoryChunk), (layout.history_leaf_key(0), HistoryIndexLeaf)])
    pending = _Pending(handle)
    sealed: dict[int, int] = {}
    for epoch in range(1, epoch_count + 1):
        to_seal, ranges = scale_step(current, segment_count)
        transition = plan_epoch_transition(current, to_seal, ranges, epoch_time(start_time, epoch))
        current, delta = next_epoch(current, transition)
        await pending.add(layout.epoch_key(epoch), current.encode())
        for segment_id in to_seal:
            await pending.add(layout.sealed_epoch_key(segment_id), SealedEpochRecord(epoch).encode())
            sealed[segment_id] = sealed_size(segment_id)
        if sizes.chunk_of(epoch) != chunk.chunk:
            await pending.add(layout.history_chunk_key(chunk.chunk), chunk.encode())
            chunk = None
        chunk = append_to_chunk(chunk, delta, sizes)
        if sizes.leaf_of(epoch) != leaf.leaf:
            await pending.add(layout.history_leaf_key(leaf.leaf), leaf.encode())
            leaf = None
        root, leaf = index_epoch(root, leaf, epoch, current.creation_time, sizes)
    await pending.add(layout.history_chunk_key(chunk.chunk), chunk.encode())
    await pending.add(layout.history_leaf_key(leaf.leaf), leaf.encode())
    await pending.add(layout.HISTORY_INDEX_ROOT, root.encode())
    await pending.add(layout.CURRENT_EPOCH, current.encode())
    for write in sealed_size_writes(dict.fromkeys(sizes.sealed_sizes_keys(sealed)), sealed, sizes):
        await pending.add(write.key, write.value)
    await pending.flush()
    return handle
