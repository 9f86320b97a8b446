"""What every controller service needs: the metadata store, the segment stores, where segments
live, and the time (the only place the controller's services read a clock is through ``now_ms``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from clients.segment_store_client import SegmentStoreClient
from coordination.retry import Backoff

from ..cluster import Coordination
from ..endpoints import SegmentLocator
from ..store import MetadataStore
from .auto_scale_settings import AutoScaleSettings
from .fault_points import FaultPoints
from .retries import REDRIVE, STREAM_BUSY


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(frozen=True)
class ServiceSettings:
    """Limits and periods of the services (defaults follow the Java controller where it has one)."""

    workflow_timeout_seconds: float = 120.0  # update/seal/delete/truncate reply DEADLINE_EXCEEDED after this
    stream_busy_backoff: Backoff = STREAM_BUSY  # waiting while another workflow holds the stream
    redrive_interval_seconds: float = 10.0  # how often pending intents of failed workflows are re-driven
    redrive_backoff: Backoff = REDRIVE  # one re-drive tried again after transient failures (lost races, stores)
    startup_redrive_wait_seconds: float = 30.0  # start waits this long for re-drives, then serves
    segment_calls_concurrency_max: int = 64  # segment-store calls in flight per workflow step
    segments_per_epoch_max: int = 10_000  # one epoch record holds at most ~32,000 segments
    tags_max: int = 127  # Java allows fewer than 128 tags ...
    tag_length_max: int = 255  # ... each shorter than 256 characters
    listing_page_max: int = 1000  # entries per list reply (Java's PAGE_LIMIT)
    transactions_wait_seconds_max: float = 110.0  # seal waits this long for committing txns to finish
    retention_period_seconds: float = 1800.0  # a retention cut per stream this often (Java: 30 min)
    watermark_period_seconds: float = 10.0  # a watermarking round over the streams this often (as Java)
    retention_interval_seconds: float | None = None  # how often the retention round runs (None: every period)
    auto_scale: AutoScaleSettings = AutoScaleSettings()  # acting on load reports: cold marks, retries, truncation


DEFAULT_SETTINGS = ServiceSettings()  # frozen: one instance serves every controller


@dataclasses.dataclass
class ControllerContext:
    store: MetadataStore
    segments: SegmentStoreClient  # raw segment and table-segment calls, routed by ``locator``
    locator: SegmentLocator
    now_ms: Callable[[], int] = wall_clock_ms
    settings: ServiceSettings = dataclasses.field(default_factory=ServiceSettings)
    fault_points: FaultPoints = dataclasses.field(default_factory=FaultPoints)
    # Which streams' periodic work is this controller's, and leases on work (one controller alone: all of it).
    coordination: Coordination = dataclasses.field(default_factory=Coordination)
    # The long-poll reads of load reports, on connections of their own (None: ``segments``).
    report_reads: SegmentStoreClient | None = None
