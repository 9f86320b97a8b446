"""Committed container state, changed only by applying logged operations.

``apply`` is the one path by which state changes: it runs when a frame becomes
durable and, identically, when recovery replays the log. So the state after a
restart is, by construction, the state that was acknowledged before it.

Segments whose metadata nobody used for a while are *dormant*: kept as their packed snapshot record
(``dormant``, ~300 bytes with the indexes, against ~1 KB for a live ``SegmentMetadata`` with its read
index), made live again (``get``, ``segment``) by whatever touches them. Dormancy is a representation, not a
state change: nothing is logged, a snapshot holds dormant records verbatim, and a restore leaves every stream
segment dormant, so a restarted container's memory and start time follow the segments used, not all of them.
Only a segment with nothing to lose may go dormant (``make_dormant``: a stream segment whose bytes are all in
Tier-2, with no reader parked on it); the container decides when (``dormancy.py``).

An ``observer`` (the storage writer) is told of every applied change that Tier-2
must follow, with its sequence number, in the same order. ``boundaries`` hears of
appends, merges, truncations and removals too, to keep its hints of where events
start (``boundaries.py``, for LocateOffset).

A deleted segment leaves its writers' last event numbers behind (``deleted_writers``, in snapshots since version
3), for as long as writer attributes are kept: a writer that lost its acks, was away while the segment was
sealed and deleted (a truncation), and sets up again learns what the segment stored, and sends only the rest to
the successors. Told only "no such segment", it sends them all: stored twice (found by the simulation, seed 196).
"""

from __future__ import annotations

import struct
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from wire.constants import NULL_ATTRIBUTE_VALUE
from wire.naming import INTERNAL_SCOPE

from .. import metrics
from . import operations as ops
from .attributes import SCALE_POLICY_TYPE
from .boundaries import SegmentBoundaries
from .metadata import SegmentMetadata, SegmentType
from .operations import ATTRIBUTE_COUNT, ATTRIBUTE_COUNT_V0, decode_attributes, encode_attributes
from .read_index import Redirect

if TYPE_CHECKING:
    from .cache import CacheManager

_MERGED_SOURCES_REMEMBERED = 10_000
DELETED_WRITERS_REMEMBERED = 100_000  # writer attributes of deleted segments kept at most (oldest deletions go)
SYSTEM_PREFIX = INTERNAL_SCOPE + "/"  # the container's and the controller's segments: not counted by the limit
# Snapshot: version:u8 next_segment_id:i64 last_sequence:i64 count:u32, then (version 2) writers:u32 and as many
# _WRITER records (the writer attributes' last use, oldest first), then (version 3) deleted segments' writers:
# their size in bytes:u32 and per deleted segment _DELETED (name length, when deleted, writers), the name and as
# many _DELETED_WRITER records, oldest deletion first; then per segment _SEGMENT_FIXED, the name, and its
# attributes as operations encode them (version 0: a u16 attribute count; 1 and later: u32).
SNAPSHOT_VERSION = 3
_SNAPSHOT_HEADER = struct.Struct(">BqqI")
_WRITER_COUNT = struct.Struct(">I")
_WRITER = struct.Struct(">q16sq")  # segment id, attribute id, last use (ms)
_DELETED_SIZE = struct.Struct(">I")
_DELETED = struct.Struct(">HqI")  # name length, deleted at (ms), writers
_DELETED_WRITER = struct.Struct(">16sq")  # attribute id, last event number
_SEGMENT_FIXED = struct.Struct(">qBqqBqH")


class DeletedWriters(NamedTuple):
    """The writer attributes a deleted segment had: attribute id (as an int) -> last event number."""

    deleted_ms: int
    writers: dict[int, int]


class InconsistentState(Exception):
    """A logged operation contradicts the state (corruption, or a bug): the container must stop."""


class StateObserver:
    """What the storage writer hears from ``apply`` (every method gets the operation's sequence number)."""

    def appended(self, segment: SegmentMetadata, offset: int, length: int, sequence: int) -> None: ...

    def sealed(self, segment: SegmentMetadata, sequence: int) -> None: ...

    def merged(self, target: SegmentMetadata, source: SegmentMetadata, sequence: int) -> None: ...

    def truncated(self, segment: SegmentMetadata, offset: int, sequence: int) -> None: ...

    def deleted(self, segment: SegmentMetadata, sequence: int) -> None: ...


