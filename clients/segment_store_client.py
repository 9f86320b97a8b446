"""Raw segment and table-segment calls to segment stores, over pooled wire connections.

One multiplexed connection per endpoint (requests are pipelined by request id),
re-established on failure. ``endpoint_for(segment)`` says where a segment lives
(standalone: always the same store; with a controller: its getURI answer).
Error replies become typed exceptions (``clients.errors``); calls retry
``retriable`` failures with exponential backoff, a bounded number of times.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeAlias, TypeVar

from coordination.retry import Backoff, retry
from wire import commands as wc
from wire.base import Reply, Request
from wire.constants import NO_VERSION
from wire.fields import BytesLike

from . import errors
from .connection import ConnectionCache, Endpoint, WireConnection, next_request_id

R = TypeVar("R", bound=Reply)

Expected: TypeAlias = type[R] | tuple[type[R], ...]
"""The reply class (or classes) that mean success."""

EndpointFor: TypeAlias = Callable[[str], Endpoint | Awaitable[Endpoint]] | Endpoint
"""Where a segment lives: a fixed endpoint, or a function of the segment name (maybe async)."""

_ERRORS: dict[type[Reply], type[errors.ServerError]] = {
    wc.NoSuchSegment: errors.NoSuchSegment,
    wc.SegmentIsSealed: errors.SegmentSealed,
    wc.SegmentIsTruncated: errors.SegmentTruncated,
    wc.SegmentAlreadyExists: errors.SegmentExists,
    wc.TableKeyBadVersion: errors.TableKeyBadVersion,
    wc.TableKeyDoesNotExist: errors.TableKeyDoesNotExist,
    wc.TableSegmentNotEmpty: errors.TableNotEmpty,
    wc.WrongHost: errors.WrongHost,
    wc.OperationUnsupported: errors.Unsupported,
    wc.ErrorMessage: errors.IllegalArgument,
}


def raise_for(reply: Reply, expected: Expected[R]) -> R:
    """Returns ``reply`` if it is one of ``expected``; raises its typed error otherwise."""
    if isinstance(reply, expected):
        return reply
    if isinstance(reply, wc.SegmentAttributeUpdated) and not reply.success:
        raise errors.AttributeConditionFailed(reply)
    if isinstance(reply, wc.AuthTokenCheckFailed):
        if reply.error_code == wc.AuthTokenCheckFailed.TOKEN_EXPIRED:
            raise errors.TokenExpired(reply)
        raise errors.TokenRejected(reply)
    raise _ERRORS.get(type(reply), errors.ServerError)(reply)


class SegmentStoreClient:
    """Raw segment and table-segment calls. ``endpoint_for(segment)`` says where a segment lives: an
    endpoint, or a function of the segment name returning one (or an awaitable of one)."""

    def __init__(self, endpoint_for: EndpointFor, *,
                 attempts: int = 5, backoff_seconds: float = 0.01, request_timeout: float = 30.0,
                 on_wrong_host: Callable[[str], None] | None = None, connect_timeout: float = 10.0,
                 keepalive_seconds: float | None = None, retry_policy: Backoff | None = None,
                 token: Callable[[str], str] = lambda _segment: "", ssl_context: ssl.SSLContext | None = None,
                 on_token_expired: Callable[[str], None] = lambda _segment: None):
        self._endpoint_for: Callable[[str], Endpoint | Awaitable[Endpoint]] = (
            endpoint_for if callable(endpoint_for) else (lambda _segment: endpoint_for))
        self._connections = ConnectionCache(connect_timeout, keepalive_seconds, ssl_context)
        self._connect_timeout, self._ssl_context = connect_timeout, ssl_context  # one-shot append connections
        self._retry = retry_policy or Backoff(initial_seconds=backoff_seconds, multiplier=10.0, max_delay_seconds=2.0,
                                              attempts=attempts, jitter=0.0)
        self._timeout = request_timeout
        self._on_wrong_host = on_wrong_host
        self._token = token  # segment -> the delegation token to send with requests about it ("": auth is off)
        self._on_token_expired = on_token_expired  # a store found it expired: the retry needs a new one

    async def close(self) -> None:
        await self._connections.close()

    async def call(self, segment: str, make_request: Callable[[int], Request], expected: Expected[R]) -> R:
        """Sends ``make_request(request_id)`` to the store owning ``segment``, retrying retriable failures.

        Returns:
            The reply, one of ``expected``.
        Raises:
            The typed error of an error reply (clients.errors), or the last retriable failure.
        """
        async def attempt() -> R:
            endpoint = self._endpoint_for(segment)
            if not isinstance(endpoint, tuple):
                endpoint = await endpoint
            try:
                connection = await self._connections.get(endpoint)
                reply = await connection.request(make_request(next_request_id()), self._timeout)
            except errors.ConnectionFailed:
                if self._on_wrong_host is not None:  # the store is gone or silent: ask where the segment lives now
                    self._on_wrong_host(segment)
                raise
            if isinstance(reply, wc.WrongHost) and self._on_wrong_host is not None:
                self._on_wrong_host(segment)
            elif isinstance(reply, wc.AuthTokenCheckFailed):
                self._on_token_expired(segment)
            return raise_for(reply, expected)

        return await retry(attempt, self._retry)

    async def runs_container(self, endpoint: Endpoint, container_id: int, wait_seconds: float = 2.0) -> bool:
        """Whether the store at ``endpoint`` runs container ``container_id``.

        Asks with FlushToStorage, which a store answers with WrongHost for a container it does not
        run; a flush still going after ``wait_seconds`` means it does run it (and goes on there).
        """
        connection = await self._connections.get(endpoint)
        try:
            reply = await connection.request(wc.FlushToStorage(container_id, self._token(""), next_request_id()),
                                             wait_seconds)
        except errors.RequestTimeout:
            return True
        return not isinstance(reply, wc.WrongHost)

    # ------------------------------------------------------------------ segments

    async def _call_unless(self, already_done: type[errors.ServerError], segment: str,
                           make_request: Callable[[int], Request], expected: Expected[R]) -> bool:
        """``call``, where the error ``already_done`` means the work was done before: returns False then."""
        try:
            await self.call(segment, make_request, expected)
            return True
        except already_done:
            return False

    async def create_segment(self, name: str, scale_type: int = 0, target_rate: int = 0,
                             rollover_size_bytes: int = 0) -> bool:
        """Creates a stream segment; False if it already existed."""
        return await self._call_unless(errors.SegmentExists, name, lambda rid: wc.CreateSegment(
            rid, name, target_rate, scale_type, self._token(name), rollover_size_bytes), (wc.SegmentCreated,))

    async def seal_segment(self, name: str) -> None:
        """Seals a segment (already sealed counts as done)."""
        await self._call_unless(errors.SegmentSealed, name, lambda rid: wc.SealSegment(rid, name, self._token(name)),
                                (wc.SegmentSealed,))

    async def delete_segment(self, name: str) -> bool:
        """Deletes a segment; False if it did not exist."""
        return await self._call_unless(errors.NoSuchSegment, name,
                                       lambda rid: wc.DeleteSegment(rid, name, self._token(name)),
                                       (wc.SegmentDeleted,))

    async def truncate_segment(self, name: str, offset: int) -> None:
        await self.call(name, lambda rid: wc.TruncateSegment(rid, name, offset, self._token(name)),
                        (wc.SegmentTruncated,))

    async def segment_info(self, name: str) -> wc.StreamSegmentInfo:
        return await self.call(name, lambda rid: wc.GetStreamSegmentInfo(rid, name, self._token(name)),
                               (wc.StreamSegmentInfo,))

    async def locate_offset(self, name: str, target: int) -> int:
        """The first event boundary of ``name`` at or after ``target`` (LocateOffset).

        A target at or below the segment's start offset gives the start offset, one at or past its
        length gives the length. Raises NoSuchSegment (and the other typed errors) as calls do.
        """
        reply = await self.call(name, lambda rid: wc.LocateOffset(rid, name, target, self._token(name)),
                                (wc.OffsetLocated,))
        return reply.offset

    async def update_segment_policy(self, name: str, scale_type: int, target_rate: int) -> None:
        await self.call(name, lambda rid: wc.UpdateSegmentPolicy(rid, name, target_rate, scale_type, self._token(name)),
                        (wc.SegmentPolicyUpdated,))

    async def merge_segments_batch(self, target: str, sources: list[str]) -> list[int]:
        """Merges sources into target in order; returns the target length after each."""
        reply = await self.call(target, lambda rid: wc.MergeSegmentsBatch(rid, target, sources, self._token(target)),
                                (wc.SegmentsBatchMerged,))
        return [merged.new_target_write_offset for merged in reply.merged]

    async def get_attribute(self, name: str, attribute_id: uuid.UUID) -> int:
        reply = await self.call(name, lambda rid: wc.GetSegmentAttribute(rid, name, attribute_id, self._token(name)),
                                (wc.SegmentAttribute,))
        return reply.value

    async def update_attribute(self, name: str, attribute_id: uuid.UUID, value: int, expected: int) -> bool:
        """Compare-and-set of one attribute (``expected`` NULL_ATTRIBUTE_VALUE: unset). Returns whether it was set."""
        try:
            await self.call(name, lambda rid: wc.UpdateSegmentAttribute(rid, name, attribute_id, value, expected,
                                                                        self._token(name)),
                            (wc.SegmentAttributeUpdated,))
        except errors.AttributeConditionFailed:
            return False
        return True

    async def read_segment(self, name: str, offset: int, length: int) -> wc.SegmentRead:
        """Up to ``length`` bytes of ``name`` from ``offset``. Never ask at the segment's end: the
        store holds such a read until data comes (a tail read). Raises SegmentTruncated, NoSuchSegment."""
        return await self.call(name, lambda rid: wc.ReadSegment(name, offset, length, self._token(name), rid),
                               (wc.SegmentRead,))

    async def append_conditionally(self, name: str, writer_id: uuid.UUID, expected_offset: int,
                                   payload: BytesLike) -> int | None:
        """Appends one event (``payload`` in its envelope) if ``name``'s length is ``expected_offset``.

        Uses a connection of its own for the SetupAppend + ConditionalAppend pair (the writer's
        state lives on the connection), closed afterwards. Not retried: after a lost reply the
        append may or may not have happened, which the caller finds out by reading the segment.

        Returns:
            The segment's new length, or None if its length was not ``expected_offset``.
        Raises:
            The typed error of an error reply (NoSuchSegment, SegmentSealed, ...), ConnectionFailed.
        """
        endpoint = self._endpoint_for(name)
        if not isinstance(endpoint, tuple):
            endpoint = await endpoint
        connection = await WireConnection.connect(*endpoint, timeout=self._connect_timeout,
                                                  ssl_context=self._ssl_context)
        try:
            reply = await connection.request(wc.SetupAppend(next_request_id(), writer_id, name, self._token(name)),
                                             self._timeout)
            last = raise_for(reply, (wc.AppendSetup,)).last_event_number
            request_id = next_request_id()
            reply = await connection.request(wc.ConditionalAppend(writer_id, max(last, 0) + 1, expected_offset,
                                                                  payload, request_id), self._timeout)
            if isinstance(reply, wc.ConditionalCheckFailed):
                return None
            return raise_for(reply, (wc.DataAppended,)).current_segment_write_offset
        finally:
            await connection.close()

    # ------------------------------------------------------------------ table segments

    async def create_table(self, name: str, key_length: int = 0, rollover_size_bytes: int = 0) -> bool:
        """Creates a table segment (``key_length`` > 0: a fixed-key-length, sorted one); False if it existed."""
        return await self._call_unless(errors.SegmentExists, name, lambda rid: wc.CreateTableSegment(
            rid, name, self._token(name), False, key_length, rollover_size_bytes), (wc.SegmentCreated,))

    async def table_info(self, name: str) -> wc.TableSegmentInfo:
        """A table segment's length, live key count and fixed key length (0: a hash table)."""
        return await self.call(name, lambda rid: wc.GetTableSegmentInfo(rid, name, self._token(name)),
                               (wc.TableSegmentInfo,))

    async def delete_table(self, name: str, must_be_empty: bool = False) -> bool:
        """Deletes a table segment; False if it did not exist."""
        return await self._call_unless(errors.NoSuchSegment, name, lambda rid: wc.DeleteTableSegment(
            rid, name, must_be_empty, self._token(name)), (wc.SegmentDeleted,))

    async def update_table(self, name: str, entries: Iterable[tuple[BytesLike, int, BytesLike]],
                           table_offset: int = -1) -> list[int]:
        """Writes (key, version, value) entries atomically; returns their new versions.

        Raises TableKeyBadVersion / TableKeyDoesNotExist when a versioned key does not match.
        """
        table_entries = [wc.TableEntry(key, version, value) for key, version, value in entries]
        reply = await self.call(name, lambda rid: wc.UpdateTableEntries(rid, name, self._token(name), table_entries,
                                                                          table_offset),
                                (wc.TableEntriesUpdated,))
        return list(reply.updated_versions)

    async def remove_table_keys(self, name: str, keys: Iterable[tuple[BytesLike, int]], table_offset: int = -1) -> None:
        """Removes (key, version) pairs atomically (NO_VERSION: unconditionally)."""
        table_keys = [wc.TableKey(key, version) for key, version in keys]
        await self.call(name, lambda rid: wc.RemoveTableKeys(rid, name, self._token(name), table_keys, table_offset),
                        (wc.TableKeysRemoved,))

    async def read_table(self, name: str, keys: Iterable[BytesLike]) -> list[tuple[int, bytes] | None]:
        """The (version, value) of each key, or None where it is absent."""
        table_keys = [wc.TableKey(key, NO_VERSION) for key in keys]
        reply = await self.call(name, lambda rid: wc.ReadTable(rid, name, self._token(name), table_keys),
                                (wc.TableRead,))
        return [None if entry.version < 0 else (entry.version, bytes(entry.value)) for entry in reply.entries]

    async def read_table_entries(self, name: str, token: bytes = b"", count: int = 1000, prefix: bytes = b"",
                                 from_key: bytes = b"", to_key: bytes = b"") -> tuple[list[tuple[bytes, int, bytes]],
                                                                                      bytes]:
        """A page of (key, version, value) and the token to resume after it (empty when done): keys starting
        with ``prefix`` and, in a fixed-key-length table, from ``from_key`` to ``to_key`` (both included)."""
        reply = await self.call(name, lambda rid: wc.ReadTableEntries(rid, name, self._token(name), count, token,
                                                                      prefix, from_key,
                                                                      to_key), (wc.TableEntriesRead,))
        entries = [(bytes(e.key), e.version, bytes(e.value)) for e in reply.entries]
        return entries, bytes(reply.continuation_token)

    async def read_table_keys(self, name: str, token: bytes = b"", count: int = 1000, prefix: bytes = b"",
                              from_key: bytes = b"", to_key: bytes = b"") -> tuple[list[tuple[bytes, int]], bytes]:
        """A page of (key, version) and the token to resume after it (as ``read_table_entries``)."""
        reply = await self.call(name, lambda rid: wc.ReadTableKeys(rid, name, self._token(name), count, token,
                                                                   prefix, from_key,
                                                                   to_key), (wc.TableKeysRead,))
        return [(bytes(key.key), key.version) for key in reply.keys], bytes(reply.continuation_token)

    async def table_entries(self, name: str, page_size: int = 1000, prefix: bytes = b"", from_key: bytes = b"",
                            to_key: bytes = b"") -> AsyncIterator[tuple[bytes, int, bytes]]:
        """Every (key, version, value) of a table (within the prefix and range), page by page."""
        token = b""
        while True:
            entries, token = await self.read_table_entries(name, token, page_size, prefix, from_key, to_key)
            if not entries:
                return
            for entry in entries:
                yield entry


__all__ = ["SegmentStoreClient", "raise_for"]
