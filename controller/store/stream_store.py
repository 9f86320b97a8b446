"""One stream's metadata: typed record access, creation, configuration, state and deletion.

The scale, query, transaction, retention, reader and workflow modules are functions over a
``StreamStore``; this class owns only what every one of them needs (where the records live and
how they are read and written) and the stream's own lifecycle records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, overload

from controller_api.model import StreamConfiguration

from . import layout
from .codec import Record
from .errors import AlreadyExists, IllegalStateTransition, NotFound
from .history import append_to_chunk, index_epoch
from .key_space import initial_epoch
from .key_value import ABSENT, Versioned, VersionedKeyValueStore, Write
from .records import (
    EMPTY_COMMITTING_TRANSACTIONS,
    EMPTY_EPOCH_TRANSITION,
    EMPTY_TRUNCATION,
    CreationRecord,
    EpochRecord,
    HistoryIndexRoot,
    HistoryTimeSeriesRecord,
    RetentionSet,
    StateRecord,
    StreamConfigurationRecord,
    SubscriberSet,
)
from .states import DELETABLE_STATES, State, state_transition_allowed

RecordType = TypeVar("RecordType", bound=Record)
First = TypeVar("First", bound=Record)
Second = TypeVar("Second", bound=Record)
Third = TypeVar("Third", bound=Record)


def decode_found(found: Versioned | None, record_type: type[RecordType]) -> tuple[RecordType, int] | None:
    """A stored value decoded as ``record_type`` with its version, or None if the key was absent."""
    return None if found is None else (record_type.decode(found.value), found.version)


class StreamStore:
    """Handle on one stream's records. Cheap to make; holds no state beyond names."""

    def __init__(self, kv: VersionedKeyValueStore, scope: str, stream: str,
                 sizes: layout.ChunkSizes = layout.DEFAULT_CHUNK_SIZES):
        self.kv = kv
        self.scope = scope
        self.name = stream
        self.sizes = sizes
        self.tables = layout.StreamTables(scope, stream)

    def __repr__(self) -> str:
        return f"StreamStore({self.scope}/{self.name})"

    # ------------------------------------------------------------------ typed record access

    async def read(self, key: str, record_type: type[RecordType], table: str | None = None) -> tuple[RecordType, int]:
        """The record under ``key`` (of the metadata table by default) and its version. Raises NotFound."""
        found = await self.kv.get(table or self.tables.metadata, key)
        return record_type.decode(found.value), found.version

    async def read_many(self, requests: Sequence[tuple[str, type[RecordType]]]) -> list[tuple[RecordType, int] | None]:
        """Several metadata records in one store call; None where a key is absent.

        ``find_records`` and ``read_records`` do the same for records of different types.
        """
        found = await self.kv.get_many(self.tables.metadata, [key for key, _ in requests])
        return [decode_found(value, record_type) for value, (_, record_type) in zip(found, requests, strict=True)]

    @overload
    async def find_records(self, first: tuple[str, type[First]], /) -> tuple[tuple[First, int] | None]: ...

    @overload
    async def find_records(self, first: tuple[str, type[First]], second: tuple[str, type[Second]], /
                           ) -> tuple[tuple[First, int] | None, tuple[Second, int] | None]: ...

    @overload
    async def find_records(self, first: tuple[str, type[First]], second: tuple[str, type[Second]],
                           third: tuple[str, type[Third]], /
                           ) -> tuple[tuple[First, int] | None, tuple[Second, int] | None,
                                      tuple[Third, int] | None]: ...

    async def find_records(self, *requests: tuple[str, type[Record]]) -> tuple[tuple[Record, int] | None, ...]:
        """Metadata records of (key, type) ``requests`` in one store call, each with its version; None
        where a key is absent. Raises NotFound if the stream's metadata table does not exist."""
        return tuple(await self.read_many(requests))

    @overload
    async def read_records(self, first: tuple[str, type[First]], /) -> tuple[tuple[First, int]]: ...

    @overload
    async def read_records(self, first: tuple[str, type[First]], second: tuple[str, type[Second]], /
                           ) -> tuple[tuple[First, int], tuple[Second, int]]: ...

    @overload
    async def read_records(self, first: tuple[str, type[First]], second: tuple[str, type[Second]],
                           third: tuple[str, type[Third]], /
                           ) -> tuple[tuple[First, int], tuple[Second, int], tuple[Third, int]]: ...

    async def read_records(self, *requests: tuple[str, type[Record]]) -> tuple[tuple[Record, int], ...]:
        """Like ``find_records``, for records every stream has: raises NotFound if one is absent (as ``read``)."""
        found = await self.read_many(requests)
        for value, (key, _) in zip(found, requests, strict=True):
            if value is None:
                raise NotFound(f"no key {key!r} in {self.tables.metadata!r}", self.tables.metadata, key)
        return tuple(value for value in found if value is not None)

    async def write(self, writes: Sequence[Write]) -> list[int]:
        """One atomic batch on the metadata table (see ``VersionedKeyValueStore.write_batch``)."""
        return await self.kv.write_batch(self.tables.metadata, writes)

    # ------------------------------------------------------------------ creation

    async def create(self, configuration: StreamConfiguration, creation_time: int,
                     starting_segment_number: int = 0) -> bool:
        """Creates the stream's tables and initial records (state CREATING), all records in one batch.

        Returns True if the records now exist with ``creation_time`` (this call or an earlier
        attempt with the same time wrote them), False if a stream created at another time exists.
        """
        for table in self.tables.all:
            await self.kv.create_table(table)
        try:
            await self.write(self._initial_records(configuration, creation_time, starting_segment_number))
            return True
        except AlreadyExists:
            existing, _ = await self.read(layout.CREATION, CreationRecord)
            return existing.creation_time == creation_time

    def _initial_records(self, configuration: StreamConfiguration, creation_time: int,
                         starting_segment_number: int) -> list[Write]:
        epoch = initial_epoch(configuration.scaling.min_num_segments, starting_segment_number, creation_time)
        history = HistoryTimeSeriesRecord(0, 0, creation_time, (), epoch.segments)
        root, leaf = index_epoch(HistoryIndexRoot(()), None, 0, creation_time, self.sizes)
        records: list[tuple[str, Record]] = [
            (layout.CREATION, CreationRecord(creation_time)),
            (layout.CONFIGURATION, StreamConfigurationRecord(configuration)),
            (layout.STATE, StateRecord(State.CREATING)),
            (layout.epoch_key(0), epoch),
            (layout.CURRENT_EPOCH, epoch),
            (layout.history_chunk_key(0), append_to_chunk(None, history, self.sizes)),
            (layout.HISTORY_INDEX_ROOT, root),
            (layout.history_leaf_key(0), leaf),
            (layout.TRUNCATION, EMPTY_TRUNCATION),
            (layout.EPOCH_TRANSITION, EMPTY_EPOCH_TRANSITION),
            (layout.COMMITTING_TRANSACTIONS, EMPTY_COMMITTING_TRANSACTIONS),
            (layout.RETENTION_SET, RetentionSet()),
            (layout.SUBSCRIBERS, SubscriberSet()),
        ]
        return [Write(key, record.encode(), ABSENT) for key, record in records]

    async def creation_time(self) -> int:
        """Raises NotFound if the stream does not exist."""
        record, _ = await self.read(layout.CREATION, CreationRecord)
        return record.creation_time

    # ------------------------------------------------------------------ configuration

    async def get_configuration(self) -> tuple[StreamConfigurationRecord, int]:
        return await self.read(layout.CONFIGURATION, StreamConfigurationRecord)

    async def replace_configuration(self, record: StreamConfigurationRecord, expected_version: int) -> int:
        """Compare-and-swap of the configuration. Returns the new version.

        Raises:
            WriteConflict: someone else updated it since ``expected_version`` was read.
        """
        return await self.kv.replace(self.tables.metadata, layout.CONFIGURATION, record.encode(),
                                     expected_version)

    # ------------------------------------------------------------------ state

    async def get_state(self) -> tuple[State, int]:
        """The stream's state and its version. Raises NotFound if the stream does not exist."""
        record, version = await self.read(layout.STATE, StateRecord)
        return record.state, version

    async def transition_state(self, requested: State, expected: State | None = None) -> State:
        """Moves the state to ``requested`` if the transition table allows it. Returns the old state.

        ``expected`` additionally requires the current state (unless it already is ``requested``,
        so a re-driven step succeeds). A transition to the current state writes nothing.

        Raises:
            IllegalStateTransition: the table (or ``expected``) refuses it.
            WriteConflict: the state changed between the read and the write.
        """
        current, version = await self.get_state()
        if current == requested:
            return current
        if not state_transition_allowed(current, requested) or (expected is not None and current != expected):
            raise IllegalStateTransition(f"stream {self.scope}/{self.name}: {current.name} -> {requested.name} "
                                         "is not allowed", current, requested, self.tables.metadata, layout.STATE)
        await self.kv.replace(self.tables.metadata, layout.STATE, StateRecord(requested).encode(), version)
        return current

    # ------------------------------------------------------------------ epochs

    async def get_epoch(self, epoch: int) -> EpochRecord:
        """Raises NotFound if the epoch does not exist (yet)."""
        record, _ = await self.read(layout.epoch_key(epoch), EpochRecord)
        return record

    async def get_current_epoch(self) -> tuple[EpochRecord, int]:
        return await self.read(layout.CURRENT_EPOCH, EpochRecord)

    async def state_and_current_epoch(self) -> tuple[State, EpochRecord] | None:
        """The state and the active epoch (one read), or None if the stream does not exist."""
        try:
            state, current = await self.find_records((layout.STATE, StateRecord), (layout.CURRENT_EPOCH, EpochRecord))
        except NotFound:
            return None
        if state is None or current is None:
            return None
        return state[0].state, current[0]

    # ------------------------------------------------------------------ deletion

    async def check_deletable(self) -> EpochRecord | None:
        """The current epoch of a stream that may be deleted, or None if it is already gone.

        Raises:
            IllegalStateTransition: the stream is neither SEALED nor stuck in CREATING.
        """
        found = await self.state_and_current_epoch()
        if found is None:
            return None
        state, current = found
        if state not in DELETABLE_STATES:
            raise IllegalStateTransition(f"stream {self.scope}/{self.name} is {state.name}, not sealed",
                                         state, None, self.tables.metadata, layout.STATE)
        return current

    async def delete_tables(self) -> None:
        """Drops every record of the stream (idempotent).

        The metadata table goes last: until then the stream still reads as SEALED, so an
        interrupted delete is re-driven rather than mistaken for a free name.
        """
        for table in reversed(self.tables.all):
            await self.kv.delete_table(table)