class ContainerState:
    def __init__(self, cache: CacheManager | None = None, observer: StateObserver | None = None):
        self.cache = cache
        self.observer = observer or StateObserver()
        self.boundaries = SegmentBoundaries()  # known event boundaries of stream segments (in memory only)
        self.by_name: dict[str, SegmentMetadata] = {}
        self.by_id: dict[int, SegmentMetadata] = {}
        self.next_segment_id = 1
        self.last_sequence = 0
        # Sources merged recently -> their target, so that a retried merge answers success.
        self.merged_sources: OrderedDict[str, str] = OrderedDict()
        # Ids of table segments appended to since table maintenance last looked (its compaction candidates).
        self.tables_changed: set[int] = set()
        # Writer attributes (extended attributes set by appends: a writer id -> its last event number), by
        # (segment id, attribute id) -> when an append last set it (ms, the logged time), least recently used
        # first, for their expiry (``SegmentContainer.expire_writers``). Advisory: entries of deleted segments
        # linger until the expiry walks past them, and a later checkpoint met in a replay is not compared on it.
        self.writers: dict[tuple[int, int], int] = {}  # keys: (segment id, attribute id as an int)
        # Deleted segments' writer attributes (module docstring), oldest deletion first; advisory too.
        self.deleted_writers: OrderedDict[str, DeletedWriters] = OrderedDict()
        self.deleted_writer_count = 0  # writer attributes in deleted_writers
        self.counted_segments = 0  # segments outside the _system scope (what the segment limit counts)
        # Dormant segments (not in by_name/by_id): name -> the segment's snapshot record; id -> name.
        self.dormant: dict[str, bytes] = {}
        self.dormant_ids: dict[int, str] = {}

    # ------------------------------------------------------------------ lookups (dormant segments wake)

    def get(self, name: str) -> SegmentMetadata | None:
        """The segment ``name`` (made live if dormant), or None."""
        segment = self.by_name.get(name)
        if segment is None and name in self.dormant:
            segment = self._wake(name)
        return segment

    def get_by_id(self, segment_id: int) -> SegmentMetadata | None:
        """The segment of ``segment_id`` (made live if dormant), or None."""
        segment = self.by_id.get(segment_id)
        if segment is None:
            name = self.dormant_ids.get(segment_id)
            if name is not None:
                segment = self._wake(name)
        return segment

    def segment(self, segment_id: int) -> SegmentMetadata:
        segment = self.by_id.get(segment_id)
        if segment is None and (segment := self.get_by_id(segment_id)) is None:
            raise InconsistentState(f"operation on unknown segment id {segment_id}")
        return segment

    def exists(self, name: str) -> bool:
        return name in self.by_name or name in self.dormant

    def names(self) -> list[str]:
        """Every segment's name, live and dormant."""
        return [*self.by_name, *self.dormant]

    @property
    def segment_count(self) -> int:
        return len(self.by_id) + len(self.dormant)

    def _wake(self, name: str) -> SegmentMetadata:
        record = self.dormant.pop(name)
        segment_id, segment_type, start, length, sealed, last_modified, _, attributes = _unpack_record(record)
        del self.dormant_ids[segment_id]
        segment = SegmentMetadata(segment_id, name, segment_type, attributes, last_modified, start, length,
                                  cache=self.cache)
        segment.sealed = sealed
        self.by_name[name] = segment
        self.by_id[segment_id] = segment
        metrics.SEGMENTS_WOKEN.inc()
        return segment

    def make_dormant(self, segment: SegmentMetadata) -> bool:
        """Keeps only ``segment``'s packed record, if it has nothing to lose: a live stream segment whose bytes
        are all in Tier-2 (none only cached), no merge redirect, no reader parked. Its cached blocks are
        dropped, and its event boundary hints. Returns whether it went dormant.

        The caller knows the rest: nothing decided on it is in flight, the storage writer has no work on it."""
        data = segment.data
        if (segment.segment_type is not SegmentType.STREAM or segment.waiters or data.storage_length < data.length
                or data.redirects or self.by_id.get(segment.segment_id) is not segment):
            return False
        data.release()
        self.boundaries.removed(segment)
        del self.by_name[segment.name]
        del self.by_id[segment.segment_id]
        self.dormant[segment.name] = _record(segment)
        self.dormant_ids[segment.segment_id] = segment.name
        return True

    # ------------------------------------------------------------------ apply

    def apply(self, operation, timestamp_ms: int, sequence: int) -> SegmentMetadata | None:
        """Applies one decided operation; returns the segment whose readers should be woken."""
        self.last_sequence = sequence
        kind = type(operation)
        if kind is ops.Append:
            segment = self.segment(operation.segment_id)
            if operation.offset != segment.length:
                raise InconsistentState(f"append at {operation.offset} to {segment!r}")
            segment.data.append(operation.data)
            self.boundaries.appended(segment, operation.offset, operation.data)
            if segment.table is not None and not segment.table_incomplete:
                segment.table.index_batch(operation.data, operation.offset)
                self.tables_changed.add(segment.segment_id)
            if operation.attributes:
                self._set_attributes(segment, operation.attributes, timestamp_ms)
            segment.last_modified = timestamp_ms
            self.observer.appended(segment, operation.offset, len(operation.data), sequence)
            return segment
        if kind is ops.CreateSegment:
            self._create(operation, timestamp_ms)
            return None
        if kind is ops.Seal:
            segment = self.segment(operation.segment_id)
            segment.sealed = True
            segment.last_modified = timestamp_ms
            self.observer.sealed(segment, sequence)
            return segment
        if kind is ops.Merge:
            return self._merge(operation, timestamp_ms, sequence)
        if kind is ops.UpdateAttributes:
            segment = self.segment(operation.segment_id)
            self._set_attributes(segment, operation.attributes)
            return None
        if kind is ops.Truncate:
            segment = self.segment(operation.segment_id)
            segment.data.truncate(operation.offset)
            self.boundaries.truncated(segment, operation.offset)
            segment.last_modified = timestamp_ms
            self.observer.truncated(segment, operation.offset, sequence)
            return segment
        if kind is ops.Delete:
            segment = self.segment(operation.segment_id)
            self._remember_writers(segment, timestamp_ms)
            self._remove(segment)
            self.observer.deleted(segment, sequence)
            return segment
        if kind is ops.Checkpoint or kind is ops.CheckpointPart:
            return None
        raise InconsistentState(f"unknown operation {operation!r}")

    def _create(self, operation: ops.CreateSegment, timestamp_ms: int) -> None:
        if (self.exists(operation.name) or operation.segment_id in self.by_id
                or operation.segment_id in self.dormant_ids):
            raise InconsistentState(f"create of existing segment {operation.name!r}")
        segment = SegmentMetadata(operation.segment_id, operation.name, SegmentType(operation.segment_type),
                                  operation.attributes, timestamp_ms, cache=self.cache)
        self.by_name[segment.name] = segment
        self.by_id[segment.segment_id] = segment
        self.counted_segments += not segment.name.startswith(SYSTEM_PREFIX)
        self.next_segment_id = max(self.next_segment_id, segment.segment_id + 1)
        self.merged_sources.pop(segment.name, None)
        self._forget_deleted(segment.name)

    def _merge(self, operation: ops.Merge, timestamp_ms: int, sequence: int) -> SegmentMetadata:
        target = self.segment(operation.target_id)
        source = self.segment(operation.source_id)
        if operation.target_offset != target.length or operation.source_length != source.length:
            raise InconsistentState(f"merge of {source!r} into {target!r} disagrees with the log")
        if operation.header:  # the header is appended data of the target, flushed to Tier-2 before the concat
            header_at = target.length
            target.data.append(operation.header)
            self.observer.appended(target, header_at, len(operation.header), sequence)
        merged_at = target.length
        self.boundaries.merged(target, source, operation.target_offset, bool(operation.header))
        target.data.append_index(source.data)
        if target.length > merged_at:  # until Tier-2 concatenates, uncached source bytes are read from the source
            target.data.redirects.append(Redirect(merged_at, target.length, source.name))
        self._set_attributes(target, operation.attributes)
        target.last_modified = timestamp_ms
        self._remove(source)
        self.merged_sources[source.name] = target.name
        while len(self.merged_sources) > _MERGED_SOURCES_REMEMBERED:
            self.merged_sources.popitem(last=False)
        wake_readers(source)
        self.observer.merged(target, source, sequence)
        return target

    def _set_attributes(self, segment: SegmentMetadata, values: dict[uuid.UUID, int],
                        appended_at: int | None = None) -> None:
        """Sets attribute values; NULL_ATTRIBUTE_VALUE removes an attribute (and its writer entry). Set by an
        append (``appended_at``: its logged time), extended attributes are writers': their last use is noted.

        On the append path: UUID hashing is Python code, so ``writers`` is keyed by the ids' ints."""
        segment.attributes.update(values)
        writers, segment_id = self.writers, segment.segment_id
        for attribute_id, value in values.items():
            number = attribute_id.int
            if value == NULL_ATTRIBUTE_VALUE:
                del segment.attributes[attribute_id]
                writers.pop((segment_id, number), None)
            elif appended_at is not None and not _CORE_LOW <= number < _CORE_HIGH:
                key = (segment_id, number)
                writers.pop(key, None)  # re-inserted at the end: the dict stays in order of last use
                writers[key] = appended_at

    # ------------------------------------------------------------------ deleted segments' writers

    def deleted_writer(self, name: str, writer_id: uuid.UUID) -> int | None:
        """The last event number deleted segment ``name`` stored of ``writer_id`` (None: not remembered)."""
        deleted = self.deleted_writers.get(name)
        return None if deleted is None else deleted.writers.get(writer_id.int)

    def expire_deleted_writers(self, cutoff_ms: int) -> int:
        """Forgets the writers of segments deleted at or before ``cutoff_ms``; returns how many."""
        deleted_writers, expired = self.deleted_writers, 0
        while deleted_writers:
            name, deleted = next(iter(deleted_writers.items()))
            if deleted.deleted_ms > cutoff_ms:
                break
            expired += self._forget_deleted(name)
        return expired

    def _remember_writers(self, segment: SegmentMetadata, deleted_ms: int) -> None:
        segment_id, writers = segment.segment_id, self.writers
        kept = {attribute_id.int: value for attribute_id, value in segment.attributes.items()
                if (segment_id, attribute_id.int) in writers}
        if kept:  # (none is kept under the name: its create forgot them)
            self.deleted_writers[segment.name] = DeletedWriters(deleted_ms, kept)
            self.deleted_writer_count += len(kept)
            while self.deleted_writer_count > DELETED_WRITERS_REMEMBERED:
                self._forget_deleted(next(iter(self.deleted_writers)))

    def _forget_deleted(self, name: str) -> int:
        deleted = self.deleted_writers.pop(name, None)
        if deleted is None:
            return 0
        self.deleted_writer_count -= len(deleted.writers)
        return len(deleted.writers)

    def _remove(self, segment: SegmentMetadata) -> None:
        del self.by_name[segment.name]
        del self.by_id[segment.segment_id]
        self.counted_segments -= not segment.name.startswith(SYSTEM_PREFIX)
        self.tables_changed.discard(segment.segment_id)
        self.boundaries.removed(segment)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        """The metadata (not the data) of every segment, for a Checkpoint operation (dormant ones verbatim)."""
        by_id, dormant_ids = self.by_id, self.dormant_ids
        writers = [_WRITER.pack(segment_id, attribute_id.to_bytes(16, "big"), last_used)  # (a removed attribute's
                   for (segment_id, attribute_id), last_used in self.writers.items()  # entry goes with it)
                   if segment_id in by_id or segment_id in dormant_ids]
        deleted = self._deleted_records()
        parts = [_SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, self.next_segment_id, self.last_sequence,
                                       self.segment_count),
                 _WRITER_COUNT.pack(len(writers)), *writers, _DELETED_SIZE.pack(len(deleted)), deleted]
        parts.extend(_record(segment) for segment in by_id.values())
        parts.extend(self.dormant.values())
        return b"".join(parts)

    def _deleted_records(self) -> bytes:
        parts = []
        for name, deleted in self.deleted_writers.items():
            encoded = name.encode("utf-8", "surrogatepass")
            parts.append(_DELETED.pack(len(encoded), deleted.deleted_ms, len(deleted.writers)))
            parts.append(encoded)
            parts.extend(_DELETED_WRITER.pack(attribute_id.to_bytes(16, "big"), value)
                         for attribute_id, value in deleted.writers.items())
        return b"".join(parts)

    def restore(self, snapshot: bytes) -> bool:
        """Loads the metadata of a snapshot into an empty state (the first checkpoint of a replay); returns
        whether any segment holds bytes. Stream segments stay dormant (version 2 snapshots) until used.

        Segment bytes are not in snapshots: the log is truncated only before a checkpoint
        whose segments' bytes are all in Tier-2, so a restored segment's bytes are in Tier-2
        and the appends that follow in the log. Table segments restored with bytes are
        marked ``table_incomplete``: their key index is rebuilt once Tier-2 is up.
        """
        view = memoryview(snapshot)
        version, self.next_segment_id, self.last_sequence, count = _SNAPSHOT_HEADER.unpack_from(view, 0)
        holds_bytes = False
        if version < 2:  # older records differ (u16 counts, NULL values kept): every segment made live
            for segment_id, segment_type, start, length, sealed, name, attributes in _snapshot_records(snapshot):
                self._restore_live(segment_id, segment_type, start, length, sealed, 0, name, attributes)
                holds_bytes = holds_bytes or length != start
        else:
            dormant, dormant_ids, stream = self.dormant, self.dormant_ids, int(SegmentType.STREAM)
            for segment_id, segment_type, start, length, name, record in _record_spans(view):
                holds_bytes = holds_bytes or length != start
                if segment_type == stream:
                    dormant[name] = bytes(record)
                    dormant_ids[segment_id] = name
                else:
                    self._restore_live(*_unpack_record(record))
        self.counted_segments = sum(not name.startswith(SYSTEM_PREFIX) for name in self.names())
        self.writers = dict(_snapshot_writers(snapshot))
        for name, deleted in _snapshot_deleted_writers(view):
            self.deleted_writers[name] = deleted
            self.deleted_writer_count += len(deleted.writers)
        return holds_bytes

    def _restore_live(self, segment_id: int, segment_type: SegmentType, start: int, length: int, sealed: bool,
                      last_modified: int, name: str, attributes: dict[uuid.UUID, int]) -> None:
        segment = SegmentMetadata(segment_id, name, segment_type, attributes, last_modified, start, length,
                                  cache=self.cache)
        segment.sealed = sealed
        segment.table_incomplete = segment.table is not None and length > start
        self.by_name[name] = segment
        self.by_id[segment_id] = segment

    def matches_snapshot(self, snapshot: bytes) -> bool:
        """Whether this state holds exactly the segments of ``snapshot`` (a later checkpoint met in a replay):
        one pass over the snapshot, nothing re-encoded (the writers' last use is advisory: not compared)."""
        _, next_segment_id, _, count = _SNAPSHOT_HEADER.unpack_from(snapshot, 0)
        if count != self.segment_count:
            return False
        view = memoryview(snapshot)
        expected: Iterator[tuple[int, str, memoryview | None, tuple | None]]
        if view[0] < 2:  # older layouts: decoded
            expected = ((segment_id, name, None, (name, segment_type, start, length, sealed, attributes))
                        for segment_id, segment_type, start, length, sealed, name, attributes
                        in _snapshot_records(snapshot))
        else:
            expected = ((segment_id, name, record, None) for segment_id, _, _, _, name, record in _record_spans(view))
        by_id, dormant, dormant_ids = self.by_id, self.dormant, self.dormant_ids
        for segment_id, name, record, fields in expected:
            dormant_here = dormant_ids.get(segment_id) == name
            if dormant_here and record is not None and dormant[name] == record:
                continue  # a dormant segment, unchanged: the same bytes (the usual case, and a fast one)
            segment = by_id.get(segment_id)
            if segment is not None:
                found = _fields(segment)
            elif dormant_here:
                found = _record_fields(dormant[name])
            else:
                return False
            if found != (fields if record is None else _record_fields(record)):
                return False
        return True

    def policy_candidates(self):
        """(name, attributes) of every unsealed stream segment that may have a scaling policy (for the load
        meter's start): dormant records are decoded only where they hold the policy attribute's id."""
        for segment in self.by_id.values():
            if segment.segment_type is SegmentType.STREAM and not segment.sealed:
                yield segment.name, segment.attributes
        for name, record in self.dormant.items():
            at = record.rfind(_SCALE_POLICY_TYPE_BYTES)  # (the attributes come last; a false match only costs)
            if at >= 0 and record[at + 16:at + 24] not in _FIXED_POLICY_VALUES:
                _, segment_type, _, _, sealed, _, _, attributes = _unpack_record(record)
                if segment_type is SegmentType.STREAM and not sealed:
                    yield name, attributes

    @staticmethod
    def describe_snapshot(snapshot: bytes) -> dict:
        """Decodes a snapshot to {name: (id, type, start, length, sealed, attributes)} (for checks)."""
        return {name: (segment_id, segment_type, start, length, sealed, attributes)
                for segment_id, segment_type, start, length, sealed, name, attributes in _snapshot_records(snapshot)}

    def describe(self) -> dict:
        """This state in the form of :meth:`describe_snapshot`."""
        return self.describe_snapshot(self.snapshot())


