"""The in-memory chunk read index of SLTS (design §5.5): segment -> sorted start offset -> chunk.

It holds only chunks that reads, writes and walks have visited, so a miss is not an error: the
reader walks the chunk list from the nearest indexed chunk before the offset (or from the first
chunk) and fills the index on the way. An entry must never be wrong, so every operation that
changes a chunk list from the inside tells the index: truncation drops entries below the new
first chunk, defragmentation drops the replaced chunks, delete and concat drop the source.
Each such removal advances ``generation``; a reader that walked the list from a record older
than a removal passes the generation it started with, and its entries are then ignored (they
might name chunks that were just unlinked). Lookups are O(log n) in the number of indexed
chunks; the least recently used segments are dropped beyond ``segments_max``.
"""

from __future__ import annotations

import collections

from sortedcontainers import SortedDict


class ReadIndex:
    def __init__(self, segments_max: int):
        self._segments_max = segments_max
        self._segments: collections.OrderedDict[str, SortedDict] = collections.OrderedDict()
        self.generation = 0  # advanced by every removal

    def floor(self, segment: str, offset: int) -> tuple[int, str] | None:
        """The indexed chunk with the greatest start offset <= ``offset``, as (start, name), or None."""
        chunks = self._segments.get(segment)
        if chunks is None:
            return None
        self._segments.move_to_end(segment)
        position = chunks.bisect_right(offset) - 1
        return chunks.peekitem(position) if position >= 0 else None

    def add(self, segment: str, start_offset: int, chunk: str, generation: int | None = None) -> None:
        """Indexes ``chunk``; ignored if ``generation`` is given and entries were removed since."""
        if generation is not None and generation != self.generation:
            return
        chunks = self._segments.get(segment)
        if chunks is None:
            chunks = self._segments[segment] = SortedDict()
            while len(self._segments) > self._segments_max:
                self._segments.popitem(last=False)
        chunks[start_offset] = chunk

    def remove_range(self, segment: str, start_offset: int, end_offset: int) -> None:
        """Drops the entries of chunks starting in [start_offset, end_offset)."""
        self.generation += 1
        chunks = self._segments.get(segment)
        if chunks is not None:
            for offset in list(chunks.irange(start_offset, end_offset, inclusive=(True, False))):
                del chunks[offset]

    def forget(self, segment: str) -> None:
        self.generation += 1
        self._segments.pop(segment, None)
