"""The controller's metadata store, laid out per PDP-32 (see LAYOUT.md).

Layers, dependencies pointing down:

    MetadataStore / ScopeStore / StreamStore      scopes, streams, typed records
    scale, queries, transactions, retention,      operations on one stream (functions over a
    readers, workflows                            StreamStore), each a bounded number of store calls
    key_space, history, stream_cuts               pure algorithms over records
    records, codec                                typed records and their versioned binary formats
    VersionedKeyValueStore                        the one storage interface:
        TableSegmentKeyValueStore                   - segment-store table segments (production)
        CountingKeyValueStore                       - call-counting proxy (scalability checks)
        (the in-memory one for tests: tests/support/doubles/key_value_store.py)

Time is always an argument: nothing here reads a clock.
"""

from . import queries, readers, records, retention, scale, transactions, workflows
from .counting import CountingKeyValueStore
from .errors import (
    AlreadyExists,
    CorruptRecord,
    DataVersionMismatch,
    IllegalStateTransition,
    NotEmpty,
    NotFound,
    RecordTooLarge,
    ScaleConflict,
    ScaleInputInvalid,
    StoreError,
    WriteConflict,
)
from .key_value import ABSENT, ANY, Page, Versioned, VersionedKeyValueStore, Write
from .layout import ChunkSizes, StreamTables
from .metadata_store import MetadataStore
from .scopes import ScopeStore
from .states import State, TransactionStatus
from .stream_store import StreamStore
from .table_segment import TableSegmentKeyValueStore

__all__ = [
    "queries", "readers", "records", "retention", "scale", "transactions", "workflows",
    "CountingKeyValueStore", "TableSegmentKeyValueStore", "VersionedKeyValueStore",
    "ABSENT", "ANY", "Page", "Versioned", "Write",
    "AlreadyExists", "CorruptRecord", "DataVersionMismatch", "IllegalStateTransition", "NotEmpty", "NotFound",
    "RecordTooLarge", "ScaleConflict", "ScaleInputInvalid", "StoreError", "WriteConflict",
    "ChunkSizes", "StreamTables", "MetadataStore", "ScopeStore", "StreamStore", "State", "TransactionStatus",
]
