"""Auto-scaling driven by the segment stores' load reports (spec §6.10; Java's ``AutoScaleTask``).

Theory of operation. The segment stores measure the load of every segment with a rate policy and
decide what is hot or cold (``server/containers/load_meter.py``: Pravega's windows, thresholds,
cooldown and mute); each container appends its reports to its own report segment. The controller
does not sample anything: ``ReportTailers`` follow those few segments with long-poll reads
(``load_report_tailer.py``) and hand every report to ``receive``. So its work per interval grows
with the number of reports, never with the number of segments, idle or not.

1. *receive* (synchronous, per batch read): a report older than ``cold_mark_seconds`` is dropped (as
   Java drops expired requests), so is one about a stream another controller owns
   (``coordination.owns``); the rest wait, grouped by stream, and the round loop is woken; the round
   starts ``batch_seconds`` later, so a stream's reports from several containers come together.
2. *round* (``run_once(now)``): for each stream with waiting reports, one read of its
   configuration, state, current epoch and cold marks; then, in pure code:
   * ``mark``: a DOWN report marks its segment cold until ``timestamp + cold_mark_seconds`` (a
     *silent* one, sent once for a segment without any traffic, until the segment is sealed); an UP
     report clears the segment's mark; marks of segments no longer active, and expired ones, go;
   * ``decide``: an UP report splits its segment into ``min(max(2, splits), max(2, scaleFactor))``
     equal ranges; runs of adjacent marked segments merge, at most three at a time, never below
     ``minNumSegments``.
   Changed marks are written back (``coldSegments`` in the stream's metadata table, compare-and-set:
   they outlive this controller); the decisions of the round become one request of the manual scale
   workflow (``Scaling.request_scale``: ETR, transactions, persisted intent, re-drive), logged at
   info. A stream busy with another workflow (or whose request was refused) is looked at again
   every ``retry_seconds`` -- with its UP reports, and its marks from the store -- for at most a
   cold-mark period; a sealed (or sealing, creating) stream's reports are dropped.

Time is an argument (``receive(reports, now)``, ``run_once(now)``, ``decide``); only
``run_forever`` reads the context's clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

from clients import errors as client_errors
from controller_api.model import ScaleType, ScalingPolicy, StreamConfiguration
from wire.load_reports import Direction, LoadReport

from .. import metrics
from ..store import NotFound, State, StreamStore, WriteConflict, layout
from ..store.key_space import equal_ranges
from ..store.key_value import ABSENT, Write
from ..store.records import (
    ColdSegmentsRecord,
    EpochRecord,
    SegmentRecord,
    StateRecord,
    StreamConfigurationRecord,
)
from ..store.records.cold import SILENT_EXPIRY
from .auto_scale_settings import AutoScaleSettings
from .context import ControllerContext
from .errors import ServiceError
from .load_report_tailer import ReportTailers
from .scaling import Scaling
from .workflows import WorkflowRunner

log = logging.getLogger("tributary.controller")
MERGE_GROUP_MAX = 3  # a cold segment merges with at most its two neighbours
# States in which a stream may still be scaled (ACTIVE now, the others once their workflow is done).
SCALABLE_STATES = frozenset({State.ACTIVE, State.SCALING, State.UPDATING, State.TRUNCATING, State.COMMITTING_TXN})


# ---------------------------------------------------------------------- the pure policy

@dataclasses.dataclass(frozen=True)
class Split:
    segment_id: int
    ranges: tuple[tuple[float, float], ...]


@dataclasses.dataclass(frozen=True)
class Merge:
    segment_ids: tuple[int, ...]  # adjacent, by key
    key_range: tuple[float, float]


Decision = Split | Merge


def mark(marks: Mapping[int, int], reports: Sequence[LoadReport], active: Sequence[SegmentRecord], now: int,
         timings: AutoScaleSettings) -> dict[int, int]:
    """The cold marks after ``reports`` (segment id -> expiry): DOWN marks, UP clears; only active, unexpired ones."""
    updated = dict(marks)
    for report in reports:
        if report.direction == Direction.DOWN:
            expiry = SILENT_EXPIRY if report.silent else report.timestamp_ms + timings.cold_mark_ms
            updated[report.segment_id] = max(expiry, updated.get(report.segment_id, expiry))
        else:
            updated.pop(report.segment_id, None)
    ids = {segment.segment_id for segment in active}
    return {segment_id: expiry for segment_id, expiry in updated.items() if segment_id in ids and expiry > now}


def decide(active: Sequence[SegmentRecord], hot: Mapping[int, int], cold: Mapping[int, int], now: int,
           policy: ScalingPolicy) -> list[Decision]:
    """The splits and merges the reports call for (none under a fixed policy).

    ``hot`` maps the segments reported UP to the pieces asked for; ``cold`` holds the cold marks
    (segment id -> expiry). A segment both hot and marked is only split.
    """
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or policy.target_rate <= 0:
        return []
    ordered = sorted(active, key=lambda segment: segment.key_start)
    decisions: list[Decision] = []
    for segment in ordered:
        if segment.segment_id in hot:
            count = min(max(2, hot[segment.segment_id]), max(2, policy.scale_factor))
            ranges = equal_ranges(segment.key_start, segment.key_end, count)
            if all(start < end for start, end in ranges):
                decisions.append(Split(segment.segment_id, tuple(ranges)))
    is_cold = [segment.segment_id not in hot and cold.get(segment.segment_id, 0) > now for segment in ordered]
    decisions += _merges(ordered, is_cold, len(ordered) - policy.min_num_segments)
    return decisions


def _merges(segments: list[SegmentRecord], cold: list[bool], budget: int) -> list[Merge]:
    """Groups of at most ``MERGE_GROUP_MAX`` adjacent cold segments, removing at most ``budget`` segments."""
    merges: list[Merge] = []
    index = 0
    while index < len(segments) and budget > 0:
        if not cold[index]:
            index += 1
            continue
        group = [segments[index]]
        while (len(group) < min(MERGE_GROUP_MAX, budget + 1) and index + len(group) < len(segments)
               and cold[index + len(group)] and segments[index + len(group)].key_start == group[-1].key_end):
            group.append(segments[index + len(group)])
        if len(group) >= 2:
            merges.append(Merge(tuple(segment.segment_id for segment in group),
                                (group[0].key_start, group[-1].key_end)))
            budget -= len(group) - 1
        index += len(group)
    return merges


def scale_request(decisions: Sequence[Decision]) -> tuple[list[int], list[tuple[float, float]]]:
    """One scale for all of a round's decisions: (segments to seal, new key ranges)."""
    to_seal: list[int] = []
    ranges: list[tuple[float, float]] = []
    for decision in decisions:
        if isinstance(decision, Split):
            to_seal.append(decision.segment_id)
            ranges += decision.ranges
        else:
            to_seal += decision.segment_ids
            ranges.append(decision.key_range)
    return to_seal, ranges


