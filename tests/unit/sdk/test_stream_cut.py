"""Stream cuts (clients/stream_cut.py): Java's text form (asText / from) and binary form
(toBytes / fromBytes), client reference §7, checked against golden vectors, encoding
boundaries, round-trip properties and garbage input."""

from __future__ import annotations

import base64
import gzip
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from clients.errors import InvalidArgument
from clients.model import Segment
from clients.stream_cut import StreamCut, cuts_by_stream, parse_stream_cut
from wire import naming

GOLDEN_CUT = StreamCut("sc", "st", {0: 0, 1: 100})
GOLDEN_TEXT = "H4sIAAAAAAAA/zOwKk7WLy6xMtAxBGIDEG1gAAD3VnKbFQAAAA=="
GOLDEN_BYTES = bytes.fromhex("00 01 01 00 00 00 00 0d 00 05 73 63 2f 73 74 02 00 00 01 20 64")

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-",
                min_size=1, max_size=24)
numbers = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 2**31 - 1)
offsets = st.integers(-1, 2**60 - 1)
segment_ids = st.builds(naming.segment_id, numbers, epochs)
# The binary form writes segment ids as compact longs (< 2^62, as Java's writeCompactLong), so
# only epochs below 2^30 fit; see test_binary_form_rejects_segment_ids_above_compact_long_range.
binary_segment_ids = st.builds(naming.segment_id, numbers, st.integers(0, 2**30 - 1))

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=150, deadline=None)


def _text_of_plain(plain: str) -> str:
    """Encodes a plain-form string the way Java's asText does (gzip + base64)."""
    return base64.b64encode(gzip.compress(plain.encode("utf-8"), mtime=0)).decode("ascii")


def _plain_of_text(text: str) -> str:
    return gzip.decompress(base64.b64decode(text)).decode("utf-8")


def _parses_or_rejects(value):
    """parse_stream_cut(value) returning a StreamCut or raising InvalidArgument; anything else escapes."""
    try:
        result = parse_stream_cut(value)
    except InvalidArgument:
        return None
    assert isinstance(result, StreamCut)
    return result


# ---------------------------------------------------------------------- golden vectors


def test_text_form_matches_the_java_vector():
    """asText() of sc/st {0:0, 1:100} is byte for byte the JDK 17 output from the spec."""
    assert GOLDEN_CUT.as_text() == GOLDEN_TEXT


def test_text_form_parses_the_java_vector():
    """from_text of the JDK vector yields sc/st with segment 0 @ 0 and segment 1 @ 100."""
    cut = StreamCut.from_text(GOLDEN_TEXT)
    assert cut == GOLDEN_CUT
    assert (cut.scope, cut.stream, cut.positions) == ("sc", "st", {0: 0, 1: 100})


def test_text_form_plain_content_and_gzip_header():
    """The text form decodes to the documented plain string, with mtime 0 and OS byte 0xFF like the JDK."""
    raw = base64.b64decode(GOLDEN_CUT.as_text())
    assert raw[:4] == b"\x1f\x8b\x08\x00" and raw[4:8] == b"\0\0\0\0"
    assert raw[9] == 0xFF
    assert gzip.decompress(raw) == b"0:sc/st:0,1:0,0:0,100"


def test_binary_form_matches_the_spec_vector():
    """to_bytes() of sc/st {0:0, 1:100} is the hand-derived vector of spec §7.2."""
    assert GOLDEN_CUT.to_bytes().hex(" ") == "00 01 01 00 00 00 00 0d 00 05 73 63 2f 73 74 02 00 00 01 20 64"


def test_binary_form_parses_the_spec_vector():
    """from_bytes of the spec vector gives back sc/st {0:0, 1:100}."""
    assert StreamCut.from_bytes(GOLDEN_BYTES) == GOLDEN_CUT


