"""The segment-store work of the workflows: create, seal, truncate, delete and re-policy segments.

Every call tolerates repeats (spec §8 item 11): "already exists", "already sealed", "no such
segment" on delete and "already truncated" count as done, so a re-driven step may run them again.
Calls of one step run concurrently, at most ``segment_calls_concurrency_max`` at a time.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from clients import errors as client_errors
from controller_api.model import ScaleType, StreamConfiguration
from wire import naming

from .context import ControllerContext

Result = TypeVar("Result")


async def bounded_gather(calls: Iterable[Callable[[], Awaitable[Result]]], concurrency: int) -> list[Result]:
    """Runs the calls with at most ``concurrency`` in flight; results in call order. The first error wins."""
    semaphore = asyncio.Semaphore(concurrency)

    async def run(call: Callable[[], Awaitable[Result]]) -> Result:
        async with semaphore:
            return await call()

    return list(await asyncio.gather(*(run(call) for call in calls)))


def policy_of(configuration: StreamConfiguration) -> tuple[int, int]:
    """The (scale type byte, target rate) a segment is created with (spec §6.3 step 3)."""
    scaling = configuration.scaling
    if scaling.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return 0, 0
    return int(scaling.scale_type), scaling.target_rate


class SegmentCalls:
    """Segment-store calls for the segments of one stream."""

    def __init__(self, context: ControllerContext, scope: str, stream: str):
        self._client = context.segments
        self._concurrency = context.settings.segment_calls_concurrency_max
        self.scope = scope
        self.stream = stream

    def name(self, segment_id: int) -> str:
        return naming.stream_segment_name(self.scope, self.stream, segment_id)

    async def _each(self, segment_ids: Iterable[int], call: Callable[[str], Awaitable[Result]]) -> list[Result]:
        return await bounded_gather([functools.partial(call, self.name(segment_id)) for segment_id in segment_ids],
                                    self._concurrency)

    async def create(self, segment_ids: Iterable[int], configuration: StreamConfiguration) -> None:
        """Creates the segments with the stream's scaling policy and rollover size (existing ones are fine)."""
        scale_type, target_rate = policy_of(configuration)
        await self._each(segment_ids, lambda name: self._client.create_segment(
            name, scale_type, target_rate, configuration.rollover_size_bytes))

    async def seal(self, segment_ids: Iterable[int]) -> dict[int, int]:
        """Seals the segments and returns each one's final length (its size at sealing)."""
        segment_ids = list(segment_ids)

        async def seal_one(name: str) -> int:
            await self._client.seal_segment(name)
            return (await self._client.segment_info(name)).write_offset

        return dict(zip(segment_ids, await self._each(segment_ids, seal_one), strict=True))  # one result per id

    async def delete(self, segment_ids: Iterable[int]) -> None:
        """Deletes the segments (missing ones are fine)."""
        await self._each(segment_ids, self._client.delete_segment)

    async def truncate(self, offsets: dict[int, int]) -> None:
        """Truncates each segment at its offset ("already truncated further" is fine)."""
        async def truncate_one(segment_id: int) -> None:
            try:
                await self._client.truncate_segment(self.name(segment_id), offsets[segment_id])
            except client_errors.SegmentTruncated:
                pass

        await bounded_gather([functools.partial(truncate_one, segment_id) for segment_id in offsets],
                             self._concurrency)

    async def update_policy(self, segment_ids: Iterable[int], configuration: StreamConfiguration) -> None:
        scale_type, target_rate = policy_of(configuration)
        await self._each(segment_ids, lambda name: self._client.update_segment_policy(name, scale_type, target_rate))

    async def write_offsets(self, segment_ids: Iterable[int]) -> dict[int, int]:
        """The current length of each segment (for retention cuts and sizes)."""
        segment_ids = list(segment_ids)

        async def length(name: str) -> int:
            return (await self._client.segment_info(name)).write_offset

        return dict(zip(segment_ids, await self._each(segment_ids, length), strict=True))  # one result per id
