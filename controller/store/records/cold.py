"""Cold marks of auto-scaling: which of a stream's segments its segment stores reported cold, until when.

Format (after the format-version byte)::

    ColdSegmentsRecord   marks:[segment_id:i64 expiry_ms:i64]   (sorted by id; SILENT_EXPIRY: until sealed)

Kept in the stream's metadata table (key ``coldSegments``) so that a restarted controller, or the
one that takes the stream over, still knows which segments may merge (Pravega's ``markCold``).
"""

from __future__ import annotations

import dataclasses

from ..codec import Decoder, Encoder

FORMAT_VERSION = 1
SILENT_EXPIRY = 2**63 - 1  # a segment reported idle stays cold until it is sealed (or reported hot)


@dataclasses.dataclass(frozen=True, slots=True)
class ColdSegmentsRecord:
    """segment id -> when its cold mark expires (ms of the controller's clock; SILENT_EXPIRY: never)."""

    marks: dict[int, int] = dataclasses.field(default_factory=dict)

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).pairs(self.marks).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> ColdSegmentsRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.pairs())
