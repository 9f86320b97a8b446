"""The container's record format (server/containers/operations.py): every operation survives encode -> decode,
frames of the older version 0 (16-bit attribute counts) are still read, arbitrary bytes either decode or raise
CorruptFrame, and a snapshot split into checkpoint parts joins back to itself."""

from __future__ import annotations

import struct
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from server.containers import operations as ops
from server.containers.metadata import SegmentType
from server.containers.state import ContainerState

I64 = st.integers(-(2**63), 2**63 - 1)
ATTRIBUTES = st.dictionaries(st.uuids(), I64, max_size=5)
NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
OPERATIONS = st.one_of(
    st.builds(ops.Append, I64, I64, st.binary(max_size=64), ATTRIBUTES),
    st.builds(ops.Seal, I64, I64),
    st.builds(ops.Merge, I64, I64, I64, I64, st.binary(max_size=32), ATTRIBUTES),
    st.builds(ops.CreateSegment, I64, st.integers(0, 255), NAMES, ATTRIBUTES),
    st.builds(ops.UpdateAttributes, I64, ATTRIBUTES),
    st.builds(ops.Truncate, I64, I64),
    st.builds(ops.Checkpoint, st.binary(max_size=64)),
    st.builds(ops.Delete, I64),
    st.integers(1, 10).flatmap(lambda count: st.builds(ops.CheckpointPart, st.integers(0, count - 1),
                                                       st.just(count), st.binary(max_size=64))),
)


def normalised(operation: ops.Operation) -> ops.Operation:
    """Payload views as bytes, for comparison."""
    if isinstance(operation, ops.Append):
        return operation._replace(data=bytes(operation.data))
    if isinstance(operation, ops.Merge):
        return operation._replace(header=bytes(operation.header))
    return operation


@settings(max_examples=300, deadline=None)
@given(timestamp=I64, first=I64, operations=st.lists(OPERATIONS, max_size=6))
def test_every_operation_survives_a_round_trip(timestamp, first, operations):
    record = b"".join(bytes(part) for part in ops.encode_frame(timestamp, first, operations))
    decoded_timestamp, decoded_first, decoded = ops.decode_frame(record)
    assert (decoded_timestamp, decoded_first) == (timestamp, first)
    assert [normalised(operation) for operation in decoded] == [normalised(operation) for operation in operations]


def test_more_attributes_than_a_sixteen_bit_count_holds():
    attributes = {uuid.UUID(int=number): number for number in range(70_000)}
    record = b"".join(bytes(part) for part in ops.encode_frame(1, 2, [ops.UpdateAttributes(7, attributes)]))
    assert ops.decode_frame(record)[2] == [ops.UpdateAttributes(7, attributes)]


def test_a_version_zero_frame_with_sixteen_bit_attribute_counts_is_still_read():
    """Hand-assembled as logs written before the attribute counts were widened hold them."""
    writer = uuid.UUID(int=5)
    body = struct.pack(">qq", 3, 100) + struct.pack(">H", 1) + writer.bytes + struct.pack(">q", 42) + b"data"
    record = struct.pack(">BqqI", 0, 1_000, 9, 1) + struct.pack(">BI", 1, len(body)) + body
    assert [normalised(operation) for operation in ops.decode_frame(record)[2]] == [
        ops.Append(3, 100, b"data", {writer: 42})]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_corrupt_frame(data):
    try:
        ops.decode_frame(data)
    except ops.CorruptFrame:
        pass


@given(snapshot=st.binary(max_size=2000), part_bytes=st.integers(1, 300))
def test_checkpoint_parts_join_back_to_the_snapshot(snapshot, part_bytes):
    operations = ops.checkpoint_operations(snapshot, part_bytes)
    if len(snapshot) <= part_bytes:
        assert operations == [ops.Checkpoint(snapshot)]
    else:
        assert [part.number for part in operations] == list(range(len(operations)))
        assert all(part.parts == len(operations) and 0 < len(part.data) <= part_bytes for part in operations)
        assert b"".join(part.data for part in operations) == snapshot


def test_a_version_zero_snapshot_is_still_read():
    attributes = {uuid.UUID(int=1): 7}
    name = b"scope/stream/0.#epoch.0"
    snapshot = (struct.pack(">BqqI", 0, 5, 77, 1) + struct.pack(">qBqqBqH", 4, 0, 10, 20, 1, 123, len(name)) + name
                + struct.pack(">H", 1) + uuid.UUID(int=1).bytes + struct.pack(">q", 7))
    assert ContainerState.describe_snapshot(snapshot) == {"scope/stream/0.#epoch.0": (4, 0, 10, 20, True, attributes)}


