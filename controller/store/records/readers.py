"""Reader-group configuration, subscriber stream cuts and writer marks (spec §4.7, §4.8, §6.9, §6.11).

Formats (after the format-version byte)::

    ReaderGroupConfigRecord  reader_group_id:uuid(16) generation:i64 group_refresh_time_ms:i64
                             checkpoint_interval_ms:i64 max_outstanding_checkpoints:i32
                             retention_type:u8 rollover_size_bytes:i64 updating:bool
                             starting_cuts:[stream:str cut:[segment_id:i64 offset:i64]]
                             ending_cuts:[stream:str cut:[segment_id:i64 offset:i64]]
    SubscriberSet            names:[str]
    SubscriberRecord         generation:i64 update_time:i64 cut:[segment_id:i64 offset:i64]
    WriterMarkRecord         timestamp:i64 is_alive:bool position:[segment_id:i64 offset:i64]
"""

from __future__ import annotations

import dataclasses
import enum
import uuid

from ..codec import Decoder, Encoder

FORMAT_VERSION = 1


class ReaderGroupRetentionType(enum.IntEnum):
    """The wire's ``ReaderGroupConfiguration.RetentionType``."""

    NONE = 0
    MANUAL = 1
    AUTOMATIC = 2


def _encode_cuts(encoder: Encoder, cuts: dict[str, dict[int, int]]) -> Encoder:
    encoder.count(len(cuts))
    for stream in sorted(cuts):
        encoder.text(stream).pairs(cuts[stream])
    return encoder


def _decode_cuts(decoder: Decoder) -> dict[str, dict[int, int]]:
    return {decoder.text(): decoder.pairs() for _ in range(decoder.count())}


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderGroupConfigRecord:
    """A (Java) reader group's configuration; ``generation`` grows with every update."""

    reader_group_id: uuid.UUID
    generation: int = 0
    group_refresh_time_ms: int = 0
    checkpoint_interval_ms: int = 0
    max_outstanding_checkpoints: int = 0
    retention_type: ReaderGroupRetentionType = ReaderGroupRetentionType.NONE
    rollover_size_bytes: int = 0
    updating: bool = False
    starting_cuts: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)  # "scope/stream" -> cut
    ending_cuts: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)

    def encode(self) -> bytes:
        encoder = (Encoder(FORMAT_VERSION).uuid(self.reader_group_id).i64(self.generation)
                   .i64(self.group_refresh_time_ms).i64(self.checkpoint_interval_ms)
                   .i32(self.max_outstanding_checkpoints).u8(self.retention_type)
                   .i64(self.rollover_size_bytes).boolean(self.updating))
        _encode_cuts(encoder, self.starting_cuts)
        return _encode_cuts(encoder, self.ending_cuts).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> ReaderGroupConfigRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.uuid(), decoder.i64(), decoder.i64(), decoder.i64(), decoder.i32(),
                       decoder.enum(ReaderGroupRetentionType, decoder.u8()), decoder.i64(), decoder.boolean(),
                       _decode_cuts(decoder), _decode_cuts(decoder))


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriberSet:
    """Names of the reader groups subscribed to a stream (consumption-based retention)."""

    names: tuple[str, ...] = ()

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).sequence(self.names, Encoder.text).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> SubscriberSet:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.sequence(Decoder.text))


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriberRecord:
    """A subscriber's truncation stream cut; updates must not go back in generation."""

    generation: int
    update_time: int
    stream_cut: dict[int, int]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i64(self.generation).i64(self.update_time).pairs(self.stream_cut).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> SubscriberRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i64(), decoder.i64(), decoder.pairs())


@dataclasses.dataclass(frozen=True, slots=True)
class WriterMarkRecord:
    """A writer's latest reported event time and the position (segment -> offset) it had written to."""

    timestamp: int
    position: dict[int, int]
    is_alive: bool = True

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i64(self.timestamp).boolean(self.is_alive).pairs(self.position).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> WriterMarkRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            timestamp, is_alive = decoder.i64(), decoder.boolean()
            return cls(timestamp, decoder.pairs(), is_alive)
