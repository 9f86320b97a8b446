"""One test per reader error path of the local log (habit 11, after leveldb's log_test.cc).

Each test writes records through the real log, damages the files the way a crash or a bad disk
would, and checks what the next owner sees: a torn or stale tail is dropped silently (and then
overwritten), damage followed by records of a later batch is LogCorrupted, naming where and how
many bytes.
"""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

from server.tier1 import LogCorrupted
from server.tier1.record_format import HEADER_SIZE, MAGIC, encode_record, parse_header
from tests.support.waiting import eventually

from .helpers import (live_file_paths, metadata, overwrite, read_bytes, recover, record_offsets, small_local_log,
                      write_sequentially)

PAYLOADS = [bytes([65 + i]) * (50 + 10 * i) for i in range(8)]
OFFSETS = record_offsets([len(p) for p in PAYLOADS])
LAST = len(PAYLOADS) - 1


async def assert_tail_dropped(directory, kept: int) -> None:
    """Reopening keeps the first ``kept`` records; the next append reuses the dropped sequence and survives."""
    records, _, _ = await recover(directory)
    assert records == [(i + 1, p) for i, p in enumerate(PAYLOADS[:kept])]
    assert await write_sequentially(directory, [b"replacement"]) == [kept + 1]
    records, _, _ = await recover(directory)
    assert records == [(i + 1, p) for i, p in enumerate(PAYLOADS[:kept])] + [(kept + 1, b"replacement")]


@pytest.fixture
async def written(tmp_path):
    """A log holding PAYLOADS, one batch each, in a single file; returns (directory, that file)."""
    await write_sequentially(tmp_path, PAYLOADS)
    [path] = live_file_paths(tmp_path)
    return tmp_path, path


async def test_torn_tail_zeroed_mid_record_is_dropped(written):
    """The last record's second half never reached the disk (zeros): only that record is dropped."""
    directory, path = written
    middle = OFFSETS[LAST] + HEADER_SIZE + len(PAYLOADS[LAST]) // 2
    overwrite(path, middle, bytes(len(PAYLOADS[LAST])))
    await assert_tail_dropped(directory, kept=LAST)


async def test_file_cut_short_mid_record_is_dropped(written):
    """The file ends inside the last record's payload: only that record is dropped."""
    directory, path = written
    os.truncate(path, OFFSETS[LAST] + HEADER_SIZE + 3)
    await assert_tail_dropped(directory, kept=LAST)


async def test_file_cut_short_mid_header_is_dropped(written):
    """The file ends inside the last record's header: only that record is dropped."""
    directory, path = written
    os.truncate(path, OFFSETS[LAST] + 10)
    await assert_tail_dropped(directory, kept=LAST)


async def test_bad_checksum_in_last_record_is_dropped_as_tail(written):
    """A flipped payload byte in the last record: it is a torn tail, dropped."""
    directory, path = written
    flipped = read_bytes(path, OFFSETS[LAST] + HEADER_SIZE + 5, 1)[0] ^ 0x40
    overwrite(path, OFFSETS[LAST] + HEADER_SIZE + 5, bytes([flipped]))
    await assert_tail_dropped(directory, kept=LAST)


async def test_bad_magic_in_last_record_is_dropped_as_tail(written):
    """The last record's magic (and so its format version) is wrong: dropped."""
    directory, path = written
    overwrite(path, OFFSETS[LAST] + 8, b"XXXX")
    await assert_tail_dropped(directory, kept=LAST)


async def test_length_running_past_end_of_file_is_dropped_as_tail(written):
    """The last record claims a length beyond the end of the file: dropped without reading it."""
    directory, path = written
    overwrite(path, OFFSETS[LAST] + 12, struct.pack("<I", 2**31))
    await assert_tail_dropped(directory, kept=LAST)


async def test_sequence_skip_at_tail_is_dropped(written):
    """A valid record whose sequence skips one (as a stale record would) ends the log."""
    directory, path = written
    overwrite(path, OFFSETS[LAST], encode_record(PAYLOADS[LAST], sequence=LAST + 2, epoch=1))
    await assert_tail_dropped(directory, kept=LAST)


async def test_sequence_skip_in_middle_is_corruption(written):
    """A valid-looking record with a skipped sequence, followed by later batches: LogCorrupted."""
    directory, path = written
    overwrite(path, OFFSETS[3], encode_record(PAYLOADS[3], sequence=99, epoch=1))
    with pytest.raises(LogCorrupted) as raised:
        await recover(directory)
    assert raised.value.offset == OFFSETS[3]
    assert "sequence 99 where 4 was expected" in str(raised.value)


async def test_bad_checksum_in_middle_is_corruption(written):
    """A damaged record followed by records of later batches: open() raises LogCorrupted saying where and how much."""
    directory, path = written
    overwrite(path, OFFSETS[2] + HEADER_SIZE, b"\xff")
    with pytest.raises(LogCorrupted) as raised:
        await recover(directory)
    error = raised.value
    assert (error.location, error.offset, error.byte_count) == (str(path), OFFSETS[2], OFFSETS[3] - OFFSETS[2])
    assert f"offset {OFFSETS[2]}" in str(error) and f"{OFFSETS[3] - OFFSETS[2]} bytes" in str(error)
    assert "checksum mismatch" in str(error)


async def test_failed_open_releases_ownership(written):
    """After open() raised LogCorrupted the directory is not left locked."""
    directory, path = written
    overwrite(path, OFFSETS[2] + HEADER_SIZE, b"\xff")
    for _ in range(2):  # the second attempt must see the same corruption, not LogBusy
        with pytest.raises(LogCorrupted):
            await recover(directory)


