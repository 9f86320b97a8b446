"""Making a directory entry durable: the one fsync of a directory every file-creating component shares."""

from __future__ import annotations

import os


def fsync_directory(directory: str | bytes) -> None:
    """fsyncs ``directory`` (a created, renamed or deleted entry in it survives a crash)."""
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
