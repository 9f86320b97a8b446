"""When a container's segments go dormant (``ContainerState.make_dormant``): their metadata kept packed, ~0.3 KB
instead of ~1 KB, until a use makes them live again.

Two triggers, one walk (``sweep``) over the live segments, oldest first (``by_id`` is in order of creation or of
waking), a clock hand over ``SegmentMetadata.used`` (set by reads and info requests; the walk clears it, so a
segment goes only if nothing read it since the previous walk):

* **idle**: every ``idle_seconds``/2 (at most a minute; the service's loop), the segments not changed for
  ``idle_seconds`` and not read since;
* **working set**: a creation or a wake that leaves more than ``working_set`` segments live starts a walk
  without the idle time, down to 90% of it (``check``); not again before a tenth more is live, so segments
  all in use cost one walk per tenth of the working set created, not one per creation.

Either way a segment goes only with nothing to lose or to race: a stream segment (tables and transients stay
live) with no decided operation in flight (``has_pending``), no storage-writer work on it (``has_work``), every
byte in Tier-2, no merge redirect and no parked reader. Without a Tier-2 nothing goes dormant: the cache holds
the only copy of the bytes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .. import metrics
from ..background import cancel_and_wait
from .metadata import SegmentType
from .state import ContainerState

log = logging.getLogger("tributary.segmentstore")


class Dormancy:
    def __init__(self, container_id: int, state: ContainerState, *, idle_seconds: float, working_set: int,
                 wall_clock_ms: Callable[[], int], running: Callable[[], bool],
                 has_pending: Callable[[str], bool], has_work: Callable[[int], bool] | None):
        """``has_work`` (the storage writer's; None without a Tier-2: then nothing goes dormant)."""
        self._container_id = container_id
        self._state = state
        self.idle_ms = int(idle_seconds * 1000)  # 0: nothing goes dormant
        self.working_set = working_set
        self._wall_clock_ms = wall_clock_ms
        self._running = running
        self._has_pending = has_pending
        self._has_work = has_work
        self._shrink_above = working_set
        self.shrinking: asyncio.Task[None] | None = None

    async def sweep(self, now_ms: int | None = None, batch: int = 5_000, *, idle_ms: int | None = None,
                    down_to: int = 0) -> int:
        """Makes dormant the segments not changed for ``idle_ms`` (default: the idle time) and not read since the
        previous walk, with nothing to lose, oldest first, until ``down_to`` live segments are left; returns how
        many. Walks ``batch`` segments per turn of the event loop."""
        has_work = self._has_work
        if self.idle_ms <= 0 or has_work is None or not self._running():
            return 0
        cutoff = (self._wall_clock_ms() if now_ms is None else now_ms) - (self.idle_ms if idle_ms is None
                                                                          else idle_ms)
        state, has_pending = self._state, self._has_pending
        segments = list(state.by_id.values())
        made = 0
        for start in range(0, len(segments), batch):
            if start:
                await asyncio.sleep(0)
                if not self._running():
                    break
            for segment in segments[start:start + batch]:
                if len(state.by_id) <= down_to:
                    break
                if segment.used:
                    segment.used = False
                elif (segment.last_modified <= cutoff and segment.segment_type is SegmentType.STREAM
                      and not has_pending(segment.name) and not has_work(segment.segment_id)
                      and state.make_dormant(segment)):
                    made += 1
        if made:
            metrics.SEGMENTS_MADE_DORMANT.inc(made)
            log.debug("segments made dormant", extra={"container": self._container_id, "count": made,
                                                      "dormant": len(state.dormant), "live": len(state.by_id)})
        return made

    def check(self) -> None:
        """After a creation or a wake: past the working set, starts a walk (unless one runs)."""
        if len(self._state.by_id) > self._shrink_above and (self.shrinking is None or self.shrinking.done()):
            self.shrinking = asyncio.get_running_loop().create_task(
                self._shrink(), name=f"working set {self._container_id}")

    async def _shrink(self) -> None:
        made = await self.sweep(idle_ms=0, down_to=self.working_set * 9 // 10)
        self._shrink_above = max(self.working_set, len(self._state.by_id) + self.working_set // 10)
        log.debug("working set shrunk", extra={"container": self._container_id, "made_dormant": made})

    async def stop(self) -> None:
        await cancel_and_wait(self.shrinking)
