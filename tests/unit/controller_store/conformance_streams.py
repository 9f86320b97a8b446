"""Conformance suite, part 2: scopes, streams, states, scaling and segment queries over any store.

Subclass ``StreamConformance`` and provide a ``kv`` fixture yielding a fresh, empty store. Chunk
sizes are tiny so that a few scales cross history-chunk, index-leaf and shard boundaries.
"""

from __future__ import annotations

import asyncio

import pytest

from controller.store import (ChunkSizes, IllegalStateTransition, MetadataStore, NotEmpty, NotFound, ScaleConflict,
                              ScaleInputInvalid, State, WriteConflict, layout, queries, retention, scale)
from controller.store.key_space import tiling_error
from controller.store.records import EpochRecord, StreamConfigurationRecord, TruncationRecord
from controller_api.model import ScalingPolicy, StreamConfiguration

SIZES = ChunkSizes(history_chunk_epochs=3, index_leaf_epochs=2, sealed_sizes_shard_epochs=2)
CONFIGURATION = StreamConfiguration(ScalingPolicy(min_num_segments=2), tags=("a", "b"))


async def make_metadata(kv) -> MetadataStore:
    metadata = MetadataStore(kv, SIZES)
    await metadata.initialize()
    return metadata


async def active_stream(metadata: MetadataStore, name: str = "stream", time: int = 1000):
    await metadata.scopes.create_scope("scope")
    stream, _ = await metadata.create_stream("scope", name, CONFIGURATION, time)
    await stream.transition_state(State.ACTIVE)
    return stream


async def split_first(stream, time: int):
    """Scales the stream by splitting its first segment in two; returns the new current epoch."""
    current = await queries.current_segments(stream)
    segment = current.segments[0]
    middle = (segment.key_start + segment.key_end) / 2
    transition = await scale.submit_scale(stream, [segment.segment_id],
                                          [(segment.key_start, middle), (middle, segment.key_end)], time)
    return await scale.commit_scale(stream, transition, {segment.segment_id: 100})


