"""Tributary: a Pravega-compatible streaming store in Python.

This package is two things:

* the public SDK: ``tributary.connect``, ``tributary.StreamConfiguration`` and every other
  name of :mod:`clients` (re-exported here, loaded on first use so that ``import tributary``
  stays cheap for the command line and the pytest plugin);
* the composition root: the processes assembled from the server and the controller
  (:mod:`tributary.assembly`), run by the ``tributary`` command line (:mod:`tributary.cli`) and
  the embeddable server for tests (:mod:`tributary.testing`), the only places that import both
  the server and the controller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = [  # the SDK's public names (clients.__all__; a test keeps the two lists equal)
    "AlreadyExists", "AttributeConditionFailed", "AuthenticationFailed", "Backoff", "BadKeyVersion", "BatchClient",
    "ByteStreamReader", "ByteStreamWriter", "BytesSerializer", "Checkpoint", "CheckpointFailed", "Client",
    "ClientConfig", "ClientError", "ClosedError", "ConditionalTableUpdateError", "ConflictingOperation",
    "ConnectionFailed", "ControllerTlsMismatch", "ControllerUnavailable", "EventBatch", "EventRead", "EventReader",
    "EventTooLarge",
    "EventWriter", "IllegalArgument", "Insert", "InvalidArgument", "InvalidEvent", "JsonSerializer", "KeyValueTable",
    "KeyValueTableConfiguration", "KeyValueTableIterator", "KeyValueTableNotFound", "LargeEventRead",
    "LargeEventWriter", "NoSuchKey", "NoSuchSegment", "NotFound", "OffsetConflict", "OperationFailed",
    "PermissionDenied", "ProtocolViolation", "Put", "ReaderConfig", "ReaderGroup", "ReaderGroupConfig",
    "ReaderGroupNotFound", "ReinitializationRequired", "Remove", "RequestTimeout", "RetentionPolicy", "RetentionType",
    "ScaleType", "ScalingPolicy", "ScopeNotEmpty", "ScopeNotFound", "Segment", "SegmentError", "SegmentExists",
    "SegmentRange", "SegmentSealed", "SegmentSlice", "SegmentTruncated", "Serializer", "ServerError",
    "StreamConfiguration", "StreamCut", "StreamDataRetention", "StreamNotFound", "StreamNotSealed", "StreamSealed",
    "StringSerializer",
    "Successors", "TableEntry", "TableItems", "TableKey", "TableKeyBadVersion", "TableKeyDoesNotExist",
    "TableModification", "TableNotEmpty", "TimeWindow", "TokenExpired", "TokenRejected", "Transaction",
    "TransactionFailed",
    "TransactionNotFound", "TransactionState", "TransactionalWriter", "TributaryError", "TruncatedData", "Unsupported",
    "Version", "WriteAck", "WriterConfig", "WrongHost", "connect", "errors",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs; at run time names load lazily
    from clients import *  # noqa: F403


def __getattr__(name: str):
    import clients

    if name in __all__:
        return getattr(clients, name)
    raise AttributeError(f"module 'tributary' has no attribute {name!r}")


def __dir__() -> list[str]:
    import clients

    return sorted(set(globals()) | set(clients.__all__))
