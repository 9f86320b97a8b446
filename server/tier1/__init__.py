"""Tier-1: the durable data log (design §2) — interface, local fsync'd implementation, fault injection."""

from .api import DEFAULT_MAX_APPEND_SIZE, AppendData, DurableDataLog, LogAddress
from .errors import LogBusy, LogClosed, LogCorrupted, LogError, LogFenced, LogWriteFailed, RecordTooLarge
from .faulty import FaultyDurableDataLog, FaultyFileOperations, SimulatedCrash
from .file_operations import FileOperations
from .local import LocalDurableDataLog

__all__ = [
    "DEFAULT_MAX_APPEND_SIZE",
    "AppendData",
    "DurableDataLog",
    "FaultyDurableDataLog",
    "FaultyFileOperations",
    "FileOperations",
    "LocalDurableDataLog",
    "LogAddress",
    "LogBusy",
    "LogClosed",
    "LogCorrupted",
    "LogError",
    "LogFenced",
    "LogWriteFailed",
    "RecordTooLarge",
    "SimulatedCrash",
]
