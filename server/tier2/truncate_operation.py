"""SLTS truncate (design §5.7): raise the start offset and drop whole head chunks below it.

One transaction: every chunk that ends at or before the new start offset is unlinked and marked
inactive, the segment's first chunk and start offsets move forward, and after the commit the
unlinked chunks go to the collector. The chunk holding the new start offset stays whole (no
binding truncates chunks); its bytes below the start offset are simply unreadable. The start
offset never goes back: a lower or equal offset changes nothing. Sealed segments can be
truncated too (retention of sealed segments).

Space: only whole chunks are freed, so a segment keeps up to one rolling length
(``max_rolling_length``) below its start offset; the collector deletes the unlinked chunks and
their records after ``gc_delay_seconds``.
"""

from __future__ import annotations

import dataclasses

from . import chunk_index
from .errors import BadOffset
from .operation_context import OperationContext, check_owner, load_segment, stamped
from .records import ChunkFlags


async def truncate(context: OperationContext, name: str, offset: int) -> tuple[int, int]:
    """Makes ``offset`` the segment's start offset if it is higher.

    Returns:
        How many chunks were unlinked (the collector deletes them) and the bytes they held.
    Raises SegmentNotFound, StorageNotPrimary, BadOffset (beyond the length); transient errors.
    """
    transaction = context.begin(name)
    segment = await load_segment(transaction, name)
    check_owner(segment, context.epoch)
    if offset > segment.length:
        raise BadOffset(name, segment.length, offset)
    if offset <= segment.start_offset:
        return 0, 0
    unlinked = []
    first, first_start = segment.first_chunk, segment.first_chunk_start_offset
    freed_from = first_start
    while first is not None:
        chunk = await transaction.linked_chunk(first)
        if first_start + chunk.length > offset:
            break
        transaction.put(dataclasses.replace(chunk, flags=ChunkFlags(0)))
        unlinked.append(chunk.name)
        first, first_start = chunk.next_chunk, first_start + chunk.length
    if unlinked:
        await chunk_index.remove_hints(transaction, segment, below=first_start)
    segment = dataclasses.replace(segment, start_offset=offset, first_chunk=first, first_chunk_start_offset=first_start,
                                  chunk_count=segment.chunk_count - len(unlinked))
    if first is None:
        segment = dataclasses.replace(segment, last_chunk=None, last_chunk_start_offset=first_start)
    transaction.put(stamped(segment))
    await transaction.commit()
    if unlinked:
        context.read_index.remove_range(name, 0, first_start)
        context.collector.schedule(unlinked)
    return len(unlinked), first_start - freed_from
