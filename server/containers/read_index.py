"""The in-memory read index of one segment: its bytes as a list of immutable blocks.

Blocks are bytes-like objects (often memoryview slices of received frames or of
log records) laid end to end from ``start_offset``. Appends add a block; reads
return views of blocks without copying; truncation drops whole blocks below the
new start offset. Until Tier-2 exists every byte of a segment stays here.
"""

from __future__ import annotations

import bisect

_SMALL_BLOCK_SLACK = 2  # a block may pin at most this many times its size of a larger buffer


def own(data):
    """Returns ``data`` or a copy of it, so that a small view never pins a much larger buffer."""
    if isinstance(data, memoryview) and data.obj is not None:
        backing = data.obj
        backing_size = backing.nbytes if isinstance(backing, memoryview) else len(backing)
        if backing_size > _SMALL_BLOCK_SLACK * len(data):
            return bytes(data)
    return data


class ReadIndex:
    """Bytes of a segment in ``[start_offset, length)``."""

    __slots__ = ("_starts", "_blocks", "length", "start_offset")

    def __init__(self, start_offset: int = 0):
        self._starts: list[int] = []  # offset of each block
        self._blocks: list = []
        self.start_offset = start_offset
        self.length = start_offset

    def __repr__(self) -> str:
        return f"<ReadIndex [{self.start_offset}, {self.length}) in {len(self._blocks)} blocks>"

    def append(self, data) -> None:
        if not len(data):
            return
        self._starts.append(self.length)
        self._blocks.append(own(data))
        self.length += len(data)

    def append_index(self, other: "ReadIndex") -> None:
        """Appends every byte of ``other`` (a merged source), sharing its blocks."""
        for block in other.blocks_from(other.start_offset):
            self.append(block)

    def blocks_from(self, offset: int):
        """Yields views of the bytes from ``offset`` to the end (cost: the blocks yielded, not all blocks)."""
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0:
            return
        blocks = self._blocks
        yield memoryview(blocks[index])[offset - self._starts[index]:]
        for following in range(index + 1, len(blocks)):
            yield memoryview(blocks[following])

    def read(self, offset: int, max_length: int) -> list:
        """Returns views covering ``[offset, min(offset + max_length, length))``.

        The caller checks ``start_offset <= offset <= length``.
        """
        remaining = min(max_length, self.length - offset)
        parts = []
        if remaining <= 0:
            return parts
        for view in self.blocks_from(offset):
            if len(view) >= remaining:
                parts.append(view[:remaining])
                break
            parts.append(view)
            remaining -= len(view)
        return parts

    def truncate(self, offset: int) -> None:
        """Raises the start offset to ``offset`` and drops blocks wholly below it."""
        self.start_offset = max(self.start_offset, offset)
        index = bisect.bisect_right(self._starts, self.start_offset) - 1
        if index > 0:
            del self._starts[:index]
            del self._blocks[:index]
