"""Keeping table segments' key indexes whole and their bytes small: index rebuild and compaction.

* **Rebuild.** After recovery, a table segment whose bytes lie partly in Tier-2 (its
  index was not in the checkpoint) gets its key index rebuilt by parsing its
  records as they stream in from Tier-2 and then from the cached tail the log
  replayed; the storage metadata table first, since SLTS reads go through it.
* **Compaction.** Re-writes the live entries at the table's end (versions kept)
  and truncates everything before. Both decisions are made in one turn, so they
  share a frame: after a crash either both are in the log or neither is (and the
  re-written records alone would be harmless).
"""

from __future__ import annotations

import logging

from .. import errors
from ..tier2.chunked_storage import ChunkedSegmentStorage
from . import table as table_format
from .metadata import SegmentMetadata
from .pipeline import OperationPipeline
from .state import ContainerState, InconsistentState

log = logging.getLogger("tributary.container")
_REBUILD_READ_SIZE = 16 * 1024 * 1024
_REBUILD_PROGRESS_BYTES = 256 * 1024 * 1024  # a table index rebuild logs its progress this often


async def rebuild_indexes(container_id: int, state: ContainerState, storage: ChunkedSegmentStorage,
                          first: str) -> None:
    """Rebuilds the key index of every table segment whose bytes lie partly in Tier-2 (``first`` first)."""
    incomplete = [segment for segment in state.by_id.values() if segment.table_incomplete]
    incomplete.sort(key=lambda segment: segment.name != first)
    for segment in incomplete:
        segment.table = await _rebuild_index(container_id, segment, storage)
        segment.table_incomplete = False
    if incomplete:
        log.info("table indexes rebuilt from tier-2", extra={"container": container_id, "tables": len(incomplete)})


async def _rebuild_index(container_id: int, segment: SegmentMetadata,
                         storage: ChunkedSegmentStorage) -> table_format.TableIndex:
    key_length = segment.table.key_length if segment.table is not None else 0
    index, leftover, base = table_format.TableIndex(key_length), b"", segment.start_offset
    stored = min(segment.data.storage_length, segment.length)
    offset = segment.start_offset
    while offset < segment.length:
        if offset < stored:
            piece = await storage.read(segment.name, offset, min(_REBUILD_READ_SIZE, stored - offset))
        else:
            piece = b"".join(segment.data.read(offset, segment.length - offset))
            if not piece:
                raise InconsistentState(f"bytes at {offset} of table {segment.name!r} are missing")
        offset += len(piece)
        if offset // _REBUILD_PROGRESS_BYTES != (offset - len(piece)) // _REBUILD_PROGRESS_BYTES:
            log.info("rebuilding table index", extra={"container": container_id, "table": segment.name,
                                                      "bytes": offset - segment.start_offset,
                                                      "of": segment.length - segment.start_offset})
        buffer = leftover + piece if leftover else piece
        whole = table_format.complete_length(buffer)
        index.index_batch(memoryview(buffer)[:whole], base)
        leftover, base = bytes(memoryview(buffer)[whole:]), base + whole
    if leftover:
        raise InconsistentState(f"table {segment.name!r} ends inside a record")
    return index


async def compact(pipeline: OperationPipeline, segment: SegmentMetadata) -> None:
    """Re-writes the table's live entries at its end and truncates everything before them."""
    name = segment.name
    if segment.table is None or segment.table_incomplete:
        raise errors.OperationUnsupported(name, "compactTable")
    upto = segment.length  # committed: any change in flight lies above it
    rewrite = pipeline.submit(lambda pending: pending.table_rewrite(name)) if segment.table.entry_count else None
    truncate = pipeline.submit(lambda pending: pending.truncate(name, upto))
    if rewrite is not None:
        await rewrite
    await truncate


async def compact_if_bloated(container_id: int, pipeline: OperationPipeline, segment: SegmentMetadata | None,
                             threshold: int) -> None:
    """Compacts a table once its dead records outweigh its live ones and ``threshold`` bytes."""
    if segment is None or segment.table is None or segment.table_incomplete:
        return
    live = segment.table.live_bytes
    dead = segment.length - segment.start_offset - live
    if dead > max(threshold, live):
        try:
            await compact(pipeline, segment)
        except errors.ContainerUnavailable:
            return  # stopping or failed: the next owner compacts
        except errors.IllegalArgument as error:  # the live entries no longer fit in one operation
            log.warning("table not compacted", extra={"container": container_id, "table": segment.name,
                                                      "error": str(error)})
