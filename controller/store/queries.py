"""Segment queries over the PDP-32 records, each at a bounded number of store calls.

    current_segments       1 call   the current-epoch record
    epoch_segments         1 call   the epoch record
    segments_at_time       3 calls  index root + truncation, index leaf, epoch record
    successors             2 calls  sealed-epoch record, then that epoch and the one before it
                                    (1 call for a segment that has not been sealed)
    is_segment_valid       1 call   the segment's creation epoch + truncation record
    segments_between       1 call   the first epoch + the history chunks spanned (one more per 32 chunks);
                                    +1 for rolling-transaction duplicates, +1 (truncation + current
                                    epoch) when a cut is left open

None of these depends on how many epochs the stream has (tests/unit/controller_store/
test_scalability.py checks the exact counts at 1,000 and 100,000 epochs).
"""

from __future__ import annotations

from collections.abc import Sequence

from wire.naming import epoch_of

from . import layout
from .errors import NotFound
from .history import chunks_spanning, deltas_between, find_epoch, find_leaf, rebuild_epochs
from .key_space import successors_with_predecessors
from .records import (
    EpochRecord,
    HistoryChunk,
    HistoryIndexLeaf,
    HistoryIndexRoot,
    SealedEpochRecord,
    SegmentRecord,
    TruncationRecord,
)
from .stream_cuts import compute_span, creation_epoch_range, is_truncated, overlay_truncation, segments_between
from .stream_store import StreamStore

KEYS_PER_READ_MAX = 32  # history chunks can be ~100 KB each: keep one ReadTable reply well under a frame


async def current_segments(stream: StreamStore) -> EpochRecord:
    """The active epoch (the tail of the stream)."""
    record, _ = await stream.get_current_epoch()
    return record


async def epoch_segments(stream: StreamStore, epoch: int) -> EpochRecord:
    """The segments of ``epoch``. Raises NotFound if it does not exist."""
    return await stream.get_epoch(epoch)


async def epoch_at_time(stream: StreamStore, time: int) -> tuple[int, TruncationRecord]:
    """The epoch that was current at ``time`` (epoch 0 before the stream), with the truncation record."""
    (root, _), (truncation, _) = await stream.read_records(
        (layout.HISTORY_INDEX_ROOT, HistoryIndexRoot), (layout.TRUNCATION, TruncationRecord))
    leaf, _ = await stream.read(layout.history_leaf_key(find_leaf(root, time)), HistoryIndexLeaf)
    return find_epoch(leaf, time, stream.sizes), truncation


async def segments_at_time(stream: StreamStore, time: int) -> dict[SegmentRecord, int]:
    """The stream cut at ``time``: that epoch's segments at offset 0, moved up to the truncation cut
    where the stream was truncated past them."""
    epoch, truncation = await epoch_at_time(stream, time)
    return overlay_truncation(await stream.get_epoch(epoch), truncation)


async def successors(stream: StreamStore, segment_id: int) -> dict[SegmentRecord, list[int]]:
    """The segments that replaced ``segment_id``, each with all of its predecessors.

    Empty if the segment has not been sealed by a scale (it is active, or the stream was sealed).
    """
    (sealed,) = await stream.find_records((layout.sealed_epoch_key(segment_id), SealedEpochRecord))
    if sealed is None:
        return {}
    (sealed_epoch, _), (previous, _) = await stream.read_records(
        (layout.epoch_key(sealed[0].epoch), EpochRecord), (layout.epoch_key(sealed[0].epoch - 1), EpochRecord))
    return successors_with_predecessors(segment_id, sealed_epoch, previous)


async def is_segment_valid(stream: StreamStore, segment_id: int) -> bool:
    """True if the segment exists in the stream (in its creation epoch) and is not truncated away."""
    epoch, truncation = await stream.find_records(
        (layout.epoch_key(epoch_of(segment_id)), EpochRecord), (layout.TRUNCATION, TruncationRecord))
    segment = None if epoch is None else epoch[0].segment(segment_id)
    if segment is None:
        return False
    if truncation is None:  # written with the stream, as its epoch 0 is
        raise NotFound(f"{stream}: no truncation record", stream.tables.metadata, layout.TRUNCATION)
    return not is_truncated(segment, truncation[0])


async def fetch_epochs(stream: StreamStore, first: int, last: int) -> list[EpochRecord]:
    """Epochs ``first``..``last`` (inclusive), rebuilt from one epoch record and the history chunks."""
    keys = [layout.epoch_key(first)] + [layout.history_chunk_key(chunk)
                                        for chunk in chunks_spanning(first, last, stream.sizes)]
    found = await _get_all(stream, keys)
    if found[0] is None:
        raise NotFound(f"{stream}: no epoch {first}", stream.tables.metadata, layout.epoch_key(first))
    first_record = EpochRecord.decode(found[0].value)
    chunks = [HistoryChunk.decode(value.value) for value in found[1:] if value is not None]
    deltas = deltas_between(chunks, first, last)
    duplicate_keys = [layout.epoch_key(delta.epoch) for delta in deltas if delta.is_duplicate]
    duplicates = {}
    for value in await _get_all(stream, duplicate_keys):  # no call when there are none
        record = EpochRecord.decode(value.value)
        duplicates[record.epoch] = record
    return rebuild_epochs(first_record, deltas, duplicates)


async def stream_cut_span(stream: StreamStore, cut: dict[int, int]) -> dict[SegmentRecord, int]:
    """Each segment of a (non-empty) cut with the highest epoch holding it (spec §6.6)."""
    low, high = creation_epoch_range(cut)
    return compute_span(cut, await fetch_epochs(stream, low, high))


async def segments_between_cuts(stream: StreamStore, from_cut: dict[int, int],
                                to_cut: dict[int, int]) -> set[SegmentRecord]:
    """Every segment with data between two stream cuts. An empty ``from_cut`` is the head of the
    stream (the truncation cut, or epoch 0), an empty ``to_cut`` its tail (the current epoch)."""
    if not from_cut or not to_cut:
        (truncation, _), (current, _) = await stream.read_records(
            (layout.TRUNCATION, TruncationRecord), (layout.CURRENT_EPOCH, EpochRecord))
        to_cut = to_cut or {segment.segment_id: 0 for segment in current.segments}
        from_cut = from_cut or dict(truncation.stream_cut)
    if not from_cut:  # never truncated: the head is epoch 0, which the fetch below starts at
        low, high = 0, creation_epoch_range(to_cut)[1]
    else:
        low, high = creation_epoch_range(from_cut, to_cut)
    epochs = await fetch_epochs(stream, low, high)
    if not from_cut:
        from_cut = {segment.segment_id: 0 for segment in epochs[0].segments}
    span_from, span_to = compute_span(from_cut, epochs), compute_span(to_cut, epochs)
    first, last = min(span_from.values()), max(span_to.values())
    return segments_between(span_from, span_to, [epoch for epoch in epochs if first <= epoch.epoch <= last])


async def _get_all(stream: StreamStore, keys: Sequence[str]) -> list:
    found = []
    for start in range(0, len(keys), KEYS_PER_READ_MAX):
        found += await stream.kv.get_many(stream.tables.metadata, keys[start:start + KEYS_PER_READ_MAX])
    return found
