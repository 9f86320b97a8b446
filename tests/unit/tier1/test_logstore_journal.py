"""The log store's journal over real files: durable groups read back after a restart, fences and
deletions survive it, a torn tail is cut and appends go on, files roll and are collected once their
ledgers are deleted, and a deletion's record outlives the entries it deletes."""

from __future__ import annotations

import array
import fcntl
import os
import struct
import threading
import time
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server import direct_writes
from server.tier1.logstore import journal as journal_module
from server.tier1.logstore.journal import Journal, entries_of
from server.tier1.logstore.journal_format import NO_ENTRY, JournalCorrupted, Kind


def add(ledger: int, entry: int, payload: bytes, lac: int = NO_ENTRY):
    return (Kind.ADD, ledger, entry, lac, payload)


def reopened(journal: Journal) -> Journal:
    journal.close()
    again = Journal(journal.directory, journal.file_size_max)
    again.open()
    return again


def journal_files(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tj"))


def test_entries_fences_and_deletions_survive_a_restart(tmp_path):
    journal = Journal(tmp_path)
    journal.open()
    journal.append([add(1, 0, b"a"), add(1, 1, b"bb", lac=0), add(2, 0, b"c")])
    journal.append([(Kind.FENCE, 1, NO_ENTRY, 1, b""), add(3, 0, b"d"), (Kind.DELETE, 2, NO_ENTRY, NO_ENTRY, b"")])
    journal = reopened(journal)
    assert list(entries_of(journal, 1, 0, 5)) == [(0, b"a"), (1, b"bb")]
    assert journal.ledgers[1].fenced and journal.ledgers[1].last_add_confirmed == 1
    assert journal.ledgers[1].last_entry == 1
    assert 2 not in journal.ledgers and journal.read(2, 0) is None
    assert journal.read(3, 0) == b"d" and not journal.ledgers[3].fenced
    journal.close()


def test_a_torn_tail_is_cut_and_appends_go_on(tmp_path):
    journal = Journal(tmp_path)
    journal.open()
    journal.append([add(1, 0, b"x" * 100)])
    journal.close()
    (name,) = journal_files(tmp_path)
    with open(tmp_path / name, "ab") as file:
        file.write(b"\x00" * 20 + b"half a record")  # a group that never finished
    journal = Journal(tmp_path)
    journal.open()
    assert list(entries_of(journal, 1, 0, 1)) == [(0, b"x" * 100)]
    journal.append([add(1, 1, b"y")])
    journal = reopened(journal)
    assert list(entries_of(journal, 1, 0, 1)) == [(0, b"x" * 100), (1, b"y")]
    journal.close()


def test_damage_in_an_older_file_is_corruption(tmp_path):
    journal = Journal(tmp_path, file_size_max=64)
    journal.open()
    journal.append([add(1, 0, b"x" * 100)])
    journal.append([add(1, 1, b"y" * 100)])  # rolled: a second file
    journal.close()
    first = tmp_path / journal_files(tmp_path)[0]
    data = bytearray(first.read_bytes())
    data[60] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupted):
        Journal(tmp_path, file_size_max=64).open()


