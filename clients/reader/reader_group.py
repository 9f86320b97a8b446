"""Reader groups: creating them, their readers, checkpoints, stream cuts, resets, readers going offline.

A group is registered with the controller (Pravega's createReaderGroup: so it is
known for consumption-based retention and listed as the scope's ``_RG<group>``
stream) and its working state lives in a table segment of our own
(``group_store``). ``ReaderGroupManagement`` is mixed into the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from controller_api.reader_groups import AUTOMATIC_CHECKPOINTS_OFF, ReaderGroupConfiguration, StreamDataRetention
from coordination.retry import Backoff

from ..config import ReaderConfig
from ..controller_client import Controller, ControllerClient
from ..errors import CheckpointFailed, InvalidArgument, ReaderGroupNotFound
from ..model import check_scope_name, check_stream_name, check_user_name
from ..segment_stores import SegmentStores, segment_of
from ..serializers import Serializer
from ..stream_cut import StreamCut, cuts_by_stream, parse_stream_cut
from .event_reader import EventReader
from .group_state import GroupState
from .group_store import GroupConfig, GroupStore

_CHECKPOINT_POLL_SECONDS = 0.05


@dataclasses.dataclass(frozen=True)
class ReaderGroupConfig:
    """Settings of a reader group.

    * ``reader_timeout_ms``: a reader whose heartbeat stops this long is declared offline
      and its segments go to the others (Java has no such detection; Rust neither).
    * ``refresh_ms``: how often each reader heartbeats and takes a group step
      (acquire/release/complete/checkpoint); Java refreshes every 3 s.
    * ``max_outstanding_checkpoints``: as Java (3).
    * ``retention``: whether the group subscribes to its streams (:class:`StreamDataRetention`).
    """

    reader_timeout_ms: int = 30_000
    refresh_ms: int = 1_000
    max_outstanding_checkpoints: int = 3
    retention: StreamDataRetention = StreamDataRetention.NONE

    def __post_init__(self) -> None:
        if self.refresh_ms < 10 or self.reader_timeout_ms < 2 * self.refresh_ms:
            raise InvalidArgument("refresh_ms must be >= 10 and reader_timeout_ms at least twice refresh_ms")
        if self.max_outstanding_checkpoints < 1:
            raise InvalidArgument("max_outstanding_checkpoints must be at least 1")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A completed checkpoint: the group's position in each of its streams."""

    name: str
    cuts: dict[str, StreamCut]

    def cut(self, scope: str, stream: str) -> StreamCut:
        return self.cuts[f"{scope}/{stream}"]


def positions_of(cuts: Iterable[StreamCut]) -> dict[str, int]:
    """Stream cuts -> ``{segment name: offset}`` (the inverse of :func:`cuts_of`)."""
    return {segment.qualified_name: offset for cut in cuts for segment, offset in cut.segments.items()}


def _positions_by_stream(cuts: Iterable[StreamCut]) -> dict[str, dict[int, int]]:
    """Stream cuts as the Controller API keeps a group's: ``{"scope/stream": {segment id: offset}}``."""
    return {f"{cut.scope}/{cut.stream}": dict(cut.positions) for cut in cuts}


def cuts_of(positions: Mapping[str, int]) -> dict[str, StreamCut]:
    """``{segment name: offset}`` -> ``{"scope/stream": StreamCut}``."""
    by_stream: dict[tuple[str, str], dict[int, int]] = {}
    for name, offset in positions.items():
        segment = segment_of(name)
        by_stream.setdefault((segment.scope, segment.stream), {})[segment.segment_id] = offset
    return {f"{scope}/{stream}": StreamCut(scope, stream, offsets) for (scope, stream), offsets in by_stream.items()}


