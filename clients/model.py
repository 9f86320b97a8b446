"""Value types of the public API: stream configurations, policies, segments and their key ranges.

Plain frozen values with validating constructors; nothing here does I/O. The stream
configuration and its policies are the Controller API's values (``controller_api.model``),
re-exported here; their proto conversions are ``controller_api.protobuf``.
"""

from __future__ import annotations

import dataclasses
import enum

from controller_api.model import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfiguration
from wire import naming

from .errors import InvalidArgument

__all__ = [
    "RetentionPolicy", "RetentionType", "ScaleType", "ScalingPolicy", "Segment", "SegmentRange", "StreamConfiguration",
    "Successors", "TransactionState", "check_scope_name", "check_stream_name", "check_user_name",
]


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
