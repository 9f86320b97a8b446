"""Controller-managed (Java-style) reader groups and stream subscribers (spec §4.7).

The Rust/Python client keeps its reader groups in a table segment of its own and never calls
these RPCs; Java clients do. A group's configuration record carries ``updating`` while a create
or update is being applied; subscriptions (consumption-based retention) are named ``scope/group``
on every stream of the group's starting cuts when its retention type is not NONE. Each group also
gets a one-segment ``_RG<group>`` stream, as Java's state synchronizer expects.
"""

from __future__ import annotations

import dataclasses
import uuid

from controller_api.model import ScalingPolicy, StreamConfiguration
from controller_api.reader_groups import NIL_GROUP_ID, ReaderGroupConfiguration, StreamDataRetention
from wire import naming

from ..store import AlreadyExists, NotFound, WriteConflict
from ..store import readers as store_readers
from ..store.records import ReaderGroupConfigRecord
from .context import ControllerContext
from .errors import (
    ConcurrentWorkflow,
    GenerationMismatch,
    InvalidStreamCut,
    ReaderGroupConfigMismatch,
    ReaderGroupNotFound,
    ScopeNotFound,
    StreamNotFound,
    SubscriberNotFound,
)
from .paging import all_pages
from .scopes import checked_name
from .stream_access import require_state
from .stream_creation import StreamCreation
from .stream_cut_rules import is_equal_or_after
from .stream_deletion import StreamDeletion
from .stream_sealing import StreamSealing
from .truncation import check_cut

GROUP_STREAM_PREFIX = "_RG"
GROUP_STREAM_ROLLOVER_BYTES = 4 * 1024 * 1024


def group_stream(group: str) -> str:
    return GROUP_STREAM_PREFIX + group


def subscribed_streams(configuration: ReaderGroupConfiguration) -> set[str]:
    """The ``scope/stream`` names a group subscribes to (none when its retention type is NONE)."""
    if configuration.retention_type == StreamDataRetention.NONE:
        return set()
    return set(configuration.starting_cuts)