class ReaderGroup:
    """A handle of one reader group (cheap to make; all state is on the server)."""

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, name: str,
                 retry_policy: Backoff, adopt: Callable[[EventReader], EventReader] | None = None):
        self._adopt = adopt  # the client's registry of what it closes on close()
        self.controller = controller
        self.stores = stores
        self.scope = scope
        self.name = name
        self.store = GroupStore(stores.raw, scope, name, retry_policy)
        self._config: GroupConfig | None = None

    def __repr__(self) -> str:
        return f"<ReaderGroup {self.scope}/{self.name}>"

    async def group_config(self) -> GroupConfig:
        if self._config is None:
            self._config = await self.store.config()
        return self._config

    def create_reader(self, reader_id: str, config: ReaderConfig | None = None,
                      serializer: Serializer | None = None, *, checkpoint_events: bool = False) -> EventReader:
        """A reader of this group (joins on ``async with`` or on the first event).

        With ``checkpoint_events`` the reader yields each checkpoint as an event whose
        ``checkpoint_name`` is set (``data`` None), so the application can store its own
        state at exactly that point; otherwise checkpoints are answered silently.
        """
        check_user_name(reader_id, "reader id")
        reader = EventReader(self, reader_id, config, serializer, checkpoint_events)
        return self._adopt(reader) if self._adopt is not None else reader

    async def online_readers(self) -> list[str]:
        state, _ = await self.store.fetch()
        return list(state.readers)

    async def reader_offline(self, reader_id: str, positions: Mapping[str, int] | None = None) -> None:
        """Declares ``reader_id`` offline; its segments go back at ``positions`` (or as last recorded)."""
        reports = await self.store.reports([reader_id])
        reported = positions if positions is not None else reports.get(reader_id, (0, None))[1]
        await self.store.update(lambda state: state.remove_reader(reader_id, dict(reported) if reported else None))

    async def stream_cuts(self) -> dict[str, StreamCut]:
        """Where the group is: each stream's cut from the recorded and last reported positions."""
        state, _ = await self.store.fetch()
        reports = await self.store.reports(list(state.readers))
        return cuts_of(state.positions({reader: positions for reader, (_, positions) in reports.items()}))

    async def initiate_checkpoint(self, name: str | None = None, timeout_seconds: float = 60.0) -> Checkpoint:
        """Creates a checkpoint and waits until every online reader reached it.

        Raises:
            CheckpointFailed: too many outstanding, the name is taken, or it was cleared (group reset).
            TimeoutError: not every reader reached it within ``timeout_seconds``.
        """
        config = await self.group_config()
        name = name or str(uuid.uuid4())
        await self.store.update(lambda state: state.create_checkpoint(name, False,
                                                                     config.max_outstanding_checkpoints))
        async with asyncio.timeout(timeout_seconds):
            while True:
                state, _ = await self.store.fetch()
                checkpoint = state.completed_checkpoint(name)
                if checkpoint is not None:
                    break
                await asyncio.sleep(_CHECKPOINT_POLL_SECONDS)
        await self.store.update(lambda state: state.clear_checkpoint(name))
        completed = Checkpoint(name, cuts_of(checkpoint.positions))
        if config.retention == StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT:
            await self._release(completed.cuts.values())
        return completed

    async def release_at(self, cuts: Iterable[StreamCut | str]) -> None:
        """Lets retention drop the data before ``cuts`` (a group with ``MANUAL_RELEASE_AT_USER_STREAMCUT``).

        Raises:
            InvalidArgument: the group does not release manually, a cut is not of one of its streams,
                or a cut is malformed or behind the one released before.
            StreamNotFound: a stream is gone.
        """
        config = await self.group_config()
        if config.retention != StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT:
            raise InvalidArgument(f"reader group {self.scope}/{self.name} does not release data manually")
        parsed = [parse_stream_cut(cut) for cut in cuts]
        if not cuts_by_stream(parsed).keys() <= set(config.streams):
            raise InvalidArgument("release cuts only for the group's streams")
        await self._release(parsed)

    async def _release(self, cuts: Iterable[StreamCut]) -> None:
        """Reports the group's subscriber cut of each stream to the controller."""
        config = await self.group_config()
        for cut in cuts:
            await self.controller.update_subscriber_cut(self.scope, self.name, config.group_id, 0, cut)

    async def last_checkpoint(self) -> Checkpoint | None:
        state, _ = await self.store.fetch()
        if state.last_checkpoint is None:
            return None
        return Checkpoint(state.last_checkpoint.name, cuts_of(state.last_checkpoint.positions))

    async def reset(self, start: Checkpoint | Iterable[StreamCut | str]) -> None:
        """Restarts the group from a checkpoint or from stream cuts: every reader goes offline
        (an online one gets ReinitializationRequired) and reading starts over from there."""
        cuts = list(start.cuts.values()) if isinstance(start, Checkpoint) else [parse_stream_cut(c) for c in start]
        positions = positions_of(cuts)

        def restart(state: GroupState) -> None:
            fresh = GroupState.starting_at(positions, state.end_offsets, state.generation + 1)
            state.__dict__.update(fresh.__dict__)

        await self.store.update(restart)

    async def is_end_of_data(self) -> bool:
        state, _ = await self.store.fetch()
        return state.is_end_of_data()


