"""Property test of scale sequences: after random splits, merges and rolling-transaction duplicates
(through the real scale steps, in memory, with tiny chunk sizes), every epoch tiles [0, 1) exactly
and matches a plain list-of-ranges model, the history rebuilds every epoch, segments-at-time finds
each epoch, and successors/predecessors agree with each other in both directions."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.store import ChunkSizes, MetadataStore, queries, scale
from controller.store.key_space import equal_ranges, tiling_error
from tests.support.doubles.key_value_store import InMemoryKeyValueStore

from .seeding import create_active_stream

SIZES = ChunkSizes(history_chunk_epochs=3, index_leaf_epochs=2, sealed_sizes_shard_epochs=2)

operations = st.lists(st.one_of(
    st.tuples(st.just("split"), st.integers(0, 1000), st.integers(2, 4)),
    st.tuples(st.just("merge"), st.integers(0, 1000), st.integers(2, 3)),
    st.tuples(st.just("roll"), st.integers(0, 1000), st.just(0)),
), min_size=1, max_size=12)


async def apply(stream, operation, time: int, model: list[list[tuple[float, float]]]) -> None:
    """Runs one operation on the store and mirrors its effect on the model (ranges per epoch)."""
    kind, position, count = operation
    current = await queries.current_segments(stream)
    segments = current.segments
    if kind == "roll":
        transaction_epoch = position % (current.epoch + 1)
        await scale.create_rolling_epochs(stream, transaction_epoch, current.epoch, time)
        await scale.complete_rolling_epochs(stream, current.epoch, {})
        model += [model[transaction_epoch], model[current.epoch]]
        return
    if kind == "split":
        chosen = [segments[position % len(segments)]]
        ranges = equal_ranges(chosen[0].key_start, chosen[0].key_end, count)
    else:
        if len(segments) < count:
            return
        start = position % (len(segments) - count + 1)
        chosen = list(segments[start:start + count])
        ranges = [(chosen[0].key_start, chosen[-1].key_end)]
    transition = await scale.submit_scale(stream, [segment.segment_id for segment in chosen], ranges, time)
    await scale.commit_scale(stream, transition, {segment.segment_id: 1 for segment in chosen})
    sealed = {(segment.key_start, segment.key_end) for segment in chosen}
    model.append(sorted([bounds for bounds in model[-1] if bounds not in sealed] + ranges))


async def check_successors(stream, epochs) -> None:
    """For each epoch, the segments it sealed lead to exactly the segments it created, and back."""
    for previous, epoch in zip(epochs, epochs[1:]):
        sealed = previous.segment_ids - epoch.segment_ids
        created = epoch.segment_ids - previous.segment_ids
        reached = set()
        for segment_id in sealed:
            segment = previous.segment(segment_id)
            successors = await queries.successors(stream, segment_id)
            assert successors and all(successor.overlaps(segment) for successor in successors)
            covered = sorted((successor.key_start, successor.key_end) for successor in successors)
            assert covered[0][0] <= segment.key_start and covered[-1][1] >= segment.key_end
            for successor, predecessors in successors.items():
                assert segment_id in predecessors and set(predecessors) <= sealed
                assert all(previous.segment(p).overlaps(successor) for p in predecessors)
                reached.add(successor.segment_id)
        assert reached == created
    for segment in epochs[-1].segments:
        assert await queries.successors(stream, segment.segment_id) == {}


async def run(sequence) -> None:
    metadata = MetadataStore(InMemoryKeyValueStore(), SIZES)
    stream = await create_active_stream(metadata, "scope", "stream", 3, 1000)
    model = [[(segment.key_start, segment.key_end) for segment in (await queries.current_segments(stream)).segments]]
    for number, operation in enumerate(sequence, start=1):
        await apply(stream, operation, 1000 + number * 10, model)
    current = await queries.current_segments(stream)
    epochs = [await queries.epoch_segments(stream, epoch) for epoch in range(current.epoch + 1)]
    assert len(epochs) == len(model)
    for epoch, ranges in zip(epochs, model):
        assert tiling_error(epoch.segments) is None and epoch.segments[-1].key_end == 1.0
        assert [(segment.key_start, segment.key_end) for segment in epoch.segments] == ranges
        assert await queries.segments_at_time(stream, epoch.creation_time) == {s: 0 for s in epoch.segments}
    assert await queries.fetch_epochs(stream, 0, current.epoch) == epochs
    assert current == epochs[-1]
    await check_successors(stream, epochs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=operations)
def test_scale_sequences_keep_the_key_space_tiled_and_successors_consistent(sequence):
    """Random scale sequences: tiling, model agreement, history, time lookups and successor/predecessor symmetry."""
    asyncio.run(run(sequence))