_CORE_LOW, _CORE_HIGH = 0x8000000000000000 << 64, 0x8000000000000001 << 64  # core attribute ids (is_core, inlined)
_SEGMENT_TYPES = tuple(SegmentType)  # by value: an IntEnum call per segment is slow at a million segments
_SCALE_POLICY_TYPE_BYTES = SCALE_POLICY_TYPE.bytes
_FIXED_POLICY_VALUES = (b"\0" * 8, NULL_ATTRIBUTE_VALUE.to_bytes(8, "big", signed=True))  # no rate policy


def _record(segment: SegmentMetadata) -> bytes:
    """A segment's snapshot record: its fixed fields, its name, its attributes."""
    name = segment.name.encode("utf-8", "surrogatepass")
    return b"".join((_SEGMENT_FIXED.pack(segment.segment_id, segment.segment_type, segment.start_offset,
                                         segment.length, segment.sealed, segment.last_modified, len(name)),
                     name, encode_attributes(segment.attributes)))


def _unpack_record(record: bytes | memoryview) -> tuple[int, SegmentType, int, int, bool, int, str,
                                                       dict[uuid.UUID, int]]:
    """(segment_id, type, start, length, sealed, last_modified, name, attributes) of a record (version 1 or 2)."""
    view = memoryview(record)
    segment_id, segment_type, start, length, sealed, last_modified, name_length = _SEGMENT_FIXED.unpack_from(view, 0)
    name_at = _SEGMENT_FIXED.size
    name = str(view[name_at:name_at + name_length], "utf-8", "surrogatepass")
    attributes, _ = decode_attributes(view, name_at + name_length)
    return segment_id, _SEGMENT_TYPES[segment_type], start, length, bool(sealed), last_modified, name, attributes


