"""The read side of a segment container: lookups of live segments, infos, attributes, table lookups and pages,
reads, and the figures the service and the metrics read (backlog, recovery, flush lag, counts).

``ContainerQueries`` is the base of ``container.SegmentContainer``: its methods run on the container's own
state, pipeline and reader, which the container sets up (the attributes declared below), so a read costs no
extra call. It changes nothing but use marks (a use makes a dormant segment live again).
"""

from __future__ import annotations

import uuid
from collections.abc import Coroutine, Iterable
from typing import Any

from wire.constants import MAX_READ_SIZE, NULL_ATTRIBUTE_VALUE
from wire.fields import BytesLike

from .. import errors
from . import attributes as attrs
from . import table as table_format
from .dormancy import Dormancy
from .metadata import SegmentMetadata, SegmentType
from .pipeline import OperationPipeline
from .recovery_progress import RecoveryProgress
from .segment_reader import SegmentReader
from .state import ContainerState
from .views import ContainerStatus, ReadResult, SegmentInfo, TableDelta, TableEntry


class ContainerQueries:
    """Answers about a container's segments, as values (``views.py``) or ``server.errors``."""

    container_id: int
    epoch: int  # the container's owner epoch (its log's)
    dormancy: Dormancy
    _state: ContainerState
    _pipeline: OperationPipeline
    _reader: SegmentReader

    def segment_count(self) -> int:
        """Segments this container holds that count towards its limit (those outside the _system scope)."""
        return self._state.counted_segments

    def dormant_segment_count(self) -> int:
        return len(self._state.dormant)

    def _check_running(self) -> None:
        status = self._pipeline.status
        if status is not ContainerStatus.RUNNING:
            raise errors.ContainerUnavailable("", f"container {self.container_id} is {status.value}")

    def _segment(self, name: str) -> SegmentMetadata:
        """The live segment ``name``; every read comes here, so the running check is one attribute test."""
        if self._pipeline.status is not ContainerStatus.RUNNING:
            self._check_running()
        segment = self._state.by_name.get(name)
        if segment is None:
            if (segment := self._state.get(name)) is None:
                raise errors.NoSuchSegment(name)
            self.dormancy.check()  # woken: the working set grew
        segment.used = True
        return segment

    def _table(self, name: str, operation: str) -> table_format.TableIndex:
        table = self._segment(name).table
        if table is None:
            raise errors.OperationUnsupported(name, operation)
        return table

    def _committed(self, name: str) -> SegmentMetadata | None:
        """The committed state of ``name`` whatever the container's status (for its own storage metadata)."""
        return self._state.get(name)

    def get_info(self, name: str) -> SegmentInfo:
        return SegmentInfo(self._segment(name))

    def get_attribute(self, name: str, attribute_id: uuid.UUID) -> int:
        """The attribute's durable value (a mutation still being logged may change it: ``has_pending``)."""
        return self._segment(name).attributes.get(attribute_id, NULL_ATTRIBUTE_VALUE)

    def deleted_writer(self, name: str, attribute_id: uuid.UUID) -> int | None:
        """The last event number deleted segment ``name`` stored of writer ``attribute_id`` (None: ``name`` is not
        a deleted segment remembered, or the writer never appended to it; state.py says why)."""
        return self._state.deleted_writer(name, attribute_id)

    def has_pending(self, name: str) -> bool:
        """Whether a mutation of ``name`` is decided but not yet durable (or failed)."""
        return self._pipeline.has_pending(name)

    async def settled(self) -> None:
        """Waits until every mutation decided so far is durable (or failed)."""
        await self._pipeline.settled()

    def get_table_info(self, name: str) -> SegmentInfo:
        self._table(name, "getTableSegmentInfo")
        return self.get_info(name)

    def read_table(self, name: str, keys: Iterable[BytesLike]) -> list[TableEntry | None]:
        """The latest entry of each key (None for a key the table does not hold).

        Raises IllegalArgument: a key of another length than a fixed-key-length table's."""
        index = self._table(name, "readTable")
        keys = list(keys)
        for key in keys:
            table_format.check_fixed_length(index.key_length, key)
        return index.lookup(keys)

    def read_table_page(self, name: str, token: BytesLike, max_count: int, max_bytes: int, prefix: BytesLike = b"",
                        from_key: BytesLike = b"", to_key: BytesLike = b"") -> tuple[list[TableEntry], bytes]:
        """Entries after ``token`` in the table's iteration order (only those starting with ``prefix``, and in
        a fixed-key-length table from ``from_key`` to ``to_key``), and the token of the next page."""
        return self._table(name, "readTableEntries").page(token, max_count, max_bytes, prefix, from_key, to_key)

    def table_key_length(self, name: str) -> int:
        """The fixed key length of table segment ``name`` (0: a hash table)."""
        return self._table(name, "getTableSegmentInfo").key_length

    async def read_table_delta(self, name: str, from_position: int, max_count: int, max_bytes: int) -> TableDelta:
        """The table's changes from ``from_position``: the latest entry of each key changed, a page at a time."""
        self._table(name, "readTableEntriesDelta")
        return await self._reader.read_table_delta(name, from_position, max_count, max_bytes)

    def segment_names(self) -> list[str]:
        return self._state.names()

    def replay_backlog(self) -> tuple[int, int]:
        """(bytes, operations) a recovery of this container would replay from its log now."""
        return self._pipeline.logged_since_first_checkpoint(), self._pipeline.operations_since_first_checkpoint()

    def recovery_progress(self) -> RecoveryProgress | None:
        """How far this container's replay has come (None before it started)."""
        return self._pipeline.recovery

    def unflushed_bytes(self) -> int:
        """Bytes of this container's segments that only Tier-1 holds (not yet in Tier-2): its flush lag."""
        return sum(max(0, segment.length - segment.data.storage_length) for segment in self._state.by_id.values())

    def transients_to_expire(self, now_ms: int, idle_ms: int) -> list[str]:
        """Transient segments idle for ``idle_ms``, or created under an earlier owner (epoch) of this container."""
        return [segment.name for segment in self._state.by_id.values()
                if segment.segment_type == SegmentType.TRANSIENT
                and (segment.attributes.get(attrs.CREATION_EPOCH, 0) < self.epoch
                     or now_ms - segment.last_modified >= idle_ms)]

    def read(self, name: str, offset: int, max_length: int = MAX_READ_SIZE,
             wait_timeout: float | None = None, lend_files: bool = False) -> Coroutine[Any, Any, ReadResult]:
        """Reads from ``offset``, long-polling at the tail (SegmentReader.read's coroutine: no extra frame).

        ``lend_files``: Tier-2 bytes may come as a file region to send and release (see ReadResult).
        """
        return self._reader.read(name, offset, max_length, wait_timeout, lend_files)

    async def locate_offset(self, name: str, target: int) -> int:
        """The first event boundary of ``name`` at or after ``target`` (LocateOffset; see ``boundaries.py``).

        Raises NoSuchSegment, or SegmentIsTruncated if truncated meanwhile.
        """
        return await self._reader.locate_offset(name, target)