async def test_damage_inside_the_last_batch_is_a_torn_tail(tmp_path):
    """Records written in one batch: a bad record followed by valid ones of the *same* batch is what a
    power cut that persisted pages out of order leaves, so the batch is cut there, without an error."""
    log = small_local_log(tmp_path)
    await log.open()
    await log.append(b"before")
    batch = [bytes([i]) * 100 for i in range(10)]
    await asyncio.gather(*(log.append(p) for p in batch))
    await log.close()
    [path] = live_file_paths(tmp_path)
    offsets = record_offsets([len(b"before")] + [100] * 10)
    assert parse_header(read_bytes(path, offsets[5], HEADER_SIZE)).batch_index == 4  # one batch, as intended
    overwrite(path, offsets[5] + HEADER_SIZE, b"\xee")
    records, _, _ = await recover(tmp_path)
    assert records == [(1, b"before")] + [(i + 2, p) for i, p in enumerate(batch[:4])]


async def test_epoch_going_backwards_at_tail_is_stale(tmp_path):
    """A valid record carrying an older epoch than the record before it is an earlier owner's leftover: dropped."""
    await write_sequentially(tmp_path, [b"epoch one"])
    await write_sequentially(tmp_path, [b"epoch two", b"also two"])
    [path] = live_file_paths(tmp_path)
    offsets = record_offsets([9, 9, 8])
    assert parse_header(read_bytes(path, offsets[1], HEADER_SIZE)).epoch == 2
    overwrite(path, offsets[2], encode_record(b"also two", sequence=3, epoch=1))
    records, _, _ = await recover(tmp_path)
    assert records == [(1, b"epoch one"), (2, b"epoch two")]


async def test_bad_record_in_earlier_file_is_corruption_on_read(tmp_path):
    """Damage in a file the log already rolled past: open() succeeds (it scans the last file only), read() raises."""
    payloads = [bytes([i % 256]) * 3000 for i in range(60)]
    await write_sequentially(tmp_path, payloads)
    paths = live_file_paths(tmp_path)
    assert len(paths) >= 3
    overwrite(paths[0], HEADER_SIZE + 3000 + HEADER_SIZE + 7, b"\x00\x01")
    log = small_local_log(tmp_path)
    await log.open()
    seen = []
    with pytest.raises(LogCorrupted) as raised:
        async for address, _ in log.read():
            seen.append(address.sequence)
    await log.close()
    assert seen == [1]
    assert raised.value.location == str(paths[0]) and raised.value.offset == HEADER_SIZE + 3000
    assert raised.value.byte_count == HEADER_SIZE + 3000  # up to the next valid record


async def test_stale_records_of_recycled_file_after_tail_are_not_returned(tmp_path):
    """A recycled file still holds valid records of its earlier lap after the new tail; none is returned."""
    log = small_local_log(tmp_path, spare_files_max=4)
    await log.open()
    first_lap = [await log.append(bytes([i % 256]) * 2000) for i in range(100)]  # a bit over 3 files
    first_lap_files = {path.name for path in live_file_paths(tmp_path)}

    def spare_ready() -> bool:  # (no .tmp alone is true before the preallocation has begun, too)
        names = os.listdir(tmp_path)
        return not any(name.endswith(".tmp") for name in names) and any(
            name.endswith(".tlog") and name not in first_lap_files for name in names)

    await eventually(spare_ready, "the spare file being preallocated in the background")
    files_before = set(os.listdir(tmp_path))
    await log.truncate(first_lap[-1])
    kept = [bytes([200]) * 1500 for _ in range(150)]  # fills the spare, then rolls into recycled files
    kept_addresses = [await log.append(p) for p in kept]
    await log.close()
    assert set(os.listdir(tmp_path)) == files_before, "expected recycled files, not new ones"
    last = live_file_paths(tmp_path)[-1]
    assert last.name in first_lap_files
    first_sequence = metadata(tmp_path).files[-1].first_sequence
    assert _stale_valid_records(last, first_sequence), "the test needs stale records after the tail"
    records, _, _ = await recover(tmp_path)
    assert records == [(a.sequence, p) for a, p in zip(kept_addresses, kept)]


def _stale_valid_records(path, first_sequence: int) -> list[int]:
    """Sequences of intact records in ``path`` that belong to an earlier lap (below first_sequence)."""
    data = path.read_bytes()
    found, index = [], data.find(MAGIC)
    while index >= 0:
        start = index - 8
        if start >= 0 and start + HEADER_SIZE <= len(data):
            header = parse_header(data, start)
            record = data[start:start + HEADER_SIZE + header.length]
            if header.sequence < first_sequence and record == encode_record(
                    record[HEADER_SIZE:], header.sequence, header.epoch, header.batch_index):
                found.append(header.sequence)
        index = data.find(MAGIC, index + 1)
    return found


async def test_missing_live_file_is_corruption(tmp_path):
    """The metadata names a file that is gone: open() raises LogCorrupted naming it."""
    await write_sequentially(tmp_path, PAYLOADS)
    [path] = live_file_paths(tmp_path)
    path.unlink()
    with pytest.raises(LogCorrupted, match="missing"):
        await recover(tmp_path)


async def test_damaged_metadata_is_corruption(tmp_path):
    """A metadata file whose checksum does not match is reported, not guessed around."""
    await write_sequentially(tmp_path, PAYLOADS)
    metadata_path = tmp_path / "METADATA"
    metadata_path.write_bytes(metadata_path.read_bytes().replace(b'"epoch":1', b'"epoch":7'))
    with pytest.raises(LogCorrupted, match="metadata"):
        await recover(tmp_path)