def _fields(segment: SegmentMetadata) -> tuple:
    """What a replay compares of a live segment: (name, type, start, length, sealed, attributes)."""
    return (segment.name, segment.segment_type, segment.start_offset, segment.length, segment.sealed,
            segment.attributes)


def _record_fields(record: bytes | memoryview) -> tuple:
    """``_fields`` of a segment's record."""
    _, segment_type, start, length, sealed, _, name, attributes = _unpack_record(record)
    return name, segment_type, start, length, sealed, attributes


def _record_spans(view: memoryview):
    """Yields (segment_id, type as an int, start, length, name, record view) of every segment of a version 2
    snapshot, without decoding attributes.

    Raises InconsistentState: a record that runs past the snapshot's end."""
    _, _, _, count = _SNAPSHOT_HEADER.unpack_from(view, 0)
    fixed, fixed_size, count_size = _SEGMENT_FIXED.unpack_from, _SEGMENT_FIXED.size, ATTRIBUTE_COUNT.size
    count_of, size = ATTRIBUTE_COUNT.unpack_from, len(view)
    position = _segments_position(view)
    for _ in range(count):
        segment_id, segment_type, start, length, _, _, name_length = fixed(view, position)
        name_at = position + fixed_size
        (attribute_count,) = count_of(view, name_at + name_length)
        end = name_at + name_length + count_size + 24 * attribute_count
        if end > size:
            raise InconsistentState("a snapshot record runs past the end of its snapshot")
        yield (segment_id, segment_type, start, length, str(view[name_at:name_at + name_length], "utf-8",
                                                             "surrogatepass"), view[position:end])
        position = end