def test_a_later_checkpoint_is_checked_against_the_replayed_state():
    """Replay compares each later checkpoint with the state the operations before it built (one pass over the
    snapshot): a segment of another length, another attribute or one too many is a mismatch."""
    state = ContainerState()
    writer = uuid.UUID(int=9)
    state.apply(ops.CreateSegment(1, SegmentType.STREAM, "s/a/0.#epoch.0", {writer: 3}), 1, 1)
    state.apply(ops.CreateSegment(2, SegmentType.TABLE, "s/_tables/t", {}), 1, 2)
    state.apply(ops.Append(1, 0, b"abc", {writer: 4}), 1, 3)
    assert state.matches_snapshot(state.snapshot())
    other = ContainerState()
    other.restore(state.snapshot())
    assert other.matches_snapshot(state.snapshot())
    other.apply(ops.Append(1, 3, b"d", {}), 1, 4)
    assert not other.matches_snapshot(state.snapshot())  # another length
    again = ContainerState()
    again.restore(state.snapshot())
    again.apply(ops.UpdateAttributes(1, {writer: 5}), 1, 4)
    assert not again.matches_snapshot(state.snapshot())  # another attribute value
    again = ContainerState()
    again.restore(state.snapshot())
    again.apply(ops.CreateSegment(3, SegmentType.STREAM, "s/b/0.#epoch.0", {}), 1, 4)
    assert not again.matches_snapshot(state.snapshot())  # one too many


def test_deleted_segments_writers_survive_a_snapshot_and_version_2_snapshots_are_still_read():
    """Snapshot version 3 carries what deleted segments stored of their writers (state.py), oldest deletion
    first, between the writers' last use and the segments; a version 2 snapshot (without it) still restores."""
    state = ContainerState()
    writers = [uuid.UUID(int=n) for n in (9, 10)]
    state.apply(ops.CreateSegment(1, SegmentType.STREAM, "s/a/0.#epoch.0", {}), 1, 1)
    state.apply(ops.CreateSegment(2, SegmentType.STREAM, "s/a/1.#epoch.0", {}), 1, 2)
    state.apply(ops.CreateSegment(3, SegmentType.STREAM, "s/a/2.#epoch.1", {}), 1, 3)
    state.apply(ops.Append(1, 0, b"abc", {writers[0]: 4, writers[1]: 2}), 1, 4)
    state.apply(ops.Append(2, 0, b"d", {writers[0]: 7}), 1, 5)
    state.apply(ops.UpdateAttributes(2, {uuid.UUID(int=11): 1}), 1, 6)  # an application's own: not a writer's
    state.apply(ops.Delete(2), 50, 7)
    state.apply(ops.Delete(1), 60, 8)
    snapshot = state.snapshot()
    restored = ContainerState()
    restored.restore(snapshot)
    assert restored.deleted_writers == state.deleted_writers
    assert list(restored.deleted_writers) == ["s/a/1.#epoch.0", "s/a/0.#epoch.0"]
    assert restored.deleted_writer("s/a/1.#epoch.0", uuid.UUID(int=11)) is None
    assert [restored.deleted_writer("s/a/0.#epoch.0", writer) for writer in writers] == [4, 2]
    assert restored.matches_snapshot(snapshot) and set(ContainerState.describe_snapshot(snapshot)) == {
        "s/a/2.#epoch.1"}
    assert restored.expire_deleted_writers(50) == 1 and list(restored.deleted_writers) == ["s/a/0.#epoch.0"]

    empty = ContainerState()
    empty.apply(ops.CreateSegment(3, SegmentType.STREAM, "s/a/2.#epoch.1", {}), 1, 1)
    version_3 = empty.snapshot()
    # header (21 bytes), writers' count (4), the deleted writers' size (4: none), the segment
    assert version_3[0] == 3 and version_3[25:29] == b"\0\0\0\0"
    version_2 = b"\x02" + version_3[1:25] + version_3[29:]  # the same without the (empty) section's size
    old = ContainerState()
    old.restore(version_2)
    assert old.names() == ["s/a/2.#epoch.1"] and not old.deleted_writers
