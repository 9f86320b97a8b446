"""Tier-1: the durable data log (design §2) — interface, local fsync'd and in-memory implementations (fault
injection for tests is in tests/support/faults/tier1.py)."""

from .api import DEFAULT_MAX_APPEND_SIZE, AppendData, DurableDataLog, LogAddress
from .errors import LogBusy, LogClosed, LogCorrupted, LogError, LogFenced, LogWriteFailed, RecordTooLarge
from .file_operations import FileOperations
from .local import LocalDurableDataLog
from .memory import MEMORY_LOGS, InMemoryDurableDataLog, MemoryLogs

__all__ = [
    "DEFAULT_MAX_APPEND_SIZE",
    "AppendData",
    "DurableDataLog",
    "FileOperations",
    "InMemoryDurableDataLog",
    "LocalDurableDataLog",
    "LogAddress",
    "LogBusy",
    "LogClosed",
    "LogCorrupted",
    "LogError",
    "LogFenced",
    "LogWriteFailed",
    "MEMORY_LOGS",
    "MemoryLogs",
    "RecordTooLarge",
]
