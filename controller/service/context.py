"""What every controller service needs: the metadata store, the segment stores, where segments
live, and the time (the only place the controller's services read a clock is through ``now_ms``)."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from clients.segment_store_client import SegmentStoreClient

from ..endpoints import SegmentLocator
from ..store import MetadataStore


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass
class ControllerContext:
    store: MetadataStore
    segments: SegmentStoreClient  # raw segment and table-segment calls, routed by ``locator``
    locator: SegmentLocator
    now_ms: Callable[[], int] = wall_clock_ms