def test_unbounded_forms():
    """UNBOUNDED is the text form and b'' the binary form of the unbounded cut, both ways."""
    assert StreamCut.UNBOUNDED.is_unbounded
    assert StreamCut.UNBOUNDED.as_text() == "UNBOUNDED"
    assert StreamCut.UNBOUNDED.to_bytes() == b""
    assert StreamCut.from_text("UNBOUNDED") is StreamCut.UNBOUNDED
    assert StreamCut.from_text("  UNBOUNDED\n") is StreamCut.UNBOUNDED
    assert StreamCut.from_bytes(b"") is StreamCut.UNBOUNDED
    assert parse_stream_cut("UNBOUNDED").is_unbounded
    assert parse_stream_cut(b"").is_unbounded
    assert not GOLDEN_CUT.is_unbounded
    assert repr(StreamCut.UNBOUNDED) == "StreamCut.UNBOUNDED"


def test_text_form_splits_segment_ids_into_numbers_and_epochs():
    """Segment ids appear as low-32-bit numbers and high-32-bit epochs in parallel lists."""
    cut = StreamCut("scope", "stream", {naming.segment_id(7, 3): 42, naming.segment_id(2, 1): -1})
    assert _plain_of_text(cut.as_text()) == "0:scope/stream:2,7:1,3:-1,42"


def test_text_form_parser_ignores_list_order_and_whitespace():
    """Decoders must not rely on the (unspecified) list order and trim whitespace around items."""
    text = _text_of_plain("0:sc/st: 7 ,2: 3, 1 :42 , -1")
    assert StreamCut.from_text(text) == StreamCut("sc", "st", {naming.segment_id(7, 3): 42,
                                                               naming.segment_id(2, 1): -1})
    assert StreamCut.from_text("  " + GOLDEN_TEXT + "\n") == GOLDEN_CUT


# ---------------------------------------------------------------------- compact encodings


@pytest.mark.parametrize("offset, encoded", [
    (0, "00"),
    (0x1F, "1f"),
    (0x20, "20 20"),
    (0x1FFF, "3f ff"),
    (0x2000, "40 00 20 00"),
    (0x1FFFFFFF, "5f ff ff ff"),
    (0x20000000, "60 00 00 00 20 00 00 00"),
    (2**60, "70 00 00 00 00 00 00 00"),
    (-1, "80"),
    (-0x20, "9f"),
    (-0x21, "a0 20"),
    (-0x2000, "bf ff"),
    (-0x2001, "c0 00 20 00"),
    (-0x20000000, "df ff ff ff"),
    (-0x20000001, "e0 00 00 00 20 00 00 00"),
])
def test_offsets_use_compact_signed_longs(offset, encoded):
    """An offset takes 1/2/4/8 bytes at the 0x1F/0x1FFF/0x1FFFFFFF boundaries; negatives store -v-1 with the sign bit."""
    data = StreamCut("s", "t", {0: offset}).to_bytes()
    expected = bytes.fromhex(encoded)
    assert data.endswith(b"\x01\x00" + expected)  # one entry, segment 0, then the offset
    assert struct.unpack(">i", data[4:8])[0] == len(data) - 8
    assert StreamCut.from_bytes(data).positions == {0: offset}


@pytest.mark.parametrize("segment, encoded", [
    (0x3F, "3f"),
    (0x40, "40 40"),
    (0x3FFF, "7f ff"),
    (0x4000, "80 00 40 00"),
    (0x3FFFFFFF, "bf ff ff ff"),
    (0x40000000, "c0 00 00 00 40 00 00 00"),
    (naming.segment_id(5, 1), "c0 00 00 01 00 00 00 05"),
])
def test_segment_ids_use_compact_longs(segment, encoded):
    """A segment id takes 1/2/4/8 bytes at the 0x3F/0x3FFF/0x3FFFFFFF boundaries."""
    data = StreamCut("s", "t", {segment: 0}).to_bytes()
    assert data.endswith(b"\x01" + bytes.fromhex(encoded) + b"\x00")
    assert StreamCut.from_bytes(data).positions == {segment: 0}


