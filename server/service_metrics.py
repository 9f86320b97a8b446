"""The segment store's state as Prometheus metrics, read from the running service at each scrape.

Containers by status, connections, writer attributes, recovery, segments, cache and Tier-2 traffic
and flush lag (docs/operations.md has the list); the hot-path counters are in ``metrics.py``. The
process that assembles the service registers it (``register_segment_store``); nothing in the server
imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .metrics import SEGMENT_LIMIT_REJECTIONS, SEGMENTS_MADE_DORMANT, SEGMENTS_WOKEN, WRITERS_EXPIRED

if TYPE_CHECKING:
    from .service import SegmentStoreService


class SegmentStoreCollector:
    """The segment store's state as gauges and counters, read from the service at each scrape."""

    def __init__(self, service: SegmentStoreService):
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service
        containers = GaugeMetricFamily("tributary_segmentstore_containers", "Containers this store runs, by status",
                                       labels=["status"])
        by_status: dict[str, int] = {}
        for container in list(service.containers.values()):
            by_status[container.status.value] = by_status.get(container.status.value, 0) + 1
        for status, count in sorted(by_status.items()):
            containers.add_metric([status], count)
        yield containers
        yield CounterMetricFamily("tributary_segmentstore_container_failures",
                                  "Containers that failed (a log error, a failed checkpoint, a bug) and were started "
                                  "again from their log", value=service.container_failures)
        yield GaugeMetricFamily("tributary_segmentstore_connections", "Open client connections",
                                value=service.connection_count)
        yield GaugeMetricFamily("tributary_segmentstore_writer_attributes",
                                "Writer attributes (writer id -> last event number) the containers keep",
                                value=service.writer_attribute_count())
        yield CounterMetricFamily("tributary_segmentstore_writer_attributes_expired",
                                  "Writer attributes removed after the writer retention (--writer-retention)",
                                  value=WRITERS_EXPIRED.value)
        yield from _recovery_metrics(service)
        segments = GaugeMetricFamily("tributary_segmentstore_segments",
                                     "Segments a container holds (metadata in memory)", labels=["container"])
        for container_id, container in sorted(service.containers.items()):
            segments.add_metric([str(container_id)], container.segment_count())
        yield segments
        dormant = GaugeMetricFamily("tributary_segmentstore_dormant_segments",
                                    "Segments of a container whose metadata is kept packed until used (idle for "
                                    "--segment-idle)", labels=["container"])
        for container_id, container in sorted(service.containers.items()):
            dormant.add_metric([str(container_id)], container.dormant_segment_count())
        yield dormant
        yield CounterMetricFamily("tributary_segmentstore_segments_made_dormant",
                                  "Idle segments whose metadata was packed", value=SEGMENTS_MADE_DORMANT.value)
        yield CounterMetricFamily("tributary_segmentstore_segments_woken",
                                  "Dormant segments made live again by a use", value=SEGMENTS_WOKEN.value)
        yield CounterMetricFamily("tributary_segmentstore_segment_limit_rejections",
                                  "Segment creations refused because a container held --max-segments-per-container",
                                  value=SEGMENT_LIMIT_REJECTIONS.value)
        backlogs = [container.replay_backlog() for container in list(service.containers.values())]
        yield GaugeMetricFamily("tributary_tier1_replay_backlog_bytes",
                                "Bytes the containers' logs hold to replay at a restart (checkpoints aside)",
                                value=sum(backlog_bytes for backlog_bytes, _ in backlogs))
        yield GaugeMetricFamily("tributary_tier1_replay_backlog_operations",
                                "Operations the containers' logs hold to replay at a restart",
                                value=sum(operations for _, operations in backlogs))
        cache = service.cache
        if cache is not None:
            yield GaugeMetricFamily("tributary_segmentstore_cache_bytes", "Segment bytes held in the cache",
                                    value=cache.size)
            yield GaugeMetricFamily("tributary_segmentstore_cache_budget_bytes", "The cache's budget",
                                    value=cache.budget)
            yield GaugeMetricFamily("tributary_segmentstore_appends_throttled",
                                    "1 while appends wait (the cache full of unflushed bytes, or a log over its "
                                    "replay bound)", value=int(cache.throttled))
        storage = service.chunk_storage
        if storage is not None:
            counters = storage.counters
            yield CounterMetricFamily("tributary_tier2_written_bytes", "Bytes written to Tier-2 chunks",
                                      value=counters.bytes_written)
            yield CounterMetricFamily("tributary_tier2_read_bytes", "Bytes read from Tier-2 chunks",
                                      value=counters.bytes_read)
            yield CounterMetricFamily("tributary_tier2_chunks_created", "Tier-2 chunks created",
                                      value=counters.chunks_created)
            yield CounterMetricFamily("tributary_tier2_chunks_deleted", "Tier-2 chunks deleted",
                                      value=counters.chunks_deleted)
            yield GaugeMetricFamily("tributary_tier2_flush_lag_bytes",
                                    "Bytes in Tier-1 not yet in Tier-2, over every running container",
                                    value=service.unflushed_bytes())


def _recovery_metrics(service: SegmentStoreService) -> Iterator[Metric]:
    """Each container's replay: records read of those its log held, and the seconds it should still take."""
    records = GaugeMetricFamily("tributary_segmentstore_recovery_records",
                                "Log records a container's recovery has replayed", labels=["container"])
    total = GaugeMetricFamily("tributary_segmentstore_recovery_records_total",
                              "Log records a container's recovery has to replay", labels=["container"])
    eta = GaugeMetricFamily("tributary_segmentstore_recovery_eta_seconds",
                            "Seconds a container's recovery should still take (0 once done)", labels=["container"])
    for container_id, container in sorted(service.containers.items()):
        progress = container.recovery_progress()
        if progress is None:
            continue
        label = [str(container_id)]
        records.add_metric(label, progress.records)
        if progress.records_total is not None:
            total.add_metric(label, max(progress.records_total, progress.records))
        seconds = progress.eta_seconds()
        if seconds is not None:
            eta.add_metric(label, seconds)
    yield from (records, total, eta)


def register_segment_store(service: SegmentStoreService) -> SegmentStoreCollector:
    """Exposes ``service``'s state (call once per process)."""
    collector = SegmentStoreCollector(service)
    REGISTRY.register(collector)
    return collector
