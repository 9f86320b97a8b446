"""The local log's metadata file: epoch, truncation point and the ordered list of live log files.

It plays the part of the ZooKeeper node of the replicated design (§2.10): the file list is the
ledger list, and every change replaces the whole file atomically (temp file, fsync, rename, fsync
directory), so a crash leaves either the old or the new version, never a mix.

Format: one JSON object, written with sorted keys and no spaces:

    {"checksum": <xxh3_64 of the canonical JSON of every other field>,
     "epoch": <u32>, "files": [{"epoch": e, "first_sequence": s, "name": "log-....tlog"}, ...],
     "format_version": 1, "truncation_sequence": <u64, 0 = nothing truncated>}

``files[i].first_sequence`` is the sequence of the first record the file will hold, and
``files[i].epoch`` the epoch of the owner that added it: the lowest epoch a record in it may carry.
A file's records end just before ``files[i + 1].first_sequence``; the last file is the one being
written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

import xxhash

from .errors import LogCorrupted
from .file_operations import FileOperations

METADATA_FILE_NAME = "METADATA"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class LogFileEntry:
    name: str
    first_sequence: int
    epoch: int


@dataclass(frozen=True)
class LogMetadata:
    epoch: int = 0
    truncation_sequence: int = 0
    files: tuple[LogFileEntry, ...] = ()

    def with_epoch(self, epoch: int) -> LogMetadata:
        return replace(self, epoch=epoch)

    def with_file(self, entry: LogFileEntry) -> LogMetadata:
        return replace(self, files=self.files + (entry,))

    def truncated(self, sequence: int) -> tuple[LogMetadata, tuple[LogFileEntry, ...]]:
        """The metadata after truncating up to ``sequence``, and the files it no longer needs.

        A file is dropped when every record it can hold is <= ``sequence``; the last file (the
        one being written) is always kept.
        """
        sequence = max(sequence, self.truncation_sequence)
        kept, dropped = [], []
        for index, entry in enumerate(self.files):
            is_last = index == len(self.files) - 1
            if not is_last and self.files[index + 1].first_sequence - 1 <= sequence:
                dropped.append(entry)
            else:
                kept.append(entry)
        return replace(self, truncation_sequence=sequence, files=tuple(kept)), tuple(dropped)


def encode_metadata(metadata: LogMetadata) -> bytes:
    body = {
        "epoch": metadata.epoch,
        "files": [{"epoch": entry.epoch, "first_sequence": entry.first_sequence, "name": entry.name}
                  for entry in metadata.files],
        "format_version": FORMAT_VERSION,
        "truncation_sequence": metadata.truncation_sequence,
    }
    body["checksum"] = _checksum(body)
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_metadata(data: bytes, location: str) -> LogMetadata:
    """Parses a metadata file. Raises LogCorrupted if it is damaged or of an unknown version."""
    try:
        body = json.loads(data)
        checksum = body.pop("checksum")
        if checksum != _checksum(body):
            raise ValueError("checksum mismatch")
        if body["format_version"] != FORMAT_VERSION:
            raise ValueError(f"unknown format version {body['format_version']}")
        files = tuple(LogFileEntry(str(item["name"]), int(item["first_sequence"]), int(item["epoch"]))
                      for item in body["files"])
        return LogMetadata(int(body["epoch"]), int(body["truncation_sequence"]), files)
    except (ValueError, KeyError, TypeError) as error:
        raise LogCorrupted(f"log metadata {location} is unreadable: {error}", location=location,
                           offset=0, byte_count=len(data)) from error


def load_metadata(directory: str, file_operations: FileOperations) -> LogMetadata | None:
    """The metadata stored in ``directory``, or None for a log that was never opened."""
    path = os.path.join(directory, METADATA_FILE_NAME)
    data = file_operations.read_file(path)
    return None if data is None else decode_metadata(data, path)


def store_metadata(directory: str, metadata: LogMetadata, file_operations: FileOperations) -> int:
    """Atomically replaces the metadata file. Returns its new inode number."""
    return file_operations.replace_file(os.path.join(directory, METADATA_FILE_NAME), encode_metadata(metadata))


def _checksum(body: dict) -> int:
    return xxhash.xxh3_64_intdigest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
