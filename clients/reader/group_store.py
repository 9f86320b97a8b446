"""Where a reader group's state is kept: one table segment, changed only by compare-and-set.

Keys of the table ``scope/_RG<group>_kvtable/0.#epoch.0`` (a name of our own,
so a Rust ``pravega`` reader group of the same name, which uses
``scope/<group>_kvtable/...``, is never touched):

* ``config``: the group's :class:`GroupConfig` (JSON), written once at creation;
* ``state``: the :class:`GroupState` (JSON), changed by conditional updates: read
  it with its version, apply a pure transition, write it back only if the
  version is unchanged, else read again and redo (optimistic concurrency);
* ``reader/<id>``: each reader's heartbeat with its current positions, written
  unconditionally by that reader alone. Other readers watch its version: one
  that stops changing for ``reader_timeout_ms`` (of the watcher's own clock, so
  clocks need not agree) belongs to a dead reader, which is then taken offline
  at those positions.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from coordination.retry import Backoff, retry
from wire import naming
from wire.constants import NO_VERSION, NOT_EXISTS

from ..errors import ConflictingOperation, NoSuchSegment, ReaderGroupNotFound, TableKeyBadVersion, TableKeyDoesNotExist
from ..segment_store_client import SegmentStoreClient
from .group_state import GroupState

T = TypeVar("T")
_CONFIG = b"config"
_STATE = b"state"
_READER_PREFIX = b"reader/"
_CONFLICT_RETRIES_MAX = 1000


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """A reader group's fixed settings (see :class:`clients.reader.reader_group.ReaderGroupConfig`)."""

    scope: str
    group: str
    group_id: str
    streams: tuple[str, ...]
    reader_timeout_ms: int
    refresh_ms: int
    max_outstanding_checkpoints: int
    retention: int = 0  # StreamDataRetention: 0 none, 1 manual, 2 automatic at the last checkpoint

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> GroupConfig:
        fields = json.loads(bytes(data))
        fields["streams"] = tuple(fields["streams"])
        return cls(**fields)


def table_name(scope: str, group: str) -> str:
    return naming.table_segment_name(scope, "_RG" + group)


def _reader_key(reader: str) -> bytes:
    return _READER_PREFIX + reader.encode()


class GroupStore:
    """Reads and conditionally updates one group's table."""

    def __init__(self, raw: SegmentStoreClient, scope: str, group: str, retry_policy: Backoff):
        self.table = table_name(scope, group)
        self._raw = raw
        self._retry = retry_policy
        self._scope, self._group = scope, group

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:

        try:
            return await retry(operation, self._retry)
        except NoSuchSegment:
            raise ReaderGroupNotFound(f"reader group {self._scope}/{self._group} does not exist") from None

    async def create(self, config: GroupConfig, state: GroupState) -> bool:
        """Creates the table with ``config`` and ``state``; False if the group existed already."""
        await self._call(lambda: self._raw.create_table(self.table))
        try:
            await self._call(lambda: self._raw.update_table(self.table, [
                (_CONFIG, NOT_EXISTS, config.encode()), (_STATE, NOT_EXISTS, state.encode())]))
        except TableKeyBadVersion:
            return False
        return True

    async def delete(self) -> bool:
        return await self._call(lambda: self._raw.delete_table(self.table))

    async def config(self) -> GroupConfig:
        entry, = await self._call(lambda: self._raw.read_table(self.table, [_CONFIG]))
        if entry is None:
            raise ReaderGroupNotFound(f"reader group {self._scope}/{self._group} does not exist")
        return GroupConfig.decode(entry[1])

    async def fetch(self) -> tuple[GroupState, int]:
        entry, = await self._call(lambda: self._raw.read_table(self.table, [_STATE]))
        if entry is None:
            raise ReaderGroupNotFound(f"reader group {self._scope}/{self._group} has no state")
        return GroupState.decode(entry[1]), entry[0]

    async def update(self, change: Callable[[GroupState], T]) -> tuple[T, GroupState]:
        """Applies ``change`` (a pure transition, which may raise) to the current state until the
        conditional write wins; returns its result and the state written. Nothing is written if
        ``change`` left the state as it was."""
        written: tuple[bytes, T] | None = None  # the last write that met a conflict, and its result
        for _ in range(_CONFLICT_RETRIES_MAX):
            state, version = await self.fetch()
            before = state.encode()
            if written is not None and before == written[0]:
                # The conflict was our own write: its reply was lost, the retry found it applied. Redoing the
                # change on it would not give its result (a reader's join would find itself already online).
                return written[1], state
            result = change(state)
            after = state.encode()
            if after == before:
                return result, state
            try:
                await self._call(functools.partial(self._raw.update_table, self.table, [(_STATE, version, after)]))
                return result, state
            except (TableKeyBadVersion, TableKeyDoesNotExist):
                written = after, result
                continue  # someone else changed it first (or this write, retried): redo on the new state
        raise ConflictingOperation(f"reader group {self._group}: {_CONFLICT_RETRIES_MAX} conflicting updates "
                                   f"in a row")

    async def report(self, reader: str, positions: dict[str, int]) -> None:
        """Writes ``reader``'s heartbeat and positions (unconditionally)."""
        value = json.dumps(positions, separators=(",", ":")).encode()
        await self._call(lambda: self._raw.update_table(self.table, [(_reader_key(reader), NO_VERSION, value)]))

    async def reports(self, readers: list[str]) -> dict[str, tuple[int, dict[str, int]]]:
        """Each reader's last heartbeat: (version, positions); readers that never reported are absent."""
        if not readers:
            return {}
        entries = await self._call(lambda: self._raw.read_table(self.table, [_reader_key(r) for r in readers]))
        return {reader: (entry[0], json.loads(entry[1])) for reader, entry in zip(readers, entries, strict=True)
                if entry is not None}

    async def forget_report(self, reader: str) -> None:
        await self._call(lambda: self._raw.remove_table_keys(self.table, [(_reader_key(reader), NO_VERSION)]))
