"""Auto-scaling (spec §6.10; thresholds of segment-store design §3.12), measured by the controller.

Theory of operation. Java's segment store measures each segment's load and reports hot and cold
segments to the controller through an internal stream. Tributary's segment store reports nothing;
instead the controller samples the load itself, and the rules stay the same:

1. *sample*: every ``sample_interval_seconds``, for every stream whose scaling policy is rate
   based, read each active segment's counter -- its length (``GetStreamSegmentInfo`` write
   offset) for KB/s policies, its ``EVENT_COUNT`` attribute for events/s policies -- and keep the
   (time, value) samples of the last ``idle_window`` per segment (in memory only: a restarted
   controller starts measuring afresh, as a restarted Java segment store does);
2. *rate*: a window's rate is the counter's increase from the newest sample at or before
   ``now - window`` to the newest sample. A window counts only once samples span it, which is
   the "segment older than the window" condition of §3.12;
3. *decide* (``decide``, a pure function of the samples, the time, the policy and the timings):
   a segment past its cooldown and not muted is *hot* if the short rate > 5x target, the medium
   one > 2x target or the long one > target, and is then split into
   ``min(max(2, floor(highest rate / target)), max(2, scaleFactor))`` equal ranges; it is *cold*
   if the short, medium and long rates are < target and the idle one < target / 2. Runs of
   adjacent cold segments merge, at most three at a time (a segment and its two neighbours), and
   never below ``minNumSegments``;
4. *act*: all decisions of a round for one stream become one request of the manual scale
   workflow (``Scaling.request_scale``: ETR, transactions, persisted intent, re-drive), and the
   segments named are muted for ``mute_seconds``. A stream that is not ACTIVE, or has a workflow
   running in this controller, is only sampled.

Time is an argument (``run_once(now)``, ``decide(..., now, ...)``); only ``run_forever`` reads the
context's clock. The controller does not import the segment store, so ``EVENT_COUNT`` (core
attribute 1) is spelled out here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from clients import errors as client_errors
from wire import naming
from wire.constants import NULL_ATTRIBUTE_VALUE

from ..store import NotFound, State, StreamStore, layout
from ..store.key_space import equal_ranges
from ..store.records import EpochRecord, ScaleType, ScalingPolicy, SegmentRecord, StateRecord, StreamConfiguration
from .auto_scale_settings import AutoScaleSettings
from .context import ControllerContext
from .errors import ServiceError
from .paging import owned_streams
from .scaling import Scaling
from .segment_calls import bounded_gather
from .workflows import WorkflowRunner

log = logging.getLogger("tributary.controller")

EVENT_COUNT = uuid.UUID(int=(0x8000000000000000 << 64) | 1)  # server.containers.attributes.EVENT_COUNT
SHORT_FACTOR, MEDIUM_FACTOR, LONG_FACTOR = 5.0, 2.0, 1.0  # scale up above these multiples of the target
IDLE_FACTOR = 0.5  # scale down when the idle-window rate is below this multiple of the target
MERGE_GROUP_MAX = 3  # a cold segment merges with at most its two neighbours
SAMPLED_STATES = frozenset({State.ACTIVE, State.SCALING, State.UPDATING, State.TRUNCATING, State.COMMITTING_TXN})


# ---------------------------------------------------------------------- the pure policy

class Sample(NamedTuple):
    time: int  # ms, the controller's clock
    value: int  # bytes (KB/s policies) or events (events/s policies) written so far


@dataclasses.dataclass(frozen=True)
class SegmentLoad:
    """What ``decide`` knows about one active segment."""

    segment: SegmentRecord
    samples: tuple[Sample, ...]  # oldest first
    last_request: int | None = None  # ms of the last auto-scale request naming the segment


@dataclasses.dataclass(frozen=True)
class Rates:
    """Per-second rates in the policy's unit; None where the samples do not span the window yet."""

    short: float | None
    medium: float | None
    long: float | None
    idle: float | None


@dataclasses.dataclass(frozen=True)
class Split:
    segment_id: int
    ranges: tuple[tuple[float, float], ...]


@dataclasses.dataclass(frozen=True)
class Merge:
    segment_ids: tuple[int, ...]  # adjacent, by key
    key_range: tuple[float, float]


Decision = Split | Merge


