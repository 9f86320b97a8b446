"""A container's load reporting: its ``LoadMeter`` fed by its mutations, ticked, its reports stored.

Theory of operation. The container tells the reporter about its rate-policy segments as it
changes them (created, policy updated, sealed, merged, deleted; all of them once at start, since
the meter's rates live in memory only, as Java's do) and counts every event append into the meter
(``record``, bound once so the append path pays one call). A task ticks the meter every
``tick_seconds`` with the container's wall clock and appends what it reports to the container's
own report segment, ``_system/containers/load_reports_<id>`` (``wire.naming.load_report_segment_name``
pins the name to the container, so the append is local and goes through the log like any other:
a report the controller can read is durable). The segment is created when the task starts if it
does not exist; the controller reads it and truncates what it no longer needs (docs/operations.md).
A report the container could not append (it is stopping or failed) is dropped: its segment was
muted when it was decided, and the meter reports it again after the mute if it is still hot or
cold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from uuid import UUID

from wire import naming
from wire.load_reports import LoadReport, encode_report

from .. import errors
from ..background import cancel_and_wait
from .attributes import CREATION_TIME, EVENT_COUNT, SCALE_POLICY_RATE, SCALE_POLICY_TYPE
from .load_meter import LoadMeter, LoadSettings

log = logging.getLogger("tributary.container")
APPEND_BYTES_MAX = 1024 * 1024  # reports of one tick go in appends of at most this much


class LoadReporter:
    """One container's meter and the task that ticks it (nothing runs while ``settings.enabled`` is False)."""

    def __init__(self, container_id: int, settings: LoadSettings, wall_clock_ms: Callable[[], int],
                 append: Callable[[str, bytes], Awaitable[object]], create: Callable[[str], Awaitable[None]]):
        self.segment_name = naming.load_report_segment_name(container_id)
        self.settings = settings
        self.meter = LoadMeter(settings)
        self._container_id = container_id
        self._wall_clock_ms = wall_clock_ms
        self._append = append
        self._create = create
        self._task: asyncio.Task[None] | None = None
        self.reports_appended = 0

    # ------------------------------------------------------------------ what the container tells it

    def policy_known(self, name: str, attributes: Mapping[UUID, int]) -> None:
        """``name`` was created or its policy changed: track it (or forget it) by its policy attributes."""
        if self.settings.enabled:
            self.meter.track(name, attributes.get(SCALE_POLICY_TYPE, 0), attributes.get(SCALE_POLICY_RATE, 0),
                             self._wall_clock_ms())

    def forget(self, name: str) -> None:
        self.meter.forget(name)

    def merged(self, target: str, length: int, attributes: Mapping[UUID, int]) -> None:
        """A source of ``length`` bytes (its attributes say its events and creation time) merged into ``target``."""
        if target in self.meter:
            events = max(0, attributes.get(EVENT_COUNT, 0))
            created = attributes.get(CREATION_TIME, 0)
            age_ms = self._wall_clock_ms() - created if created > 0 else 0
            self.meter.merged(target, length, events, age_ms)

    # ------------------------------------------------------------------ lifecycle

    def start(self, segments: Mapping[str, Mapping[UUID, int]]) -> None:
        """Tracks the rate-policy ``segments`` (name -> attributes, the unsealed ones) and starts ticking."""
        if not self.settings.enabled:
            return
        for name, attributes in segments.items():
            self.policy_known(name, attributes)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"load reports {self._container_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        created = await self._create_segment()
        next_tick = loop.time() + self.settings.tick_seconds
        while True:
            await asyncio.sleep(max(0.0, next_tick - loop.time()))
            next_tick = max(next_tick + self.settings.tick_seconds, loop.time())
            reports = self.meter.tick(self._wall_clock_ms())
            if not reports:
                continue
            try:
                created = created or await self._create_segment()
                await self._store(reports)
            except errors.SegmentStoreError as error:
                log.warning("load reports dropped", extra={"container": self._container_id, "reports": len(reports),
                                                           "error": repr(error)})

    async def _create_segment(self) -> bool:
        """Creates the report segment unless it exists (at start, so the controller finds it). Returns whether
        it exists now."""
        try:
            await self._create(self.segment_name)
        except errors.SegmentAlreadyExists:
            pass
        except errors.SegmentStoreError as error:
            log.warning("load report segment not created", extra={"container": self._container_id,
                                                                   "error": repr(error)})
            return False
        return True

    async def _store(self, reports: list[LoadReport]) -> None:
        batch: list[bytes] = []
        size = 0
        for record in map(encode_report, reports):
            if size + len(record) > APPEND_BYTES_MAX:
                await self._append(self.segment_name, b"".join(batch))
                batch, size = [], 0
            batch.append(record)
            size += len(record)
        await self._append(self.segment_name, b"".join(batch))
        self.reports_appended += len(reports)
        for report in reports:
            if not report.silent:
                log.info("segment load reported", extra={
                    "segment": naming.stream_segment_name(report.scope, report.stream, report.segment_id),
                    "direction": report.direction.name, "splits": report.splits})
        silent = sum(report.silent for report in reports)
        if silent:
            log.info("idle segments reported", extra={"container": self._container_id, "count": silent})
