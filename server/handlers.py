"""Request handlers: one coroutine per request type, answering with exactly one reply.

Each handler names the segment and offset its error replies carry (protocol
reference §3.5-3.10); :func:`replies.error_reply` turns the operating error
into the reply. Handlers never touch the transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from wire import Command, Reply, Request, encode_around, naming
from wire import commands as wc
from wire.constants import NOT_EXISTS, NULL_ATTRIBUTE_VALUE

from . import containers, errors, metrics
from .containers import MAX_TABLE_KEY_LENGTH, SegmentContainer, SegmentType
from .outbox import FileFrame
from .replies import CloseConnection, error_reply

MAX_TABLE_REPLY_BYTES = 2 * 1024 * 1024
MAX_SEGMENT_NAME_LENGTH = 2048


def check_segment_name(name: str) -> None:
    """Segment names are non-empty, bounded, printable, not absolute and without empty parts.

    ``.`` and ``..`` are ordinary parts (Pravega's scope and stream names may be just that): names
    are opaque, and Tier-2 never uses them as paths (see ``server/tier2/filesystem.encode_name``).
    """
    if (not name or len(name) > MAX_SEGMENT_NAME_LENGTH or not name.isprintable()
            or name.startswith("/") or "//" in name):
        raise errors.IllegalArgument(name, f"invalid segment name {name[:100]!r}")


class RequestHandlers:
    """The non-append requests of one connection."""

    def __init__(self, container_for: Callable[[str], SegmentContainer], *, tail_read_timeout: float,
                 transients: set[str], container_by_id: Callable[[int], list[SegmentContainer]]):
        self._container_for = container_for
        self._container_by_id = container_by_id
        self._tail_read_timeout = tail_read_timeout
        self._transients = transients  # transient segments created on this connection
        # request type -> its handler (each takes requests of its key's type)
        self.table: dict[type[Command], Callable[[Any], Awaitable[Reply | FileFrame]]] = {
            wc.ReadSegment: self.read_segment,
            wc.GetStreamSegmentInfo: self.get_stream_segment_info,
            wc.CreateSegment: self.create_segment,
            wc.SealSegment: self.seal_segment,
            wc.SealTableSegment: self.seal_segment,
            wc.TruncateSegment: self.truncate_segment,
            wc.DeleteSegment: self.delete_segment,
            wc.UpdateSegmentPolicy: self.update_segment_policy,
            wc.GetSegmentAttribute: self.get_segment_attribute,
            wc.UpdateSegmentAttribute: self.update_segment_attribute,
            wc.CreateTransientSegment: self.create_transient_segment,
            wc.MergeSegments: self.merge_segments,
            wc.MergeTableSegments: self.merge_segments,
            wc.MergeSegmentsWithHeader: self.merge_segments,
            wc.MergeSegmentsBatch: self.merge_segments_batch,
            wc.CreateTableSegment: self.create_table_segment,
            wc.DeleteTableSegment: self.delete_table_segment,
            wc.GetTableSegmentInfo: self.get_table_segment_info,
            wc.UpdateTableEntries: self.update_table_entries,
            wc.RemoveTableKeys: self.remove_table_keys,
            wc.ReadTable: self.read_table,
            wc.ReadTableKeys: self.read_table_keys,
            wc.ReadTableEntries: self.read_table_entries,
            wc.ReadTableEntriesDelta: self.read_table_entries_delta,
            wc.FlushToStorage: self.flush_to_storage,
            wc.ListStorageChunks: self.list_storage_chunks,
            wc.LocateOffset: self.locate_offset,
        }

    async def handle(self, command: Command) -> Reply | FileFrame:
        """Returns the reply to ``command`` (a FileFrame: a SegmentRead sent from a file). Raises CloseConnection
        when it has none."""
        handler = self.table.get(type(command))
        if handler is None:  # the table holds request types only: anything else a client sends ends here
            raise CloseConnection(f"{type(command).__name__} is not a request this server handles")
        request: Request = command  # type: ignore[assignment]  # found in the table: a request
        try:
            return await handler(request)
        except errors.SegmentStoreError as error:  # errors not mapped inside a handler name its segment
            return error_reply(error, request.request_id, getattr(command, "segment", ""),
                               operation=_OPERATION_NAMES.get(type(command), ""))

    # ------------------------------------------------------------------ segments

    async def read_segment(self, command: wc.ReadSegment):
        segment, offset, request_id = command.segment, command.offset, command.request_id
        arrived = time.perf_counter() if metrics.enabled else 0.0
        try:
            if offset < 0:
                raise errors.IllegalArgument(segment, f"negative read offset {offset}")
            result = await self._container_for(segment).read(segment, offset, command.suggested_length,
                                                             self._tail_read_timeout, lend_files=True)
        except TimeoutError:
            raise CloseConnection(f"tail read of {segment} at {offset} waited too long") from None
        except errors.SegmentStoreError as error:
            return error_reply(error, request_id, segment, offset)
        if arrived:
            metrics.READ_LATENCY.observe(time.perf_counter() - arrived)
            metrics.READ_BYTES.inc(result.length)
        if result.region is not None:  # Tier-2 bytes: sent from the chunk file (sendfile), not read here
            head, tail = encode_around(
                wc.SegmentRead(segment, offset, result.at_tail, result.end_of_segment, b"", request_id),
                "data", result.region.length)
            return FileFrame(head, result.region, tail)
        return wc.SegmentRead(segment, offset, result.at_tail, result.end_of_segment, result.data(), request_id)

    async def get_stream_segment_info(self, command: wc.GetStreamSegmentInfo):
        name = command.segment_name
        try:
            info = self._container_for(name).get_info(name)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name)
        return wc.StreamSegmentInfo(command.request_id, name, True, info.sealed, False, info.last_modified,
                                    info.length, info.start_offset)

    async def create_segment(self, command: wc.CreateSegment):
        name = command.segment
        attributes = {containers.SCALE_POLICY_TYPE: command.scale_type,
                      containers.SCALE_POLICY_RATE: command.target_rate,
                      containers.ROLLOVER_SIZE: max(command.rollover_size_bytes, 0)}
        return await self._mutate(command, name, lambda container: container.create_segment(
            name, SegmentType.STREAM, attributes), wc.SegmentCreated(command.request_id, name), check_name=True)

    async def create_table_segment(self, command: wc.CreateTableSegment):
        name = command.segment
        if not 0 <= command.key_length <= MAX_TABLE_KEY_LENGTH:
            return wc.ErrorMessage(command.request_id, name, f"a table key length is 0..{MAX_TABLE_KEY_LENGTH}",
                                   wc.ErrorMessage.ILLEGAL_ARGUMENT)
        attributes = {containers.ROLLOVER_SIZE: max(command.rollover_size_bytes, 0)}
        if command.key_length:  # a fixed-key-length table (key-value tables), sorted, with range iteration
            attributes[containers.TABLE_KEY_LENGTH] = command.key_length
        return await self._mutate(command, name, lambda container: container.create_segment(
            name, SegmentType.TABLE, attributes), wc.SegmentCreated(command.request_id, name), check_name=True)

    async def seal_segment(self, command):
        name = command.segment
        return await self._mutate(command, name, lambda container: container.seal(name),
                                  wc.SegmentSealed(command.request_id, name))

    async def truncate_segment(self, command: wc.TruncateSegment):
        name, offset = command.segment, command.truncation_offset
        return await self._mutate(command, name, lambda container: container.truncate(name, offset),
                                  wc.SegmentTruncated(command.request_id, name), error_offset=offset)

    async def delete_segment(self, command: wc.DeleteSegment):
        name = command.segment
        self._transients.discard(name)
        return await self._mutate(command, name, lambda container: container.delete(name),
                                  wc.SegmentDeleted(command.request_id, name))

    async def update_segment_policy(self, command: wc.UpdateSegmentPolicy):
        name = command.segment
        updates = (containers.AttributeUpdate(containers.SCALE_POLICY_TYPE, containers.REPLACE, command.scale_type),
                   containers.AttributeUpdate(containers.SCALE_POLICY_RATE, containers.REPLACE, command.target_rate))
        return await self._mutate(command, name, lambda container: container.update_attributes(name, updates),
                                  wc.SegmentPolicyUpdated(command.request_id, name))

    async def get_segment_attribute(self, command: wc.GetSegmentAttribute):
        name = command.segment_name
        try:
            value = self._container_for(name).get_attribute(name, command.attribute_id)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name)
        return wc.SegmentAttribute(command.request_id, value)

    async def update_segment_attribute(self, command: wc.UpdateSegmentAttribute):
        name = command.segment_name
        update = containers.AttributeUpdate(command.attribute_id, containers.REPLACE_IF_EQUALS, command.new_value,
                                       command.expected_value)
        return await self._mutate(command, name, lambda container: container.update_attributes(name, (update,)),
                                  wc.SegmentAttributeUpdated(command.request_id, True))

    async def create_transient_segment(self, command: wc.CreateTransientSegment):
        parent = command.parent_segment
        try:
            check_segment_name(parent)
            name = await self._container_for(parent).create_transient_segment(parent, command.writer_id)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, parent, operation="createTransientSegment")
        self._transients.add(name)
        return wc.SegmentCreated(command.request_id, name)

    async def merge_segments(self, command):
        target, source = command.target, command.source
        header = getattr(command, "header", b"")
        updates = [containers.AttributeUpdate(update.attribute_id, update.update_type, update.new_value,
                                         update.old_value)
                   for update in getattr(command, "attribute_updates", ())]
        try:
            container = self._container_for(target)
            updates.append(containers.AttributeUpdate(containers.EVENT_COUNT, containers.ACCUMULATE,
                                                 _source_event_count(container, source)))
            length = await container.merge(target, source, updates, header)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, source, operation="mergeSegments")
        self._transients.discard(source)
        return wc.SegmentsMerged(command.request_id, target, source, length)

    async def merge_segments_batch(self, command: wc.MergeSegmentsBatch):
        target = command.target_segment_id
        merged = []
        try:
            container = self._container_for(target)
            for source in command.source_segment_ids:
                try:
                    count = _source_event_count(container, source)
                    update = containers.AttributeUpdate(containers.EVENT_COUNT, containers.ACCUMULATE, count)
                    length = await container.merge(target, source, (update,))
                except errors.NoSuchSegment:
                    # Already merged (a retried commit) or never existed: counts as merged.
                    length = container.get_info(target).length
                merged.append(wc.MergedSource(source, length))
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, target, operation="mergeSegmentsBatch")
        return wc.SegmentsBatchMerged(command.request_id, target, merged)

    async def _mutate(self, command, name: str, action, success, *, error_offset: int = -1, check_name=False):
        try:
            if check_name:
                check_segment_name(name)
            await action(self._container_for(name))
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name, error_offset)
        return success

    # ------------------------------------------------------------------ tables

    async def delete_table_segment(self, command: wc.DeleteTableSegment):
        name = command.segment
        try:
            container = self._container_for(name)
            if command.must_be_empty and container.get_info(name).table_entry_count > 0:
                raise errors.TableSegmentNotEmpty(name)
            await container.delete(name)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name)
        return wc.SegmentDeleted(command.request_id, name)

    async def get_table_segment_info(self, command: wc.GetTableSegmentInfo):
        name = command.segment_name
        try:
            container = self._container_for(name)
            info, key_length = container.get_table_info(name), container.table_key_length(name)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name, operation="getTableSegmentInfo")
        return wc.TableSegmentInfo(command.request_id, name, info.start_offset, info.length, info.table_entry_count,
                                   key_length)

    async def update_table_entries(self, command: wc.UpdateTableEntries):
        name, offset = command.segment, command.table_segment_offset
        try:
            entries = [(bytes(entry.key), entry.version, bytes(entry.value)) for entry in command.entries]
            versions = await self._container_for(name).update_table(name, entries, offset)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name, offset, operation="updateTableEntries")
        return wc.TableEntriesUpdated(command.request_id, versions)

    async def remove_table_keys(self, command: wc.RemoveTableKeys):
        name, offset = command.segment, command.table_segment_offset
        try:
            keys = [(bytes(key.key), key.version) for key in command.keys]
            await self._container_for(name).remove_table_keys(name, keys, offset)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name, offset, operation="removeTableKeys")
        return wc.TableKeysRemoved(command.request_id, name)

    async def read_table(self, command: wc.ReadTable):
        name = command.segment
        try:
            found = self._container_for(name).read_table(name, [key.key for key in command.keys])
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name, operation="readTable")
        entries = [wc.TableEntry(key.key, NOT_EXISTS, b"") if entry is None else wc.TableEntry(*entry)
                   for key, entry in zip(command.keys, found, strict=True)]
        return wc.TableRead(command.request_id, name, entries)

    async def read_table_keys(self, command: wc.ReadTableKeys):
        entries, token = self._table_page(command, command.suggested_key_count)
        keys = [wc.TableKey(entry.key, entry.version) for entry in entries]
        return wc.TableKeysRead(command.request_id, command.segment, keys, token)

    async def read_table_entries(self, command: wc.ReadTableEntries):
        entries, token = self._table_page(command, command.suggested_entry_count)
        return wc.TableEntriesRead(command.request_id, command.segment, [wc.TableEntry(*entry) for entry in entries],
                                   token)

    def _table_page(self, command: wc.ReadTableKeys | wc.ReadTableEntries, count: int):
        """One page of a table iteration: after the token, with the prefix and key range asked for."""
        return self._container_for(command.segment).read_table_page(
            command.segment, command.continuation_token, count, MAX_TABLE_REPLY_BYTES, command.prefix_filter,
            command.from_key, command.to_key)

    async def read_table_entries_delta(self, command: wc.ReadTableEntriesDelta):
        """The change-log page from the command's position (Java's semantics, protocol reference §3.8.8)."""
        name = command.segment
        delta = await self._container_for(name).read_table_delta(name, command.from_position,
                                                                 command.suggested_entry_count, MAX_TABLE_REPLY_BYTES)
        return wc.TableEntriesDeltaRead(command.request_id, name, [wc.TableEntry(*entry) for entry in delta.entries],
                                        False, delta.reached_end, delta.last_position)

    # ------------------------------------------------------------------ admin

    async def flush_to_storage(self, command: wc.FlushToStorage):
        """Flushes one container (or every container for a negative id) to Tier-2.

        A container this store does not run gets WrongHost, as any request about a container it
        does not own (a controller checks its container count this way: ``controller/app.py``).
        """
        containers = self._container_by_id(command.container_id)
        if not containers and command.container_id >= 0:
            return wc.WrongHost(command.request_id, "", "", "")
        await asyncio.gather(*(container.flush_to_storage() for container in containers))
        return wc.StorageFlushed(command.request_id)

    async def list_storage_chunks(self, command: wc.ListStorageChunks):
        chunks = await self._container_for(command.segment).storage_chunks(command.segment)
        return wc.StorageChunksListed(command.request_id, tuple(
            wc.ChunkInfo(chunk.length, chunk.length, chunk.start_offset, chunk.name, chunk.exists_in_storage)
            for chunk in chunks))

    async def locate_offset(self, command: wc.LocateOffset):
        """The first event boundary at or after the target offset (server/containers/boundaries.py).

        A target at or below the segment's start offset answers the start offset, one at or past
        its length answers the length; otherwise the smallest offset ``b >= target`` where an
        event envelope starts (or the length). Bytes that are not enveloped events (a byte stream,
        garbage) and table or transient segments answer the length. Sealed segments are answered
        like any other; a missing segment gets NoSuchSegment, as other requests do.
        """
        name = command.segment
        try:
            offset = await self._container_for(name).locate_offset(name, command.target_offset)
        except errors.SegmentStoreError as error:
            return error_reply(error, command.request_id, name, operation="locateOffset")
        return wc.OffsetLocated(command.request_id, name, offset)


_OPERATION_NAMES = {wc.ReadTableKeys: "readTableKeys", wc.ReadTableEntries: "readTableEntries",
                    wc.ReadTableEntriesDelta: "readTableEntriesDelta"}


def _source_event_count(container, source: str) -> int:
    """What merging ``source`` adds to the target's EVENT_COUNT (a transient source counts as 1)."""
    if naming.is_transient_segment(source):
        return 1
    try:
        count = container.get_attribute(source, containers.EVENT_COUNT)
    except errors.NoSuchSegment:
        return 0
    return 0 if count == NULL_ATTRIBUTE_VALUE else count


__all__ = ["RequestHandlers", "check_segment_name"]
