"""The write side of a segment container: every mutation of its segments, through its operation pipeline.

Create (the segment limit, a creation racing another not yet durable), appends, seal, truncate, delete,
attribute updates, merges, table updates and removals, table compaction; each keeps the container's load
meter (``load_reporter.py``) and dormancy told. ``ContainerMutations`` is the base of
``container.SegmentContainer``, which sets up the parts declared below; an append costs no extra call.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

from wire import naming
from wire.fields import BytesLike

from .. import errors, metrics
from . import attributes as attrs
from . import table as table_format
from . import table_maintenance
from .load_reporter import LoadReporter
from .metadata import SegmentType
from .pending import Decision, PendingState
from .queries import ContainerQueries

log = logging.getLogger("tributary.container")
_POLICY = (attrs.SCALE_POLICY_TYPE, attrs.SCALE_POLICY_RATE)  # attributes whose update may start or stop load metering


class ContainerMutations(ContainerQueries):
    """Changes a container's segments; each method returns once the change is durable (or fails)."""

    load: LoadReporter
    _tables: table_maintenance.TableCompactor
    _wall_clock_ms: Callable[[], int]
    _record_load: Callable[[str, int, int], None]  # the load meter's append hook
    _limit_logged_at: float  # when the segment limit was last logged (monotonic)

    async def create_segment(self, name: str, segment_type: SegmentType = SegmentType.STREAM,
                             attributes: Mapping[uuid.UUID, int] | None = None) -> None:
        values = dict(attributes or {})
        values.setdefault(attrs.CREATION_TIME, self._wall_clock_ms())
        values[attrs.SEGMENT_TYPE] = int(segment_type)

        def decide(pending: PendingState) -> Decision:
            return pending.create(name, segment_type, values)
        try:  # (a caller told "exists" may read the segment at once; if the other creation fails, this one goes ahead)
            await self._refused_when_durable(name, errors.SegmentAlreadyExists, decide)
        except errors.TooManySegments as error:
            self._segment_limit_reached(error)
            raise
        if segment_type == SegmentType.STREAM:
            self.load.policy_known(name, values)
        self.dormancy.check()

    def _segment_limit_reached(self, error: errors.TooManySegments) -> None:
        metrics.SEGMENT_LIMIT_REJECTIONS.inc()
        now = time.monotonic()
        if now - self._limit_logged_at >= 60.0:  # one line a minute at most
            self._limit_logged_at = now
            log.warning("segment creation refused: the container holds its limit of segments",
                        extra={"container": self.container_id, "limit": error.limit,
                               "segments": self._state.segment_count})

    async def create_transient_segment(self, parent: str, writer_id: uuid.UUID) -> str:
        name = naming.transient_segment_name(parent, writer_id, uuid.uuid4())
        await self.create_segment(name, SegmentType.TRANSIENT, {attrs.CREATION_EPOCH: self.epoch})
        return name

    def submit_event_append(self, name: str, data: BytesLike, writer_id: uuid.UUID, event_number: int,
                            previous_event_number: int, event_count: int,
                            expected_offset: int | None = None) -> asyncio.Future[int]:
        """Decides a writer's append now; returns a future of the offset it lands at, once durable.

        The writer's attribute moves from ``previous_event_number`` to ``event_number`` atomically
        with the append (BadAttributeUpdate if another owner moved it: a zombie writer), and
        EVENT_COUNT grows by ``event_count``. BadOffset if ``expected_offset`` is not the length.
        """
        updates = (attrs.AttributeUpdate(writer_id, attrs.REPLACE_IF_EQUALS, event_number, previous_event_number),
                   attrs.AttributeUpdate(attrs.EVENT_COUNT, attrs.ACCUMULATE, event_count))
        self._record_load(name, len(data), event_count)
        return self._pipeline.submit(lambda pending: pending.append(name, data, updates, expected_offset))

    def flush_if_idle(self) -> None:
        """Hands the decided mutations to the log now unless it is busy (then they go at the turn's end)."""
        self._pipeline.flush_if_idle()

    def delete_soon(self, name: str) -> asyncio.Future[None]:
        """Decides the deletion of ``name`` now; returns a future of its outcome (for cleanups nobody awaits)."""
        return self._pipeline.submit(lambda pending: pending.delete(name))

    async def append(self, name: str, data: BytesLike, attribute_updates: Iterable[attrs.AttributeUpdate] = (),
                     expected_offset: int | None = None) -> int:
        """Appends ``data``; returns the segment length after it."""
        offset: int = await self._pipeline.submit(
            lambda pending: pending.append(name, data, attribute_updates, expected_offset))
        return offset + len(data)

    async def seal(self, name: str) -> int:
        length: int = await self._refused_when_durable(name, errors.SegmentIsSealed, lambda pending: pending.seal(name))
        self.load.forget(name)
        return length

    async def truncate(self, name: str, offset: int) -> None:
        await self._pipeline.submit(lambda pending: pending.truncate(name, offset))

    async def delete(self, name: str) -> None:
        await self._refused_when_durable(name, errors.NoSuchSegment, lambda pending: pending.delete(name))
        self.load.forget(name)

    async def update_attributes(self, name: str, attribute_updates: Iterable[attrs.AttributeUpdate]) -> None:
        attribute_updates = tuple(attribute_updates)
        await self._pipeline.submit(lambda pending: pending.update_attributes(name, attribute_updates))
        segment = self._state.get(name)
        if (segment is not None and segment.segment_type == SegmentType.STREAM and not segment.sealed
                and any(update.attribute_id in _POLICY for update in attribute_updates)):
            self.load.policy_known(name, segment.attributes)

    async def merge(self, target: str, source: str, attribute_updates: Iterable[attrs.AttributeUpdate] = (),
                    header: BytesLike = b"") -> int:
        """Merges ``source`` (sealing it) after ``header`` into ``target``; returns the target's new length.

        A retried merge whose source was already merged into ``target`` answers the target's length, once that
        merge is durable (``_refused_when_durable``).
        """
        if self._merged_into(source, target):
            return self.get_info(target).length
        merged = self._state.get(source)
        try:
            length: int = await self._refused_when_durable(
                source, errors.NoSuchSegment, lambda pending: pending.merge(target, source, attribute_updates, header))
        except errors.NoSuchSegment:
            if self._merged_into(source, target):  # the merge this one met in flight, now durable
                return self.get_info(target).length
            raise
        self.load.forget(source)
        if merged is not None:
            self.load.merged(target, merged.length, merged.attributes)
        return length

    def _merged_into(self, source: str, target: str) -> bool:
        """Whether ``source`` is durably merged into ``target`` (and gone)."""
        return not self._state.exists(source) and self._state.merged_sources.get(source) == target

    async def _refused_when_durable(self, name: str, refusal: type[errors.SegmentStoreError],
                                    decide: Callable[[PendingState], Decision]) -> Any:
        """Submits ``decide``. A ``refusal`` (the segment there, sealed, or gone) is answered only when the segment's
        state is durable: one decided while a mutation of ``name`` is in flight (a retried create, seal, merge or
        delete meeting the original) waits until that one is durable or failed, then is decided again. Callers take
        such a refusal for "already done" (a controller's retried seal, a commit's retried merge): answered from a
        mutation not yet durable, which the container could still lose by failing, it was a lie (found by the
        simulation, cluster seed 40: a retried transaction merge was answered "already merged" while the first was being
        logged; the store failed before it was durable, and the transaction's events in that segment were lost)."""
        while True:
            try:
                return await self._pipeline.submit(decide)
            except refusal:
                if not self._pipeline.has_pending(name):
                    raise
                await self._pipeline.settled()

    @overload
    async def update_table(self, name: str, entries: Sequence[tuple[BytesLike, int, BytesLike]],
                           table_offset: int = -1) -> list[int]: ...

    @overload
    async def update_table(self, name: str, entries: Sequence[table_format.TableUpdate],
                           table_offset: int = -1) -> list[int | None]: ...

    async def update_table(self, name: str, entries: Sequence[table_format.TableUpdate],
                           table_offset: int = -1) -> list[int] | list[int | None]:
        """Updates (key, expected version, value) entries atomically; returns new versions (None: removed)."""
        return await self._pipeline.submit(lambda pending: pending.table_update(name, entries, table_offset))

    async def remove_table_keys(self, name: str, keys: Sequence[table_format.TableRemoval],
                                table_offset: int = -1) -> None:
        """Removes (key, expected version) keys atomically."""
        await self._pipeline.submit(lambda pending: pending.table_remove(name, keys, table_offset))

    async def compact_table(self, name: str) -> None:
        """Re-writes the table's live entries at its end (versions kept) and truncates everything before."""
        await self._tables.compact(self._segment(name))
