"""SLTS read (design §5.5): find the chunk holding an offset, then read across chunks.

Reads take no lock and commit nothing: they work on the segment record as committed when the
read started (records are immutable values). Chunks a concurrent truncate, delete or defrag
unlinks keep their records and bytes until the collector's delay has passed, so such a read
still completes.

The starting chunk is the last chunk when the offset is in it; otherwise the read index's
nearest chunk at or below the offset; otherwise the first chunk. From there the read follows
``next_chunk`` links (indexing every chunk it passes) until a chunk holds the offset. With the
records cached and the index warm, a read costs no metadata store round trip and one
O(log chunks) lookup.
"""

from __future__ import annotations

from .errors import BadOffset, SegmentTruncated, StorageCorrupted
from .operation_context import OperationContext, load_segment
from .records import SegmentRecord


async def read(context: OperationContext, name: str, offset: int, length: int) -> bytes:
    """Exactly ``min(length, segment length - offset)`` bytes from ``offset``.

    Raises SegmentNotFound, SegmentTruncated (offset below the start offset), BadOffset (beyond
    the length); transient errors.
    """
    if length < 0:
        raise ValueError(f"negative read length {length}")
    generation = context.read_index.generation  # before the record: see ReadIndex
    transaction = context.begin(name)
    segment = await load_segment(transaction, name)
    if offset < segment.start_offset:
        raise SegmentTruncated(name, segment.start_offset, offset)
    if offset > segment.length:
        raise BadOffset(name, segment.length, offset)
    length = min(length, segment.length - offset)
    if length == 0:
        return b""
    chunk_start, chunk = _nearest_chunk(context, segment, offset)
    parts = []
    while True:
        record = await transaction.linked_chunk(chunk)
        end = chunk_start + record.length
        if offset < end:  # chunks before the one holding ``offset`` are only walked past
            size = min(length, end - offset)
            data = await context.chunks.read(chunk, offset - chunk_start, size)
            if len(data) != size:
                raise StorageCorrupted(f"chunk {chunk} returned {len(data)} bytes, {size} expected at "
                                       f"{offset - chunk_start}: it is shorter than its committed length")
            parts.append(data)
            offset += size
            length -= size
            if not length:
                return parts[0] if len(parts) == 1 else b"".join(parts)
        next_chunk = record.next_chunk
        if next_chunk is None:
            raise StorageCorrupted(f"segment {name}: the chunk list ends before offset {offset}")
        chunk_start, chunk = end, next_chunk
        context.read_index.add(name, chunk_start, chunk, generation)


def _nearest_chunk(context: OperationContext, segment: SegmentRecord, offset: int) -> tuple[int, str]:
    """(start offset, name) of the chunk to walk from: the last chunk if it holds ``offset``, else the
    indexed chunk nearest below ``offset``, else the first chunk."""
    first, last = segment.first_chunk, segment.last_chunk
    if first is None or last is None:  # ``offset`` is below the length: some chunk holds it
        raise StorageCorrupted(f"segment {segment.name} has bytes at {offset} but no chunks")
    if offset >= segment.last_chunk_start_offset:
        return segment.last_chunk_start_offset, last
    nearest = context.read_index.floor(segment.name, offset)
    if nearest is None or nearest[0] < segment.first_chunk_start_offset:
        return segment.first_chunk_start_offset, first
    return nearest
