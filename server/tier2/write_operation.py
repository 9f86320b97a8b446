"""SLTS write (design §5.4): append bytes at the segment's length, rolling over into new chunks.

One transaction per write. The bytes go to chunks first; the chunk and segment lengths change
only in the transaction, so bytes in a chunk beyond its committed length are never visible, and
a write that fails anywhere before its commit left nothing visible (only, perhaps, unreferenced
chunks, which the collector deletes because they were registered before they were created).

A write opens a new chunk, named with this owner's epoch and the segment offset, when there is
no last chunk, the last chunk is full (``max_rolling_length``), the storage cannot append, a
newer owner took the segment over (``owner_epoch`` below ours, or ``OWNERSHIP_CHANGED``: the last
chunk may belong to another epoch and only its creator may write it), or appending found bytes
beyond the committed length (a failed earlier attempt: InvalidOffset with a larger expected
offset). So a retried write at the same offset never duplicates bytes.
"""

from __future__ import annotations

import dataclasses

from . import chunk_index, chunk_names
from .chunk_storage import InvalidOffset, WriteData, as_parts
from .errors import BadOffset, SegmentSealed, StorageCorrupted
from .garbage import NewChunks
from .metadata_transaction import MetadataTransaction
from .operation_context import OperationContext, check_owner, load_segment, stamped
from .records import ChunkRecord, SegmentFlags, SegmentRecord


async def write(context: OperationContext, name: str, offset: int, data: WriteData) -> None:
    """Appends ``data`` at ``offset``, which must be the segment's length.

    Raises SegmentNotFound, SegmentSealed, StorageNotPrimary, BadOffset; transient errors.
    """
    parts = [view for view in (memoryview(part).cast("B") for part in as_parts(data)) if view.nbytes]
    transaction = context.begin(name)
    segment = await load_segment(transaction, name)
    if segment.sealed:
        raise SegmentSealed(name)
    check_owner(segment, context.epoch)
    if offset != segment.length:
        raise BadOffset(name, segment.length, offset)
    if not parts:
        return
    last = await transaction.linked_chunk(segment.last_chunk) if segment.last_chunk else None
    writer = _SegmentWriter(context, transaction, segment, last)
    with context.collector.new_chunks() as new_chunks:
        await writer.write(parts, new_chunks)
        await chunk_index.chunks_linked(transaction, segment,
                                        segment.last_chunk_start_offset if segment.last_chunk else None, writer.opened)
        transaction.put(stamped(writer.segment))
        await transaction.commit()
    for start_offset, chunk in writer.opened:
        context.read_index.add(name, start_offset, chunk)


class _SegmentWriter:
    """Writes pieces to chunks and records the resulting layout in the transaction."""

    def __init__(self, context: OperationContext, transaction: MetadataTransaction, segment: SegmentRecord,
                 last: ChunkRecord | None):
        self._context = context
        self._transaction = transaction
        self.segment = segment
        self._last = last
        self._last_has_garbage = False
        self.opened: list[tuple[int, str]] = []  # (start offset, name) of every chunk opened

    async def write(self, parts: list[memoryview], new_chunks: NewChunks) -> None:
        rolling = self.segment.max_rolling_length
        while parts:
            last = self._appendable_chunk()
            if last is None:
                piece, parts = _split(parts, rolling)
                await self._open_chunk(piece, new_chunks)
            else:
                piece, rest = _split(parts, rolling - last.length)
                if await self._append(last, piece):
                    parts = rest

    def _appendable_chunk(self) -> ChunkRecord | None:
        """The last chunk if the next piece may be appended to it; None if it needs a new chunk."""
        segment, last = self.segment, self._last
        if (last is None or self._last_has_garbage or not self._context.chunks.supports_append
                or last.length >= segment.max_rolling_length
                or segment.owner_epoch < self._context.epoch or segment.ownership_changed):
            return None
        return last

    async def _open_chunk(self, piece: list[memoryview], new_chunks: NewChunks) -> None:
        segment = self.segment
        name = chunk_names.new_segment_chunk(segment.name, self._context.epoch, segment.length)
        new_chunks.add(name)  # registered with the collector before it exists
        length = await self._context.chunks.create_with_content(name, piece)
        if self._last is not None:
            self._transaction.put(dataclasses.replace(self._last, next_chunk=name))
        self._last = ChunkRecord(name, length)
        self._last_has_garbage = False
        self._transaction.put(self._last)
        has_first = segment.first_chunk is not None
        self.segment = dataclasses.replace(
            segment, length=segment.length + length, chunk_count=segment.chunk_count + 1,
            first_chunk=segment.first_chunk if has_first else name,
            first_chunk_start_offset=segment.first_chunk_start_offset if has_first else segment.length,
            last_chunk=name, last_chunk_start_offset=segment.length,
            owner_epoch=self._context.epoch, flags=segment.flags & ~SegmentFlags.OWNERSHIP_CHANGED)
        self.opened.append((segment.length, name))

    async def _append(self, last: ChunkRecord, piece: list[memoryview]) -> bool:
        """Appends to ``last``, the last chunk; False if it holds bytes beyond its committed length."""
        try:
            length = await self._context.chunks.write(last.name, last.length, piece)
        except InvalidOffset as error:
            if error.expected < last.length:
                raise StorageCorrupted(f"chunk {last.name} is shorter ({error.expected}) than its "
                                       f"committed length {last.length}") from error
            self._last_has_garbage = True
            return False
        self._last = dataclasses.replace(last, length=last.length + length)
        self._transaction.put(self._last)
        self.segment = dataclasses.replace(self.segment, length=self.segment.length + length)
        return True


def _split(parts: list[memoryview], size: int) -> tuple[list[memoryview], list[memoryview]]:
    """The first ``size`` bytes of ``parts`` and the rest, both as lists of views (no copies)."""
    head: list[memoryview] = []
    for index, part in enumerate(parts):
        if len(part) >= size:
            if size:
                head.append(part[:size])
            rest = [part[size:]] if len(part) > size else []
            return head, rest + parts[index + 1:]
        head.append(part)
        size -= len(part)
    return head, []
