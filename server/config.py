"""Segment store configuration (defaults are the embedded standalone's)."""

from __future__ import annotations

import dataclasses
import pathlib

DEFAULT_PORT = 12345
MIN_LOG_FILE_SIZE = 16 * 1024 * 1024  # a Tier-1 log file holds at least one largest record (8 MiB + 64 KiB)


@dataclasses.dataclass
class SegmentStoreConfig:
    data_dir: pathlib.Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    container_count: int = 4
    append_bytes_outstanding_max: int = 64 * 1024 * 1024  # per connection, before reading pauses
    write_buffer_high: int = 8 * 1024 * 1024  # per connection unsent output, before reading pauses
    tail_read_timeout: float = 60.0  # a read parked at the tail longer than this closes its connection
    transient_idle_seconds: float = 600.0  # unmerged transient segments idle this long are deleted
    checkpoint_every_operations: int = 50_000
    log_file_size: int = 64 * 1024 * 1024

    def __post_init__(self):
        self.data_dir = pathlib.Path(self.data_dir)
        if not 1 <= self.container_count <= 4096:
            raise ValueError("container_count must be in [1, 4096]")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be in [0, 65535]")
        if self.log_file_size < MIN_LOG_FILE_SIZE:
            raise ValueError(f"log_file_size must be at least {MIN_LOG_FILE_SIZE} (one largest record)")