def test_entry_count_uses_a_compact_int():
    """More than 127 entries make the count a two-byte compact int (top bits 10)."""
    cut = StreamCut("s", "t", {segment: segment for segment in range(128)})
    data = cut.to_bytes()
    assert data[8:13] == b"\x00\x03s/t" and data[13:15] == b"\x80\x80"
    assert StreamCut.from_bytes(data) == cut


def test_offset_range_matches_javas_compact_signed_long_bounds():
    """Offsets in Java's [-(2^61-1), 2^61-2] encode and round trip; one beyond either end is InvalidArgument."""
    for offset in (2**61 - 2, -(2**61 - 1)):
        assert StreamCut.from_bytes(StreamCut("s", "t", {0: offset}).to_bytes()).positions == {0: offset}
    for offset in (2**61 - 1, -(2**61)):
        with pytest.raises(InvalidArgument):
            StreamCut("s", "t", {0: offset}).to_bytes()


def test_binary_form_rejects_segment_ids_above_compact_long_range():
    """Segment ids of epoch >= 2^30 exceed Java's compact long (< 2^62): to_bytes raises InvalidArgument, not struct.error."""
    with pytest.raises(InvalidArgument):
        StreamCut("s", "t", {naming.segment_id(0, 2**30): 0}).to_bytes()


def test_version_0_binary_form_is_still_readable():
    """Version 0 wrote offsets as (unsigned) compact longs; from_bytes still reads it."""
    body = b"\x00\x05sc/st" + b"\x02" + b"\x00\x00" + b"\x01" + b"\x40\x64"  # {0: 0, 1: 100}
    data = b"\x00\x00\x01\x00" + struct.pack(">i", len(body)) + body
    assert StreamCut.from_bytes(data) == GOLDEN_CUT


# ---------------------------------------------------------------------- round trips


@ROUND_TRIP
@given(names, names, st.dictionaries(segment_ids, offsets, max_size=12))
def test_text_form_round_trips(scope, stream, positions):
    """from_text(as_text(cut)) == cut for any valid names, segment ids (epoch, number < 2^31) and offsets."""
    cut = StreamCut(scope, stream, positions)
    text = cut.as_text()
    assert text.isascii()
    back = StreamCut.from_text(text)
    assert back == cut
    assert (back.scope, back.stream, back.positions) == (scope, stream, positions)
    assert parse_stream_cut(text) == cut


@ROUND_TRIP
@given(names, names, st.dictionaries(binary_segment_ids, offsets, max_size=12))
def test_binary_form_round_trips(scope, stream, positions):
    """from_bytes(to_bytes(cut)) == cut for any valid names, segment ids (epoch < 2^30) and offsets."""
    cut = StreamCut(scope, stream, positions)
    data = cut.to_bytes()
    assert data[:4] == b"\x00\x01\x01\x00"
    assert struct.unpack(">i", data[4:8])[0] == len(data) - 8
    back = StreamCut.from_bytes(data)
    assert back == cut and back.positions == positions
    assert parse_stream_cut(data) == cut
    assert parse_stream_cut(bytearray(data)) == cut
    assert parse_stream_cut(memoryview(data)) == cut


@ROUND_TRIP
@given(st.dictionaries(binary_segment_ids, offsets, min_size=1, max_size=6))
def test_text_and_binary_forms_agree(positions):
    """Decoding both forms of one cut gives equal cuts (where the binary form can hold the ids)."""
    cut = StreamCut("scope", "stream", positions)
    assert StreamCut.from_text(cut.as_text()) == StreamCut.from_bytes(cut.to_bytes()) == cut


# ---------------------------------------------------------------------- value semantics and helpers


def test_equality_hash_and_copies():
    """Cuts compare and hash by scope, stream and positions (not insertion order); positions is a copy."""
    a = StreamCut("sc", "st", {1: 100, 0: 0})
    assert a == GOLDEN_CUT and hash(a) == hash(GOLDEN_CUT)
    assert a != StreamCut("sc", "st", {0: 0, 1: 101})
    assert a != StreamCut("sc", "other", {0: 0, 1: 100})
    assert (a == "not a cut") is False
    a.positions[5] = 5
    assert a.positions == {0: 0, 1: 100}
    assert a.scoped_stream == "sc/st"
    assert a.segments == {Segment("sc", "st", 0): 0, Segment("sc", "st", 1): 100}