class ReaderGroups:
    def __init__(self, context: ControllerContext, creation: StreamCreation, sealing: StreamSealing,
                 deletion: StreamDeletion):
        self._context = context
        self._store = context.store
        self._creation = creation
        self._sealing = sealing
        self._deletion = deletion

    # ------------------------------------------------------------------ configuration

    async def create_reader_group(self, scope: str, group: str,
                                  config: ReaderGroupConfiguration) -> ReaderGroupConfiguration:
        """Creates the group, or returns the stored configuration if it exists (the new one is ignored).

        Raises:
            InvalidName: the group name breaks the user-name rules.
            ScopeNotFound: no such scope.
        """
        checked_name(naming.validate_user_name, group, "reader group name")
        if not await self._store.scopes.scope_exists(scope):
            raise ScopeNotFound(f"scope {scope!r} does not exist")
        try:
            stored, _ = await self._store.scopes.get_reader_group(scope, group)
        except NotFound:
            stored = None
        if stored is not None and not stored.updating:
            return stored.configuration
        if stored is None:
            group_id = uuid.uuid4() if config.reader_group_id == NIL_GROUP_ID else config.reader_group_id
            stored = ReaderGroupConfigRecord(dataclasses.replace(config, reader_group_id=group_id, generation=0),
                                             updating=True)
            try:
                await self._store.scopes.create_reader_group(scope, group, stored)
            except AlreadyExists:
                stored, _ = await self._store.scopes.get_reader_group(scope, group)
        await self._subscribe(scope, group, stored.configuration, subscribed_streams(stored.configuration))
        await self._creation.create_stream(scope, group_stream(group), StreamConfiguration(
            ScalingPolicy(min_num_segments=1), rollover_size_bytes=GROUP_STREAM_ROLLOVER_BYTES))
        return await self._clear_updating(scope, group)

    async def get_reader_group(self, scope: str, group: str) -> ReaderGroupConfiguration:
        """Raises ReaderGroupNotFound."""
        record, _ = await self._stored(scope, group)
        return record.configuration

    async def _stored(self, scope: str, group: str) -> tuple[ReaderGroupConfigRecord, int]:
        """The stored configuration and its version. Raises ReaderGroupNotFound."""
        try:
            return await self._store.scopes.get_reader_group(scope, group)
        except NotFound:
            raise ReaderGroupNotFound(f"reader group {scope}/{group} does not exist") from None

    async def update_reader_group(self, scope: str, group: str, config: ReaderGroupConfiguration) -> int:
        """Stores a new configuration at the next generation and fixes subscriptions. Returns the generation.

        Raises:
            ReaderGroupNotFound: no such group.
            ReaderGroupConfigMismatch: another generation or group id than the stored ones.
            ConcurrentWorkflow: another update is being applied.
        """
        record, version = await self._stored(scope, group)
        stored = record.configuration
        if config.generation != stored.generation or config.reader_group_id != stored.reader_group_id:
            raise ReaderGroupConfigMismatch(f"reader group {scope}/{group} is at generation {stored.generation}")
        if record.updating:
            raise ConcurrentWorkflow(f"reader group {scope}/{group} is being updated")
        updated = dataclasses.replace(config, generation=stored.generation + 1)
        try:
            await self._store.scopes.replace_reader_group(scope, group, ReaderGroupConfigRecord(updated, updating=True),
                                                          version)
        except WriteConflict:
            raise ConcurrentWorkflow(f"reader group {scope}/{group} changed concurrently") from None
        old, new = subscribed_streams(stored), subscribed_streams(updated)
        for name in old - new:
            await self._unsubscribe(scope, group, name)
        await self._subscribe(scope, group, updated, new)
        return (await self._clear_updating(scope, group)).generation

    async def delete_reader_group(self, scope: str, group: str, group_id: uuid.UUID) -> None:
        """Removes subscriptions, the group's stream and its configuration.

        Raises:
            ReaderGroupNotFound: no such group, or another group id.
        """
        stored = (await self._stored(scope, group))[0].configuration
        if group_id != stored.reader_group_id:
            raise ReaderGroupNotFound(f"reader group {scope}/{group} has another id")
        for name in subscribed_streams(stored):
            await self._unsubscribe(scope, group, name)
        try:
            await self._sealing.seal_stream(scope, group_stream(group))
            await self._deletion.delete_stream(scope, group_stream(group))
        except StreamNotFound:
            pass
        await self._store.scopes.delete_reader_group(scope, group)

    async def list_reader_groups(self, scope: str) -> list[str]:
        return await all_pages(lambda token: self._store.scopes.list_reader_groups(scope, token))

    async def _clear_updating(self, scope: str, group: str) -> ReaderGroupConfiguration:
        stored, version = await self._store.scopes.get_reader_group(scope, group)
        if stored.updating:
            stored = dataclasses.replace(stored, updating=False)
            await self._store.scopes.replace_reader_group(scope, group, stored, version)
        return stored.configuration

    # ------------------------------------------------------------------ subscribers

    async def _subscribe(self, scope: str, group: str, configuration: ReaderGroupConfiguration,
                         streams: set[str]) -> None:
        name = naming_subscriber(scope, group)
        for scoped in sorted(streams):
            stream_scope, _, stream = scoped.partition("/")
            handle = self._store.stream(stream_scope, stream)
            try:
                await store_readers.add_subscriber(handle, name, configuration.generation, self._context.now_ms())
            except AlreadyExists:
                subscriber, _ = await store_readers.get_subscriber(handle, name)
                if subscriber.generation != configuration.generation:
                    await store_readers.update_subscriber_cut(handle, name, configuration.generation,
                                                              subscriber.stream_cut, self._context.now_ms())
            except NotFound:
                pass  # the stream does not exist (any more): nothing to subscribe to

    async def _unsubscribe(self, scope: str, group: str, scoped_stream: str) -> None:
        stream_scope, _, stream = scoped_stream.partition("/")
        try:
            await store_readers.remove_subscriber(self._store.stream(stream_scope, stream),
                                                  naming_subscriber(scope, group))
        except NotFound:
            pass

    async def list_subscribers(self, scope: str, stream: str) -> tuple[str, ...]:
        """Raises StreamNotFound."""
        handle = self._store.stream(scope, stream)
        await require_state(handle)
        return await store_readers.list_subscribers(handle)

    async def subscriber_cut(self, scope: str, stream: str, subscriber: str) -> dict[int, int] | None:
        """The last cut ``subscriber`` reported for the stream ({} if none yet), or None if it does not subscribe."""
        try:
            record, _ = await store_readers.get_subscriber(self._store.stream(scope, stream), subscriber)
        except NotFound:
            return None
        return dict(record.stream_cut)

    async def update_subscriber_cut(self, scope: str, stream: str, subscriber: str, group_id: uuid.UUID,
                                    generation: int, cut: dict[int, int]) -> None:
        """Records how far subscriber ``scope/group`` has read the stream.

        Raises:
            StreamNotFound: no such stream.
            SubscriberNotFound: not subscribed, or the group has another id.
            GenerationMismatch: another generation than the subscription's.
            InvalidStreamCut: a malformed cut, or one behind the previous one.
        """
        handle = self._store.stream(scope, stream)
        await require_state(handle)
        try:
            record, _ = await store_readers.get_subscriber(handle, subscriber)
        except NotFound:
            raise SubscriberNotFound(f"{subscriber!r} does not subscribe to {scope}/{stream}") from None
        group_scope, _, group = subscriber.partition("/")
        try:
            group_record, _ = await self._store.scopes.get_reader_group(group_scope, group)
        except NotFound:
            raise SubscriberNotFound(f"reader group {subscriber!r} does not exist") from None
        if group_record.configuration.reader_group_id != group_id:
            raise SubscriberNotFound(f"reader group {subscriber!r} has another id")
        if generation != record.generation:
            raise GenerationMismatch(f"{subscriber!r} is at generation {record.generation}, not {generation}")
        segments = await check_cut(handle, cut)
        if record.stream_cut:
            previous = await check_cut(handle, record.stream_cut)
            if not is_equal_or_after(cut, segments, record.stream_cut, previous):
                raise InvalidStreamCut(f"the new cut of {subscriber!r} is behind its previous one")
        try:
            await store_readers.update_subscriber_cut(handle, subscriber, generation, cut, self._context.now_ms())
        except WriteConflict:
            raise GenerationMismatch(f"{subscriber!r} changed generation concurrently") from None


def naming_subscriber(scope: str, group: str) -> str:
    """A subscriber's name: the scoped reader-group name."""
    return f"{scope}/{group}"
