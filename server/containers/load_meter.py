"""Per-segment load rates and the hot/cold decisions of auto-scaling (pure logic; time is an argument).

Theory of operation (the rules of Pravega's segment store: ``SegmentAggregates``,
``SegmentStatsRecorderImpl``, ``AutoScaleProcessor``; spec §6.10, segment-store design §3.12).

* *Which segments.* A container's meter tracks the stream segments whose scaling policy is rate
  based (``SCALE_POLICY_TYPE`` 1: KiB/s, 2: events/s; transaction, transient and table segments
  never): from their creation, from a policy update, or, after a restart, from the container's
  start. Sealing, merging away or deleting a segment forgets it.
* *Counting* (``record``, on the append path): one dict lookup and an addition -- the events or
  bytes since the segment's last tick -- and, the first time in a tick, the segment joins the
  tick's list of touched segments. Nothing else happens per append. A merged transaction counts as
  traffic of its parent, amortised over the transaction's life as Pravega does (``merged``).
* *Ticking* (``tick(now)``, every ``tick_seconds``): each touched segment folds its count into four
  exponentially weighted rates -- one per window (short/medium/long/idle: 2/5/10/20 minutes by
  default) -- in continuous time: the count's span (since the meter's previous tick, or the
  segment's last fold) weighs ``1 - exp(-span / window)``, and the silent time before it decays the
  rate by ``exp(-silence / window)``. So a tick that runs late, or one that runs just after a late one
  (a busy event loop), weighs what its span is worth: a burst counted over a millisecond is not read
  as a rate of thousands. A rate is read bias-corrected (divided by ``1 - exp(-measured / window)``,
  the weight of the time measured so far), so a young segment's rate is the weighted mean of all its
  traffic, its first fold included, rather than its first fold alone. A segment
  is judged at most every ``report_interval_seconds`` and only when it had traffic: past its
  cooldown (measured from when the meter started tracking it), it is *hot* if older than a window
  whose rate exceeds the window's multiple of the target (short 5x, medium 2x, long 1x), asking
  for ``max(2, highest rate / target)`` pieces; *cold* if the short, medium and long rates are
  below the target, the idle rate below half of it, and it is older than the idle window. An UP
  report mutes both directions for ``mute_seconds``; a DOWN report mutes DOWN.
* *Going idle.* Untouched segments cost nothing per tick: they wait in an order of last traffic,
  and one that saw no traffic for the idle window is reported cold once, *silently* (the
  controller keeps a silent mark until the segment is gone), and starts afresh -- rates at 0,
  a new cooldown -- when traffic comes back. So a tick costs O(segments with traffic + segments
  going idle), never O(segments tracked), and an idle segment is reported once.

The meter only decides; the container's ``LoadReporter`` reads the clock, runs the ticks and
appends the reports to the container's report segment (``wire.load_reports``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict

from wire import naming
from wire.load_reports import Direction, LoadReport

BY_KBYTES, BY_EVENTS = 1, 2  # SCALE_POLICY_TYPE values that mean a rate policy (0: a fixed number of segments)
SHORT_FACTOR, MEDIUM_FACTOR, LONG_FACTOR = 5.0, 2.0, 1.0  # hot above these multiples of the target
IDLE_FACTOR = 0.5  # cold when the idle-window rate is below this multiple of the target
RATE_DIGITS = 9  # rates are read rounded to this many decimals: float noise never tips a steady rate over a bar


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    """Timings of load measurement (defaults: Pravega's); tests shrink them to seconds."""

    enabled: bool = True
    tick_seconds: float = 5.0  # how often rates are folded and segments judged
    short_window_seconds: float = 120.0  # hot when this rate > 5x target ...
    medium_window_seconds: float = 300.0  # ... or this one > 2x target ...
    long_window_seconds: float = 600.0  # ... or this one > target; cold when all three < target ...
    idle_window_seconds: float = 1200.0  # ... and this one < target / 2; no traffic this long: silently cold
    cooldown_seconds: float = 600.0  # no report about a segment this soon after tracking began
    mute_seconds: float = 600.0  # no second report in a direction this soon after the last one
    report_interval_seconds: float = 120.0  # a segment with traffic is judged at most this often
    reports_per_tick_max: int = 1000  # the rest of the idle segments are reported on the next ticks

    def __post_init__(self) -> None:
        windows = (self.short_window_seconds, self.medium_window_seconds, self.long_window_seconds,
                   self.idle_window_seconds)
        if self.tick_seconds <= 0 or min(windows) <= 0:
            raise ValueError("the tick and the windows must be positive")
        if min(self.cooldown_seconds, self.mute_seconds, self.report_interval_seconds) < 0:
            raise ValueError("cooldown, mute and report interval cannot be negative")
        if self.reports_per_tick_max < 1:
            raise ValueError("reports_per_tick_max must be at least 1")

    @property
    def windows_seconds(self) -> tuple[float, float, float, float]:
        return (self.short_window_seconds, self.medium_window_seconds, self.long_window_seconds,
                self.idle_window_seconds)


@dataclasses.dataclass(frozen=True)
class Rates:
    """Rates in the policy's unit (events/s or KiB/s) over the four windows."""

    short: float
    medium: float
    long: float
    idle: float


class SegmentLoad:
    """What the meter keeps about one tracked segment (times in ms of the store's wall clock)."""

    __slots__ = ("name", "scope", "stream", "segment_id", "by_events", "target_rate", "start_ms", "measured_from_ms",
                 "last_tick_ms", "count", "rates", "last_judged_ms", "last_up_ms", "last_down_ms", "last_traffic_ms",
                 "touched", "idle", "tracked")
    start_ms: int  # when tracking (or traffic after going idle) began: cooldown and window ages count from here
    measured_from_ms: int  # where the rates' measured time begins (their bias correction's origin)
    last_tick_ms: int  # the last fold
    last_judged_ms: int
    last_traffic_ms: int  # the last tick that saw traffic (or the start)
    last_up_ms: int | None  # the last UP report (None: never, or not since going idle)
    last_down_ms: int | None
    rates: list[float]  # short, medium, long, idle, in events/s or bytes/s, before the bias correction
    idle: bool  # reported silently cold; the next traffic starts afresh

    def __init__(self, name: str, parsed: naming.SegmentName, by_events: bool, target_rate: int, now_ms: int):
        self.name = name
        self.scope, self.stream, self.segment_id = parsed.scope, parsed.stream, parsed.segment_id
        self.by_events = by_events
        self.target_rate = target_rate
        self.count = 0  # events or bytes since the last fold
        self.touched = False  # in the current tick's list
        self.tracked = True  # False once forgotten (a touched list may still hold it)
        self.restart(now_ms)
        self.last_up_ms = self.last_down_ms = now_ms  # a new segment is muted, as Pravega's creation mutes it

    def restart(self, now_ms: int) -> None:
        """Fresh aggregates from ``now_ms`` (tracking began, or traffic came back after going idle)."""
        self.start_ms = self.measured_from_ms = self.last_tick_ms = self.last_judged_ms = self.last_traffic_ms = now_ms
        self.rates = [0.0, 0.0, 0.0, 0.0]
        self.idle = False
        self.last_up_ms = self.last_down_ms = None

    def __repr__(self) -> str:
        return f"<SegmentLoad {self.name} target={self.target_rate} rates={[round(r, 2) for r in self.rates]}>"


def parse_tracked(name: str) -> naming.SegmentName | None:
    """The parsed name of a segment the meter may track: a plain stream segment outside ``_system``."""
    if naming.is_transaction_segment(name) or naming.is_transient_segment(name):
        return None
    try:
        parsed = naming.parse_segment_name(name)
    except naming.InvalidName:
        return None
    return None if parsed.scope == naming.INTERNAL_SCOPE or parsed.stream.endswith(naming.TABLE_SUFFIX) else parsed


class LoadMeter:
    """The rates of one container's rate-policy segments, and the reports they call for."""

    def __init__(self, settings: LoadSettings):
        self.settings = settings
        self._segments: dict[str, SegmentLoad] = {}
        self._touched: list[SegmentLoad] = []
        self._by_last_traffic: OrderedDict[str, SegmentLoad] = OrderedDict()  # not idle yet, oldest traffic first
        self._windows_ms = tuple(window * 1000 for window in settings.windows_seconds)
        self._tick_ms = max(1, int(settings.tick_seconds * 1000))
        self._last_tick_ms: int | None = None  # when the meter last ticked (ticks run late on a busy host)

    def __len__(self) -> int:
        return len(self._segments)

    def __contains__(self, name: str) -> bool:
        return name in self._segments

    def load(self, name: str) -> SegmentLoad | None:
        return self._segments.get(name)

    # ------------------------------------------------------------------ what the container tells it

    def track(self, name: str, scale_type: int, target_rate: int, now_ms: int) -> None:
        """Tracks ``name`` under a policy (a fixed policy, a zero target or an untracked kind of name: forgets it).

        The same policy again changes nothing; a new target keeps the rates; a new type starts afresh.
        """
        parsed = parse_tracked(name) if scale_type in (BY_KBYTES, BY_EVENTS) and target_rate > 0 else None
        if parsed is None:
            self.forget(name)
            return
        by_events = scale_type == BY_EVENTS
        load = self._segments.get(name)
        if load is not None and load.by_events == by_events:
            load.target_rate = target_rate
            return
        self.forget(name)
        load = SegmentLoad(name, parsed, by_events, target_rate, now_ms)
        self._segments[name] = load
        self._by_last_traffic[name] = load

    def forget(self, name: str) -> None:
        load = self._segments.pop(name, None)
        if load is not None:
            load.tracked = False
            self._by_last_traffic.pop(name, None)

    def record(self, name: str, byte_count: int, event_count: int) -> None:
        """An append to ``name`` (the append path: O(1), nothing for untracked segments)."""
        load = self._segments.get(name)
        if load is None:
            return
        load.count += event_count if load.by_events else byte_count
        if not load.touched:
            load.touched = True
            self._touched.append(load)

    def merged(self, name: str, byte_count: int, event_count: int, age_ms: int) -> None:
        """A transaction (or large event) of ``age_ms`` merged into ``name``: its traffic, spread over its life
        (Pravega counts one tick's share of a transaction older than a tick)."""
        if age_ms > self._tick_ms:
            byte_count, event_count = byte_count * self._tick_ms // age_ms, event_count * self._tick_ms // age_ms
        self.record(name, byte_count, event_count)

    # ------------------------------------------------------------------ the tick

    def tick(self, now_ms: int) -> list[LoadReport]:
        """Folds the counts of the segments with traffic, judges them, and reports the ones gone idle.

        Returns the reports to append, UP and DOWN, in the order decided.
        """
        reports: list[LoadReport] = []
        previous_tick_ms = self._last_tick_ms if self._last_tick_ms is not None else now_ms - self._tick_ms
        self._last_tick_ms = now_ms
        touched, self._touched = self._touched, []
        for load in touched:
            load.touched = False
            if not load.tracked:
                continue
            if load.idle:
                load.restart(now_ms)  # traffic after a silent report: as Pravega re-creates the aggregates
                load.measured_from_ms = load.last_tick_ms = now_ms - self._tick_ms
            self._fold(load, now_ms, previous_tick_ms)
            load.last_traffic_ms = now_ms
            self._by_last_traffic[load.name] = load
            self._by_last_traffic.move_to_end(load.name)
            if now_ms - load.last_judged_ms >= self.settings.report_interval_seconds * 1000:
                load.last_judged_ms = now_ms
                report = self._judge(load, now_ms)
                if report is not None:
                    reports.append(report)
        reports += self._gone_idle(now_ms)
        return reports

    def _fold(self, load: SegmentLoad, now_ms: int, previous_tick_ms: int) -> None:
        """Folds ``load.count`` into the rates, in continuous time.

        The count came since the meter's previous tick (or the segment's last fold, if later): that is its span,
        and the time between the segment's last fold and the span's start is silence. Each window's rate decays
        over the silence and then moves towards the span's rate by the span's weight, so a late tick (a long
        span) weighs more and a tick just after a late one (a span of a millisecond) weighs next to nothing."""
        span_ms = max(1, now_ms - max(previous_tick_ms, load.last_tick_ms))
        elapsed_ms = max(span_ms, now_ms - load.last_tick_ms)  # the silence and the span: what the old rate decays by
        instant = load.count * 1000 / span_ms
        rates = load.rates
        for index, window_ms in enumerate(self._windows_ms):
            rates[index] = rates[index] * math.exp(-elapsed_ms / window_ms) - math.expm1(-span_ms / window_ms) * instant
        load.count = 0
        load.last_tick_ms = now_ms

    def rates(self, load: SegmentLoad) -> Rates:
        """The rates in the policy's unit (events/s, or KiB/s for a KB/s policy), bias-corrected: each is the
        window's weighted mean of the traffic over the time measured so far (none measured yet: zeros)."""
        unit = 1.0 if load.by_events else 1024.0
        measured_ms = load.last_tick_ms - load.measured_from_ms
        if measured_ms <= 0:
            return Rates(0.0, 0.0, 0.0, 0.0)
        return Rates(*(round(rate / (unit * -math.expm1(-measured_ms / window_ms)), RATE_DIGITS)
                       for rate, window_ms in zip(load.rates, self._windows_ms, strict=True)))

    def _judge(self, load: SegmentLoad, now_ms: int) -> LoadReport | None:
        """An UP or DOWN report for a segment with traffic, if its rates and age call for one and it is not muted."""
        settings = self.settings
        age = (now_ms - load.start_ms) / 1000
        if age <= settings.cooldown_seconds:
            return None
        found, target = self.rates(load), load.target_rate
        mute_ms = settings.mute_seconds * 1000
        if is_hot(found, target, age, settings):
            if load.last_up_ms is not None and now_ms - load.last_up_ms <= mute_ms:
                return None
            load.last_up_ms = load.last_down_ms = now_ms
            splits = max(2, int(max(found.short, found.medium, found.long) / target))
            return LoadReport(load.scope, load.stream, load.segment_id, Direction.UP, now_ms, splits)
        if is_cold(found, target, age, settings):
            if load.last_down_ms is not None and now_ms - load.last_down_ms <= mute_ms:
                return None
            load.last_down_ms = now_ms
            return LoadReport(load.scope, load.stream, load.segment_id, Direction.DOWN, now_ms)
        return None

    def _gone_idle(self, now_ms: int) -> list[LoadReport]:
        """Silent DOWN reports of the segments without traffic for the idle window (oldest first, bounded)."""
        idle_ms = self.settings.idle_window_seconds * 1000
        reports: list[LoadReport] = []
        while self._by_last_traffic and len(reports) < self.settings.reports_per_tick_max:
            name, load = next(iter(self._by_last_traffic.items()))
            if now_ms - load.last_traffic_ms < idle_ms:
                break
            del self._by_last_traffic[name]
            load.idle = True
            reports.append(LoadReport(load.scope, load.stream, load.segment_id, Direction.DOWN, now_ms, silent=True))
        return reports


def is_hot(found: Rates, target: float, age_seconds: float, settings: LoadSettings) -> bool:
    """A window counts once the segment is older than it (Pravega's ``currentTime - startTime > window``)."""
    return ((found.short > SHORT_FACTOR * target and age_seconds > settings.short_window_seconds)
            or (found.medium > MEDIUM_FACTOR * target and age_seconds > settings.medium_window_seconds)
            or (found.long > LONG_FACTOR * target and age_seconds > settings.long_window_seconds))


def is_cold(found: Rates, target: float, age_seconds: float, settings: LoadSettings) -> bool:
    return (found.short < target and found.medium < target and found.long < target
            and found.idle < IDLE_FACTOR * target and age_seconds > settings.idle_window_seconds)