def test_of_segments():
    """of_segments builds a cut from Segment keys of one stream and rejects mixed or empty input."""
    cut = StreamCut.of_segments({Segment("sc", "st", 0): 0, Segment("sc", "st", 1): 100})
    assert cut == GOLDEN_CUT
    with pytest.raises(InvalidArgument):
        StreamCut.of_segments({Segment("sc", "st", 0): 0, Segment("sc", "other", 1): 100})
    with pytest.raises(InvalidArgument):
        StreamCut.of_segments({})


def test_parse_stream_cut_accepts_cuts_text_and_bytes_only():
    """parse_stream_cut returns a StreamCut as is, parses str and bytes-likes, and rejects other types."""
    assert parse_stream_cut(GOLDEN_CUT) is GOLDEN_CUT
    assert parse_stream_cut(GOLDEN_TEXT) == GOLDEN_CUT
    assert parse_stream_cut(GOLDEN_BYTES) == GOLDEN_CUT
    for bad in (42, None, {0: 0}, 1.5):
        with pytest.raises(InvalidArgument):
            parse_stream_cut(bad)


def test_cuts_by_stream():
    """cuts_by_stream keys cuts by scope/stream and rejects two cuts of one stream."""
    other = StreamCut("sc", "other", {0: 5})
    assert cuts_by_stream([GOLDEN_CUT, other]) == {"sc/st": GOLDEN_CUT, "sc/other": other}
    assert cuts_by_stream([]) == {}
    with pytest.raises(InvalidArgument):
        cuts_by_stream([GOLDEN_CUT, StreamCut("sc", "st", {0: 1})])


# ---------------------------------------------------------------------- garbage


@pytest.mark.parametrize("text", [
    "", "   ", "not base64!", "AAAA", GOLDEN_TEXT[:-4], GOLDEN_TEXT[1:], "Zm9v",  # "foo", not gzip
    "H4sI", "é", _text_of_plain("1:sc/st:0:0:0"), _text_of_plain("0:sc/st:0:0"),
    _text_of_plain("0:scst:0:0:0"), _text_of_plain("0:/st:0:0:0"), _text_of_plain("0:sc/:0:0:0"),
    _text_of_plain("0:sc/st:0,1:0:0,100"), _text_of_plain("0:sc/st:x:0:0"), _text_of_plain("0:sc/st:0,:0,:0,"),
    _text_of_plain("0:sc/st:1.5:0:0"),
    base64.b64encode(gzip.compress(b"\xff\xfe", mtime=0)).decode(),
])
def test_bad_text_is_invalid_argument(text):
    """Invalid base64, non-gzip data, bad UTF-8, wrong version, missing names or bad lists raise InvalidArgument."""
    with pytest.raises(InvalidArgument):
        StreamCut.from_text(text)


def test_truncated_or_inconsistent_bytes_are_invalid_argument():
    """Every proper prefix of the vector, unknown formats/versions and a too-short declared length raise InvalidArgument."""
    for length in range(1, len(GOLDEN_BYTES)):
        with pytest.raises(InvalidArgument):
            StreamCut.from_bytes(GOLDEN_BYTES[:length])
    for bad in (b"\x01" + GOLDEN_BYTES[1:], GOLDEN_BYTES[:1] + b"\x02" + GOLDEN_BYTES[2:],
                GOLDEN_BYTES[:2] + b"\x00" + GOLDEN_BYTES[3:], GOLDEN_BYTES[:7] + b"\x0c" + GOLDEN_BYTES[8:]):
        with pytest.raises(InvalidArgument):
            StreamCut.from_bytes(bad)


@FUZZ
@given(st.text())
def test_arbitrary_text_parses_or_is_invalid_argument(text):
    """Any text either parses to a StreamCut or raises InvalidArgument (never another exception)."""
    _parses_or_rejects(text)


