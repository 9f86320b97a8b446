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

from controller_api.reader_groups import ReaderGroupConfiguration, StreamDataRetention

from ..codec import Decoder, Encoder

FORMAT_VERSION = 1


def _encode_cuts(encoder: Encoder, cuts: dict[str, dict[int, int]]) -> Encoder:
    encoder.count(len(cuts))
    for stream in sorted(cuts):
        encoder.text(stream).pairs(cuts[stream])
    return encoder


def _decode_cuts(decoder: Decoder) -> dict[str, dict[int, int]]:
    return {decoder.text(): decoder.pairs() for _ in range(decoder.count())}


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderGroupConfigRecord:
    """A (Java) reader group's configuration (the Controller API's value) as stored; ``updating`` is set
    while a create or update applies it."""

    configuration: ReaderGroupConfiguration
    updating: bool = False

    def encode(self) -> bytes:
        configuration = self.configuration
        encoder = (Encoder(FORMAT_VERSION).uuid(configuration.reader_group_id).i64(configuration.generation)
                   .i64(configuration.group_refresh_time_ms).i64(configuration.checkpoint_interval_ms)
                   .i32(configuration.max_outstanding_checkpoints).u8(configuration.retention_type)
                   .i64(configuration.rollover_size_bytes).boolean(self.updating))
        _encode_cuts(encoder, configuration.starting_cuts)
        return _encode_cuts(encoder, configuration.ending_cuts).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> ReaderGroupConfigRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            reader_group_id, generation, refresh, interval = decoder.uuid(), decoder.i64(), decoder.i64(), decoder.i64()
            outstanding, retention_type = decoder.i32(), decoder.enum(StreamDataRetention, decoder.u8())
            rollover, updating = decoder.i64(), decoder.boolean()
            return cls(ReaderGroupConfiguration(reader_group_id, generation, refresh, interval, outstanding,
                                                retention_type, rollover, _decode_cuts(decoder), _decode_cuts(decoder)),
                       updating)


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