def hot_segments(reports: Sequence[LoadReport]) -> dict[int, int]:
    """segment id -> the most pieces any UP report asked for."""
    hot: dict[int, int] = {}
    for report in reports:
        if report.direction == Direction.UP:
            hot[report.segment_id] = max(report.splits, hot.get(report.segment_id, 0))
    return hot


# ---------------------------------------------------------------------- the loop

StreamKey = tuple[str, str]


class Outcome(enum.Enum):
    """What a round did for a stream."""

    SUBMITTED = "submitted"  # a scale request is under way
    DONE = "done"  # nothing (more) to do
    LATER = "later"  # busy: look again after the retry pause


SUBMITTED, DONE, LATER = Outcome.SUBMITTED, Outcome.DONE, Outcome.LATER


@dataclasses.dataclass(frozen=True)
class _StreamFacts:
    """What a round needs of a stream, read in one store call."""

    configuration: StreamConfiguration
    state: State
    current: EpochRecord
    marks: dict[int, int]
    marks_version: int  # ABSENT: no marks written yet (a write must create them)

    @classmethod
    async def read(cls, stream: StreamStore) -> _StreamFacts | None:
        """None if the stream has no configuration, state or current epoch (gone, or not created yet)."""
        requests: list[tuple[str, type[Any]]] = [
            (layout.CONFIGURATION, StreamConfigurationRecord), (layout.STATE, StateRecord),
            (layout.CURRENT_EPOCH, EpochRecord), (layout.COLD_SEGMENTS, ColdSegmentsRecord)]
        configuration, state, current, cold = await stream.read_many(requests)
        if configuration is None or state is None or current is None:
            return None
        marks, version = (cast(ColdSegmentsRecord, cold[0]).marks, cold[1]) if cold is not None else ({}, ABSENT)
        return cls(cast(StreamConfigurationRecord, configuration[0]).configuration, cast(StateRecord, state[0]).state,
                   cast(EpochRecord, current[0]), marks, version)


