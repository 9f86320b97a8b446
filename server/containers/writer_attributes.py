"""Writer attributes that expire: the writers set up on connections, and the removal of idle writers' attributes.

A writer is set up on one connection at a time: each SetupAppend claims the writer's events on the segment
(``claim``), and the claim it replaces, on another connection or the same one, dies. The append path refuses
an append under a dead claim. A writer that drops a connection and sets up on a new one has given up the old
one, but what it sent there may still arrive (held by a partition, or queued behind a slow store): written
after the new setup told the writer what is stored, it would be an event the writer sends again, and if the
segment is sealed meanwhile, writes to the successor too: read twice (found by the simulation, seed 196).

A writer's attribute is its last event number, what deduplicates a writer that sets up again after a lost
connection and resends what it has not seen acknowledged. One that comes back after the retention starts afresh
(a resend of an event acknowledged before would be written again), so the retention is the longest a writer may
stay away with appends in doubt. Without expiry every writer id that ever appended stays in memory and in every
checkpoint (the SDK makes one per segment writer). The removal is logged (an attribute update to NULL),
conditional on the value the expiry saw.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterator

from .. import errors, metrics
from .pending import PendingState
from .pipeline import OperationPipeline
from .state import ContainerState
from .views import ContainerStatus

log = logging.getLogger("tributary.container")


class WriterClaim:
    """One connection's setup of a writer on a segment: ``live`` until another setup replaces it or it is
    released."""

    __slots__ = ("key", "live")

    def __init__(self, key: tuple[str, uuid.UUID]) -> None:
        self.key = key
        self.live = True


class WriterClaims:
    """The writers set up on connections: (segment, writer id) -> the live claim (module docstring)."""

    def __init__(self) -> None:
        self._live: dict[tuple[str, uuid.UUID], WriterClaim] = {}

    def __contains__(self, key: tuple[str, uuid.UUID]) -> bool:
        return key in self._live

    def __iter__(self) -> Iterator[tuple[str, uuid.UUID]]:
        return iter(self._live)

    def claim(self, name: str, writer_id: uuid.UUID) -> WriterClaim:
        """A connection sets ``writer_id`` up on ``name``: the claim it held elsewhere dies (module docstring),
        and its attribute does not expire until this claim is released or replaced."""
        key = (name, writer_id)
        claim = WriterClaim(key)
        previous = self._live.get(key)
        if previous is not None:
            previous.live = False
        self._live[key] = claim
        return claim

    def release(self, claim: WriterClaim) -> None:
        """The connection no longer has the writer set up (it set up again, or closed)."""
        claim.live = False
        if self._live.get(claim.key) is claim:
            del self._live[claim.key]


class WriterAttributes:
    """The writer attributes of one container: those a connection has set up (``claims``), which do not expire,
    and the expiry of the others once idle for ``retention_ms`` (0: never)."""

    def __init__(self, container_id: int, state: ContainerState, pipeline: OperationPipeline, *, retention_ms: int,
                 wall_clock_ms: Callable[[], int]):
        self._container_id = container_id
        self._state = state
        self._pipeline = pipeline
        self.retention_ms = retention_ms
        self._wall_clock_ms = wall_clock_ms
        self.claims = WriterClaims()

    def count(self) -> int:
        """Writer attributes the container keeps (those of deleted segments until the expiry passes them)."""
        return len(self._state.writers)

    async def expire(self, now_ms: int | None = None, limit: int = 100_000) -> int:
        """Removes the attributes of writers that have not appended for the retention and are set up on no
        connection of this store; returns how many (at most ``limit`` looked at per call)."""
        if self.retention_ms <= 0 or self._pipeline.status is not ContainerStatus.RUNNING:
            return 0
        cutoff = (self._wall_clock_ms() if now_ms is None else now_ms) - self.retention_ms
        self._state.expire_deleted_writers(cutoff)  # (in memory: a replay may bring some back until the next pass)
        state, claims, writers = self._state, self.claims, self._state.writers
        due: dict[int, dict[uuid.UUID, int]] = {}
        stale = []
        for looked, ((segment_id, attribute_number), last_used) in enumerate(writers.items()):
            if last_used > cutoff or looked >= limit:
                break
            segment = state.get_by_id(segment_id)  # (made live if dormant: its attribute is about to change)
            attribute_id = uuid.UUID(int=attribute_number)
            value = None if segment is None else segment.attributes.get(attribute_id)
            if segment is None or value is None:
                stale.append((segment_id, attribute_number))
            elif (segment.name, attribute_id) not in claims:
                due.setdefault(segment_id, {})[attribute_id] = value
        for key in stale:
            del writers[key]
        submitted = []
        per_operation = max(1, (self._pipeline.max_operation_bytes - 64) // 24)  # 24 bytes per attribute logged
        for segment_id, expected in due.items():
            name = state.by_id[segment_id].name
            items = list(expected.items())
            for start in range(0, len(items), per_operation):
                submitted.append(self._pipeline.submit(
                    functools.partial(PendingState.expire_attributes, name=name,
                                      expected=dict(items[start:start + per_operation]))))
        expired = 0
        for future in submitted:
            try:
                expired += await future
            except errors.SegmentStoreError:
                pass  # changed or deleted meanwhile, or the container stopped
        if expired:
            metrics.WRITERS_EXPIRED.inc(expired)
            log.info("idle writers' attributes expired", extra={"container": self._container_id, "count": expired})
        return expired
