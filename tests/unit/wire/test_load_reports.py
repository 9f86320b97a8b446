"""The load-report codec (wire/load_reports.py): round trips of every report in any chunking, a pinned
byte layout, malformed input raising ProtocolError only, and the report segment pinned to its container."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import naming
from wire.errors import ProtocolError
from wire.load_reports import (
    FORMAT_VERSION,
    NAME_BYTES_MAX,
    Direction,
    LoadReport,
    ReportSplitter,
    decode_body,
    encode_report,
    encode_reports,
    split_reports,
)

names = st.text(max_size=60).filter(lambda text: len(text.encode("utf-8", "surrogatepass")) <= NAME_BYTES_MAX)
reports = st.builds(LoadReport, names, names, st.integers(0, 2**63 - 1), st.sampled_from(Direction),
                    st.integers(-2**63, 2**63 - 1), st.integers(0, 2**31 - 1), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(reports, max_size=12), st.lists(st.integers(0, 2000), max_size=8))
def test_reports_round_trip_in_any_chunking(written, cuts):
    """Reports encoded back to back and fed to a splitter in arbitrary pieces come back equal, in order."""
    data = encode_reports(written)
    splitter, seen, start = ReportSplitter(), [], 0
    for cut in sorted(min(cut, len(data)) for cut in cuts) + [len(data)]:
        seen += splitter.feed(data[start:cut])
        start = cut
    assert seen == written
    assert splitter.buffered_bytes == 0


def test_layout_is_pinned():
    """The byte layout documented in the module: length, version, direction, silent, splits, time, id, names."""
    report = LoadReport("sc", "st", (3 << 32) | 7, Direction.UP, 1_700_000_000_000, splits=4)
    body = (struct.pack(">BBBiqq", FORMAT_VERSION, 0, 0, 4, 1_700_000_000_000, (3 << 32) | 7)
            + b"\x00\x02sc" + b"\x00\x02st")
    assert encode_report(report) == struct.pack(">i", len(body)) + body
    cold = LoadReport("sc", "st", 1, Direction.DOWN, 5, silent=True)
    assert encode_report(cold)[5:8] == b"\x01\x01\x00"


def test_split_reports_leaves_an_incomplete_record():
    """Only whole records are returned, with how many bytes they took."""
    first, second = (LoadReport("a", "b", number, Direction.DOWN, 10) for number in (1, 2))
    data = encode_report(first) + encode_report(second)[:-1]
    found, consumed = split_reports(data)
    assert found == [first] and consumed == len(encode_report(first))


@pytest.mark.parametrize("body", [
    b"",  # too short
    struct.pack(">BBBiqq", 0, 0, 0, 2, 1, 1) + b"\x00\x00\x00\x00",  # version 0
    struct.pack(">BBBiqq", 1, 2, 0, 2, 1, 1) + b"\x00\x00\x00\x00",  # unknown direction
    struct.pack(">BBBiqq", 1, 1, 2, 0, 1, 1) + b"\x00\x00\x00\x00",  # silent flag 2
    struct.pack(">BBBiqq", 1, 0, 0, 2, 1, 1) + b"\x00\x05ab",  # name cut short
    struct.pack(">BBBiqq", 1, 0, 0, 2, 1, 1) + b"\x00\x01\xff\x00\x00",  # not UTF-8
    struct.pack(">BBBiqq", 1, 0, 0, 2, 1, -1) + b"\x00\x00\x00\x00",  # negative segment id
    struct.pack(">BBBiqq", 1, 0, 0, 2, 1, 1) + b"\x00\x00\x00\x00!",  # left-over bytes at this version
])
def test_malformed_bodies_raise_protocol_error(body):
    """Each malformed body is a ProtocolError, never another exception."""
    with pytest.raises(ProtocolError):
        decode_body(body)


def test_a_newer_version_may_append_fields():
    """A body of a later format version with trailing bytes decodes (the trailing fields are ignored)."""
    body = struct.pack(">BBBiqq", FORMAT_VERSION + 1, 0, 0, 3, 9, 5) + b"\x00\x01s\x00\x01t" + b"future"
    assert decode_body(body) == LoadReport("s", "t", 5, Direction.UP, 9, 3)


@pytest.mark.parametrize("length", [-1, 0, 5, 100_000])
def test_lengths_out_of_range_raise_protocol_error(length):
    with pytest.raises(ProtocolError):
        split_reports(struct.pack(">i", length) + bytes(30))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data):
    """Fuzz: any bytes either split into reports or raise ProtocolError, fed whole or one byte at a time."""
    try:
        split_reports(data)
    except ProtocolError:
        pass
    splitter = ReportSplitter()
    try:
        for index in range(len(data)):
            splitter.feed(data[index:index + 1])
    except ProtocolError:
        pass


def test_report_values_are_checked():
    with pytest.raises(ValueError):
        LoadReport("s", "t", -1, Direction.UP, 0)
    with pytest.raises(ValueError):
        LoadReport("s" * (NAME_BYTES_MAX + 1), "t", 1, Direction.UP, 0)


def test_report_segment_is_pinned_to_its_container():
    """``load_reports_<n>`` maps to container n (mod the count), whatever the hash would say."""
    assert naming.load_report_segment_name(3) == "_system/containers/load_reports_3"
    for count in (1, 4, 16):
        assert [naming.container_of(naming.load_report_segment_name(n), count) for n in range(count)] == \
            list(range(count))