@FUZZ
@given(st.binary(max_size=64))
def test_arbitrary_base64_text_parses_or_is_invalid_argument(data):
    """Base64 of arbitrary bytes, and of arbitrary gzip members, parses or raises InvalidArgument."""
    _parses_or_rejects(base64.b64encode(data).decode())
    _parses_or_rejects(base64.b64encode(gzip.compress(data, mtime=0)).decode())


_tokens = st.one_of(st.integers(0, 2**31 - 1).map(str), st.integers(-2**70, 2**70).map(str),
                    st.sampled_from(["", " ", "x", "1.5", "0x10", "--1", "1e3", "1_0"]))
_in_range_tokens = st.one_of(st.integers(0, 2**31 - 1).map(str),
                             st.sampled_from(["", " ", "x", "1.5", "0x10", "--1", "1e3", " 7 "]))


def _list(token_strategy):
    return st.lists(token_strategy, max_size=4).map(",".join)


@FUZZ
@given(st.sampled_from(["0", "1", ""]), st.sampled_from(["sc/st", "sc", "/st", "a/b/c", ""]),
       _list(_in_range_tokens), _list(_in_range_tokens), _list(_tokens), st.sampled_from(["", ":", ":x"]))
def test_structured_plain_text_parses_or_is_invalid_argument(version, names_part, numbers_part, epochs_part,
                                                             offsets_part, tail):
    """Gzipped plain forms with valid-range segment numbers/epochs but bad structure/tokens parse or raise InvalidArgument."""
    plain = f"{version}:{names_part}:{numbers_part}:{epochs_part}:{offsets_part}{tail}"
    cut = _parses_or_rejects(_text_of_plain(plain))
    if cut is not None and not cut.is_unbounded:
        assert StreamCut.from_text(cut.as_text()) == cut


@pytest.mark.parametrize("plain", ["0:sc/st:-1:0:0", "0:sc/st:0:2147483648:0", "0:sc/st:2147483648:0:0",
                                   "0:sc/st:0:-1:5"])
def test_out_of_range_segment_numbers_in_text_are_invalid_argument(plain):
    """A text cut whose segment number or epoch is not a non-negative int32 raises InvalidArgument."""
    with pytest.raises(InvalidArgument):
        StreamCut.from_text(_text_of_plain(plain))


@FUZZ
@example(numbers_part="-1", epochs_part="0")
@given(_list(_tokens), _list(_tokens))
def test_any_integer_lists_parse_or_are_invalid_argument(numbers_part, epochs_part):
    """Well-formed plain text with arbitrary integers as numbers and epochs parses or raises InvalidArgument."""
    count = len(numbers_part.split(","))
    _parses_or_rejects(_text_of_plain(f"0:sc/st:{numbers_part}:{epochs_part}:{','.join(['0'] * count)}"))


@FUZZ
@given(st.binary(max_size=80))
def test_arbitrary_bytes_parse_or_are_invalid_argument(data):
    """Any bytes either parse to a StreamCut or raise InvalidArgument (never another exception)."""
    _parses_or_rejects(data)


@FUZZ
@given(st.sampled_from([0, 1, 2]), st.integers(0, 3), st.binary(max_size=60), st.integers(-4, 4))
def test_bytes_with_a_valid_header_parse_or_are_invalid_argument(version, revisions, body, length_skew):
    """A serializer header (format 0, versions 0-2) over an arbitrary body parses or raises InvalidArgument."""
    data = bytes([0, version, revisions, 0]) + struct.pack(">i", len(body) + length_skew) + body
    _parses_or_rejects(data)


@FUZZ
@given(st.binary(min_size=1, max_size=40), st.integers(0, len(GOLDEN_BYTES) - 1))
def test_corrupted_vector_bytes_parse_or_are_invalid_argument(noise, position):
    """The spec vector with bytes overwritten from any position parses or raises InvalidArgument."""
    data = GOLDEN_BYTES[:position] + noise + GOLDEN_BYTES[position + len(noise):]
    _parses_or_rejects(data)
