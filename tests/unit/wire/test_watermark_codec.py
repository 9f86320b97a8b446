"""The watermark codec (wire/watermark.py): Pravega's Watermark / SegmentWithRange serialization.

The golden bytes are written out by hand from Pravega's serializers (VersionedSerializer header:
serializer version 0, format version 0, one revision, revision 0, int32 length; RevisionDataOutput's
compact int for the map size), not produced by our encoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import ProtocolError
from wire.watermark import (
    SegmentWithRange,
    Watermark,
    decode_watermark,
    encode_segment_with_range,
    encode_watermark,
    is_internal_stream,
    mark_stream,
    push_compact_int,
)

GOLDEN = bytes.fromhex(
    "00000100" "00000061"                        # header, body length 97
    "00000000000003e8" "00000000000007d0"        # lower 1000, upper 2000
    "02"                                          # two cut entries (compact int)
    "00000100" "00000018" "0000000100000002" "0000000000000000" "3fe0000000000000"  # seg 1<<32|2 [0, .5)
    "000000000000004d"                            # ... at offset 77
    "00000100" "00000018" "0000000000000003" "3fe0000000000000" "3ff0000000000000"  # seg 3 [.5, 1)
    "0000000000000000")                           # ... at offset 0
GOLDEN_MARK = Watermark(1000, 2000, {SegmentWithRange(1 << 32 | 2, 0.0, 0.5): 77,
                                     SegmentWithRange(3, 0.5, 1.0): 0})


def test_golden_watermark_both_ways():
    """A two-segment watermark encodes to the bytes Pravega's serializer writes, and decodes back."""
    assert encode_watermark(GOLDEN_MARK) == GOLDEN
    assert decode_watermark(GOLDEN) == GOLDEN_MARK
    assert list(decode_watermark(GOLDEN).stream_cut) == list(GOLDEN_MARK.stream_cut)


def test_golden_segment_with_range():
    assert encode_segment_with_range(SegmentWithRange(7, 0.25, 0.75)) == bytes.fromhex(
        "00000100" "00000018" "0000000000000007" "3fd0000000000000" "3fe8000000000000")


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (0x7F, "7f"), (0x80, "8080"), (0x3FFF, "bfff"), (0x4000, "c0004000"), (0x3FFF_FFFF, "ffffffff")])
def test_compact_int_golden(value, encoded):
    """RevisionDataOutput.writeCompactInt: 1 byte below 0x80, 2 bytes | 0x8000 to 0x3FFF, else 4 | 0xC0000000."""
    out = bytearray()
    push_compact_int(out, value)
    assert out.hex() == encoded


def test_compact_int_out_of_range_is_refused():
    with pytest.raises(ValueError):
        push_compact_int(bytearray(), 0x4000_0000)


def test_empty_watermark_and_a_large_cut_use_the_longer_size_forms():
    """No segments: size byte 00; 200 segments: a 2-byte size; both decode back."""
    empty = Watermark(-5, -5, {})
    assert encode_watermark(empty).hex() == "00000100" "00000011" "fffffffffffffffb" "fffffffffffffffb" "00"
    big = Watermark(1, 2, {SegmentWithRange(n, n / 200, (n + 1) / 200): n for n in range(200)})
    encoded = encode_watermark(big)
    assert encoded[24:26] == bytes.fromhex("80c8")
    assert decode_watermark(encoded) == big


def test_decoder_skips_what_a_later_revision_or_writer_adds():
    """Bytes after revision 0's fields (Java reads within the revision's length) and later revisions
    are skipped, as Pravega's VersionedSerializer skips them."""
    body = GOLDEN[8:] + b"extra fields"
    longer = bytes.fromhex("00000200") + len(body).to_bytes(4, "big") + body + bytes.fromhex("01 00000003 616263")
    assert decode_watermark(longer) == GOLDEN_MARK


@pytest.mark.parametrize("mutate", [
    lambda data: data[:-1],                                   # body cut short
    lambda data: b"\x00\x01" + data[2:],                      # format version 1
    lambda data: b"\x00\x00\x00" + data[3:],                  # no revision
    lambda data: data + b"\x00",                              # bytes after the object
    lambda data: data[:8] + bytes.fromhex("00000000000007d0" "00000000000003e8") + data[24:],  # lower > upper
])
def test_malformed_watermarks_raise_protocol_error(mutate):
    with pytest.raises(ProtocolError):
        decode_watermark(mutate(GOLDEN))


def test_a_segment_named_twice_is_refused():
    entry = GOLDEN[25:65]
    body = GOLDEN[8:24] + b"\x02" + entry + entry
    with pytest.raises(ProtocolError, match="twice"):
        decode_watermark(GOLDEN[:4] + len(body).to_bytes(4, "big") + body)


def test_mark_stream_names():
    assert mark_stream("orders") == "_MARKorders"
    assert is_internal_stream("_MARKorders") and is_internal_stream("_RGgroup") and not is_internal_stream("orders")


ranges = st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=20, unique=True).map(sorted)


@st.composite
def watermarks(draw):
    lows = draw(ranges)
    bounds = lows[1:] + [1.0]
    ids = draw(st.lists(st.integers(0, 2**63 - 1), min_size=len(lows), max_size=len(lows), unique=True))
    offsets = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(lows), max_size=len(lows)))
    lower = draw(st.integers(-(2**63), 2**63 - 1))
    upper = draw(st.integers(lower, 2**63 - 1))
    cut = {SegmentWithRange(segment_id, low, high): offset
           for segment_id, low, high, offset in zip(ids, lows, bounds, offsets, strict=True) if low < high}
    return Watermark(lower, upper, cut)


@settings(max_examples=300, deadline=None)
@given(watermarks())
def test_round_trip(watermark):
    """Every watermark decodes back to itself, cut order included."""
    decoded = decode_watermark(encode_watermark(watermark))
    assert decoded == watermark
    assert list(decoded.stream_cut.items()) == list(watermark.stream_cut.items())


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200) | watermarks().map(encode_watermark).flatmap(
    lambda data: st.tuples(st.integers(0, len(data)), st.binary(max_size=8)).map(
        lambda cut: data[:cut[0]] + cut[1])))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data):
    """Garbage and damaged watermarks either decode or raise ProtocolError, nothing else."""
    try:
        decode_watermark(data)
    except ProtocolError:
        pass
