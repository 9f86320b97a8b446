"""The local log gives disk space back: files freed by truncation beyond the spare limit are deleted,
so the directory shrinks to the live files plus the spares, whatever was written; each truncation that
frees files is logged at info with what it freed."""

from __future__ import annotations

import logging
import os

import pytest

from tests.support.waiting import eventually

from .helpers import TEST_FILE_SIZE, metadata, recover, small_local_log


def log_file_bytes(directory) -> int:
    return sum(os.stat(os.path.join(directory, name)).st_size for name in os.listdir(directory)
               if name.endswith(".tlog"))


@pytest.mark.parametrize("spares", [0, 2])
async def test_truncation_shrinks_the_directory_to_live_files_and_spares(tmp_path, caplog, spares):
    """About 6 files of records, then truncation to the last record: the directory keeps the live file,
    at most ``spares`` freed files and the one prepared ahead of the next rollover; the rest is deleted."""
    log = small_local_log(tmp_path, spare_files_max=spares)
    await log.open()
    addresses = [await log.append(bytes([i]) * 4000) for i in range(90)]
    live_before = len(metadata(tmp_path).files)
    assert live_before >= 5 and log_file_bytes(tmp_path) >= live_before * TEST_FILE_SIZE
    caplog.set_level(logging.INFO, logger="tributary.tier1")
    await log.truncate(addresses[-1])
    await log.close()

    assert len(metadata(tmp_path).files) == 1
    assert log_file_bytes(tmp_path) <= (1 + spares + 1) * TEST_FILE_SIZE
    [line] = [record for record in caplog.records if record.getMessage() == "tier-1 log truncated"]
    assert (line.sequence, line.files_live, line.files_released) == (90, 1, live_before - 1)
    assert live_before - 1 - spares <= line.files_deleted <= live_before - 1
    assert line.bytes_deleted == line.files_deleted * TEST_FILE_SIZE
    assert (await recover(tmp_path))[0] == []


async def test_a_truncation_inside_the_current_file_frees_nothing_and_logs_nothing(tmp_path, caplog):
    log = small_local_log(tmp_path, spare_files_max=0)
    await log.open()
    addresses = [await log.append(b"x" * 1000) for _ in range(10)]  # one file
    # the file prepared ahead of the next rollover, in the background: measured with it (on a loaded machine it
    # was not there yet when measured, and was by the close)
    await eventually(lambda: log_file_bytes(tmp_path) == 2 * TEST_FILE_SIZE, "the file prepared ahead")
    before = log_file_bytes(tmp_path)
    caplog.set_level(logging.INFO, logger="tributary.tier1")
    await log.truncate(addresses[5])
    await log.close()
    assert log_file_bytes(tmp_path) == before
    assert [record for record in caplog.records if record.getMessage() == "tier-1 log truncated"] == []
    records, _, truncation = await recover(tmp_path)
    assert truncation == 6 and [sequence for sequence, _ in records] == [7, 8, 9, 10]