def window_rate(samples: Sequence[Sample], now: int, window_ms: int, unit: float = 1.0) -> float | None:
    """The counter's increase per second (divided by ``unit``) from the newest sample at or before
    ``now - window_ms`` to the newest sample; None if no sample is that old."""
    if not samples:
        return None
    newest = samples[-1]
    base = None
    for sample in samples:
        if sample.time > now - window_ms:
            break
        base = sample
    if base is None or newest.time <= base.time:
        return None
    return max(0, newest.value - base.value) / unit / ((newest.time - base.time) / 1000)


def rates(samples: Sequence[Sample], now: int, scale_type: ScaleType, timings: AutoScaleSettings) -> Rates:
    """The four window rates; KB/s policies count bytes in KiB, events/s policies count events."""
    unit = 1024.0 if scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC else 1.0
    windows = (timings.short_window_seconds, timings.medium_window_seconds, timings.long_window_seconds,
               timings.idle_window_seconds)
    return Rates(*(window_rate(samples, now, int(seconds * 1000), unit) for seconds in windows))


def is_hot(found: Rates, target: float) -> bool:
    return ((found.short is not None and found.short > SHORT_FACTOR * target)
            or (found.medium is not None and found.medium > MEDIUM_FACTOR * target)
            or (found.long is not None and found.long > LONG_FACTOR * target))


def is_cold(found: Rates, target: float) -> bool:
    busy = (found.short, found.medium, found.long)
    return (found.idle is not None and found.idle < IDLE_FACTOR * target
            and all(rate is not None and rate < target for rate in busy))