def _snapshot_records(snapshot: bytes):
    """Yields (segment_id, SegmentType, start, length, sealed, name, attributes) of every segment of a snapshot.

    Raises InconsistentState: an unknown snapshot version."""
    view = memoryview(snapshot)
    version, _, _, count = _SNAPSHOT_HEADER.unpack_from(view, 0)
    count_format = ATTRIBUTE_COUNT if version else ATTRIBUTE_COUNT_V0
    fixed, fixed_size, types = _SEGMENT_FIXED.unpack_from, _SEGMENT_FIXED.size, _SEGMENT_TYPES
    kept_nulls = version < 2  # older versions kept removed attributes as NULL
    position = _segments_position(view)
    for _ in range(count):
        segment_id, segment_type, start, length, sealed, _, name_length = fixed(view, position)
        position += fixed_size
        name = str(view[position:position + name_length], "utf-8", "surrogatepass")
        position += name_length
        attributes, position = decode_attributes(view, position, count_format)
        if kept_nulls and NULL_ATTRIBUTE_VALUE in attributes.values():
            attributes = {key: value for key, value in attributes.items() if value != NULL_ATTRIBUTE_VALUE}
        yield segment_id, types[segment_type], start, length, bool(sealed), name, attributes


def _writer_records(view: memoryview) -> tuple[int, int]:
    """(where a snapshot's writer records start, how many: none before version 2).

    Raises InconsistentState: an unknown snapshot version."""
    version = view[0]
    if version > SNAPSHOT_VERSION:
        raise InconsistentState(f"unknown snapshot version {version}")
    if version < 2:
        return _SNAPSHOT_HEADER.size, 0
    (count,) = _WRITER_COUNT.unpack_from(view, _SNAPSHOT_HEADER.size)
    return _SNAPSHOT_HEADER.size + _WRITER_COUNT.size, count


