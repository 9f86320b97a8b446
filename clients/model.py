"""Value types of the public API: stream configurations, policies, segments and their key ranges.

Plain frozen values with validating constructors; nothing here does I/O. The
proto conversions live in :mod:`clients.controller_client`.
"""

from __future__ import annotations

import dataclasses
import enum

from wire import naming

from .errors import InvalidArgument


class ScaleType(enum.IntEnum):
    """How a stream's segment count is decided (Pravega's ScalingPolicy.ScaleType)."""

    FIXED_NUM_SEGMENTS = 0
    BY_RATE_IN_KBYTES_PER_SEC = 1
    BY_RATE_IN_EVENTS_PER_SEC = 2


@dataclasses.dataclass(frozen=True)
class ScalingPolicy:
    """A fixed segment count, or auto-scaling by a per-segment target rate.

    Build one with :meth:`fixed`, :meth:`by_event_rate` or :meth:`by_data_rate`.
    """

    scale_type: ScaleType = ScaleType.FIXED_NUM_SEGMENTS
    target_rate: int = 0
    scale_factor: int = 0
    min_num_segments: int = 1

    def __post_init__(self) -> None:
        if self.min_num_segments < 1:
            raise InvalidArgument(f"a stream needs at least one segment, not {self.min_num_segments}")
        if self.scale_type != ScaleType.FIXED_NUM_SEGMENTS and (self.target_rate <= 0 or self.scale_factor < 1):
            raise InvalidArgument("an auto-scaling policy needs a positive target rate and a scale factor >= 1")

    @classmethod
    def fixed(cls, segments: int) -> ScalingPolicy:
        """Exactly ``segments`` segments, never scaled automatically."""
        return cls(ScaleType.FIXED_NUM_SEGMENTS, 0, 0, segments)

    @classmethod
    def by_event_rate(cls, events_per_second: int, scale_factor: int, min_segments: int) -> ScalingPolicy:
        """Split a segment above ``events_per_second`` (into up to ``scale_factor``), merge cold ones."""
        return cls(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, events_per_second, scale_factor, min_segments)

    @classmethod
    def by_data_rate(cls, kbytes_per_second: int, scale_factor: int, min_segments: int) -> ScalingPolicy:
        """Split a segment above ``kbytes_per_second`` KiB/s (into up to ``scale_factor``), merge cold ones."""
        return cls(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, kbytes_per_second, scale_factor, min_segments)


class RetentionType(enum.IntEnum):
    TIME = 1
    SIZE = 2


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """Keep at least ``minimum`` (ms or bytes) and at most ``maximum`` (0: no maximum) of a stream."""

    retention_type: RetentionType
    minimum: int
    maximum: int = 0

    def __post_init__(self) -> None:
        if self.minimum < 0 or self.maximum < 0 or (self.maximum and self.maximum < self.minimum):
            raise InvalidArgument(f"invalid retention bounds {self.minimum}..{self.maximum}")

    @classmethod
    def by_time(cls, minimum_ms: int, maximum_ms: int = 0) -> RetentionPolicy:
        return cls(RetentionType.TIME, minimum_ms, maximum_ms)

    @classmethod
    def by_size(cls, minimum_bytes: int, maximum_bytes: int = 0) -> RetentionPolicy:
        return cls(RetentionType.SIZE, minimum_bytes, maximum_bytes)


@dataclasses.dataclass(frozen=True)
class StreamConfiguration:
    """A stream's scaling and retention policies and tags."""

    scaling: ScalingPolicy = dataclasses.field(default_factory=lambda: ScalingPolicy.fixed(1))
    retention: RetentionPolicy | None = None
    tags: tuple[str, ...] = ()
    rollover_size_bytes: int = 0
    timestamp_aggregation_timeout_ms: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tuple(self.tags))
        if self.rollover_size_bytes < 0 or self.timestamp_aggregation_timeout_ms < 0:
            raise InvalidArgument("rollover size and timestamp aggregation timeout cannot be negative")


@dataclasses.dataclass(frozen=True, order=True)
class Segment:
    """One segment of a stream: ``segment_id`` packs ``epoch << 32 | number``."""

    scope: str
    stream: str
    segment_id: int

    @property
    def number(self) -> int:
        return naming.segment_number_of(self.segment_id)

    @property
    def epoch(self) -> int:
        return naming.epoch_of(self.segment_id)

    @property
    def qualified_name(self) -> str:
        """The segment's name on the segment store: ``scope/stream/N.#epoch.E``."""
        return naming.stream_segment_name(self.scope, self.stream, self.segment_id)

    @property
    def scoped_stream(self) -> str:
        return f"{self.scope}/{self.stream}"

    def __str__(self) -> str:
        return self.qualified_name


@dataclasses.dataclass(frozen=True)
class SegmentRange:
    """A segment and the half-open slice ``[low, high)`` of the key space it owns."""

    segment: Segment
    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class Successors:
    """What follows a sealed segment: each successor with the ids of all its predecessors.

    Empty ``successors`` means the stream was sealed after this segment.
    """

    successors: tuple[tuple[SegmentRange, frozenset[int]], ...]

    @property
    def stream_sealed(self) -> bool:
        return not self.successors


class TransactionState(enum.Enum):
    """A transaction's state as the controller reports it."""

    UNKNOWN = "unknown"
    OPEN = "open"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTING = "aborting"
    ABORTED = "aborted"


def check_scope_name(scope: str) -> str:
    """Returns ``scope`` or raises InvalidArgument (Pravega's scope naming rules)."""
    try:
        return naming.validate_scope_name(scope)
    except naming.InvalidName as error:
        raise InvalidArgument(str(error)) from None


def check_stream_name(stream: str) -> str:
    """Returns ``stream`` or raises InvalidArgument (Pravega's stream naming rules)."""
    try:
        return naming.validate_stream_name(stream)
    except naming.InvalidName as error:
        raise InvalidArgument(str(error)) from None


def check_user_name(name: str, kind: str) -> str:
    """Returns ``name`` or raises InvalidArgument (reader groups, readers, writer ids)."""
    try:
        return naming.validate_user_name(name, kind)
    except naming.InvalidName as error:
        raise InvalidArgument(str(error)) from None
