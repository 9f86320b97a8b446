"""The read index of one segment: which of its bytes are cached, and where the rest live.

A segment's bytes ``[start_offset, length)`` are in one of three places:

* **cached blocks**: bytes-like objects (often views of received frames) laid at their
  offsets, sorted, never overlapping, possibly with gaps between them;
* **Tier-2**: everything below ``storage_length`` (advanced by the storage writer);
* **a merge redirect**: bytes of a merged source segment that Tier-2 has not yet
  concatenated into this one; they are read from the source in Tier-2 meanwhile.

Small appends are *coalesced*: an append under ``COALESCE_BELOW`` bytes that follows another small
one is copied into a slab (a bytearray of fixed capacity that only this index writes, and only past
what it already holds), which grows as one block. Without this, a segment written one event at a
time holds one block per event: at 1,000 events/s of 1 KiB the storage writer's flush every two
seconds read 2,000 views on the event loop (2.7 ms) and copied them in a Python loop on its thread
(5-7 ms, holding the GIL), stalling every append behind it. Slabs start at twice what they first
hold and double up to ``SLAB_MAX``, so a little-written segment wastes at most what it holds. Bytes
already in a slab never change, so views handed out (to readers, to the storage writer) stay valid.

Bytes at or above ``storage_length`` are *pinned*: they exist nowhere but here (and the
Tier-1 log), so only blocks entirely below ``storage_length`` (or below ``start_offset``)
may be evicted. A read returns the cached views contiguous from its offset, or nothing
if the first byte is not cached, in which case the container fetches from Tier-2 and
``insert``s what it got. The cache manager (``cache.py``) is told of every block added
or removed, so it can keep the total under budget.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wire.fields import BytesLike

    from .cache import CacheManager

_SMALL_BLOCK_SLACK = 2  # a block may pin at most this many times its size of a larger buffer
COALESCE_BELOW = 16 * 1024  # appends smaller than this are copied into slabs (see the module docstring)
SLAB_MIN = 512
SLAB_MAX = 256 * 1024


def own(data: BytesLike) -> BytesLike:
    """Returns ``data`` or a copy of it, so that a small view never pins a much larger buffer."""
    if isinstance(data, memoryview) and data.obj is not None:
        backing = data.obj
        backing_size = len(backing) if isinstance(backing, (bytes, bytearray)) else memoryview(backing).nbytes
        if backing_size > _SMALL_BLOCK_SLACK * len(data):
            return bytes(data)
    return data


class Redirect:
    """Bytes ``[start, end)`` of this segment are bytes ``[0, end - start)`` of ``source`` in Tier-2."""

    __slots__ = ("start", "end", "source")

    def __init__(self, start: int, end: int, source: str):
        self.start, self.end, self.source = start, end, source

    def __repr__(self) -> str:
        return f"<Redirect [{self.start}, {self.end}) -> {self.source!r}>"


class ReadIndex:
    """Bytes of a segment in ``[start_offset, length)``: cached blocks, Tier-2 below ``storage_length``."""

    __slots__ = ("_starts", "_blocks", "length", "start_offset", "storage_length", "redirects", "cache",
                 "cached_bytes", "_slab")

    def __init__(self, start_offset: int = 0, length: int | None = None, cache: CacheManager | None = None):
        self._starts: list[int] = []  # offset of each block
        self._blocks: list[BytesLike] = []
        self.start_offset = start_offset
        self.length = start_offset if length is None else length
        self.storage_length = self.length  # bytes below this are in Tier-2 (all of them, on a restore)
        self.redirects: list[Redirect] = []
        self.cache = cache  # a CacheManager, or None for an index that is never evicted (no Tier-2)
        self.cached_bytes = 0
        self._slab: bytearray | None = None  # the last block's buffer while appends may still go into it

    def __repr__(self) -> str:
        return (f"<ReadIndex [{self.start_offset}, {self.length}) stored<{self.storage_length} "
                f"{len(self._blocks)} blocks>")

    # ------------------------------------------------------------------ adding bytes

    def append(self, data: BytesLike) -> None:
        size = len(data)
        if not size:
            return
        blocks = self._blocks
        if size < COALESCE_BELOW and blocks and self._starts[-1] + len(blocks[-1]) == self.length:
            held, slab = len(blocks[-1]), self._slab  # an open slab is the last block's buffer
            if slab is not None:
                if held + size <= len(slab):
                    self._fill_slab(slab, held, data, size)
                else:
                    self._next_slab(data, size, min(SLAB_MAX, max(2 * len(slab), size)))
                return
            if held < COALESCE_BELOW:
                self._first_slab(data, size)
                return
        self._slab = None
        self._add(len(blocks), self.length, own(data))
        self.length += size

    def _fill_slab(self, slab: bytearray, held: int, data: BytesLike, size: int) -> None:
        """Copies ``data`` after the ``held`` bytes of the open slab (the last block), which grows by ``size``."""
        end = held + size
        slab[held:end] = data
        self._blocks[-1] = memoryview(slab)[:end]
        self.cached_bytes += size
        self.length += size
        if self.cache is not None:
            self.cache.grew(self, self._starts[-1], size)

    def _first_slab(self, data: BytesLike, size: int) -> None:
        """Moves the small last block into a new slab twice the size of both, with ``data`` after it."""
        last = self._blocks[-1]
        held = len(last)
        slab = self._slab = bytearray(max(SLAB_MIN, min(SLAB_MAX, 1 << (2 * (held + size) - 1).bit_length())))
        slab[:held] = last
        self._blocks[-1] = memoryview(slab)[:held]
        self._fill_slab(slab, held, data, size)

    def _next_slab(self, data: BytesLike, size: int, capacity: int) -> None:
        """The open slab is full: it stays as it is, and a new one of ``capacity`` bytes starts with ``data``."""
        slab = self._slab = bytearray(capacity)
        slab[:size] = data
        self._add(len(self._blocks), self.length, memoryview(slab)[:size])
        self.length += size

    def append_index(self, other: ReadIndex) -> None:
        """Appends every byte of ``other`` (a merged source): its cached blocks, shared, and gaps.

        The caller records a Redirect for the gaps (bytes the source holds in Tier-2 only).
        """
        self._slab = None  # the last block may become the source's: never write into it
        base = self.length - other.start_offset
        for start, block in zip(other._starts, other._blocks, strict=True):
            if start + len(block) > other.start_offset:
                self._add(len(self._blocks), base + start, block)
        self.length = base + other.length

    def insert(self, offset: int, data: BytesLike) -> None:
        """Caches ``data`` (read from Tier-2) at ``offset``, filling gaps only."""
        self._slab = None
        base, end = offset, offset + len(data)
        position = max(offset, self.start_offset)
        view = memoryview(data)
        while position < end:
            index = bisect.bisect_right(self._starts, position)
            if index > 0:
                previous_end = self._starts[index - 1] + len(self._blocks[index - 1])
                if previous_end > position:
                    position = previous_end
                    continue
            piece_end = min(end, self._starts[index]) if index < len(self._starts) else end
            self._add(index, position, own(view[position - base:piece_end - base]))
            position = piece_end

    def _add(self, index: int, offset: int, block: BytesLike) -> None:
        self._starts.insert(index, offset)
        self._blocks.insert(index, block)
        self.cached_bytes += len(block)
        if self.cache is not None:
            self.cache.added(self, offset, len(block))

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, max_length: int) -> list[memoryview]:
        """Views of the cached bytes contiguous from ``offset``, at most ``max_length`` of them.

        Empty when ``offset`` is not cached. The caller checks ``start_offset <= offset <= length``.
        """
        remaining = min(max_length, self.length - offset)
        parts: list[memoryview] = []
        index = bisect.bisect_right(self._starts, offset) - 1
        if remaining <= 0 or index < 0:
            return parts
        starts, blocks, cache = self._starts, self._blocks, self.cache
        position = offset
        while remaining > 0 and index < len(blocks) and starts[index] <= position:
            block = blocks[index]
            start = starts[index]
            if start + len(block) <= position:
                break
            view = memoryview(block)[position - start:]
            if cache is not None:
                cache.touched(self, start)
            if len(view) >= remaining:
                parts.append(view[:remaining])
                break
            parts.append(view)
            remaining -= len(view)
            position += len(view)
            index += 1
        return parts

    def is_cached(self, offset: int) -> bool:
        """Whether the byte at ``offset`` is cached (a probe: it does not count as a use)."""
        index = bisect.bisect_right(self._starts, offset) - 1
        return index >= 0 and offset < self._starts[index] + len(self._blocks[index])

    def redirect_at(self, offset: int) -> Redirect | None:
        for redirect in self.redirects:
            if redirect.start <= offset < redirect.end:
                return redirect
        return None

    # ------------------------------------------------------------------ dropping bytes

    def truncate(self, offset: int) -> None:
        """Raises the start offset to ``offset`` and drops the blocks no longer needed below it.

        Blocks not yet in Tier-2 stay until the storage writer has flushed them (it writes
        every byte in order, then truncates Tier-2).
        """
        self.start_offset = max(self.start_offset, offset)
        self.drop_below(min(self.start_offset, self.storage_length))

    def drop_below(self, offset: int) -> None:
        """Drops every block that ends at or below ``offset``."""
        index = 0
        while index < len(self._blocks) and self._starts[index] + len(self._blocks[index]) <= offset:
            index += 1
        for position in range(index):
            self._forget(self._starts[position], self._blocks[position])
        del self._starts[:index]
        del self._blocks[:index]
        if not self._blocks:
            self._slab = None

    def evict(self, offset: int) -> bool:
        """Drops the block starting at ``offset`` if it may be evicted; returns whether it was."""
        index = bisect.bisect_left(self._starts, offset)
        if index == len(self._starts) or self._starts[index] != offset:
            return True  # already gone
        end = offset + len(self._blocks[index])
        if end > self.storage_length:
            return False  # pinned: not in Tier-2 yet (even below the start offset: Tier-2 is written in order)
        if index == len(self._starts) - 1:
            self._slab = None  # the last block goes: a later append starts afresh
        block = self._blocks.pop(index)
        del self._starts[index]
        self.cached_bytes -= len(block)
        return True

    def release(self) -> None:
        """Forgets every block (the segment was deleted, or merged and concatenated)."""
        for start, block in zip(self._starts, self._blocks, strict=True):
            self._forget(start, block)
        self._starts.clear()
        self._blocks.clear()
        self._slab = None

    def _forget(self, start: int, block: BytesLike) -> None:
        self.cached_bytes -= len(block)
        if self.cache is not None:
            self.cache.removed(self, start)