class ReaderGroupManagement:
    """Reader-group administration (mixed into :class:`~clients.client.Client`)."""

    _controller: ControllerClient
    _stores: SegmentStores

    if TYPE_CHECKING:  # provided by the Client this is mixed into

        def _adopt(self, child: EventReader) -> EventReader: ...

        async def tail_cut(self, scope: str, stream: str) -> StreamCut: ...


    def _group_retry(self) -> Backoff:
        return ReaderConfig().retry

    async def create_reader_group(self, scope: str, group: str, streams: Iterable[str | StreamCut], *,
                                  start_at: str = "head", end_cuts: Iterable[StreamCut | str] = (),
                                  config: ReaderGroupConfig | None = None) -> ReaderGroup:
        """Creates reader group ``group`` in ``scope`` over ``streams`` and returns it.

        Each of ``streams`` is a stream name of ``scope``, a ``"scope/stream"`` name, or a
        StreamCut to start that stream at (``StreamCut.from_text`` reads a cut's text form). Streams named without a cut
        start at their ``start_at``: ``"head"`` (default) or ``"tail"``. ``end_cuts`` bound
        the read (the readers' iteration ends there). If the group exists already it is
        returned as it is (its configuration is not changed).

        Raises:
            InvalidArgument: bad names, cuts or options.
            ScopeNotFound, StreamNotFound.
        """
        check_scope_name(scope)
        check_user_name(group, "reader group name")
        config = config or ReaderGroupConfig()
        if start_at not in ("head", "tail"):
            raise InvalidArgument(f"start_at must be 'head' or 'tail', not {start_at!r}")
        starts = [await self._start_cut(scope, item, start_at) for item in streams]
        if not starts:
            raise InvalidArgument("a reader group reads at least one stream")
        ends = [parse_stream_cut(cut) for cut in end_cuts]
        names = cuts_by_stream(starts)  # raises InvalidArgument for a stream named twice
        if not cuts_by_stream(ends).keys() <= names.keys():
            raise InvalidArgument("end cuts only for the group's streams")
        registered = await self._controller.create_reader_group(scope, group, ReaderGroupConfiguration(
            group_refresh_time_ms=config.refresh_ms, checkpoint_interval_ms=AUTOMATIC_CHECKPOINTS_OFF,
            max_outstanding_checkpoints=config.max_outstanding_checkpoints, retention_type=config.retention,
            starting_cuts=_positions_by_stream(starts), ending_cuts=_positions_by_stream(ends)))
        handle = ReaderGroup(self._controller, self._stores, scope, group, self._group_retry(), self._adopt)
        group_config = GroupConfig(scope, group, str(registered.reader_group_id), tuple(sorted(names)),
                                   config.reader_timeout_ms, config.refresh_ms, config.max_outstanding_checkpoints,
                                   int(config.retention))
        created = await handle.store.create(group_config,
                                            GroupState.starting_at(positions_of(starts), positions_of(ends)))
        if created and config.retention != StreamDataRetention.NONE:
            await handle._release(starts)  # the group holds its streams from where it starts
        return handle

    async def _start_cut(self, scope: str, item: str | StreamCut, start_at: str) -> StreamCut:
        """The start cut of one entry of ``streams`` (uses StreamManagement.tail_cut for 'tail')."""
        if isinstance(item, StreamCut):
            cut = item
            if cut.is_unbounded:
                raise InvalidArgument("a start cut must name its stream")
            return cut
        stream_scope, _, stream = item.rpartition("/")
        stream_scope = stream_scope or scope
        check_scope_name(stream_scope)
        check_stream_name(stream)
        if start_at == "tail":
            return await self.tail_cut(stream_scope, stream)
        return await self._controller.get_head_cut(stream_scope, stream)

    def reader_group(self, scope: str, group: str) -> ReaderGroup:
        """A handle of an existing group (calls raise ReaderGroupNotFound if it does not exist)."""
        check_scope_name(scope)
        check_user_name(group, "reader group name")
        return ReaderGroup(self._controller, self._stores, scope, group, self._group_retry(), self._adopt)

    async def delete_reader_group(self, scope: str, group: str) -> bool:
        """Deletes the group (its readers should be closed first); False if it did not exist."""
        handle = self.reader_group(scope, group)
        try:
            config = await handle.group_config()
        except ReaderGroupNotFound:
            return False
        await self._controller.delete_reader_group(scope, group, config.group_id)
        return await handle.store.delete()


__all__ = ["ReaderGroup", "ReaderGroupConfig", "StreamDataRetention", "ReaderGroupManagement", "Checkpoint",
           "CheckpointFailed"]
