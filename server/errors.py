"""Operating errors of the segment store: expected failures, each mapping to one wire reply.

Handlers raise these; the connection layer turns each into its reply (see
``server.replies``). Anything else escaping a handler is a programmer error and
closes that connection.
"""

from __future__ import annotations


class SegmentStoreError(Exception):
    """Base of expected request failures."""

    def __init__(self, segment: str = "", message: str = ""):
        super().__init__(message or f"{type(self).__name__}: {segment}")
        self.segment = segment


class NoSuchSegment(SegmentStoreError):
    """The segment does not exist (or was deleted or merged)."""


class SegmentIsSealed(SegmentStoreError):
    """The segment is sealed."""


class SegmentIsTruncated(SegmentStoreError):
    """An offset lies before the segment's start offset."""

    def __init__(self, segment: str, start_offset: int, offset: int):
        super().__init__(segment, f"{segment}: offset {offset} is below the start offset {start_offset}")
        self.start_offset = start_offset
        self.offset = offset


class BadOffset(SegmentStoreError):
    """An offset condition failed (conditional append, truncate range, table segment offset)."""

    def __init__(self, segment: str, expected_offset: int, actual_offset: int):
        super().__init__(segment, f"{segment}: expected offset {expected_offset}, actual {actual_offset}")
        self.expected_offset = expected_offset
        self.actual_offset = actual_offset


class SegmentAlreadyExists(SegmentStoreError):
    """A segment of that name exists."""


class BadAttributeUpdate(SegmentStoreError):
    """A conditional attribute update failed (e.g. a writer's event number did not match)."""

    def __init__(self, segment: str, attribute_id, expected, actual):
        super().__init__(segment, f"{segment}: attribute {attribute_id} is {actual}, expected {expected}")
        self.attribute_id = attribute_id
        self.expected = expected
        self.actual = actual


class TableKeyDoesNotExist(SegmentStoreError):
    """A conditional table update named an absent key."""


class TableKeyBadVersion(SegmentStoreError):
    """A conditional table update named a key whose version differs."""


class TableSegmentNotEmpty(SegmentStoreError):
    """A delete that required an empty table found keys."""


class WrongHost(SegmentStoreError):
    """The segment's container is not owned by this segment store."""


class OperationUnsupported(SegmentStoreError):
    """The operation is not supported (on this kind of segment)."""

    def __init__(self, segment: str, operation: str):
        super().__init__(segment, f"{operation} is not supported on {segment}")
        self.operation = operation


class IllegalArgument(SegmentStoreError):
    """A request argument is invalid (answered with ErrorMessage, code 0)."""


class TooManySegments(SegmentStoreError):
    """A container holds its limit of segments: a new one is refused (answered with ErrorMessage, code -1)."""

    def __init__(self, segment: str, container_id: int, limit: int):
        super().__init__(segment, f"cannot create {segment}: container {container_id} holds its limit of {limit:,} "
                                  "segments (--max-segments-per-container); delete segments or streams, or run "
                                  "more containers")
        self.limit = limit


class ContainerUnavailable(SegmentStoreError):
    """The container is recovering, stopped or failed; the client should retry (the connection closes)."""

    retriable = True
