"""SLTS concat (design §5.6): append a sealed segment to another by splicing chunk lists.

One transaction: the target's last chunk links to the source's first chunk (or the target
adopts the source's list if it has no chunks), the target's length, count and last chunk move
on, and the source's record is removed. No bytes move, and a failure anywhere leaves both
segments as they were.

The source's last chunk becomes the target's. If the source's owner epoch is older than ours
(or it carries ``OWNERSHIP_CHANGED``), that chunk may have another epoch's writer, so the
target gets ``OWNERSHIP_CHANGED`` and its next write opens a new chunk.

Optionally (``defragment``), small chunks at the junction are stitched into one in the same
transaction.
"""

from __future__ import annotations

import dataclasses

from . import chunk_index
from .defragment import Junction, defragment
from .errors import BadOffset, SegmentNotSealed, SegmentSealed, SegmentTruncated
from .metadata_transaction import MetadataTransaction
from .operation_context import OperationContext, check_owner, load_segment, stamped
from .records import SegmentFlags, SegmentRecord


async def concat(context: OperationContext, target_name: str, offset: int, source_name: str) -> int:
    """Appends the sealed ``source`` to ``target`` at ``offset`` (its length); returns the new length.

    Raises SegmentNotFound (either), SegmentSealed (target), StorageNotPrimary, BadOffset,
    SegmentNotSealed and SegmentTruncated (source); transient errors.
    """
    transaction = context.begin(target_name)
    target = await load_segment(transaction, target_name)
    source = await load_segment(transaction, source_name)
    if target.sealed:
        raise SegmentSealed(target_name)
    check_owner(target, context.epoch)
    check_owner(source, context.epoch)
    if offset != target.length:
        raise BadOffset(target_name, target.length, offset)
    if not source.sealed:
        raise SegmentNotSealed(source_name)
    if source.start_offset != 0:
        raise SegmentTruncated(source_name, source.start_offset)
    if target.last_chunk is not None and source.first_chunk is not None:
        last = await transaction.linked_chunk(target.last_chunk)
        transaction.put(dataclasses.replace(last, next_chunk=source.first_chunk))
    junction = Junction(predecessor=target.last_chunk, predecessor_start_offset=target.last_chunk_start_offset,
                        predecessor_writable=target.owner_epoch == context.epoch and not target.ownership_changed,
                        start_offset=target.length)
    spliced = _splice(target, source, context.epoch)
    await chunk_index.remove_hints(transaction, source)
    transaction.remove(source_name)
    with context.collector.new_chunks() as new_chunks:
        spliced, replaced = await defragment(context, transaction, spliced, junction, new_chunks)
        previous_start = junction.predecessor_start_offset if junction.predecessor else None
        if chunk_index.may_start_blocks(spliced, previous_start, junction.start_offset, spliced.length):
            # (a walk of the source's chunks: skipped for the usual small merge, inside one block)
            await chunk_index.chunks_linked(transaction, spliced, previous_start,
                                            await _spliced_chunks(transaction, spliced, junction))
        transaction.put(stamped(spliced))
        await transaction.commit()
    context.read_index.forget(source_name)
    if replaced:
        context.read_index.remove_range(target_name, junction.predecessor_start_offset, spliced.length)
        context.collector.schedule(replaced)
    return spliced.length


async def _spliced_chunks(transaction: MetadataTransaction, spliced: SegmentRecord,
                          junction: Junction) -> list[tuple[int, str]]:
    """(start offset, name) of the chunks after the junction, once spliced (and defragmented): they start where
    the target's last chunk (as it is now: in-place defragmentation grows it) ends."""
    if junction.predecessor is not None:
        predecessor = await transaction.linked_chunk(junction.predecessor)
        name, start = predecessor.next_chunk, junction.predecessor_start_offset + predecessor.length
    else:
        name, start = spliced.first_chunk, spliced.first_chunk_start_offset
    found = []
    while name is not None:
        chunk = await transaction.linked_chunk(name)
        found.append((start, name))
        name, start = chunk.next_chunk, start + chunk.length
    return found


def _splice(target: SegmentRecord, source: SegmentRecord, epoch: int) -> SegmentRecord:
    """The target's record after appending the source's chunk list (the link itself is the caller's)."""
    if source.chunk_count == 0:
        return target
    flags = target.flags
    if source.owner_epoch < epoch or source.ownership_changed:
        flags |= SegmentFlags.OWNERSHIP_CHANGED
    if target.first_chunk is None:  # the source's list becomes the target's (an untruncated source starts at 0)
        first, first_start_offset = source.first_chunk, target.length
    else:
        first, first_start_offset = target.first_chunk, target.first_chunk_start_offset
    return dataclasses.replace(
        target, length=target.length + source.length, chunk_count=target.chunk_count + source.chunk_count,
        first_chunk=first, first_chunk_start_offset=first_start_offset, last_chunk=source.last_chunk,
        last_chunk_start_offset=target.length + source.last_chunk_start_offset, flags=flags)
