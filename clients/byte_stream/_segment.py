"""What the byte-stream writer and reader share: finding the one segment, its offsets, waiting for change."""

from __future__ import annotations

import asyncio

from wire import commands as wc

from ..controller_client import Controller
from ..errors import InvalidArgument, NoSuchSegment, StreamNotFound
from ..segment_stores import SegmentStores


async def locate_segment(controller: Controller, scope: str, stream: str) -> str:
    """The qualified name of the one segment of byte stream ``scope/stream``.

    Returns:
        ``scope/stream/N.#epoch.E``: the one current segment, or (a sealed stream has none) the one
        segment of the stream's head cut.
    Raises:
        StreamNotFound: no such stream.
        InvalidArgument: the stream has more than one segment, so it is not a byte stream.
    """
    ranges = await controller.get_current_segments(scope, stream)
    if ranges:
        segments = [segment_range.segment for segment_range in ranges]
    else:
        segments = list((await controller.get_head_cut(scope, stream)).segments)
    if len(segments) != 1:
        raise InvalidArgument(f"{scope}/{stream} has {len(segments)} segments; a byte stream has exactly one")
    return segments[0].qualified_name


async def segment_info(stores: SegmentStores, segment: str) -> wc.StreamSegmentInfo:
    """The segment's current state (``start_offset``, ``write_offset``, ``is_sealed``).

    Raises:
        StreamNotFound: the segment no longer exists (the stream was deleted).
        ConnectionFailed, RequestTimeout: the segment store could not be asked.
    """
    try:
        return await stores.raw.segment_info(segment)
    except NoSuchSegment:
        raise StreamNotFound(f"segment {segment} no longer exists") from None


class Change:
    """A level-triggered "something changed" signal for coroutines waiting on a flow's state.

    Waiters check their condition, then ``await wait()``; ``notify()`` wakes every waiter.
    Checking and waiting happen in one step of the event loop, so no notification is lost.
    """

    def __init__(self) -> None:

        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wakes every coroutine waiting in :meth:`wait`."""
        self._event.set()

    async def wait(self, timeout: float | None = None) -> None:
        """Returns at the next ``notify`` (or after ``timeout`` seconds)."""
        self._event.clear()
        if timeout is None:
            await self._event.wait()
            return
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            pass
