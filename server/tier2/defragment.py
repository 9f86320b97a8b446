"""Inline defragmentation at a concat junction (design §5.6), inside the concat's transaction.

Merging many small segments (transactions, or any segment on storage that cannot append, where
every write is a chunk) would otherwise pile up tiny chunks. After the splice, the run of chunks
that follows the junction, each smaller than ``defrag_min_chunk_size``, is stitched into one
chunk of at most ``min(defrag_max_size, rolling length)`` bytes:

* in place, appending the run to the target's old last chunk, when that chunk is small, was
  created by this epoch (the target was ours and not taken over), the storage can append, and
  the chunk holds no bytes beyond its committed length;
* otherwise into a new chunk (named with this epoch, registered with the collector first) that
  replaces a run of at least two chunks.

Bytes move with the storage's native concat when it has one, otherwise by read and append; the
storage counters show them. The stitched chunks' records become inactive and go to the
collector after the commit. Nothing happens without append and native concat, or when
``defrag_min_chunk_size`` is 0; chunks of at least that size never move.
"""

from __future__ import annotations

import dataclasses

from . import chunk_names
from .garbage import NewChunks
from .metadata_transaction import MetadataTransaction
from .operation_context import OperationContext
from .records import ChunkFlags, ChunkRecord, SegmentRecord

_CHUNKS_PER_STITCH_MAX = 1024  # bounds one transaction however tiny the chunks are


@dataclasses.dataclass(frozen=True)
class Junction:
    predecessor: str | None  # the target's last chunk before the splice (None: it had none)
    predecessor_start_offset: int
    predecessor_writable: bool  # the target was ours with no ownership change: this epoch created that chunk
    start_offset: int  # the target's length before the splice: where the source's chunks start


async def defragment(context: OperationContext, transaction: MetadataTransaction, segment: SegmentRecord,
                     junction: Junction, new_chunks: NewChunks) -> tuple[SegmentRecord, list[str]]:
    """The segment after stitching small chunks at ``junction``, and the names of the chunks replaced."""
    config, chunks = context.config, context.chunks
    small = config.defrag_min_chunk_size
    if small == 0 or not (chunks.supports_append or chunks.supports_concat):
        return segment, []
    limit = min(config.defrag_max_size, segment.max_rolling_length)
    predecessor = await transaction.linked_chunk(junction.predecessor) if junction.predecessor else None
    first = predecessor.next_chunk if predecessor else segment.first_chunk
    if (predecessor is not None and junction.predecessor_writable and chunks.supports_append
            and predecessor.length < small):
        run = await _small_run(transaction, first, predecessor.length, small, limit)
        if run and (await chunks.get_info(predecessor.name)).length == predecessor.length:
            await _copy(context, predecessor.name, predecessor.length, run)
            stitched = dataclasses.replace(predecessor, length=predecessor.length + _length(run),
                                           next_chunk=run[-1].next_chunk)
            return _replace_run(transaction, segment, run, stitched, junction.predecessor_start_offset, 0), \
                [chunk.name for chunk in run]
    run = await _small_run(transaction, first, 0, small, limit)
    if len(run) < 2:
        return segment, []
    name = chunk_names.new_segment_chunk(segment.name, context.epoch, junction.start_offset)
    new_chunks.add(name)
    await chunks.create_with_content(name, b"")
    await _copy(context, name, 0, run)
    stitched = ChunkRecord(name, _length(run), run[-1].next_chunk)
    if predecessor is not None:
        transaction.put(dataclasses.replace(predecessor, next_chunk=name))
    else:
        segment = dataclasses.replace(segment, first_chunk=name)
    return _replace_run(transaction, segment, run, stitched, junction.start_offset, 1), [chunk.name for chunk in run]


async def _small_run(transaction: MetadataTransaction, first: str | None, base: int, small: int,
                     limit: int) -> list[ChunkRecord]:
    """The chunks from ``first`` on, each smaller than ``small``, while ``base`` + their total <= ``limit``."""
    run: list[ChunkRecord] = []
    total = base
    name = first
    while name is not None and len(run) < _CHUNKS_PER_STITCH_MAX:
        chunk = await transaction.linked_chunk(name)
        if chunk.length >= small or total + chunk.length > limit:
            break
        run.append(chunk)
        total += chunk.length
        name = chunk.next_chunk
    return run


async def _copy(context: OperationContext, target: str, target_length: int, run: list[ChunkRecord]) -> None:
    chunks = context.chunks
    if chunks.supports_concat:
        await chunks.concat(target, [(chunk.name, chunk.length) for chunk in run])
        return
    for chunk in run:
        data = await chunks.read(chunk.name, 0, chunk.length)
        target_length += await chunks.write(target, target_length, data)


def _replace_run(transaction: MetadataTransaction, segment: SegmentRecord, run: list[ChunkRecord],
                 stitched: ChunkRecord, stitched_start_offset: int, chunks_added: int) -> SegmentRecord:
    for chunk in run:
        transaction.put(dataclasses.replace(chunk, flags=ChunkFlags(0)))
    transaction.put(stitched)
    if segment.last_chunk == run[-1].name:
        segment = dataclasses.replace(segment, last_chunk=stitched.name, last_chunk_start_offset=stitched_start_offset)
    return dataclasses.replace(segment, chunk_count=segment.chunk_count - len(run) + chunks_added)


def _length(run: list[ChunkRecord]) -> int:
    return sum(chunk.length for chunk in run)
