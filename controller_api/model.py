"""The Controller API's values: scaling and retention policies and stream configurations.

Plain frozen values with validating constructors (they raise :class:`~controller_api.errors.InvalidArgument`);
nothing here does I/O. The SDK exports them (``clients.model``), the controller's services take and
return them and its metadata store persists them (``controller.store.records.streams``). The
protobuf conversions are in :mod:`controller_api.protobuf`.
"""

from __future__ import annotations

import dataclasses
import enum

from .errors import InvalidArgument

NO_MAXIMUM = 2**63 - 1
"""How "no maximum" travels in a retention policy's ``retentionMax`` (Java's Long.MAX_VALUE) and is stored."""


class ScaleType(enum.IntEnum):
    """How a stream's segment count is decided (Pravega's ScalingPolicy.ScaleType; the wire's numbers)."""

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
    """What a retention policy counts (the wire's numbers; the wire's UNKNOWN, 0, means no policy)."""

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

    @property
    def upper_bound(self) -> int:
        """The most to keep: ``maximum``, or :data:`NO_MAXIMUM` when there is none."""
        return self.maximum or NO_MAXIMUM

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
