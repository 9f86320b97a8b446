"""Segment containers: metadata, operation log, read index, table segments, recovery.

The package's public surface is what this module exports; the rest (pending
state, segment metadata, table index and record format, the pipeline's frames)
is private to it, and ``server/*.py`` imports only from here.
"""

from .attributes import (
                         ACCUMULATE,
                         EVENT_COUNT,
                         REPLACE,
                         REPLACE_IF_EQUALS,
                         ROLLOVER_SIZE,
                         SCALE_POLICY_RATE,
                         SCALE_POLICY_TYPE,
                         TABLE_KEY_LENGTH,
                         AttributeUpdate,
)
from .cache import CacheManager
from .container import SegmentContainer
from .load_meter import LoadSettings
from .metadata import SegmentType
from .replay_bound import ReplayBound
from .storage_writer import StorageWriterConfig
from .table import MAX_KEY_LENGTH as MAX_TABLE_KEY_LENGTH
from .tier2_link import Tier2Settings
from .views import ContainerStatus, ReadResult, SegmentInfo, TableDelta, TableEntry
from .writer_attributes import WriterClaim

__all__ = ["ACCUMULATE", "EVENT_COUNT", "MAX_TABLE_KEY_LENGTH", "REPLACE", "REPLACE_IF_EQUALS", "ROLLOVER_SIZE",
           "SCALE_POLICY_RATE", "SCALE_POLICY_TYPE", "TABLE_KEY_LENGTH", "AttributeUpdate", "CacheManager",
           "ContainerStatus", "LoadSettings", "ReadResult", "ReplayBound", "SegmentContainer", "SegmentInfo",
           "SegmentType", "StorageWriterConfig", "TableDelta", "TableEntry", "Tier2Settings", "WriterClaim"]
