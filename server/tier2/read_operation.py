"""SLTS read (design §5.5): find the chunk holding an offset, then read across chunks.

Reads take no lock and commit nothing: they work on the segment record as committed when the
read started (records are immutable values). Chunks a concurrent truncate, delete or defrag
unlinks keep their records and bytes until the collector's delay has passed, so such a read
still completes.

``region`` finds the chunk the same way and lends its bytes as a file region (no read).

The starting chunk is the last chunk when the offset is in it; otherwise the read index's
nearest chunk at or below the offset; otherwise the first chunk. From there the read follows
``next_chunk`` links (indexing every chunk it passes) until a chunk holds the offset. With the
records cached and the index warm, a read costs no metadata store round trip and one
O(log chunks) lookup.
"""

from __future__ import annotations

from . import chunk_index
from .chunk_storage import ChunkRegion
from .errors import BadOffset, SegmentTruncated, StorageCorrupted
from .metadata_transaction import MetadataTransaction
from .operation_context import OperationContext, load_segment
from .records import ChunkRecord, SegmentRecord


async def read(context: OperationContext, name: str, offset: int, length: int) -> bytes:
    """Exactly ``min(length, segment length - offset)`` bytes from ``offset``.

    Raises SegmentNotFound, SegmentTruncated (offset below the start offset), BadOffset (beyond
    the length); transient errors.
    """
    generation = context.read_index.generation  # before the record: see ReadIndex
    transaction = context.begin(name)
    segment = await load_segment(transaction, name)
    length = _readable(segment, offset, length)
    if length == 0:
        return b""
    chunk_start, chunk, record = await _chunk_holding(context, transaction, segment, offset, generation)
    parts = []
    while True:
        size = min(length, chunk_start + record.length - offset)
        data = await context.chunks.read(chunk, offset - chunk_start, size)
        if len(data) != size:
            raise StorageCorrupted(f"chunk {chunk} returned {len(data)} bytes, {size} expected at "
                                   f"{offset - chunk_start}: it is shorter than its committed length")
        parts.append(data)
        offset += size
        length -= size
        if not length:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        chunk_start, chunk = _step(context, segment, chunk_start, record, offset, generation)
        record = await transaction.linked_chunk(chunk)  # the read continues at this chunk's start


async def region(context: OperationContext, name: str, offset: int, length: int) -> ChunkRegion | None:
    """Up to ``length`` bytes from ``offset`` as a region of the one chunk holding ``offset`` (a
    read that reaches past that chunk is cut at its end); None at the segment's end.

    Only with a chunk storage that ``supports_regions``. Raises as ``read`` does.
    """
    generation = context.read_index.generation
    transaction = context.begin(name)
    segment = await load_segment(transaction, name)
    length = _readable(segment, offset, length)
    if length == 0:
        return None
    chunk_start, chunk, record = await _chunk_holding(context, transaction, segment, offset, generation)
    return await context.chunks.open_region(chunk, offset - chunk_start,
                                            min(length, chunk_start + record.length - offset))


def _readable(segment: SegmentRecord, offset: int, length: int) -> int:
    """How many of ``length`` bytes from ``offset`` the segment has; raises for an offset outside it."""
    if length < 0:
        raise ValueError(f"negative read length {length}")
    if offset < segment.start_offset:
        raise SegmentTruncated(segment.name, segment.start_offset, offset)
    if offset > segment.length:
        raise BadOffset(segment.name, segment.length, offset)
    return min(length, segment.length - offset)


async def _chunk_holding(context: OperationContext, transaction: MetadataTransaction, segment: SegmentRecord,
                         offset: int, generation: int) -> tuple[int, str, ChunkRecord]:
    """(start offset, name, record) of the chunk holding ``offset`` (below the segment's length).

    The walk starts at the nearest chunk the index knows and indexes every chunk it passes.
    """
    chunk_start, chunk = await _nearest_chunk(context, transaction, segment, offset)
    while True:
        record = await transaction.linked_chunk(chunk)
        if offset < chunk_start + record.length:  # chunks before the one holding ``offset`` are only walked past
            return chunk_start, chunk, record
        chunk_start, chunk = _step(context, segment, chunk_start, record, offset, generation)


def _step(context: OperationContext, segment: SegmentRecord, chunk_start: int, record: ChunkRecord, offset: int,
          generation: int) -> tuple[int, str]:
    """(start offset, name) of the chunk after the one at ``chunk_start``, indexed; ``offset`` lies beyond."""
    if record.next_chunk is None:
        raise StorageCorrupted(f"segment {segment.name}: the chunk list ends before offset {offset}")
    chunk_start += record.length
    context.read_index.add(segment.name, chunk_start, record.next_chunk, generation)
    return chunk_start, record.next_chunk


async def _nearest_chunk(context: OperationContext, transaction: MetadataTransaction, segment: SegmentRecord,
                         offset: int) -> tuple[int, str]:
    """(start offset, name) of the chunk to walk from: the last chunk if it holds ``offset``, else the
    indexed chunk nearest below ``offset`` (in memory, or a persisted hint when memory has none within an
    index block), else the first chunk."""
    first, last = segment.first_chunk, segment.last_chunk
    if first is None or last is None:  # ``offset`` is below the length: some chunk holds it
        raise StorageCorrupted(f"segment {segment.name} has bytes at {offset} but no chunks")
    if offset >= segment.last_chunk_start_offset:
        return segment.last_chunk_start_offset, last
    nearest = context.read_index.floor(segment.name, offset)
    if nearest is not None and nearest[0] < segment.first_chunk_start_offset:
        nearest = None
    if nearest is None or offset - nearest[0] > chunk_index.block_size(segment):
        hinted = await chunk_index.nearest(transaction, segment, offset)
        if hinted is not None and (nearest is None or hinted[0] > nearest[0]):
            nearest = hinted
    return (segment.first_chunk_start_offset, first) if nearest is None else nearest