def _deleted_section(view: memoryview) -> tuple[int, int]:
    """(where a snapshot's deleted segments' writers start, their size in bytes: none before version 3)."""
    start, count = _writer_records(view)
    end = start + count * _WRITER.size
    if view[0] < 3:
        return end, 0
    (size,) = _DELETED_SIZE.unpack_from(view, end)
    return end + _DELETED_SIZE.size, size


def _segments_position(view: memoryview) -> int:
    """Where a snapshot's segment records start (after its writer records and deleted segments' writers)."""
    start, size = _deleted_section(view)
    return start + size


def _snapshot_deleted_writers(view: memoryview):
    """Yields (name, DeletedWriters) of a snapshot's deleted segments, oldest deletion first.

    Raises InconsistentState: a record that runs past its section."""
    position, size = _deleted_section(view)
    end = position + size
    while position < end:
        name_length, deleted_ms, count = _DELETED.unpack_from(view, position)
        position += _DELETED.size
        name = str(view[position:position + name_length], "utf-8", "surrogatepass")
        position += name_length
        writers_end = position + count * _DELETED_WRITER.size
        if writers_end > end:
            raise InconsistentState("a deleted segment's record runs past the end of its snapshot section")
        writers = {int.from_bytes(attribute_id, "big"): value
                   for attribute_id, value in _DELETED_WRITER.iter_unpack(view[position:writers_end])}
        position = writers_end
        yield name, DeletedWriters(deleted_ms, writers)


def _snapshot_writers(snapshot: bytes):
    """Yields ((segment id, attribute id as an int), last use ms) of a snapshot's writer attributes, least recently
    used first."""
    view = memoryview(snapshot)
    start, count = _writer_records(view)
    for segment_id, attribute_id, last_used in _WRITER.iter_unpack(view[start:start + count * _WRITER.size]):
        yield (segment_id, int.from_bytes(attribute_id, "big")), last_used


def wake_readers(segment: SegmentMetadata) -> None:
    """Completes the futures of reads parked on ``segment`` (they re-check the state)."""
    waiters, segment.waiters = segment.waiters, []
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)

