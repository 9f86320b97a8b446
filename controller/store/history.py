"""Pure helpers for the history time index and the chunked history time series (PDP-32).

Theory of operation. Epoch creation times strictly increase, so "which epoch was current at time
T" is a binary search over them. PDP-32 splits that sorted list into a two-level tree so that no
value grows without bound in practice: leaf ``n`` holds the creation times of epochs
[n * L, (n + 1) * L), and the root holds the first time of every leaf. A lookup reads the root,
then one leaf, then the epoch record: a constant number of store calls at any history length.

The history time series stores, per epoch, only the delta from the previous epoch (segments
sealed and created), ``C`` epochs per chunk. Rebuilding a run of consecutive epochs therefore
costs one epoch record plus one chunk per ``C`` epochs, instead of one record per epoch.
Rolling-transaction duplicates carry no delta; their epoch records are read individually.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .errors import CorruptRecord
from .key_space import apply_delta
from .layout import ChunkSizes
from .records import EpochRecord, HistoryChunk, HistoryIndexLeaf, HistoryIndexRoot, HistoryTimeSeriesRecord


def append_to_chunk(chunk: HistoryChunk | None, record: HistoryTimeSeriesRecord, sizes: ChunkSizes) -> HistoryChunk:
    """``chunk`` (None: not written yet) with ``record`` appended. Appending twice is a no-op."""
    number = sizes.chunk_of(record.epoch)
    if chunk is None:
        if record.epoch != number * sizes.history_chunk_epochs:
            raise CorruptRecord(f"history chunk {number} is missing before epoch {record.epoch}")
        return HistoryChunk(number, (record,))
    if chunk.chunk != number:
        raise ValueError(f"epoch {record.epoch} belongs in history chunk {number}, not {chunk.chunk}")
    last = chunk.records[-1].epoch
    if record.epoch <= last:
        return chunk
    if record.epoch != last + 1:
        raise CorruptRecord(f"history chunk {number} ends at epoch {last}, cannot append {record.epoch}")
    return HistoryChunk(number, chunk.records + (record,))


def index_epoch(root: HistoryIndexRoot, leaf: HistoryIndexLeaf | None, epoch: int, time: int,
                sizes: ChunkSizes) -> tuple[HistoryIndexRoot, HistoryIndexLeaf]:
    """The index root and leaf after recording that ``epoch`` started at ``time``.

    The root changes only when ``epoch`` opens a new leaf. Indexing an epoch twice is a no-op.
    """
    number = sizes.leaf_of(epoch)
    position = epoch - number * sizes.index_leaf_epochs
    if leaf is None:
        if position != 0:
            raise CorruptRecord(f"history index leaf {number} is missing before epoch {epoch}")
        leaf = HistoryIndexLeaf(number, ())
    if leaf.leaf != number:
        raise ValueError(f"epoch {epoch} belongs in index leaf {number}, not {leaf.leaf}")
    if position < len(leaf.epoch_times):
        return root, leaf
    if position != len(leaf.epoch_times):
        raise CorruptRecord(f"history index leaf {number} has {len(leaf.epoch_times)} times, cannot add epoch {epoch}")
    if position == 0 and len(root.leaf_start_times) == number:
        root = HistoryIndexRoot(root.leaf_start_times + (time,))
    return root, HistoryIndexLeaf(number, leaf.epoch_times + (time,))


def find_leaf(root: HistoryIndexRoot, time: int) -> int:
    """The leaf holding the epoch current at ``time`` (leaf 0 for times before the stream)."""
    return max(bisect.bisect_right(root.leaf_start_times, time) - 1, 0)


def find_epoch(leaf: HistoryIndexLeaf, time: int, sizes: ChunkSizes) -> int:
    """The epoch current at ``time``, searching within ``leaf``."""
    position = max(bisect.bisect_right(leaf.epoch_times, time) - 1, 0)
    return leaf.leaf * sizes.index_leaf_epochs + position


def chunks_spanning(first_epoch: int, last_epoch: int, sizes: ChunkSizes) -> range:
    """The history chunk numbers holding the deltas of epochs (first_epoch, last_epoch] (none if empty)."""
    if last_epoch <= first_epoch:
        return range(0)
    return range(sizes.chunk_of(first_epoch + 1), sizes.chunk_of(last_epoch) + 1)


def deltas_between(chunks: Sequence[HistoryChunk], first_epoch: int,
                   last_epoch: int) -> list[HistoryTimeSeriesRecord]:
    """The history records of epochs (first_epoch, last_epoch], in order. Raises CorruptRecord on gaps."""
    deltas = [record for chunk in chunks for record in chunk.records if first_epoch < record.epoch <= last_epoch]
    expected = list(range(first_epoch + 1, last_epoch + 1))
    if [record.epoch for record in deltas] != expected:
        raise CorruptRecord(f"history of epochs {first_epoch + 1}..{last_epoch} is incomplete")
    return deltas


def rebuild_epochs(first: EpochRecord, deltas: Sequence[HistoryTimeSeriesRecord],
                   duplicates: dict[int, EpochRecord]) -> list[EpochRecord]:
    """``first`` and the epochs after it, rebuilt by applying ``deltas`` in order.

    ``duplicates`` holds the epoch records of the deltas that are rolling-transaction duplicates
    (epoch != reference epoch), which carry no delta and are taken as stored.
    """
    epochs = [first]
    for delta in deltas:
        if delta.is_duplicate:
            epochs.append(duplicates[delta.epoch])
            continue
        segments = apply_delta(epochs[-1].segments, delta.sealed_segment_ids, delta.created_segments)
        epochs.append(EpochRecord(delta.epoch, delta.reference_epoch, delta.scale_time, segments))
    return epochs
