"""Persisted chunk index hints of SLTS: where a read finds its chunk without walking the whole chunk list.

A segment's chunks form a singly linked list, and the in-memory read index (``read_index.py``) knows only
chunks that reads, writes and walks visited since the container started: the first read of a segment with
many chunks after a restart walked the list from its first chunk (each step a metadata lookup, ~10 us in
memory, more from the metadata table: a second for 100,000 chunks, and storage without appends makes a chunk
per flush). So every *index block* of a segment but the first (``BLOCK_CHUNKS`` rolling lengths of bytes) records, under
its own key in the metadata store, the first chunk that starts in it (``IndexHintRecord``: chunk name and
start offset), written in the transaction that links that chunk. A read looks up the hint of the block
holding its offset (or, if that chunk starts past the offset, of the block before), and walks from there:
at most a block's worth of chunks, O(1) metadata lookups instead of O(chunks).

Hints are hints: a read uses one only if its chunk record is still active and starts at or below the
offset and at or above the segment's first chunk, so a hint to a chunk that a truncation or a
defragmentation unlinked (its record inactive, or gone after the collector's delay) is skipped, and the
read falls back to an earlier block, the in-memory index, or the first chunk. Hints do not outlive their
segment: a truncation removes those below the new first chunk, a delete and a concat (of the source)
remove all of them, in the same transaction. System segments (the journal's pinned records) have none.

The key is the segment's name, a NUL and the block number: no segment or chunk name holds a NUL.
"""

from __future__ import annotations

from .metadata_transaction import MetadataTransaction
from .records import ChunkRecord, IndexHintRecord, SegmentFlags, SegmentRecord

BLOCK_CHUNKS = 16  # an index block spans this many rolling lengths (so a walk from a hint passes ~16 full chunks)
_BLOCKS_PROBED = 3  # a lookup tries the offset's block and the two before it


def block_size(segment: SegmentRecord) -> int:
    return max(1, segment.max_rolling_length) * BLOCK_CHUNKS


def hint_key(segment_name: str, block: int) -> str:
    return f"{segment_name}\0{block}"


def indexed(segment: SegmentRecord) -> bool:
    return not segment.flags & SegmentFlags.SYSTEM


async def chunks_linked(transaction: MetadataTransaction, segment: SegmentRecord, previous_start: int | None,
                        chunks: list[tuple[int, str]]) -> None:
    """Records the hints of chunks just linked at the end of ``segment`` (their (start offset, name), in order);
    ``previous_start`` is the start offset of the chunk before them (None: there was none)."""
    if not chunks or not indexed(segment):
        return
    size = block_size(segment)
    last_block = -1 if previous_start is None else previous_start // size
    for start, name in chunks:
        block = start // size
        if block != last_block and block:  # the first chunk to start in its block (block 0: the first chunk's)
            key = hint_key(segment.name, block)
            await transaction.get(key)  # read first: the commit is conditional on what was read
            transaction.put(IndexHintRecord(key, name, start))
            last_block = block


def may_start_blocks(segment: SegmentRecord, previous_start: int | None, start: int, end: int) -> bool:
    """Whether chunks linked over ``[start, end)`` after a chunk starting at ``previous_start`` can be the first
    of a block (so that ``chunks_linked`` has hints to write): not when the range stays in block 0, or in the
    block of the chunk before it."""
    if not indexed(segment) or end <= start:
        return False
    size = block_size(segment)
    last_block = (end - 1) // size
    return last_block > 0 and not (previous_start is not None and previous_start // size == last_block)


async def remove_hints(transaction: MetadataTransaction, segment: SegmentRecord, below: int | None = None) -> None:
    """Removes the hints of ``segment`` (only those of chunks starting below ``below``, when given)."""
    if not indexed(segment):
        return
    size = block_size(segment)
    first_block = max(1, segment.first_chunk_start_offset // size)
    end = segment.length if below is None else below
    for block in range(first_block, end // size + 1):
        key = hint_key(segment.name, block)
        record = await transaction.get(key)
        if isinstance(record, IndexHintRecord) and (below is None or record.start_offset < below):
            transaction.remove(key)


async def nearest(transaction: MetadataTransaction, segment: SegmentRecord, offset: int) -> tuple[int, str] | None:
    """(start offset, chunk name) of a linked chunk starting at or below ``offset`` in the same or an earlier
    block, from the persisted hints; None when none is usable."""
    if not indexed(segment):
        return None
    size = block_size(segment)
    block = offset // size
    for candidate in range(block, max(0, block - _BLOCKS_PROBED), -1):
        if (candidate + 1) * size <= segment.first_chunk_start_offset:
            break
        hint = await transaction.get(hint_key(segment.name, candidate))
        if not isinstance(hint, IndexHintRecord) or not (
                segment.first_chunk_start_offset <= hint.start_offset <= offset):
            continue
        chunk = await transaction.get(hint.chunk)
        if isinstance(chunk, ChunkRecord) and chunk.active:
            return hint.start_offset, hint.chunk
    return None
