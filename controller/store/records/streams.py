"""Scope and stream-level records: scope entry, stream configuration, state, creation, deletion.

The stream configuration is the Controller API's value (``controller_api.model``); its record adds the
update workflow's bookkeeping. "No maximum" of a retention policy is stored as ``2**63 - 1``; with no
policy, the retention fields are zeros.

Formats (after the format-version byte)::

    ScopeRecord                 sealed:bool          (sealed: deleteScopeRecursive has started)
    CreationRecord              creation_time:i64    (a stream's entry in its scope, and its own marker)
    StreamConfigurationRecord   scale_type:u8 target_rate:i32 scale_factor:i32 min_segments:i32
                                has_retention:bool retention_type:u8 retention_param:i64 retention_max:i64
                                timestamp_aggregation_timeout:i64 rollover_size_bytes:i64
                                tags:[str] updating:bool tags_to_remove:[str]
    StateRecord                 state:u8             (``states.State``)
    DeletedStreamRecord         last_segment_number:i32
"""

from __future__ import annotations

import dataclasses

from controller_api.errors import InvalidArgument
from controller_api.model import (
    NO_MAXIMUM,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfiguration,
)

from ..codec import Decoder, Encoder
from ..errors import CorruptRecord
from ..states import State

FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True)
class StreamConfigurationRecord:
    """A stream's configuration (the Controller API's value) as stored; ``updating`` is set while an
    update workflow applies it, and ``tags_to_remove`` lists the tags it drops (for the tag index)."""

    configuration: StreamConfiguration = StreamConfiguration()
    updating: bool = False
    tags_to_remove: tuple[str, ...] = ()

    def encode(self) -> bytes:
        configuration = self.configuration
        scaling, retention = configuration.scaling, configuration.retention
        retention_fields = (0, 0, 0) if retention is None else (
            retention.retention_type, retention.minimum, retention.upper_bound)
        encoder = (Encoder(FORMAT_VERSION).u8(scaling.scale_type).i32(scaling.target_rate)
                   .i32(scaling.scale_factor).i32(scaling.min_num_segments)
                   .boolean(retention is not None).u8(retention_fields[0])
                   .i64(retention_fields[1]).i64(retention_fields[2])
                   .i64(configuration.timestamp_aggregation_timeout_ms).i64(configuration.rollover_size_bytes))
        return (encoder.sequence(configuration.tags, Encoder.text).boolean(self.updating)
                .sequence(self.tags_to_remove, Encoder.text).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> StreamConfigurationRecord:
        try:
            return cls._decode(data)
        except InvalidArgument as error:  # values the controller never stores
            raise CorruptRecord(f"{cls.__name__}: {error}") from None

    @classmethod
    def _decode(cls, data: bytes) -> StreamConfigurationRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            scaling = _stored_scaling(decoder.enum(ScaleType, decoder.u8()), decoder.i32(), decoder.i32(),
                                      decoder.i32())
            has_retention, retention_type = decoder.boolean(), decoder.u8()
            minimum, maximum = decoder.i64(), decoder.i64()
            retention = None
            if has_retention and retention_type:  # UNKNOWN (0) was never stored as a policy: read as none
                retention = RetentionPolicy(decoder.enum(RetentionType, retention_type), minimum,
                                            0 if maximum == NO_MAXIMUM else maximum)
            timeout, rollover = decoder.i64(), decoder.i64()
            configuration = StreamConfiguration(scaling, retention, decoder.sequence(Decoder.text), rollover, timeout)
            return cls(configuration, decoder.boolean(), decoder.sequence(Decoder.text))


def _stored_scaling(scale_type: ScaleType, target_rate: int, scale_factor: int, min_segments: int) -> ScalingPolicy:
    """The stored policy. Before the controller took the Controller API's values, it also stored auto-scaling
    policies the model refuses, and read them back as they behaved: without a target rate, one that
    never scaled (read as fixed); with a scale factor of 0, one that split in two like a factor of 1."""
    if scale_type != ScaleType.FIXED_NUM_SEGMENTS:
        if target_rate <= 0:
            return ScalingPolicy(ScaleType.FIXED_NUM_SEGMENTS, target_rate, scale_factor, min_segments)
        scale_factor = max(1, scale_factor)
    return ScalingPolicy(scale_type, target_rate, scale_factor, min_segments)


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