def test_files_roll_and_are_collected_once_their_ledgers_are_deleted(tmp_path):
    journal = Journal(tmp_path, file_size_max=200)
    journal.open()
    for entry in range(6):  # one ledger per file, roughly: each group fills a file
        journal.append([add(10 + entry % 2, entry // 2, b"p" * 180)])
    assert len(journal_files(tmp_path)) == 6
    journal.append([(Kind.DELETE, 10, NO_ENTRY, NO_ENTRY, b"")])
    assert journal.collect() == [1, 3, 5]  # ledger 10's files; the tombstone's file is the current one
    journal = reopened(journal)
    assert 10 not in journal.ledgers  # its entries are gone with their files
    assert [entry for entry, _ in entries_of(journal, 11, 0, 5)] == [0, 1, 2]
    journal.close()


def test_a_deletion_record_is_kept_while_older_files_hold_the_ledger(tmp_path):
    journal = Journal(tmp_path, file_size_max=150)
    journal.open()
    journal.append([add(1, 0, b"a" * 60), add(2, 0, b"b" * 60)])  # file 1: ledgers 1 and 2
    journal.append([(Kind.DELETE, 1, NO_ENTRY, NO_ENTRY, b""), add(3, 0, b"c" * 100)])  # file 2
    journal.append([(Kind.DELETE, 3, NO_ENTRY, NO_ENTRY, b""), add(4, 0, b"d" * 100)])  # file 3
    journal.append([add(4, 1, b"e")])  # file 4: now file 2 holds only deleted ledgers
    assert journal.collect() == []  # file 2 holds ledger 1's DELETE, and file 1 still holds ledger 1
    journal = reopened(journal)
    assert 1 not in journal.ledgers and 3 not in journal.ledgers  # not brought back by the restart
    assert journal.read(2, 0) == b"b" * 60
    journal.append([(Kind.DELETE, 2, NO_ENTRY, NO_ENTRY, b"")])
    assert journal.collect() == [1, 2]  # file 1 holds only deleted ledgers; file 2's tombstone is no longer needed
    journal = reopened(journal)
    assert set(journal.ledgers) == {4} and journal.read(4, 1) == b"e"
    journal.close()


def test_files_are_preallocated_and_a_torn_tail_inside_them_is_zeroed(tmp_path):
    """Files hold file_size_max zeros from the start (a group's fdatasync then commits no size); zeros after the
    last record are free space, and a torn group inside that space is zeroed at open, keeping the file's size."""
    journal = Journal(tmp_path, file_size_max=4096)
    journal.open()
    journal.append([add(1, 0, b"x" * 100)])
    journal.close()
    (name,) = journal_files(tmp_path)
    path = tmp_path / name
    assert path.stat().st_size == 4096
    end = 48 + 100
    with open(path, "r+b") as file:
        file.seek(end)
        file.write(b"TJr\x01 half a group")  # never finished, never acknowledged
    journal = Journal(tmp_path, file_size_max=4096)
    journal.open()
    assert path.stat().st_size == 4096 and path.read_bytes()[end:] == bytes(4096 - end)
    journal.append([add(1, 1, b"y")])
    journal = reopened(journal)
    assert list(entries_of(journal, 1, 0, 5)) == [(0, b"x" * 100), (1, b"y")]
    journal.close()


def test_a_prepared_next_file_does_not_turn_a_torn_tail_into_corruption(tmp_path):
    """Once the current file is half full the next one is preallocated; a crash then leaves an empty newest file,
    and a torn group at the end of the one before is still a torn tail, not damage."""
    journal = Journal(tmp_path, file_size_max=1024)
    journal.open()
    journal.append([add(1, 0, b"a" * 600)])
    journal.append([add(1, 1, b"b" * 10)])  # past half: the next file is being prepared
    journal.close()  # waits for the preparation
    first, second = (tmp_path / name for name in journal_files(tmp_path))
    assert second.read_bytes() == bytes(1024)
    end = 2 * 48 + 610
    with open(first, "r+b") as file:
        file.seek(end)
        file.write(b"\x01" * 40)
    journal = Journal(tmp_path, file_size_max=1024)
    journal.open()
    assert list(entries_of(journal, 1, 0, 5)) == [(0, b"a" * 600), (1, b"b" * 10)]
    journal.append([add(1, 2, b"c")])
    journal = reopened(journal)
    assert list(entries_of(journal, 1, 0, 5)) == [(0, b"a" * 600), (1, b"b" * 10), (2, b"c")]
    assert len(journal_files(tmp_path)) == 2
    journal.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.lists(st.integers(0, 9000), min_size=1, max_size=4), min_size=1, max_size=12),
       direct=st.booleans())
def test_groups_of_any_size_read_back_after_a_restart(tmp_path_factory, groups, direct):
    """Groups land whole pages at a time (the last partial page written again with the new data, zero-padded),
    or buffered where O_DIRECT is refused; either way every entry reads back, before and after a restart,
    across file rollovers."""
    directory = tmp_path_factory.mktemp("journal")
    with mock.patch.object(direct_writes, "_open_direct", direct_writes._open_direct if direct else lambda fd: None), \
            mock.patch.object(journal_module, "DIRECT_GROUP_BYTES", 8 * 1024), \
            mock.patch.object(journal_module, "ZERO_STEP", 8 * 1024), \
            mock.patch.object(journal_module, "ZERO_RUNWAY", 12 * 1024):  # small, direct and zeroing groups mix
        write_and_read_back(Journal(directory, file_size_max=32 * 1024), groups)


def write_and_read_back(journal: Journal, groups: list[list[int]]) -> None:
    journal.open()
    expected, entry = {}, 0
    for sizes in groups:
        records = []
        for size in sizes:
            payload = bytes([entry % 251]) * size
            records.append(add(1, entry, payload))
            expected[entry] = payload
            entry += 1
        journal.append(records)
    assert dict(entries_of(journal, 1, 0, entry, max_bytes=1 << 30)) == expected
    journal = reopened(journal)
    assert dict(entries_of(journal, 1, 0, entry, max_bytes=1 << 30)) == expected
    journal.append([add(1, entry, b"after")])
    journal = reopened(journal)
    assert journal.read(1, entry) == b"after" and journal.read(1, 0) == expected[0]
    journal.close()


def test_small_groups_zero_the_space_ahead_so_their_syncs_change_no_extents(tmp_path):
    """Fallocated space is unwritten: writing into it changes the extent map, which an fdatasync must commit.
    While groups are small, the journal zeroes the space just ahead of them, so they land in written blocks."""
    journal = Journal(tmp_path, file_size_max=64 * 1024 * 1024)
    journal.open()
    (name,) = journal_files(tmp_path)
    if unwritten_ranges(tmp_path / name) is None:
        journal.close()
        pytest.skip("the filesystem reports no extents (FIEMAP) here")
    for entry in range(200):
        journal.append([add(1, entry, b"e" * 1000)])
    journal.close()  # waits for the zeroing in flight
    data_end = journal._offset
    unwritten = unwritten_ranges(tmp_path / name)
    assert unwritten, "the rest of the file stays fallocated (not zero-written: that costs bandwidth)"
    first_unwritten = min(start for start, _ in unwritten)
    assert first_unwritten >= data_end + journal_module.ZERO_RUNWAY // 2


def test_a_group_never_writes_where_zeros_are_still_being_written(tmp_path, monkeypatch):
    """A group that reaches into the range a slow zeroing step covers waits for that step: the zeros can never
    land on top of its data."""
    zeroing = threading.Event()
    real_zero = journal_module._zero

    def slow_zero(fd, offset, length):
        zeroing.set()
        time.sleep(0.3)
        real_zero(fd, offset, length)

    monkeypatch.setattr(journal_module, "_zero", slow_zero)
    journal = Journal(tmp_path, file_size_max=8 * 1024 * 1024)
    journal.open()
    journal.append([add(1, 0, b"small")])  # starts zeroing the space just ahead
    assert zeroing.wait(5)
    big = bytes(range(256)) * 4096  # 1 MiB: reaches into the range being zeroed
    journal.append([add(1, 1, big)])
    journal = reopened(journal)
    assert journal.read(1, 1) == big and journal.read(1, 0) == b"small"
    journal.close()


_FIEMAP = 0xC020660B  # FS_IOC_FIEMAP
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_EXTENTS_MAX = 64


def unwritten_ranges(path) -> list[tuple[int, int]] | None:
    """(offset, length) of the file's unwritten (fallocated, never written) extents; None without FIEMAP."""
    header = struct.Struct("=QQLLLL")  # start, length, flags, mapped extents, extent count, reserved
    extent = struct.Struct("=QQQQQLLLL")  # logical, physical, length, 2 reserved, flags, 3 reserved
    buffer = array.array("B", header.pack(0, 2**64 - 1, 1, 0, _EXTENTS_MAX, 0) + bytes(extent.size * _EXTENTS_MAX))
    with open(path, "rb") as file:
        try:
            fcntl.ioctl(file.fileno(), _FIEMAP, buffer)
        except OSError:
            return None
    mapped = header.unpack_from(buffer)[3]
    ranges = []
    for index in range(mapped):
        logical, _, length, _, _, flags, *_ = extent.unpack_from(buffer, header.size + index * extent.size)
        if flags & _FIEMAP_EXTENT_UNWRITTEN:
            ranges.append((logical, length))
    return ranges