def split_count(found: Rates, policy: ScalingPolicy) -> int:
    """``min(max(2, floor(highest rate / target)), max(2, scaleFactor))`` (spec §6.10 "Up")."""
    highest = max(rate for rate in (found.short, found.medium, found.long) if rate is not None)
    return min(max(2, int(highest // policy.target_rate)), max(2, policy.scale_factor))


def decide(loads: Sequence[SegmentLoad], now: int, policy: ScalingPolicy,
           timings: AutoScaleSettings) -> list[Decision]:
    """The splits and merges the segments' load calls for (empty for fixed policies).

    ``loads`` are the stream's active segments. A segment younger than the cooldown or requested
    less than the mute ago is left alone (and does not take part in merges).
    """
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or policy.target_rate <= 0:
        return []
    cooldown_ms, mute_ms = int(timings.cooldown_seconds * 1000), int(timings.mute_seconds * 1000)
    ordered = sorted(loads, key=lambda load: load.segment.key_start)
    decisions: list[Decision] = []
    cold: list[bool] = []
    for load in ordered:
        eligible = (now - load.segment.creation_time >= cooldown_ms
                    and (load.last_request is None or now - load.last_request >= mute_ms))
        found = rates(load.samples, now, policy.scale_type, timings) if eligible else None
        if found is not None and is_hot(found, policy.target_rate):
            segment = load.segment
            ranges = equal_ranges(segment.key_start, segment.key_end, split_count(found, policy))
            if all(start < end for start, end in ranges):
                decisions.append(Split(segment.segment_id, tuple(ranges)))
        cold.append(found is not None and is_cold(found, policy.target_rate))
    decisions += _merges([load.segment for load in ordered], cold, len(ordered) - policy.min_num_segments)
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


def _named(decision: Decision) -> tuple[int, ...]:
    return (decision.segment_id,) if isinstance(decision, Split) else decision.segment_ids


# ---------------------------------------------------------------------- the loop

class AutoScaler:
    """Samples rate-policy streams and submits the scales ``decide`` calls for (see the module docstring)."""

    def __init__(self, context: ControllerContext, scaling: Scaling, runner: WorkflowRunner):
        self._context = context
        self._scaling = scaling
        self._runner = runner
        self._samples: dict[tuple[str, str], dict[int, list[Sample]]] = {}
        self._requested: dict[tuple[str, str], dict[int, int]] = {}  # segment id -> time of the last request
        self._in_flight: dict[tuple[str, str], asyncio.Task] = {}

    @property
    def timings(self) -> AutoScaleSettings:
        return self._context.settings.auto_scale

    async def run_once(self, now: int) -> int:
        """One round over every stream. Returns how many scale requests it submitted."""
        submitted = 0
        streams = await owned_streams(self._context.store, self._context.coordination.owns)
        for scope, stream in streams:
            try:
                submitted += bool(await self.apply(self._context.store.stream(scope, stream), now))
            except (ServiceError, NotFound, client_errors.ClientError) as error:
                log.info("auto-scale skipped a stream", extra={"stream": f"{scope}/{stream}", "error": repr(error)})
        for key in set(self._samples) - set(streams):
            self._forget(key)
        return submitted

    async def apply(self, stream: StreamStore, now: int) -> list[Decision]:
        """Samples the stream's active segments and submits what ``decide`` says. Returns the decisions."""
        key = (stream.scope, stream.name)
        found_configuration, found_state, found_current = await stream.find_records(
            (layout.CONFIGURATION, StreamConfiguration), (layout.STATE, StateRecord),
            (layout.CURRENT_EPOCH, EpochRecord))
        if found_configuration is None or found_state is None or found_current is None:
            self._forget(key)
            return []
        configuration, state, current = found_configuration[0], found_state[0], found_current[0]
        policy = configuration.scaling
        if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or state.state not in SAMPLED_STATES:
            self._forget(key)
            return []
        await self._sample(stream, current, policy.scale_type, now)
        busy = key in self._in_flight or self._runner.is_running(*key)
        if state.state != State.ACTIVE or busy:
            return []
        samples, requested = self._samples[key], self._requested.setdefault(key, {})
        loads = [SegmentLoad(segment, tuple(samples.get(segment.segment_id, ())), requested.get(segment.segment_id))
                 for segment in current.segments]
        decisions = decide(loads, now, policy, self.timings)
        if decisions:
            for decision in decisions:
                requested.update(dict.fromkeys(_named(decision), now))
            to_seal, ranges = scale_request(decisions)
            log.info("auto-scale", extra={"stream": f"{key[0]}/{key[1]}", "seal": to_seal, "ranges": ranges})
            task = asyncio.get_running_loop().create_task(self._request(key, to_seal, ranges))
            self._in_flight[key] = task
            task.add_done_callback(lambda done: self._in_flight.pop(key) if self._in_flight.get(key) is done else None)
        return decisions

    async def _sample(self, stream: StreamStore, current: EpochRecord, scale_type: ScaleType, now: int) -> None:
        """Adds a sample per active segment; drops segments no longer active and samples too old to matter."""
        client = self._context.segments

        async def read(segment_id: int) -> int | None:
            name = naming.stream_segment_name(stream.scope, stream.name, segment_id)
            try:
                if scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC:
                    return (await client.segment_info(name)).write_offset
                value = await client.get_attribute(name, EVENT_COUNT)
                return 0 if value == NULL_ATTRIBUTE_VALUE else value
            except client_errors.ClientError:
                return None  # missed this round (the segment store is busy, restarting, ...)

        ids = [segment.segment_id for segment in current.segments]
        values = await bounded_gather([functools.partial(read, segment_id) for segment_id in ids],
                                      self._context.settings.segment_calls_concurrency_max)
        old = self._samples.get((stream.scope, stream.name), {})
        horizon = now - self.timings.longest_window_ms
        samples: dict[int, list[Sample]] = {}
        for segment_id, value in zip(ids, values, strict=True):  # one value per id
            kept = old.get(segment_id, [])
            if value is not None:
                kept.append(Sample(now, value))
            while len(kept) >= 2 and kept[1].time <= horizon:
                del kept[0]  # the newest sample at or before the horizon stays: it bases the longest window
            samples[segment_id] = kept
        self._samples[(stream.scope, stream.name)] = samples
        requested = self._requested.get((stream.scope, stream.name), {})
        for segment_id in set(requested) - set(ids):
            del requested[segment_id]

    async def _request(self, key: tuple[str, str], to_seal: list[int], ranges: list[tuple[float, float]]) -> None:
        try:
            await self._scaling.request_scale(key[0], key[1], to_seal, ranges)
        except ServiceError as error:  # e.g. another scale is pending: the next round decides again
            log.info("auto-scale request refused", extra={"stream": f"{key[0]}/{key[1]}", "error": repr(error)})
        except Exception as error:  # noqa: BLE001 - a store that is down: the next round decides again
            log.warning("auto-scale request failed", extra={"stream": f"{key[0]}/{key[1]}", "error": repr(error)})

    def _forget(self, key: tuple[str, str]) -> None:
        self._samples.pop(key, None)
        self._requested.pop(key, None)

    async def run_forever(self) -> None:
        """A round every ``sample_interval_seconds`` (the clock is read here only); nothing if disabled."""
        if not self.timings.enabled:
            return
        try:
            while True:
                await asyncio.sleep(self.timings.sample_interval_seconds)
                try:
                    await self.run_once(self._context.now_ms())
                except Exception as error:  # noqa: BLE001 - the next round tries again
                    log.warning("auto-scale round failed", extra={"error": repr(error)})
        finally:
            tasks = [task for task in self._in_flight.values() if not task.done()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
