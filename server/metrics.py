"""The segment store's and the log store's hot-path Prometheus metrics (docs/operations.md has the list).

Two kinds of metrics; this module holds the first and imports nothing of the server, so any module may
count into it. *Events on hot paths* (appends, reads, cache lookups, group commits) update the plain
counters and histograms here (``FastCounter``, ``FastHistogram``: no locks, about 0.2 us), but only
while ``enabled`` (``enable()``, called by a process that serves its metrics): with metrics off, each
point costs one module attribute read. Appends are counted per block (a block carries its event
count), never per event. ``HotPathCollector`` turns them into Prometheus samples at scrape time.
*State* (containers by status, connections, cache bytes, Tier-2 traffic and flush lag) is read at
scrape time from the running service by ``service_metrics.SegmentStoreCollector``, so it costs
nothing between scrapes.

Names follow Prometheus conventions: ``tributary_<process>_<what>_<unit>``, counters ending in
``_total`` (prometheus_client adds it), histograms of seconds or bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

enabled = False

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    5.0, 10.0)
_SIZE_BUCKETS = tuple(float(1 << shift) for shift in range(10, 25, 2))  # 1 KiB .. 16 MiB


class FastCounter:
    """A counter for hot paths: a plain integer (no lock; prometheus_client's take ~0.3 us each), exposed at
    scrape time. Updates from another thread race only with each other, and a lost increment cannot make
    the value go down."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class FastHistogram:
    """A histogram for hot paths: one bisect and two additions per observation (prometheus_client's Histogram
    takes ~1.5 us with its locks), exposed at scrape time with cumulative buckets."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]):
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1
        self.sum += amount

    def buckets(self) -> list[tuple[str, float]]:
        cumulative, total = [], 0
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            total += count
            cumulative.append((bound, float(total)))
        return cumulative


APPEND_EVENTS = FastCounter()  # events appended and acknowledged
APPEND_BYTES = FastCounter()
APPEND_LATENCY = FastHistogram(_LATENCY_BUCKETS)  # an append block's arrival -> its acknowledgement
READ_BYTES = FastCounter()
READ_LATENCY = FastHistogram(_LATENCY_BUCKETS)  # a read request's arrival -> its reply (tail reads wait)
REPLAY_BOUND_HOLDS = FastCounter()  # times a container's log passed its replay bound (appends waited)
WRITERS_EXPIRED = FastCounter()  # writer attributes removed after the writer retention
SEGMENT_LIMIT_REJECTIONS = FastCounter()  # segment creations refused at a container's segment limit
SEGMENTS_MADE_DORMANT = FastCounter()  # idle segments whose metadata was packed (ContainerState.make_dormant)
SEGMENTS_WOKEN = FastCounter()  # dormant segments made live again by a use
CACHE_HIT = FastCounter()
CACHE_MISS = FastCounter()
LOCAL_GROUP_BYTES, LOCAL_SYNC_SECONDS = FastHistogram(_SIZE_BUCKETS), FastHistogram(_LATENCY_BUCKETS)
STORE_GROUP_BYTES, STORE_SYNC_SECONDS = FastHistogram(_SIZE_BUCKETS), FastHistogram(_LATENCY_BUCKETS)


def enable() -> None:
    """Hot-path metrics on (and exposed), for the rest of the process's life."""
    global enabled
    if not enabled:
        REGISTRY.register(HotPathCollector())
    enabled = True


def _histogram(name: str, documentation: str, labels: Sequence[str],
               series: Sequence[tuple[Sequence[str], FastHistogram]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for values, histogram in series:
        family.add_metric(list(values), histogram.buckets(), histogram.sum)
    return family


class HotPathCollector:
    """The hot-path counters and histograms above, in Prometheus form, at each scrape."""

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("tributary_segmentstore_append_events", "Events appended and acknowledged",
                                  value=APPEND_EVENTS.value)
        yield CounterMetricFamily("tributary_segmentstore_append_bytes", "Bytes appended and acknowledged",
                                  value=APPEND_BYTES.value)
        yield _histogram("tributary_segmentstore_append_latency_seconds",
                         "From an append block's arrival to its acknowledgement (durable in Tier-1)", [],
                         [((), APPEND_LATENCY)])
        yield CounterMetricFamily("tributary_segmentstore_read_bytes", "Segment bytes sent to readers",
                                  value=READ_BYTES.value)
        yield _histogram("tributary_segmentstore_read_latency_seconds",
                         "From a read request's arrival to its reply (tail reads include their wait for data)", [],
                         [((), READ_LATENCY)])
        lookups = CounterMetricFamily("tributary_segmentstore_cache_lookups",
                                      "Reads looked up in the read index cache", labels=["result"])
        lookups.add_metric(["hit"], CACHE_HIT.value)
        lookups.add_metric(["miss"], CACHE_MISS.value)
        yield lookups
        yield CounterMetricFamily("tributary_segmentstore_replay_bound_holds",
                                  "Times a container's log passed its replay bound and appends waited for Tier-2",
                                  value=REPLAY_BOUND_HOLDS.value)
        yield _histogram("tributary_tier1_group_commit_bytes", "Bytes made durable by one fdatasync", ["log"],
                         [(("local",), LOCAL_GROUP_BYTES), (("logstore",), STORE_GROUP_BYTES)])
        yield _histogram("tributary_tier1_fsync_seconds", "Duration of one group commit's write and fdatasync",
                         ["log"], [(("local",), LOCAL_SYNC_SECONDS), (("logstore",), STORE_SYNC_SECONDS)])


def observe_group_commit(local: bool, size: int, seconds: float) -> None:
    """One group commit of a Tier-1 log (``local``) or of a log store's journal."""
    (LOCAL_GROUP_BYTES if local else STORE_GROUP_BYTES).observe(size)
    (LOCAL_SYNC_SECONDS if local else STORE_SYNC_SECONDS).observe(seconds)