class AutoScaler:
    """Acts on load reports (see the module docstring)."""

    def __init__(self, context: ControllerContext, scaling: Scaling, runner: WorkflowRunner):
        self._context = context
        self._scaling = scaling
        self._runner = runner
        self._waiting: dict[StreamKey, list[LoadReport]] = {}
        self._recheck: dict[StreamKey, int] = {}  # streams to look at again without new reports, until when (ms)
        self._wakeup = asyncio.Event()
        self._in_flight: dict[StreamKey, asyncio.Task] = {}
        self.reports_received = 0
        self.rounds = 0

    @property
    def timings(self) -> AutoScaleSettings:
        return self._context.settings.auto_scale

    def receive(self, reports: Sequence[LoadReport], now: int) -> None:
        """Reports just read: valid ones about streams this controller owns wait for the next round."""
        oldest = now - self.timings.cold_mark_ms
        owns = self._context.coordination.owns
        for report in reports:
            metrics.LOAD_REPORTS.labels("up" if report.direction == Direction.UP else "down").inc()
            if report.timestamp_ms >= oldest and owns(report.scope, report.stream):
                self._waiting.setdefault(report.stream_key, []).append(report)
        self.reports_received += len(reports)
        if self._waiting:
            self._wakeup.set()

    async def run_once(self, now: int) -> int:
        """One round over the streams with waiting reports (or to look at again). Returns how many scale
        requests it submitted."""
        self.rounds += 1
        waiting, self._waiting = self._waiting, {}
        for key, until in list(self._recheck.items()):
            if until < now:
                del self._recheck[key]
            else:
                waiting.setdefault(key, [])
        submitted = 0
        for key, reports in waiting.items():
            try:
                outcome = await self.apply(key, reports, now)
            except (ServiceError, NotFound, WriteConflict, client_errors.ClientError) as error:
                log.info("auto-scale postponed", extra={"stream": f"{key[0]}/{key[1]}", "error": repr(error)})
                outcome = LATER
            if outcome is LATER:
                self._later(key, reports, now)
            else:
                self._recheck.pop(key, None)
                submitted += outcome is SUBMITTED
        return submitted

    def _later(self, key: StreamKey, reports: Sequence[LoadReport], now: int) -> None:
        """Looks at the stream again after ``retry_seconds`` with its valid UP reports (its DOWN reports are
        marks by now), for at most a cold-mark period."""
        oldest = now - self.timings.cold_mark_ms
        ups = [report for report in reports if report.direction == Direction.UP and report.timestamp_ms >= oldest]
        if ups:
            self._waiting.setdefault(key, []).extend(ups)
        self._recheck.setdefault(key, now + self.timings.cold_mark_ms)

    async def apply(self, key: StreamKey, reports: Sequence[LoadReport], now: int) -> Outcome:
        """Marks, decides and submits for one stream.

        Returns SUBMITTED (a scale request is under way), DONE (nothing to do), or LATER (the stream is busy:
        look again).
        """
        stream = self._context.store.stream(*key)
        facts = await _StreamFacts.read(stream)
        if facts is None:
            return DONE  # the stream is gone (or not created yet)
        policy = facts.configuration.scaling
        if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or facts.state not in SCALABLE_STATES:
            return DONE
        active = facts.current.segments
        updated = mark(facts.marks, reports, active, now, self.timings)
        if updated != facts.marks:
            await stream.write([Write(layout.COLD_SEGMENTS, ColdSegmentsRecord(updated).encode(), facts.marks_version)])
        hot = hot_segments(reports)
        if facts.state != State.ACTIVE or key in self._in_flight or self._runner.is_running(*key):
            return LATER if hot or len(updated) >= 2 else DONE  # a merge needs two marks
        decisions = decide(active, hot, updated, now, policy)
        if not decisions:
            return DONE
        to_seal, ranges = scale_request(decisions)
        log.info("auto-scale", extra={"stream": f"{key[0]}/{key[1]}", "seal": to_seal, "ranges": ranges,
                                      "splits": sum(isinstance(decision, Split) for decision in decisions),
                                      "merges": sum(isinstance(decision, Merge) for decision in decisions)})
        ups = [report for report in reports if report.direction == Direction.UP]
        task = asyncio.get_running_loop().create_task(self._request(key, to_seal, ranges, ups))
        self._in_flight[key] = task
        task.add_done_callback(lambda done: self._in_flight.pop(key) if self._in_flight.get(key) is done else None)
        return SUBMITTED

    async def _request(self, key: StreamKey, to_seal: list[int], ranges: list[tuple[float, float]],
                       ups: list[LoadReport]) -> None:
        try:
            await self._scaling.request_scale(key[0], key[1], to_seal, ranges)
            return
        except ServiceError as error:  # e.g. another scale is pending: looked at again with the UP reports
            log.info("auto-scale request refused", extra={"stream": f"{key[0]}/{key[1]}", "error": repr(error)})
        except Exception as error:  # noqa: BLE001 - a store that is down: looked at again
            log.warning("auto-scale request failed", extra={"stream": f"{key[0]}/{key[1]}", "error": repr(error)})
        self._later(key, ups, self._context.now_ms())
        asyncio.get_running_loop().call_later(self.timings.retry_seconds, self._wakeup.set)

    async def run_forever(self) -> None:
        """Tails the report segments and runs a round whenever reports wait (nothing if disabled)."""
        if not self.timings.enabled:
            return
        client = self._context.report_reads or self._context.segments
        tailers = ReportTailers(self._context.locator.container_count, client,
                                lambda reports: self.receive(reports, self._context.now_ms()),
                                self._context.now_ms, self.timings)
        tailing = asyncio.get_running_loop().create_task(tailers.run(), name="load report tailers")
        try:
            while True:
                if self._waiting or self._recheck:  # streams to look at again: after a pause, or when reports come
                    try:  # not wait_for: 3.11's loses a cancel that meets a set event
                        async with asyncio.timeout(self.timings.retry_seconds):
                            await self._wakeup.wait()
                    except TimeoutError:
                        pass
                else:
                    await self._wakeup.wait()
                await asyncio.sleep(self.timings.batch_seconds)  # let the other containers' reports of the tick come
                self._wakeup.clear()
                try:
                    await self.run_once(self._context.now_ms())
                except Exception as error:  # noqa: BLE001 - the next round tries again
                    log.warning("auto-scale round failed", extra={"error": repr(error)})
        finally:
            tasks = [tailing, *(task for task in self._in_flight.values() if not task.done())]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
