"""Scope and stream-level records: scope entry, stream configuration, state, creation, deletion.

Formats (after the format-version byte)::

    ScopeRecord           sealed:bool          (sealed: deleteScopeRecursive has started)
    CreationRecord        creation_time:i64    (a stream's entry in its scope, and its own marker)
    StreamConfiguration   scale_type:u8 target_rate:i32 scale_factor:i32 min_segments:i32
                          has_retention:bool retention_type:u8 retention_param:i64 retention_max:i64
                          timestamp_aggregation_timeout:i64 rollover_size_bytes:i64
                          tags:[str] updating:bool tags_to_remove:[str]
    StateRecord           state:u8             (``states.State``)
    DeletedStreamRecord   last_segment_number:i32
"""

from __future__ import annotations

import dataclasses
import enum

from ..codec import Decoder, Encoder
from ..states import State

FORMAT_VERSION = 1


class ScaleType(enum.IntEnum):
    """The wire's ``ScalingPolicy.ScalingPolicyType``."""

    FIXED_NUM_SEGMENTS = 0
    BY_RATE_IN_KBYTES_PER_SEC = 1
    BY_RATE_IN_EVENTS_PER_SEC = 2


class RetentionType(enum.IntEnum):
    """The wire's ``RetentionPolicy.RetentionPolicyType`` (UNKNOWN is what proto3 decodes unset to)."""

    UNKNOWN = 0
    TIME = 1
    SIZE = 2


@dataclasses.dataclass(frozen=True, slots=True)
class ScalingPolicy:
    scale_type: ScaleType = ScaleType.FIXED_NUM_SEGMENTS
    target_rate: int = 0
    scale_factor: int = 0
    min_num_segments: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPolicy:
    retention_type: RetentionType
    retention_param: int
    retention_max: int = 2**63 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class StreamConfiguration:
    """A stream's configuration; ``updating`` is set while an update workflow applies it."""

    scaling: ScalingPolicy = ScalingPolicy()
    retention: RetentionPolicy | None = None
    tags: tuple[str, ...] = ()
    timestamp_aggregation_timeout: int = 0
    rollover_size_bytes: int = 0
    updating: bool = False
    tags_to_remove: tuple[str, ...] = ()  # tags the running update drops, for the tag index

    def encode(self) -> bytes:
        retention = self.retention or RetentionPolicy(RetentionType.UNKNOWN, 0, 0)
        encoder = (Encoder(FORMAT_VERSION).u8(self.scaling.scale_type).i32(self.scaling.target_rate)
                   .i32(self.scaling.scale_factor).i32(self.scaling.min_num_segments)
                   .boolean(self.retention is not None).u8(retention.retention_type)
                   .i64(retention.retention_param).i64(retention.retention_max)
                   .i64(self.timestamp_aggregation_timeout).i64(self.rollover_size_bytes))
        return (encoder.sequence(self.tags, Encoder.text).boolean(self.updating)
                .sequence(self.tags_to_remove, Encoder.text).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> StreamConfiguration:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            scaling = ScalingPolicy(decoder.enum(ScaleType, decoder.u8()), decoder.i32(), decoder.i32(), decoder.i32())
            has_retention = decoder.boolean()
            retention = RetentionPolicy(decoder.enum(RetentionType, decoder.u8()), decoder.i64(), decoder.i64())
            return cls(scaling, retention if has_retention else None, timestamp_aggregation_timeout=decoder.i64(),
                       rollover_size_bytes=decoder.i64(), tags=decoder.sequence(Decoder.text),
                       updating=decoder.boolean(), tags_to_remove=decoder.sequence(Decoder.text))


@dataclasses.dataclass(frozen=True, slots=True)
class StateRecord:
    state: State

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).u8(self.state).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> StateRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.enum(State, decoder.u8()))


@dataclasses.dataclass(frozen=True, slots=True)
class ScopeRecord:
    sealed: bool = False

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).boolean(self.sealed).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> ScopeRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.boolean())


@dataclasses.dataclass(frozen=True, slots=True)
class CreationRecord:
    """When a stream was created: tells a retried create from a stream that someone else made."""

    creation_time: int

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i64(self.creation_time).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> CreationRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i64())


@dataclasses.dataclass(frozen=True, slots=True)
class DeletedStreamRecord:
    """The last segment number of a deleted stream: a re-created one numbers its segments above it."""

    last_segment_number: int

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.last_segment_number).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> DeletedStreamRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32())
