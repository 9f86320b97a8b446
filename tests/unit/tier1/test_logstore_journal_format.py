"""The log store's journal record format: any sequence of records reads back as written; a tail cut
anywhere in the newest file is a torn tail (the whole records before it survive); damage followed by
a valid record, or in a file that is not the newest, is corruption."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.tier1.logstore.journal_format import HEADER_SIZE, NO_ENTRY, JournalCorrupted, Kind, encode, scan

records = st.lists(st.tuples(st.sampled_from(list(Kind)), st.integers(0, 2**64 - 1), st.integers(-1, 2**40),
                             st.integers(-1, 2**40), st.binary(max_size=300)), min_size=1, max_size=12)


def file_of(items) -> tuple[bytes, list[int]]:
    """The bytes of ``items`` written back to back, and where each record ends."""
    data, ends = bytearray(), []
    for kind, ledger, entry, lac, payload in items:
        data += b"".join(bytes(part) for part in encode(kind, ledger, entry, lac, payload))
        ends.append(len(data))
    return bytes(data), ends


@settings(max_examples=200, deadline=None)
@given(records)
def test_records_read_back_as_written(items):
    data, ends = file_of(items)
    found, end = scan(data, newest=False)
    assert end == len(data)
    assert [(r.kind, r.ledger, r.entry, r.last_add_confirmed, data[r.payload_offset:r.end]) for r in found] == [
        (kind, ledger, entry, lac, payload) for kind, ledger, entry, lac, payload in items]


@settings(max_examples=200, deadline=None)
@given(records, st.data())
def test_a_cut_anywhere_in_the_newest_file_is_a_torn_tail(items, draw):
    data, ends = file_of(items)
    cut = draw.draw(st.integers(0, len(data) - 1))
    found, end = scan(data[:cut], newest=True)
    whole = [e for e in ends if e <= cut]
    assert len(found) == len(whole) and end == (whole[-1] if whole else 0)
    if cut in ends or cut == 0:  # a cut between records leaves a whole, valid file
        assert scan(data[:cut], newest=False) == (found, end)
    else:  # a file that is not the newest was synced whole: a partial record there is damage
        with pytest.raises(JournalCorrupted):
            scan(data[:cut], newest=False)


@settings(max_examples=200, deadline=None)
@given(records.filter(lambda items: len(items) >= 2), st.data())
def test_damage_before_a_valid_record_is_corruption(items, draw):
    data, ends = file_of(items)
    damaged_record = draw.draw(st.integers(0, len(items) - 2))  # not the last record
    start = ends[damaged_record - 1] if damaged_record else 0
    position = draw.draw(st.integers(start, ends[damaged_record] - 1))
    damaged = bytearray(data)
    damaged[position] ^= 0xFF
    with pytest.raises(JournalCorrupted):
        scan(bytes(damaged), newest=True)


def test_damage_in_the_last_record_of_the_newest_file_is_a_torn_tail():
    data, ends = file_of([(Kind.ADD, 7, 0, NO_ENTRY, b"a" * 100), (Kind.ADD, 7, 1, 0, b"b" * 100)])
    damaged = bytearray(data)
    damaged[ends[0] + HEADER_SIZE + 5] ^= 1
    found, end = scan(bytes(damaged), newest=True)
    assert [r.entry for r in found] == [0] and end == ends[0]
    with pytest.raises(JournalCorrupted):
        scan(bytes(damaged), newest=False)


def test_fence_and_delete_records_carry_no_entry():
    data, _ = file_of([(Kind.FENCE, 3, NO_ENTRY, 41, b""), (Kind.DELETE, 3, NO_ENTRY, NO_ENTRY, b"")])
    assert len(data) == 2 * HEADER_SIZE
    (fence, delete), _ = scan(data, newest=False)
    assert (fence.kind, fence.ledger, fence.last_add_confirmed, fence.length) == (Kind.FENCE, 3, 41, 0)
    assert (delete.kind, delete.entry) == (Kind.DELETE, NO_ENTRY)
