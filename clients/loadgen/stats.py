"""What a loadgen run measures: counters, latency histograms (HdrHistogram) and the JSON results.

Latencies are recorded in microseconds, from 1 µs to one hour with three significant
digits, and reported in milliseconds. Counters are plain integers: the whole run is
one asyncio loop, so nothing needs a lock. Besides the run's totals, each step of the
rate schedule has its own counts and histograms: events written in the step, and the
write acks and reads of the events *sent* in it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

from hdrh.histogram import HdrHistogram

from .steps import StepSchedule

_LOWEST_US = 1
_HIGHEST_US = 3_600_000_000
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99_9", 99.9))
"""The percentiles reported (``p50_ms`` ...), besides the mean and the maximum."""
MB = 1_000_000  # MB/s are decimal megabytes, as in Pravega's benchmarks


class Latency:
    """One latency distribution (an HdrHistogram of microseconds)."""

    def __init__(self) -> None:
        self._histogram = HdrHistogram(_LOWEST_US, _HIGHEST_US, 3)
        self.clamped = 0  # negative values (clocks disagreeing) recorded as the lowest

    def record_ns(self, nanoseconds: int) -> None:
        """Records one latency given in nanoseconds."""
        micros = nanoseconds // 1000
        if micros < _LOWEST_US:
            if nanoseconds < 0:
                self.clamped += 1
            micros = _LOWEST_US
        elif micros > _HIGHEST_US:
            micros = _HIGHEST_US
        self._histogram.record_value(micros)

    @property
    def count(self) -> int:
        """Latencies recorded."""
        count: int = self._histogram.get_total_count()
        return count

    def percentile_ms(self, percentile: float) -> float | None:
        """The latency at ``percentile`` in ms (None before anything was recorded)."""
        if not self.count:
            return None
        micros: int = self._histogram.get_value_at_percentile(percentile)
        return micros / 1000

    def summary(self) -> dict[str, Any]:
        """Count, mean, the ``PERCENTILES`` and max in milliseconds (values None when empty)."""
        empty = not self.count
        result = {"count": self.count,
                  "mean_ms": None if empty else round(self._histogram.get_mean_value() / 1000, 3)}
        for name, percentile in PERCENTILES:
            value = self.percentile_ms(percentile)
            result[f"{name}_ms"] = None if value is None else round(value, 3)

        result["max_ms"] = None if empty else round(self._histogram.get_max_value() / 1000, 3)
        if self.clamped:
            result["negative_clamped"] = self.clamped
        return result


class StepStats:
    """What one step of the schedule measured."""

    def __init__(self) -> None:
        self.written = 0  # events written (accepted, or committed) while the step lasted
        self.read = 0  # events sent in the step and read (first copies)
        self.write_ack = Latency()  # of sampled events sent in the step
        self.end_to_end = Latency()  # of events sent in the step


@dataclasses.dataclass
class StreamCounts:
    """Events and bytes written to and read from one stream."""

    written: int = 0
    written_bytes: int = 0
    read: int = 0
    read_bytes: int = 0


class RunStats:
    """Every number of one run, updated by the writers and readers as they go."""

    MAX_ERRORS_KEPT = 50

    def __init__(self, stream_names: list[str], schedule: StepSchedule):
        self.streams = {name: StreamCounts() for name in stream_names}
        self.schedule = schedule
        self.steps = [StepStats() for _ in range(len(schedule))]
        self.write_ack = Latency()
        self.end_to_end = Latency()
        self.commit = Latency()
        self.acks_sampled = 0
        self.acks_skipped = 0
        self.transactions_committed = 0
        self.transactions_failed = 0
        self.duplicates_read = 0  # events read again (not counted in ``read``)
        self.last_read_ns: int | None = None
        self.error_count = 0
        self.errors: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ updates

    def step_at(self, time_ns: int) -> StepStats:
        """The statistics of the step that wall-clock time ``time_ns`` falls in."""
        return self.steps[self.schedule.step_at(time_ns)]

    def wrote(self, stream: str, events: int, size: int, at_ns: int) -> None:
        """``events`` events of ``size`` bytes in all were written (accepted or committed) to ``stream`` at ``at_ns``
        (counted in the step of that time)."""
        counts = self.streams[stream]
        counts.written += events
        counts.written_bytes += size
        self.step_at(at_ns).written += events

    def acked(self, sent_ns: int, acked_ns: int) -> None:
        """The write of a sampled event sent at ``sent_ns`` was acknowledged at ``acked_ns``."""
        self.acks_sampled += 1
        latency_ns = acked_ns - sent_ns
        self.write_ack.record_ns(latency_ns)
        self.step_at(sent_ns).write_ack.record_ns(latency_ns)

    def read(self, stream: str, size: int, sent_ns: int, now_ns: int) -> None:
        """One event of ``size`` bytes was read (for the first time) from ``stream`` at ``now_ns``; it was sent at
        ``sent_ns``, which makes it one of that step's."""
        counts = self.streams[stream]
        counts.read += 1
        counts.read_bytes += size
        self.last_read_ns = now_ns
        step = self.step_at(sent_ns)
        step.read += 1
        latency_ns = now_ns - sent_ns
        self.end_to_end.record_ns(latency_ns)
        step.end_to_end.record_ns(latency_ns)

    def error(self, where: str, error: BaseException | str) -> None:
        """Records a failure (the first ``MAX_ERRORS_KEPT`` are kept with their text)."""
        self.error_count += 1
        if len(self.errors) < self.MAX_ERRORS_KEPT:
            text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            self.errors.append({"where": where, "error": text, "time": time.time()})

    # ------------------------------------------------------------------ totals

    @property
    def written(self) -> int:
        """Events written, all streams."""
        return sum(counts.written for counts in self.streams.values())

    @property
    def written_bytes(self) -> int:
        """Bytes written, all streams."""
        return sum(counts.written_bytes for counts in self.streams.values())

    @property
    def read_events(self) -> int:
        """Events read (first copies), all streams."""
        return sum(counts.read for counts in self.streams.values())

    @property
    def read_bytes(self) -> int:
        """Bytes read (first copies), all streams."""
        return sum(counts.read_bytes for counts in self.streams.values())


