"""Validation of mutations against the pending state: the container's one serialization point.

Theory of operation. A mutation is decided synchronously (no await) against
the *pending* view of the segments it touches: the committed state plus the
effects of every operation accepted but not yet durable. Deciding fills in
every value the operation depends on (the offset of an append, the versions of
table entries, final attribute values), records the effect in the overlay, and
returns the logged operation. When the operation's frame becomes durable the
committed state applies it, and the overlay is dropped once no accepted
operation on that segment is still in flight.

Every check raises an operating error before anything is changed, so a failed
request has no effect. Checks run in Java's order: existence, seal, attribute
conditions, then offset conditions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from wire.constants import NO_VERSION, NOT_EXISTS, NULL_ATTRIBUTE_VALUE

from .. import errors
from . import attributes as attrs
from . import operations as ops
from . import table
from .metadata import SegmentMetadata, SegmentType
from .state import SYSTEM_PREFIX, ContainerState

if TYPE_CHECKING:
    from wire.fields import BytesLike


class PendingSegment:
    """The pending view of one segment."""

    __slots__ = ("segment_id", "name", "segment_type", "base", "length", "start_offset", "sealed", "deleted",
                 "attributes", "table_keys", "inflight")

    def __init__(self, segment_id: int, name: str, segment_type: SegmentType, base: SegmentMetadata | None,
                 length: int = 0, start_offset: int = 0, sealed: bool = False):
        self.segment_id = segment_id
        self.name = name
        self.segment_type = segment_type
        self.base = base
        self.length = length
        self.start_offset = start_offset
        self.sealed = sealed
        self.deleted = False
        self.attributes: dict[uuid.UUID, int] = {}  # changed attributes only
        self.table_keys: dict[bytes, int | None] = {}  # changed table keys only: key -> version, or None when removed
        self.inflight = 0

    @classmethod
    def of(cls, segment: SegmentMetadata) -> PendingSegment:
        return cls(segment.segment_id, segment.name, segment.segment_type, segment, segment.length,
                   segment.start_offset, segment.sealed)

    def attribute(self, attribute_id: uuid.UUID) -> int:
        if attribute_id in self.attributes:
            return self.attributes[attribute_id]
        return self.base.attributes.get(attribute_id, NULL_ATTRIBUTE_VALUE) if self.base else NULL_ATTRIBUTE_VALUE

    def table_version(self, key: bytes) -> int | None:
        if key in self.table_keys:
            return self.table_keys[key]
        if self.base is None or self.base.table is None:
            return None
        found = self.base.table.get(key)
        return None if found is None else found[0]


class CompactionStep(NamedTuple):
    """What one step of a table compaction did (``PendingState.table_compaction_step``)."""

    position: int  # where in the compaction's keys the next step goes on
    size: int  # bytes re-written
    done: bool  # the step was the truncation: the compaction is over


class Decision(NamedTuple):
    """A decided operation, the pending segments it touched, and the result for the caller."""

    operation: ops.Operation
    touched: tuple[PendingSegment, ...]
    result: object = None


class PendingState:
    def __init__(self, state: ContainerState, max_operation_bytes: int, container_id: int = 0,
                 segment_limit: int | None = None):
        self._state = state
        self._max_operation_bytes = max_operation_bytes
        self._container_id = container_id
        self.segment_limit = segment_limit  # segments the container may hold (its own system segments aside)
        self._creating = 0  # creations decided, not yet committed
        self._overlays: dict[str, PendingSegment] = {}
        self._next_segment_id = state.next_segment_id

    # ------------------------------------------------------------------ bookkeeping

    def _view(self, name: str) -> PendingSegment | None:
        overlay = self._overlays.get(name)
        if overlay is not None:
            return None if overlay.deleted else overlay
        segment = self._state.by_name.get(name)  # (the append path: a dormant one is the rare miss)
        if segment is None and (segment := self._state.get(name)) is None:
            return None
        return PendingSegment.of(segment)

    def _existing(self, name: str) -> PendingSegment:
        view = self._view(name)
        if view is None:
            raise errors.NoSuchSegment(name)
        return view

    def _touch(self, *views: PendingSegment) -> tuple[PendingSegment, ...]:
        for view in views:
            if self._overlays.get(view.name) is not view:
                self._overlays[view.name] = view
            view.inflight += 1
        return views

    def release(self, decision: Decision) -> None:
        """Called once the decision's operation is committed (or the container failed)."""
        operation = decision.operation
        if type(operation) is ops.CreateSegment and not operation.name.startswith(SYSTEM_PREFIX):
            self._creating -= 1
        for view in decision.touched:
            view.inflight -= 1
            if view.inflight == 0 and self._overlays.get(view.name) is view:
                del self._overlays[view.name]

    @property
    def overlay_count(self) -> int:
        return len(self._overlays)

    def has_overlay(self, name: str) -> bool:
        """Whether an operation decided on ``name`` is not committed yet."""
        return name in self._overlays

    # ------------------------------------------------------------------ segment lifecycle

    def create(self, name: str, segment_type: SegmentType, attributes: dict[uuid.UUID, int]) -> Decision:
        """Decides a creation; at the segment limit one outside the _system scope is refused (TooManySegments)."""
        if self._view(name) is not None:
            raise errors.SegmentAlreadyExists(name)
        if not name.startswith(SYSTEM_PREFIX):
            if self.segment_limit is not None and self._state.counted_segments + self._creating >= self.segment_limit:
                raise errors.TooManySegments(name, self._container_id, self.segment_limit)
            self._creating += 1
        segment_id = max(self._next_segment_id, self._state.next_segment_id)
        self._next_segment_id = segment_id + 1
        view = PendingSegment(segment_id, name, segment_type, None)
        view.attributes.update(attributes)
        return Decision(ops.CreateSegment(segment_id, segment_type, name, dict(attributes)), self._touch(view))

    def seal(self, name: str) -> Decision:
        view = self._existing(name)
        if view.sealed:
            raise errors.SegmentIsSealed(name)
        view.sealed = True
        return Decision(ops.Seal(view.segment_id, view.length), self._touch(view), view.length)

    def truncate(self, name: str, offset: int) -> Decision:
        view = self._existing(name)
        if not view.start_offset <= offset <= view.length:
            raise errors.SegmentIsTruncated(name, view.start_offset, offset)
        view.start_offset = offset
        return Decision(ops.Truncate(view.segment_id, offset), self._touch(view))

    def delete(self, name: str) -> Decision:
        view = self._existing(name)
        view.deleted = True
        return Decision(ops.Delete(view.segment_id), self._touch(view))

    # ------------------------------------------------------------------ data and attributes

    def append(self, name: str, data: BytesLike, updates: Iterable[attrs.AttributeUpdate] = (),
               expected_offset: int | None = None) -> Decision:
        """Decides an append; the result is the offset at which ``data`` lands."""
        return self._append(self._existing(name), data, updates, expected_offset)

    def _append(self, view: PendingSegment, data: BytesLike, updates: Iterable[attrs.AttributeUpdate] = (),
                expected_offset: int | None = None) -> Decision:
        name = view.name
        if len(data) > self._max_operation_bytes:
            raise errors.IllegalArgument(name, f"an append of {len(data)} bytes exceeds the limit of "
                                               f"{self._max_operation_bytes}")
        # The conditions on attributes first: a writer whose event numbers conflict with what the segment holds
        # (a zombie, or a writer resending an append that is in fact stored) must set up again and learn where it
        # is; told SegmentIsSealed instead, it would write its events to the successor, a second time.
        decided = attrs.decide(name, updates, view.attribute)
        if view.sealed:
            raise errors.SegmentIsSealed(name)
        if expected_offset is not None and expected_offset != view.length:
            raise errors.BadOffset(name, expected_offset, view.length)
        offset = view.length
        view.length += len(data)
        view.attributes.update(decided)
        return Decision(ops.Append(view.segment_id, offset, data, decided), self._touch(view), offset)

    def update_attributes(self, name: str, updates: Iterable[attrs.AttributeUpdate]) -> Decision:
        view = self._existing(name)
        if view.sealed:
            raise errors.SegmentIsSealed(name)
        decided = attrs.decide(name, updates, view.attribute)
        view.attributes.update(decided)
        return Decision(ops.UpdateAttributes(view.segment_id, decided), self._touch(view))

    def expire_attributes(self, name: str, expected: dict[uuid.UUID, int]) -> Decision:
        """Decides the removal of attributes still holding their ``expected`` values (sealed segments too): the
        expiry of idle writers' attributes, which must not undo a change decided meanwhile (that one is kept).
        The result is how many are removed.

        Raises BadAttributeUpdate if every one of them changed (nothing to remove)."""
        view = self._existing(name)
        removed = {attribute_id: NULL_ATTRIBUTE_VALUE for attribute_id, value in expected.items()
                   if view.attribute(attribute_id) == value}
        if not removed:
            raise errors.BadAttributeUpdate(name, next(iter(expected)), "an unchanged value", "a new one")
        view.attributes.update(removed)
        return Decision(ops.UpdateAttributes(view.segment_id, removed), self._touch(view), len(removed))

    def merge(self, target_name: str, source_name: str, updates: Iterable[attrs.AttributeUpdate] = (),
              header: BytesLike = b"") -> Decision:
        """Decides a merge (sealing the source); the result is the target's length after it."""
        source = self._view(source_name)
        target = self._view(target_name)
        if source is None or target is None:
            raise errors.NoSuchSegment(source_name)
        if target.sealed:
            raise errors.SegmentIsSealed(source_name)
        if source.start_offset > 0:
            raise errors.SegmentIsTruncated(source_name, source.start_offset, 0)
        if source.segment_id == target.segment_id:
            raise errors.IllegalArgument(source_name, "a segment cannot be merged into itself")
        if len(header) > self._max_operation_bytes:
            raise errors.IllegalArgument(target_name, f"a merge header of {len(header)} bytes is too large")
        decided = attrs.decide(target_name, updates, target.attribute)
        operation = ops.Merge(target.segment_id, source.segment_id, target.length, source.length, header, decided)
        target.length += len(header) + source.length
        target.attributes.update(decided)
        source.sealed = source.deleted = True
        return Decision(operation, self._touch(target, source), target.length)

    # ------------------------------------------------------------------ table segments

    def _table(self, name: str) -> PendingSegment:
        view = self._existing(name)
        if view.segment_type != SegmentType.TABLE:
            raise errors.OperationUnsupported(name, "updateTableEntries")
        return view

    def table_update(self, name: str, entries: Sequence[table.TableUpdate], table_offset: int) -> Decision:
        """Decides an update batch of (key, version, value); the result is the new versions.

        A value of None removes its key in the same batch (its version in the result is None):
        the container's own storage metadata commits updates and removals atomically this way.
        """
        for key, _, value in entries:
            table.check_key(key, value)
        view = self._table(name)
        key_length = max(0, view.attribute(attrs.TABLE_KEY_LENGTH))
        for key, _, _ in entries:
            table.check_fixed_length(key_length, key)
        self._check_versions(view, [(key, version) for key, version, _ in entries])
        parts: list[BytesLike] = []
        versions: list[int | None] = []
        offset = self._check_append(view, table_offset)
        for key, _, value in entries:
            if value is None:
                versions.append(None)
                parts += table.serialize_removal(key)
                offset += table.removal_size(key)
            else:
                versions.append(offset)
                parts += table.serialize_update(key, value)
                offset += table.update_size(key, value)
        decision = self._append(view, b"".join(parts))
        for (key, _, _), version in zip(entries, versions, strict=True):
            view.table_keys[bytes(key)] = version
        return decision._replace(result=versions)

    def table_compaction_step(self, name: str, keys: Sequence[bytes], start: int, upto: int) -> Decision:
        """Decides the next step of a compaction that truncates the table at ``upto`` (its committed length
        when it began; ``keys``: its committed keys then). From ``keys[start:]``, as many as fit in one
        operation: each committed live entry whose record lies below ``upto`` and that has no change in
        flight is re-written at the end with its version explicit (so versions survive). Once no key is
        left, the step is the truncation at ``upto``. The result is a ``CompactionStep``.

        Why nothing below ``upto`` is then needed: a version below ``upto`` means a record below it (a
        record's version is its offset, or for a re-written record an older one), except for a key this
        compaction re-wrote already, which comes once in ``keys``; a change in flight, and every record
        committed since the compaction began, lie above ``upto``; and a key that was not live then and is
        now was written since.
        """
        view = self._table(name)
        committed = view.base
        if committed is None or committed.table is None:  # created in flight, not committed yet: nothing to re-write
            raise errors.OperationUnsupported(name, "compactTable")
        parts: list[BytesLike] = []
        size, position = 0, start
        while position < len(keys):
            key = keys[position]
            found = committed.table.get(key)
            if found is not None and found[0] < upto and key not in view.table_keys:
                version, value = found
                record_size = table.update_size(key, value)
                if size + record_size > self._max_operation_bytes:
                    if not parts:
                        raise errors.IllegalArgument(name, f"a table entry of {record_size} bytes does not fit "
                                                           f"one operation of {self._max_operation_bytes}")
                    break
                parts += table.serialize_update(key, value, version)
                size += record_size
            position += 1
        if not parts:
            return self.truncate(name, upto)._replace(result=CompactionStep(position, 0, True))
        return self._append(view, b"".join(parts))._replace(result=CompactionStep(position, size, False))

    def table_remove(self, name: str, keys: Iterable[table.TableRemoval], table_offset: int) -> Decision:
        """Decides a removal batch of (key, version) (absent keys too, as Java does)."""
        return self.table_update(name, [(key, version, None) for key, version in keys], table_offset)

    def _check_versions(self, view: PendingSegment, keys: Iterable[table.TableRemoval]) -> None:
        bad_version = False
        for key, version in keys:
            if version == NO_VERSION:
                continue
            current = view.table_version(bytes(key))
            if current is None:
                if version == NOT_EXISTS:
                    continue
                if version >= 0:
                    raise errors.TableKeyDoesNotExist(view.name)
                bad_version = True
            elif current != version:
                bad_version = True
        if bad_version:
            raise errors.TableKeyBadVersion(view.name)

    @staticmethod
    def _check_append(view: PendingSegment, table_offset: int) -> int:
        if view.sealed:
            raise errors.SegmentIsSealed(view.name)
        if table_offset != -1 and table_offset != view.length:
            raise errors.BadOffset(view.name, table_offset, view.length)
        return view.length
