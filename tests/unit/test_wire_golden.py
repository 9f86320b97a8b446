"""Golden byte vectors: frames assembled by hand with struct from the protocol reference
(shared/spec/wire-protocol.md §2, §7), checked against our encoder and decoder both ways."""

from __future__ import annotations

import struct
import uuid

import pytest

import wire
from wire import commands as c
from wire.constants import NO_VERSION, NOT_EXISTS, NULL_ATTRIBUTE_VALUE

WRITER = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
SEGMENT = "sc/st/0.#epoch.0"
TABLE = "sc/t_kvtable/0.#epoch.0"


def frame(type_code: int, payload: bytes) -> bytes:
    return struct.pack(">ii", type_code, len(payload)) + payload


def utf(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def buf(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def q(value: int) -> bytes:
    return struct.pack(">q", value)


def i(value: int) -> bytes:
    return struct.pack(">i", value)


HELLO_EVENT = b"\x00\x00\x00\x00\x00\x00\x00\x05hello"

GOLDEN = [
    (c.Hello(15, 5), frame(-127, i(15) + i(5))),
    (c.KeepAlive(), frame(100, b"")),
    (c.SetupAppend(7, WRITER, SEGMENT, ""), frame(1, q(7) + WRITER.bytes + utf(SEGMENT) + utf(""))),
    (c.AppendSetup(7, SEGMENT, WRITER, NULL_ATTRIBUTE_VALUE),
     frame(2, q(7) + utf(SEGMENT) + WRITER.bytes + q(-(2**63)))),
    (c.AppendBlockEnd(WRITER, 13, HELLO_EVENT, 1, 1, 8),
     frame(4, WRITER.bytes + i(13) + buf(HELLO_EVENT) + i(1) + q(1) + q(8))),
    (c.ConditionalAppend(WRITER, 3, 1024, b"hello", 11),
     frame(5, WRITER.bytes + q(3) + q(1024) + i(0) + buf(b"hello") + q(11))),
    (c.DataAppended(WRITER, 1, NULL_ATTRIBUTE_VALUE, 8, 13),
     frame(7, WRITER.bytes + q(1) + q(-(2**63)) + q(8) + q(13))),
    (c.ReadSegment(SEGMENT, 0, 8 * 1024 * 1024, "", 9),
     frame(9, utf(SEGMENT) + q(0) + i(8 * 1024 * 1024) + utf("") + q(9))),
    (c.SegmentRead(SEGMENT, 0, True, False, HELLO_EVENT, 9),
     frame(10, utf(SEGMENT) + q(0) + b"\x01\x00" + buf(HELLO_EVENT) + q(9))),
    (c.CreateSegment(4, SEGMENT, 100, 1, "", 0),
     frame(20, q(4) + utf(SEGMENT) + i(100) + b"\x01" + utf("") + q(0))),
    (c.CreateTransientSegment(12, WRITER, SEGMENT, ""),
     frame(40, q(12) + WRITER.bytes + utf(SEGMENT) + utf(""))),
    (c.MergeSegments(5, SEGMENT, SEGMENT + "#transient.x", "",
                     (c.ConditionalAttributeUpdate(WRITER, 4, 10, NULL_ATTRIBUTE_VALUE),)),
     frame(58, q(5) + utf(SEGMENT) + utf(SEGMENT + "#transient.x") + utf("") + i(1)
           + WRITER.bytes + b"\x04" + q(10) + q(-(2**63)))),
    (c.SegmentsMerged(5, SEGMENT, "src", 99), frame(59, q(5) + utf(SEGMENT) + utf("src") + q(99))),
    (c.MergeSegmentsBatch(6, SEGMENT, ("a", "bc"), ""),
     frame(90, q(6) + utf(SEGMENT) + i(2) + utf("a") + utf("bc") + utf(""))),
    (c.SegmentsBatchMerged(6, SEGMENT, (c.MergedSource("a", 10), c.MergedSource("bc", 20))),
     frame(91, q(6) + utf(SEGMENT) + i(2) + utf("a") + q(10) + utf("bc") + q(20))),
    (c.UpdateTableEntries(3, TABLE, "", (c.TableEntry(b"k", NOT_EXISTS, b"v"),), -1),
     frame(74, q(3) + utf(TABLE) + utf("") + i(1) + i(13) + buf(b"k") + q(-1) + i(5) + buf(b"v") + q(-1))),
    (c.TableEntriesUpdated(3, (0,)), frame(75, q(3) + i(1) + q(0))),
    (c.ReadTable(4, TABLE, "", (c.TableKey(b"x", NO_VERSION),)),
     frame(78, q(4) + utf(TABLE) + utf("") + i(1) + i(13) + buf(b"x") + q(-(2**63)))),
    (c.TableRead(4, TABLE, (c.TableEntry(b"x", NOT_EXISTS, b""),)),
     frame(79, q(4) + utf(TABLE) + i(1) + i(13) + buf(b"x") + q(-1) + i(4) + buf(b""))),
    (c.InvalidEventNumber(WRITER, 8, "", 3), frame(55, WRITER.bytes + q(8) + utf("") + q(3))),
    (c.SegmentIsTruncated(2, SEGMENT, 100, "", 50), frame(56, q(2) + utf(SEGMENT) + q(100) + utf("") + q(50))),
    (c.MergeSegmentsWithHeader(9, SEGMENT, "src", HELLO_EVENT[:8], ""),
     frame(1000, q(9) + utf(SEGMENT) + utf("src") + buf(HELLO_EVENT[:8]) + utf(""))),
]


@pytest.mark.parametrize("command, expected", GOLDEN, ids=lambda value: type(value).__name__)
def test_encoder_produces_the_hand_assembled_bytes(command, expected):
    """Our encoder writes exactly the bytes the spec's layout gives for the command."""
    assert wire.encode(command) == expected


@pytest.mark.parametrize("command, expected", GOLDEN, ids=lambda value: type(value).__name__)
def test_decoder_reads_the_hand_assembled_bytes(command, expected):
    """The stream decoder turns the hand-assembled frame back into the command."""
    assert wire.Decoder().receive(expected) == [command]


# The worked examples of the protocol reference §7, as hex text copied from it.
SPEC_EXAMPLES = [
    (c.Hello(15, 5), "ff ff ff 81 00 00 00 08 00 00 00 0f 00 00 00 05"),
    (c.KeepAlive(), "00 00 00 64 00 00 00 00"),
    (c.SetupAppend(7, WRITER, SEGMENT, ""),
     "00 00 00 01 00 00 00 2c 00 00 00 00 00 00 00 07 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff"
     " 00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68 2e 30 00 00"),
    (c.AppendBlockEnd(WRITER, 13, HELLO_EVENT, 1, 1, 8),
     "00 00 00 04 00 00 00 39 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff 00 00 00 0d"
     " 00 00 00 0d 00 00 00 00 00 00 00 05 68 65 6c 6c 6f 00 00 00 01 00 00 00 00 00 00 00 01"
     " 00 00 00 00 00 00 00 08"),
    (c.DataAppended(WRITER, 1, NULL_ATTRIBUTE_VALUE, 8, 13),
     "00 00 00 07 00 00 00 30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff 00 00 00 00 00 00 00 01"
     " 80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 08 00 00 00 00 00 00 00 0d"),
    (c.ReadSegment(SEGMENT, 0, 8 * 1024 * 1024, "", 9),
     "00 00 00 09 00 00 00 28 00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68 2e 30 00 00 00 00 00 00 00 00"
     " 00 80 00 00 00 00 00 00 00 00 00 00 00 09"),
    (c.TableEntriesUpdated(3, (0,)),
     "00 00 00 4b 00 00 00 14 00 00 00 00 00 00 00 03 00 00 00 01 00 00 00 00 00 00 00 00"),
]


@pytest.mark.parametrize("command, hex_text", SPEC_EXAMPLES, ids=lambda value: type(value).__name__)
def test_worked_examples_of_the_reference(command, hex_text):
    """The reference's own worked byte examples (§7) match our encoding."""
    assert wire.encode(command) == bytes.fromhex(hex_text)


# ---------------------------------------------------------------- Java's tolerance on input


@pytest.mark.parametrize("payload, expected", [
    # The Rust client sends CreateSegment without rolloverSizeBytes.
    (q(1) + utf(SEGMENT) + i(0) + b"\x00" + utf(""), c.CreateSegment(1, SEGMENT, 0, 0, "", 0)),
    # ... CreateTableSegment with only requestId, segment and token.
    (q(2) + utf(TABLE) + utf(""), c.CreateTableSegment(2, TABLE, "", False, 0, 0)),
    # ... MergeSegments without the attribute-update list.
    (q(3) + utf(SEGMENT) + utf("s") + utf(""), c.MergeSegments(3, SEGMENT, "s", "", ())),
    # ... ReadTableEntries with only the continuation token.
    (q(4) + utf(TABLE) + utf("") + i(10) + buf(b"tok"), c.ReadTableEntries(4, TABLE, "", 10, b"tok")),
    # An AppendBlockEnd without its trailing requestId defaults it to -1.
    (WRITER.bytes + i(0) + buf(b"") + i(1) + q(5), c.AppendBlockEnd(WRITER, 0, b"", 1, 5, -1)),
    # A v15 Java server's DataAppended-era peers omit trailing fields; they default to -1.
    (WRITER.bytes + q(5), c.DataAppended(WRITER, 5, -1, -1, -1)),
    # Unread trailing bytes are ignored (a newer peer's extra fields).
    (q(7) + utf(SEGMENT) + b"extra-bytes", c.SegmentCreated(7, SEGMENT)),
])
def test_optional_trailing_fields_and_extra_bytes(payload, expected):
    """Requests missing optional trailing fields decode with defaults; extra bytes are ignored."""
    assert wire.decode_frame(expected.TYPE, payload) == expected


def test_optional_i64_read_when_any_byte_remains_then_short_is_malformed():
    """SegmentsMerged.newTargetWriteOffset is read when any byte remains: 1..7 bytes are malformed."""
    base = q(1) + utf("t") + utf("s")
    assert wire.decode_frame(59, base).new_target_write_offset == -1
    with pytest.raises(wire.ProtocolError):
        wire.decode_frame(59, base + b"\x00\x00\x00")


def test_modified_utf8_and_cesu_surrogates_decode_and_echo_exactly():
    """Java's modified UTF-8 (C0 80 for NUL, surrogate pairs as two 3-byte sequences) is accepted,
    and a name decoded from surrogate pairs is re-encoded with exactly the bytes it arrived with."""
    nul_name = b"a\xc0\x80b"
    cesu_name = "x\ud83d\ude00"  # U+1F600 as the surrogate pair Java writes, one 3-byte sequence each
    cesu_bytes = b"x\xed\xa0\xbd\xed\xb8\x80"
    created = wire.decode_frame(21, q(1) + struct.pack(">H", 4) + nul_name)
    assert created.segment == "a\x00b"
    echoed = wire.decode_frame(21, q(1) + struct.pack(">H", len(cesu_bytes)) + cesu_bytes)
    assert wire.encode(echoed) == frame(21, q(1) + struct.pack(">H", len(cesu_bytes)) + cesu_bytes)
    assert echoed.segment == cesu_name
    with pytest.raises(wire.ProtocolError):
        wire.decode_frame(21, q(1) + struct.pack(">H", 2) + b"\xff\xfe")


@pytest.mark.parametrize("make", [
    lambda: c.Hello(2**31, 5),                                   # i32 overflow
    lambda: c.SetupAppend(1, "not-a-uuid", SEGMENT, ""),         # wrong type
    lambda: c.SegmentCreated(1, "x" * 70_000),                   # string over 65535 bytes
    lambda: c.CreateSegment(1, SEGMENT, 0, 128, ""),             # i8 overflow
    lambda: c.TableKey(b"", NO_VERSION),                         # empty keys are not sendable
    lambda: c.AuthTokenCheckFailed(1, "", 7),                    # Rust clients panic on other codes
    lambda: c.SegmentAttributeUpdated(1, 1),                     # bools are bools
    lambda: c.ReadSegment(SEGMENT, 0, 1, ""  , 1, 2),            # too many fields
])
def test_constructors_validate(make):
    """A command that can be constructed can be encoded: bad field values are refused up front."""
    with pytest.raises((ValueError, TypeError)):
        make()
