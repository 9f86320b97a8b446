"""The cache budget shared by every segment's read index in a segment store (design §3.11).

Every cached block of every segment is registered here, in least-recently-used
order. When the total passes the budget, the oldest blocks that Tier-2 already holds
are evicted until the total is back under ``evict_to`` of the budget. Blocks not yet
flushed are pinned (never evicted): when pinned bytes alone keep the cache over
budget, the cache is *throttled* and connections stop taking appends until the
storage writer has flushed and eviction has made room (cache pressure causes
throttling, never loss). Table segments obey it too: their key index owns copies of
the live values, so their flushed history can be evicted.

The same throttle is the store's one append brake: a container whose log holds more than its
replay bound (``replay_bound.py``) *holds* it too (``hold_appends``), and appends go on once the
cache is under budget and nothing holds it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

_EVICT_TO = 0.85  # evict down to this fraction of the budget
_RELIEVED_AT = 0.95  # throttling ends below this fraction
_SCAN_LIMIT = 20_000  # blocks looked at per eviction pass


class CacheManager:
    def __init__(self, budget: int):
        if budget <= 0:
            raise ValueError("the cache budget must be positive")
        self.budget = budget
        self.size = 0
        self._blocks: OrderedDict = OrderedDict()  # (index, offset) -> size, least recently used first
        self.throttled = False  # appends wait: the cache is full of pinned bytes, or something holds them
        self._full = False  # over budget (until back under _RELIEVED_AT of it)
        self._holders: set[object] = set()  # containers whose log holds too much to replay
        self._relief_callbacks: list[Callable[[], None]] = []
        self._pressure_callbacks: list[Callable[[], None]] = []
        self.evicted_bytes = 0

    def __repr__(self) -> str:
        return f"<CacheManager {self.size}/{self.budget} bytes, {len(self._blocks)} blocks>"

    # ------------------------------------------------------------------ told by read indexes

    def added(self, index, offset: int, size: int) -> None:
        self._blocks[(index, offset)] = size
        self._count(size)

    def grew(self, index, offset: int, size: int) -> None:
        """The block at ``offset`` took ``size`` more bytes (a slab being filled: read_index.py)."""
        key = (index, offset)
        self._blocks[key] = self._blocks.get(key, 0) + size
        self._count(size)

    def _count(self, size: int) -> None:
        self.size += size
        if self.size > self.budget and not self._full:  # once full, the storage writers drive eviction
            self.evict()

    def removed(self, index, offset: int) -> None:
        size = self._blocks.pop((index, offset), 0)
        self.size -= size

    def touched(self, index, offset: int) -> None:
        key = (index, offset)
        if key in self._blocks:
            self._blocks.move_to_end(key)

    # ------------------------------------------------------------------ eviction and throttling

    def evict(self) -> int:
        """Evicts flushed blocks, oldest first, down to the target; returns the bytes evicted."""
        target = int(self.budget * _EVICT_TO)
        if self.size <= target:
            self._update_throttle()
            return 0
        evicted = 0
        pinned = []
        blocks = self._blocks
        for _ in range(min(_SCAN_LIMIT, len(blocks))):
            if self.size <= target:
                break
            (index, offset), size = blocks.popitem(last=False)
            if index.evict(offset):
                self.size -= size
                evicted += size
            else:
                pinned.append(((index, offset), size))
        for key, size in pinned:  # pinned blocks go to the young end so the next pass skips them
            blocks[key] = size
        self.evicted_bytes += evicted
        self._update_throttle()
        return evicted

    @property
    def full(self) -> bool:
        """Over budget with pinned bytes: blocks read from Tier-2 are better not cached now."""
        return self._full

    def hold_appends(self, holder: object) -> None:
        """Appends wait until ``holder`` releases them (and the cache has room)."""
        self._holders.add(holder)
        self._update_throttle()

    def release_appends(self, holder: object) -> None:
        self._holders.discard(holder)
        self._update_throttle()

    def _update_throttle(self) -> None:
        if self.size > self.budget:
            self._full = True
        elif self.size < self.budget * _RELIEVED_AT:
            self._full = False
        throttled = self._full or bool(self._holders)
        if throttled == self.throttled:
            return
        self.throttled = throttled
        if throttled:
            for callback in self._pressure_callbacks:
                callback()
        else:
            callbacks, self._relief_callbacks = self._relief_callbacks, []
            for callback in callbacks:
                callback()

    def when_relieved(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` once when throttling ends (at once if it is not throttled)."""
        if not self.throttled:
            callback()
        else:
            self._relief_callbacks.append(callback)

    def on_pressure(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` whenever throttling starts (the storage writers flush at once)."""
        self._pressure_callbacks.append(callback)
