"""Stream management on the client: scopes, streams, policies, scaling, cuts, sealing, deletion.

Every call validates names locally first (an invalid name never costs a round
trip) and then goes to the controller through :class:`ControllerClient`.
Creating something that exists returns False, as Pravega's StreamManager does;
deleting something missing returns False.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from .controller_client import Controller, ControllerClient
from .errors import InvalidArgument
from .model import Segment, SegmentRange, StreamConfiguration, Successors, check_scope_name, check_stream_name
from .segment_stores import SegmentStores
from .stream_cut import StreamCut, parse_stream_cut

_INTERNAL_STREAM_PREFIXES = ("_MARK", "_RG")


async def current_tail(controller: Controller, stores: SegmentStores, scope: str, stream: str) -> StreamCut:
    """The stream cut at the tail now: the length of every active segment (empty once sealed)."""
    ranges = await controller.get_current_segments(scope, stream)
    infos = await asyncio.gather(*(stores.raw.segment_info(r.segment.qualified_name) for r in ranges))
    positions = {r.segment.segment_id: info.write_offset for r, info in zip(ranges, infos, strict=True)}
    return StreamCut(scope, stream, positions)


class StreamManagement:
    """Scope and stream administration (mixed into :class:`~clients.client.Client`)."""

    _controller: ControllerClient
    _stores: SegmentStores

    # ------------------------------------------------------------------ scopes

    async def create_scope(self, scope: str) -> bool:
        """Creates ``scope``; False if it existed. Raises InvalidArgument for a bad name."""
        return await self._controller.create_scope(check_scope_name(scope))

    async def scope_exists(self, scope: str) -> bool:
        return await self._controller.scope_exists(check_scope_name(scope))

    async def delete_scope(self, scope: str, *, recursive: bool = False) -> bool:
        """Deletes ``scope``; False if it did not exist.

        Raises:
            ScopeNotEmpty: it still holds streams, reader groups or tables (and ``recursive`` is False).
        """
        return await self._controller.delete_scope(check_scope_name(scope), recursive)

    async def list_scopes(self) -> AsyncIterator[str]:
        """Every scope, page by page."""
        async for scope in self._controller.list_scopes():
            yield scope

    # ------------------------------------------------------------------ streams

    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None) -> bool:
        """Creates ``scope/stream`` (one fixed segment by default); False if it existed.

        Raises:
            InvalidArgument: a bad name or configuration.
            ScopeNotFound: the scope does not exist.
        """
        return await self._controller.create_stream(check_scope_name(scope), check_stream_name(stream),
                                                    config or StreamConfiguration())

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Replaces the stream's policies and tags. Raises StreamNotFound, StreamSealed."""
        await self._controller.update_stream(check_scope_name(scope), check_stream_name(stream), config)

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        """Raises StreamNotFound."""
        return await self._controller.get_stream_configuration(check_scope_name(scope), check_stream_name(stream))

    async def stream_exists(self, scope: str, stream: str) -> bool:
        return await self._controller.stream_exists(check_scope_name(scope), check_stream_name(stream))

    async def list_streams(self, scope: str, *, tag: str | None = None,
                           include_internal: bool = False) -> AsyncIterator[str]:
        """The streams of ``scope`` (those carrying ``tag`` if given), page by page.

        Internal streams (``_MARK...`` and ``_RG...``) are left out unless ``include_internal``.

        Raises:
            ScopeNotFound: the scope does not exist.
        """
        async for stream in self._controller.list_streams(check_scope_name(scope), tag):
            if include_internal or not stream.startswith(_INTERNAL_STREAM_PREFIXES):
                yield stream

    async def seal_stream(self, scope: str, stream: str) -> None:
        """Seals the stream: nothing more can be written. Raises StreamNotFound."""
        await self._controller.seal_stream(check_scope_name(scope), check_stream_name(stream))

    async def delete_stream(self, scope: str, stream: str) -> bool:
        """Deletes a sealed stream; False if it did not exist. Raises StreamNotSealed."""
        return await self._controller.delete_stream(check_scope_name(scope), check_stream_name(stream))

    async def truncate_stream(self, cut: StreamCut | str) -> None:
        """Drops the stream's data before ``cut`` (a StreamCut or its text form).

        Raises:
            InvalidArgument: not a valid cut of the stream, or behind its current head.
            StreamNotFound, StreamSealed.
        """
        cut = parse_stream_cut(cut)
        if cut.is_unbounded:
            raise InvalidArgument("cannot truncate at the unbounded cut")
        await self._controller.truncate_stream(cut)

    # ------------------------------------------------------------------ segments, scaling, cuts

    async def get_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The stream's active segments with their key ranges (empty when sealed)."""
        return await self._controller.get_current_segments(check_scope_name(scope), check_stream_name(stream))

    async def get_successors(self, segment: Segment) -> Successors:
        """The segments that replaced ``segment`` when it was sealed by a scale, each with its predecessors
        (none: the segment is active, or its stream was sealed)."""
        return await self._controller.get_successors(segment)

    async def scale_stream(self, scope: str, stream: str, sealed: Iterable[Segment | int],
                           new_ranges: Iterable[tuple[float, float]]) -> list[SegmentRange]:
        """Replaces ``sealed`` segments by new ones over ``new_ranges``; returns once done.

        ``new_ranges`` must exactly cover the key ranges of the sealed segments.

        Raises:
            InvalidArgument: bad ranges, or a segment that is not active.
            OperationFailed: the controller refused (another scale pending, stream sealed).
        """
        ids = [segment.segment_id if isinstance(segment, Segment) else int(segment) for segment in sealed]
        return await self._controller.scale(check_scope_name(scope), check_stream_name(stream), ids,
                                            [(float(low), float(high)) for low, high in new_ranges])

    async def head_cut(self, scope: str, stream: str) -> StreamCut:
        """The stream cut at the head: where a reader from the beginning starts."""
        return await self._controller.get_head_cut(check_scope_name(scope), check_stream_name(stream))

    async def tail_cut(self, scope: str, stream: str) -> StreamCut:
        """The stream cut at the tail: the current length of every active segment."""
        return await current_tail(self._controller, self._stores, check_scope_name(scope), check_stream_name(stream))

    async def segments_between(self, start: StreamCut, end: StreamCut) -> list[Segment]:
        """Every segment between two cuts of one stream (unbounded: the head / the tail)."""
        named = start if not start.is_unbounded else end
        if named.is_unbounded:
            raise InvalidArgument("at least one cut must name the stream")
        return await self._controller.get_segments_between(named.scope, named.stream, start, end)