class StreamConformance:
    @pytest.fixture
    async def metadata(self, kv):
        return await make_metadata(kv)

    async def test_scopes_list_with_tokens_and_delete_only_when_empty(self, metadata):
        """Scopes are created once, listed page by page, and deleted only when they hold nothing."""
        names = [f"scope{number}" for number in range(7)]
        for name in names:
            assert await metadata.scopes.create_scope(name) is True
        assert await metadata.scopes.create_scope("scope0") is False
        listed, token = [], ""
        while True:
            page, token = await metadata.scopes.list_scopes(token, 3)
            if not page:
                break
            assert len(page) <= 3
            listed += page
        assert sorted(listed) == names
        await metadata.create_stream("scope0", "stream", CONFIGURATION, 1)
        with pytest.raises(NotEmpty):
            await metadata.scopes.delete_scope("scope0")
        await metadata.scopes.delete_scope("scope1")
        assert not await metadata.scopes.scope_exists("scope1")
        with pytest.raises(NotFound):
            await metadata.scopes.delete_scope("scope1")

    async def test_streams_need_a_live_scope(self, metadata):
        """Creating a stream in a missing or sealed (being deleted) scope raises NotFound."""
        with pytest.raises(NotFound):
            await metadata.create_stream("nowhere", "stream", CONFIGURATION, 1)
        await metadata.scopes.create_scope("scope")
        await metadata.scopes.seal_scope("scope")
        with pytest.raises(NotFound):
            await metadata.create_stream("scope", "stream", CONFIGURATION, 1)
        assert await metadata.scopes.create_scope("scope") is False

    async def test_stream_creation_writes_every_initial_record_once(self, metadata):
        """A new stream is CREATING with its configuration and a tiled epoch 0; a retry with the same
        creation time is the same creation, another time is a different stream; it is listed."""
        await metadata.scopes.create_scope("scope")
        stream, created = await metadata.create_stream("scope", "stream", CONFIGURATION, 1000)
        assert created
        assert (await metadata.create_stream("scope", "stream", CONFIGURATION, 1000))[1] is True
        assert (await metadata.create_stream("scope", "stream", CONFIGURATION, 2000))[1] is False
        assert (await stream.get_state())[0] == State.CREATING
        assert (await stream.get_configuration())[0] == StreamConfigurationRecord(CONFIGURATION)
        assert await stream.creation_time() == 1000
        epoch = await queries.current_segments(stream)
        assert epoch == await queries.epoch_segments(stream, 0)
        assert len(epoch.segments) == 2 and tiling_error(epoch.segments) is None
        assert (await metadata.scopes.list_streams("scope"))[0] == ["stream"]
        truncation, _ = await retention.get_truncation(stream)
        assert truncation.is_empty

    async def test_state_transitions_allowed_and_refused(self, metadata):
        """The state follows the transition table; a refused transition leaves the state unchanged."""
        await metadata.scopes.create_scope("scope")
        stream, _ = await metadata.create_stream("scope", "stream", CONFIGURATION, 1)
        with pytest.raises(IllegalStateTransition):
            await stream.transition_state(State.SCALING)
        assert (await stream.get_state())[0] == State.CREATING
        for state in (State.ACTIVE, State.ACTIVE, State.SCALING, State.ACTIVE, State.UPDATING, State.ACTIVE,
                      State.SEALING, State.SEALED):
            await stream.transition_state(state)
            assert (await stream.get_state())[0] == state
        for refused in (State.ACTIVE, State.SCALING, State.CREATING):
            with pytest.raises(IllegalStateTransition):
                await stream.transition_state(refused)
        with pytest.raises(NotFound):
            await metadata.stream("scope", "missing").get_state()

    async def test_expected_state_guards_the_transition(self, metadata):
        """``expected`` refuses a transition from another (allowed) state, but not a repeat of it."""
        stream = await active_stream(metadata)
        await stream.transition_state(State.TRUNCATING)
        with pytest.raises(IllegalStateTransition):
            await stream.transition_state(State.ACTIVE, expected=State.SCALING)
        await stream.transition_state(State.ACTIVE, expected=State.TRUNCATING)
        await stream.transition_state(State.ACTIVE, expected=State.TRUNCATING)

    async def test_only_one_workflow_wins_the_active_state(self, metadata):
        """Concurrent ACTIVE -> SCALING / TRUNCATING / UPDATING: exactly one succeeds."""
        stream = await active_stream(metadata)
        results = await asyncio.gather(*(stream.transition_state(state) for state in
                                         (State.SCALING, State.TRUNCATING, State.UPDATING)), return_exceptions=True)
        assert sum(not isinstance(result, Exception) for result in results) == 1
        assert all(isinstance(result, (WriteConflict, IllegalStateTransition)) for result in results
                   if isinstance(result, Exception))

    async def test_configuration_update_is_compare_and_swap(self, metadata):
        """An update from a stale version is refused; the current one wins."""
        stream = await active_stream(metadata)
        configuration, version = await stream.get_configuration()
        updated = StreamConfigurationRecord(StreamConfiguration(ScalingPolicy(min_num_segments=3), tags=("c",)),
                                            updating=True, tags_to_remove=("a", "b"))
        await stream.replace_configuration(updated, version)
        with pytest.raises(WriteConflict):
            await stream.replace_configuration(configuration, version)
        assert (await stream.get_configuration())[0] == updated

    async def test_scale_steps_are_idempotent_and_resumable(self, metadata):
        """Every scale step can run twice (a re-driven crash) with the same result, and the stream
        ends one epoch further, ACTIVE, with successors and sealed sizes recorded."""
        stream = await active_stream(metadata)
        first, second = (await queries.current_segments(stream)).segments
        ranges = [(0.0, 0.25), (0.25, first.key_end)]
        transition = await scale.submit_scale(stream, [first.segment_id], ranges, 2000)
        assert await scale.submit_scale(stream, [first.segment_id], ranges, 2500) == transition
        with pytest.raises(ScaleConflict):
            await scale.submit_scale(stream, [second.segment_id], [(second.key_start, 1.0)], 2000)
        await stream.transition_state(State.SCALING)
        epoch = await scale.create_new_epoch(stream, transition)
        assert await scale.create_new_epoch(stream, transition) == epoch
        assert (await queries.current_segments(stream)).epoch == 0  # pointer moves only in step 3
        assert set(await queries.successors(stream, first.segment_id)) == set(epoch.segments[:2])
        for _ in range(2):
            await scale.seal_old_segments(stream, transition, {first.segment_id: 4096})
            await scale.complete_scale(stream, transition)
        assert await queries.current_segments(stream) == epoch
        assert (await stream.get_state())[0] == State.ACTIVE
        sizes = await retention.get_sealed_sizes(stream, [first.segment_id, second.segment_id])
        assert sizes == {first.segment_id: 4096}
        assert epoch.epoch == 1 and tiling_error(epoch.segments) is None

    async def test_invalid_scale_input_is_refused(self, metadata):
        """Unknown segments, gaps, overlaps and ranges beyond the sealed ones are ScaleInputInvalid."""
        stream = await active_stream(metadata)
        first, second = (await queries.current_segments(stream)).segments
        for seal, ranges in (([12345], [(0.0, 0.5)]), ([first.segment_id], [(0.0, 0.2), (0.3, 0.5)]),
                             ([first.segment_id], [(0.0, 0.3), (0.2, 0.5)]), ([first.segment_id], [(0.0, 0.6)]),
                             ([first.segment_id, first.segment_id], [(0.0, 0.5)]), ([], [])):
            with pytest.raises(ScaleInputInvalid):
                await scale.submit_scale(stream, seal, ranges, 2000)
        merged = await scale.submit_scale(stream, [second.segment_id, first.segment_id], [(0.0, 1.0)], 2000)
        assert merged.new_segments[0].key_end == 1.0

    async def test_history_queries_across_chunk_and_leaf_boundaries(self, metadata):
        """After seven scales (crossing chunks of 3 and leaves of 2), segments at any time and the
        rebuilt history match the stored epoch records."""
        stream = await active_stream(metadata, time=1000)
        epochs = [await queries.current_segments(stream)]
        for number in range(1, 8):
            epochs.append(await split_first(stream, 1000 + number * 100))
        assert await queries.fetch_epochs(stream, 0, 7) == epochs
        assert await queries.fetch_epochs(stream, 2, 5) == epochs[2:6]
        for epoch in epochs:
            at_time = await queries.segments_at_time(stream, epoch.creation_time + 50)
            assert at_time == {segment: 0 for segment in epoch.segments}
        assert set(await queries.segments_at_time(stream, 0)) == set(epochs[0].segments)

    async def test_rolling_transaction_epochs_chain_successors(self, metadata):
        """Rolling a txn epoch adds a duplicate of it and of the active epoch, with their reference
        epochs; successors lead from the old active segments through both duplicates."""
        stream = await active_stream(metadata)
        await split_first(stream, 2000)
        transaction_epoch, active = await queries.epoch_segments(stream, 0), await queries.current_segments(stream)
        duplicate_of_transaction, duplicate_of_active = await scale.create_rolling_epochs(stream, 0, 1, 3000)
        assert (duplicate_of_transaction.epoch, duplicate_of_transaction.reference_epoch) == (2, 0)
        assert (duplicate_of_active.epoch, duplicate_of_active.reference_epoch) == (3, 1)
        assert await scale.create_rolling_epochs(stream, 0, 1, 3000) == (duplicate_of_transaction,
                                                                         duplicate_of_active)
        await scale.complete_rolling_epochs(stream, 1, {segment.segment_id: 7 for segment in active.segments})
        assert await queries.current_segments(stream) == duplicate_of_active
        successors = await queries.successors(stream, active.segments[0].segment_id)
        assert set(successors) <= set(duplicate_of_transaction.segments) and successors
        for successor, predecessors in successors.items():
            assert set(predecessors) <= active.segment_ids
            assert set(await queries.successors(stream, successor.segment_id)) <= set(duplicate_of_active.segments)
        assert await queries.fetch_epochs(stream, 0, 3) == [transaction_epoch, active, duplicate_of_transaction,
                                                            duplicate_of_active]

    async def test_truncation_moves_the_head(self, metadata):
        """After truncating at a later cut, segments read past are invalid, segments at an old time
        come from the truncation cut, and segments between head and tail start at the cut."""
        stream = await active_stream(metadata)
        epoch0 = await queries.current_segments(stream)
        epoch1 = await split_first(stream, 2000)
        epoch2 = await split_first(stream, 3000)
        cut = {segment.segment_id: 10 for segment in epoch1.segments}
        span = await queries.stream_cut_span(stream, cut)
        assert set(span.values()) <= {1, 2}
        between = await queries.segments_between_cuts(stream, {}, cut)
        assert between == set(epoch0.segments) | set(epoch1.segments)
        to_delete = frozenset({epoch0.segments[0].segment_id})
        await retention.start_truncation(stream, TruncationRecord(cut, span, to_delete))
        await retention.complete_truncation(stream)
        assert not await queries.is_segment_valid(stream, epoch0.segments[0].segment_id)
        assert await queries.is_segment_valid(stream, epoch0.segments[1].segment_id)  # still in the cut
        assert await queries.is_segment_valid(stream, epoch2.segments[0].segment_id)
        assert not await queries.is_segment_valid(stream, 99)
        assert await queries.segments_at_time(stream, 1500) == {segment: 10 for segment in epoch1.segments}
        assert await queries.segments_between_cuts(stream, {}, {}) == set(epoch1.segments) | set(epoch2.segments)

    async def test_deleting_a_stream(self, metadata):
        """Only a SEALED stream is deleted; its tables go, it leaves its scope, and a re-created
        stream of the same name numbers its segments above the old ones."""
        stream = await active_stream(metadata)
        await split_first(stream, 2000)
        with pytest.raises(IllegalStateTransition):
            await metadata.delete_stream("scope", "stream")
        await stream.transition_state(State.SEALED)
        assert await metadata.delete_stream("scope", "stream") is True
        assert await metadata.delete_stream("scope", "stream") is False
        for table in stream.tables.all:
            with pytest.raises(NotFound):
                await metadata.kv.list_entries(table)
        assert (await metadata.scopes.list_streams("scope"))[0] == []
        again, created = await metadata.create_stream("scope", "stream", CONFIGURATION, 5000)
        assert created and min(segment.number for segment in (await queries.current_segments(again)).segments) == 4
        assert await again.read_many([(layout.epoch_key(1), EpochRecord)]) == [None]  # fresh tables: no old epoch 1
