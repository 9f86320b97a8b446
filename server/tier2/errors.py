"""Errors of ChunkedSegmentStorage (SLTS).

Operating errors (expected; the segment container maps each to its own reaction) derive from
``StorageError`` and carry the segment name. Transient failures are not wrapped: the chunk
store's ``ChunkStorageUnavailable`` and the metadata store's ``MetadataStoreUnavailable`` and
``VersionMismatch`` propagate unchanged, and the caller retries the whole operation later (after
a VersionMismatch the records involved are dropped from the cache, so the retry sees the
committed state). The metadata store's ``StorageFenced`` becomes ``StorageNotPrimary``.

``StorageCorrupted`` is different: committed metadata or a journal broke an invariant. It is
not an operating error and nothing should catch it but a crash handler.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of SLTS operating errors."""

    def __init__(self, segment: str, message: str = ""):
        super().__init__(message or f"{type(self).__name__}: {segment}")
        self.segment = segment


class SegmentNotFound(StorageError):
    """No such segment (never created, deleted, or merged into another)."""


class SegmentExists(StorageError):
    """``create`` of a segment that exists."""


class BadOffset(StorageError):
    """An offset other than the one required: ``expected`` is the segment's length."""

    def __init__(self, segment: str, expected: int, given: int):
        super().__init__(segment, f"{segment}: offset {given} given, the segment's length is {expected}")
        self.expected = expected
        self.given = given


class StorageNotPrimary(StorageError):
    """A newer owner took the segment (its owner epoch is above ours) or fenced our metadata."""


class SegmentSealed(StorageError):
    """A modification of a sealed segment (a write, or a concat into it)."""


class SegmentNotSealed(StorageError):
    """A concat whose source is not sealed."""


class SegmentTruncated(StorageError):
    """An offset below the segment's start offset (a read, or a concat of a truncated source)."""

    def __init__(self, segment: str, start_offset: int, offset: int = 0):
        super().__init__(segment, f"{segment}: offset {offset} is below the start offset {start_offset}")
        self.start_offset = start_offset
        self.offset = offset


class StorageCorrupted(Exception):
    """Stored metadata, a record or the system journal broke an invariant (a bug or data loss)."""
