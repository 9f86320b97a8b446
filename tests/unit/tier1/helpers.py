"""Shared helpers for the Tier-1 tests: small local logs, reading everything back, finding records on disk."""

from __future__ import annotations

import os
from pathlib import Path

from server.tier1 import DurableDataLog, LocalDurableDataLog, LogAddress
from server.tier1.file_operations import FileOperations
from server.tier1.log_metadata import LogMetadata, load_metadata
from server.tier1.record_format import HEADER_SIZE

# Small enough that a test rolls through several files, big enough for its largest record.
TEST_FILE_SIZE = 64 * 1024
TEST_MAX_APPEND_SIZE = 16 * 1024
TEST_BATCH_BYTES_MAX = 32 * 1024


def small_local_log(directory: Path | str, **overrides) -> LocalDurableDataLog:
    settings = dict(file_size=TEST_FILE_SIZE, max_append_size=TEST_MAX_APPEND_SIZE,
                    batch_bytes_max=TEST_BATCH_BYTES_MAX)
    settings.update(overrides)
    return LocalDurableDataLog(directory, **settings)


async def read_all(log: DurableDataLog, after: LogAddress | None = None) -> list[tuple[int, bytes]]:
    return [(address.sequence, bytes(payload)) async for address, payload in log.read(after)]


async def recover(directory: Path | str, **overrides) -> tuple[list[tuple[int, bytes]], int, int]:
    """Opens a new instance, reads everything, closes. Returns (records, epoch, truncation sequence)."""
    log = small_local_log(directory, **overrides)
    epoch = await log.open()
    try:
        records = await read_all(log)
        truncation = log.truncation_address.sequence if log.truncation_address else 0
        return records, epoch, truncation
    finally:
        await log.close()


async def write_sequentially(directory: Path | str, payloads: list[bytes], **overrides) -> list[int]:
    """Appends each payload as its own batch (one in flight); returns the sequences."""
    log = small_local_log(directory, **overrides)
    await log.open()
    try:
        return [(await log.append(payload)).sequence for payload in payloads]
    finally:
        await log.close()


def metadata(directory: Path | str) -> LogMetadata:
    return load_metadata(os.fspath(directory), FileOperations())


def live_file_paths(directory: Path | str) -> list[Path]:
    return [Path(directory) / entry.name for entry in metadata(directory).files]


def record_offsets(lengths: list[int], start: int = 0) -> list[int]:
    """File offsets of records with these payload lengths written back to back from ``start``."""
    offsets = []
    for length in lengths:
        offsets.append(start)
        start += HEADER_SIZE + length
    return offsets


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def read_bytes(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as file:
        file.seek(offset)
        return file.read(size)


def assert_prefix(recovered: list[bytes], appended: list[bytes], acknowledged: int) -> None:
    """The recovery promise: exactly a prefix of what was appended, holding every acknowledged record."""
    assert len(recovered) >= acknowledged, f"lost acknowledged records: {len(recovered)} < {acknowledged}"
    assert recovered == appended[:len(recovered)], "recovered records are not a prefix of the appended ones"