def rate(count: float, seconds: float | None) -> float:
    """``count`` per second, 0 for an empty interval."""
    return round(count / seconds, 3) if seconds and seconds > 0 else 0.0


@dataclasses.dataclass
class Timings:
    """Wall-clock ns of the run's phase boundaries (None: the phase never happened)."""

    started_ns: int
    write_end_ns: int | None = None
    flush_end_ns: int | None = None
    drain_end_ns: int | None = None

    def seconds(self, start: int | None, end: int | None) -> float | None:
        """Seconds from ``start`` to ``end`` (ns), rounded to ms; None if either is missing."""
        return None if start is None or end is None else round((end - start) / 1e9, 3)


def step_results(stats: RunStats, write_end_ns: int | None) -> list[dict[str, Any]]:
    """One entry per step of the schedule: offered and achieved rates, events read, latencies."""
    schedule, results = stats.schedule, []
    for index, step in enumerate(stats.steps):
        seconds = schedule.seconds_of(index, write_end_ns)
        results.append({
            "offered_events_per_second": schedule.rates[index],
            "seconds": seconds,
            "events_written": step.written,
            "write_events_per_second": rate(step.written, seconds),
            "events_read": step.read,
            "latency_ms": {"write_ack": step.write_ack.summary(), "end_to_end": step.end_to_end.summary()},
        })
    return results


def results_document(options: dict[str, Any], stats: RunStats, timings: Timings, sequence: dict[str, Any] | None, *,
                     readers: int, drained: bool, interrupted: bool) -> dict[str, Any]:
    """The JSON results of a run (see ``docs/loadgen.md`` for the format)."""
    write_seconds = timings.seconds(timings.started_ns, timings.write_end_ns)
    read_seconds = timings.seconds(timings.started_ns, stats.last_read_ns) if stats.last_read_ns else None
    written, read = stats.written, stats.read_events
    return {
        "tool": "tributary loadgen",
        "format": 1,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timings.started_ns / 1e9)),
        "options": options,
        "interrupted": interrupted,
        "phases": {
            "write": {"seconds": write_seconds, "events": written, "bytes": stats.written_bytes},
            "flush": {"seconds": timings.seconds(timings.write_end_ns, timings.flush_end_ns)},
            "drain": {"seconds": timings.seconds(timings.flush_end_ns, timings.drain_end_ns),
                      "complete": drained if readers else None},
        },
        "totals": {
            "events_written": written, "bytes_written": stats.written_bytes,
            "events_read": read, "bytes_read": stats.read_bytes, "duplicates_read": stats.duplicates_read,
            "transactions_committed": stats.transactions_committed,
            "transactions_failed": stats.transactions_failed,
            "acks_sampled": stats.acks_sampled, "acks_not_sampled_queue_full": stats.acks_skipped,
        },
        "rates": {
            "target_events_per_second": round(stats.schedule.average_rate, 3),
            "write_events_per_second": rate(written, write_seconds),
            "write_mb_per_second": rate(stats.written_bytes / MB, write_seconds),
            "read_events_per_second": rate(read, read_seconds),
            "read_mb_per_second": rate(stats.read_bytes / MB, read_seconds),
        },
        "latency_ms": {
            "write_ack": stats.write_ack.summary(),
            "end_to_end": stats.end_to_end.summary(),
            "transaction_commit": stats.commit.summary(),
        },
        "steps": step_results(stats, timings.write_end_ns),
        "sequence": sequence,
        "streams": [{"stream": name, **dataclasses.asdict(counts)} for name, counts in stats.streams.items()],
        "errors": {"count": stats.error_count, "first": stats.errors},
    }


def write_results(path: pathlib.Path, document: dict[str, Any]) -> None:
    """Writes ``document`` to ``path`` as indented JSON (via a temporary file, then a rename)."""
    path = pathlib.Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    partial.replace(path)


__all__ = ["PERCENTILES", "Latency", "RunStats", "StepStats", "StreamCounts", "Timings", "rate", "results_document",
           "step_results", "write_results"]
