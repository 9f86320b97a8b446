"""PDP-32 metadata records: typed values with a compact, versioned binary encoding each.

Every record has ``encode() -> bytes`` and ``decode(bytes)``; formats are documented at the top
of each module and in controller/store/LAYOUT.md.
"""

from .cold import ColdSegmentsRecord
from .cuts import EMPTY_TRUNCATION, RetentionSet, StreamCutRecord, TruncationRecord
from .epochs import (
    EMPTY_EPOCH_TRANSITION,
    EpochRecord,
    EpochTransitionRecord,
    HistoryChunk,
    HistoryIndexLeaf,
    HistoryIndexRoot,
    HistoryTimeSeriesRecord,
    NewSegment,
    SealedEpochRecord,
    SealedSizesShard,
    SegmentRecord,
)
from .readers import (
    ReaderGroupConfigRecord,
    SubscriberRecord,
    SubscriberSet,
    WriterMarkRecord,
)
from .streams import (
    CreationRecord,
    DeletedStreamRecord,
    ScopeRecord,
    StateRecord,
    StreamConfigurationRecord,
)
from .transactions import EMPTY_COMMITTING_TRANSACTIONS, CommittingTransactionsRecord, TransactionRecord
from .workflows import PendingWorkflowRecord, WorkflowIntentRecord, WorkflowKind

__all__ = [
    "ColdSegmentsRecord",
    "EMPTY_TRUNCATION", "RetentionSet", "StreamCutRecord", "TruncationRecord",
    "EMPTY_EPOCH_TRANSITION", "EpochRecord", "EpochTransitionRecord", "HistoryChunk", "HistoryIndexLeaf",
    "HistoryIndexRoot", "HistoryTimeSeriesRecord", "NewSegment", "SealedEpochRecord", "SealedSizesShard",
    "SegmentRecord",
    "ReaderGroupConfigRecord", "SubscriberRecord", "SubscriberSet", "WriterMarkRecord",
    "CreationRecord", "DeletedStreamRecord", "ScopeRecord", "StateRecord", "StreamConfigurationRecord",
    "EMPTY_COMMITTING_TRANSACTIONS", "CommittingTransactionsRecord", "TransactionRecord",
    "PendingWorkflowRecord", "WorkflowIntentRecord", "WorkflowKind",
]
