"""Every command of the wire protocol (v15) plus Tributary's extension, by concern."""

from .admin import FlushToStorage, ListStorageChunks, StorageChunksListed, StorageFlushed
from .appends import (
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateTransientSegment,
    DataAppended,
    SetupAppend,
)
from .composites import ChunkInfo, ConditionalAttributeUpdate, MergedSource, TableEntry, TableKey
from .connection import Event, Hello, KeepAlive, Padding, PartialEvent
from .errors import (
    AuthTokenCheckFailed,
    ErrorMessage,
    InvalidEventNumber,
    NoSuchSegment,
    OperationUnsupported,
    SegmentAlreadyExists,
    SegmentIsSealed,
    SegmentIsTruncated,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableSegmentNotEmpty,
    WrongHost,
)
from .extensions import MergeSegmentsWithHeader
from .segments import (
    CreateSegment,
    DeleteSegment,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    LocateOffset,
    MergeSegments,
    MergeSegmentsBatch,
    OffsetLocated,
    ReadSegment,
    SealSegment,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentPolicyUpdated,
    SegmentRead,
    SegmentSealed,
    SegmentsBatchMerged,
    SegmentsMerged,
    SegmentTruncated,
    StreamSegmentInfo,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
)
from .tables import (
    CreateTableSegment,
    DeleteTableSegment,
    GetTableSegmentInfo,
    MergeTableSegments,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    SealTableSegment,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentInfo,
    UpdateTableEntries,
)

__all__ = [name for name in dir() if name[0].isupper()]
