"""What ``open()`` does on the writer thread: fence, then find the tail.

Order matters (it mirrors BookKeeperLog.initialize, §2.10):

1. load the metadata (a log that was never opened starts empty);
2. sort the directory: unlisted log files become spares, interrupted preallocations go;
3. persist ``epoch + 1`` (with a first file for a new log). From here on this instance is the
   owner of record; the directory lock already keeps older owners out;
4. scan the last file from its start: every valid record, then decide between a torn tail (the
   writer resumes at the end of the last good record) and corruption (``LogCorrupted``).

Only the last file is scanned here; earlier files were synced before the log rolled past them
and are validated by ``read()`` when the container replays the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from .batch_writer import BatchWriter
from .errors import LogCorrupted
from .file_operations import FileOperations
from .log_files import LogFilePool
from .log_metadata import LogFileEntry, LogMetadata, load_metadata, store_metadata
from .record_format import EPOCH_MAX
from .scanner import LogFileScanner, corruption_after_tail


@dataclass(frozen=True)
class RecoveredLog:
    writer: BatchWriter
    last_sequence: int  # the last record that survived; the next append gets last_sequence + 1


def recover_log(directory: str, file_operations: FileOperations, pool: LogFilePool,
                batch_bytes_max: int) -> RecoveredLog:
    """Fences older owners and positions a writer after the last valid record.

    Raises:
        LogCorrupted: the metadata or the last file is damaged beyond a torn tail.
        OSError: the directory cannot be read or written.
    """
    metadata = load_metadata(directory, file_operations) or LogMetadata()
    epoch = metadata.epoch + 1
    if epoch > EPOCH_MAX:
        raise LogCorrupted(f"log {directory}: epoch {metadata.epoch} cannot grow any further", location=directory)
    pool.adopt({entry.name for entry in metadata.files})
    metadata = metadata.with_epoch(epoch)
    if not metadata.files:
        first = LogFileEntry(pool.take(), metadata.truncation_sequence + 1, epoch)
        metadata = metadata.with_file(first)
    metadata_inode = store_metadata(directory, metadata, file_operations)

    last = metadata.files[-1]
    path = pool.path(last.name)
    try:
        fd = file_operations.open_for_update(path)
    except FileNotFoundError as error:
        raise LogCorrupted(f"log file {path} named in the metadata is missing", location=path) from error
    try:
        last_sequence, offset = _find_tail(fd, file_operations, path, last, metadata)
        writer = BatchWriter(directory, file_operations, pool, metadata=metadata, metadata_inode=metadata_inode,
                             fd=fd, offset=offset, batch_bytes_max=batch_bytes_max)
    except BaseException:
        file_operations.close(fd)
        raise
    pool.prepare_ahead()
    return RecoveredLog(writer, last_sequence)


def _find_tail(fd: int, file_operations: FileOperations, path: str, last: LogFileEntry,
               metadata: LogMetadata) -> tuple[int, int]:
    """(last valid sequence, offset after it) of the last file; raises LogCorrupted."""
    scanner = LogFileScanner(fd, file_operations, location=path, first_sequence=last.first_sequence,
                             epoch_minimum=last.epoch, epoch_maximum=metadata.epoch)
    scanner.skip_to_end()
    error = corruption_after_tail(scanner)
    if error is not None:
        raise error
    if scanner.last_sequence < metadata.truncation_sequence:
        raise LogCorrupted(f"log {path}: the records end at {scanner.last_sequence}, before the truncation "
                           f"point {metadata.truncation_sequence}", location=path, offset=scanner.offset)
    return scanner.last_sequence, scanner.offset
