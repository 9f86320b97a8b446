"""Workflow intent payloads: each workflow's own input, encoded into its persisted intent.

A re-driven workflow decodes the payload and runs again from the top, so the payload holds
exactly what the original request carried (spec §6: every step checks what is already done).
Formats (after the format-version byte, ``controller.store.codec`` primitives)::

    create     creation_time:i64 configuration:blob(StreamConfigurationRecord)
    update     configuration:blob(StreamConfigurationRecord)
    truncate   cut:[segment_id:i64 offset:i64]
    scale      to_seal:[segment_id:i64] ranges:[start:f64 end:f64]
    seal, delete   (empty)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from controller_api.model import StreamConfiguration

from ..store.codec import Decoder, Encoder
from ..store.records import StreamConfigurationRecord

FORMAT_VERSION = 1
_SEGMENT_ID = struct.Struct(">q")
_RANGE = struct.Struct(">dd")


def encode_create(creation_time: int, configuration: StreamConfiguration) -> bytes:
    return Encoder(FORMAT_VERSION).i64(creation_time).blob(StreamConfigurationRecord(configuration).encode()).to_bytes()


def decode_create(payload: bytes) -> tuple[int, StreamConfiguration]:
    decoder = Decoder(payload, "create payload", FORMAT_VERSION)
    creation_time, configuration = decoder.i64(), StreamConfigurationRecord.decode(decoder.blob()).configuration
    decoder.finish()
    return creation_time, configuration


def encode_update(configuration: StreamConfiguration) -> bytes:
    return Encoder(FORMAT_VERSION).blob(StreamConfigurationRecord(configuration).encode()).to_bytes()


def decode_update(payload: bytes) -> StreamConfiguration:
    decoder = Decoder(payload, "update payload", FORMAT_VERSION)
    configuration = StreamConfigurationRecord.decode(decoder.blob()).configuration
    decoder.finish()
    return configuration


def encode_truncate(stream_cut: dict[int, int]) -> bytes:
    return Encoder(FORMAT_VERSION).pairs(dict(sorted(stream_cut.items()))).to_bytes()


def decode_truncate(payload: bytes) -> dict[int, int]:
    decoder = Decoder(payload, "truncate payload", FORMAT_VERSION)
    cut = decoder.pairs()
    decoder.finish()
    return cut


def encode_scale(segments_to_seal: Sequence[int], new_ranges: Sequence[tuple[float, float]]) -> bytes:
    return (Encoder(FORMAT_VERSION).packed(_SEGMENT_ID, ((segment_id,) for segment_id in segments_to_seal))
            .packed(_RANGE, new_ranges).to_bytes())


def decode_scale(payload: bytes) -> tuple[tuple[int, ...], tuple[tuple[float, float], ...]]:
    decoder = Decoder(payload, "scale payload", FORMAT_VERSION)
    to_seal = tuple(row[0] for row in decoder.packed(_SEGMENT_ID))
    ranges = tuple(decoder.packed(_RANGE))
    decoder.finish()
    return to_seal, ranges
