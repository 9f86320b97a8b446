"""The segment-store side of transactions: create, merge, delete, seal (spec §5.4, §6.5, §6.12).

Names. A transaction's segment for parent number ``n`` is the qualified name of the
*generalised* id ``segment_id(n, transaction_epoch)`` followed by ``#transaction.<32 hex>``:
the transaction epoch replaces the parent's creation epoch, exactly as the client computes it
from the ids that createTransaction returns. A merge targets the parent's *actual* name.

Every call here is idempotent on the segment store (create: "already exists" is success;
delete: "no such segment" is success; seal: "already sealed" is success; MergeSegmentsBatch:
a source already merged into the target answers the target's length), so a re-driven step may
repeat any of them. Calls on different segments run concurrently, at most
``SEGMENT_CALLS_CONCURRENT_MAX`` at a time.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Awaitable, Iterable, Sequence, TypeVar

from clients.segment_store_client import SegmentStoreClient
from wire.naming import segment_id, segment_number_of, stream_segment_name, transaction_segment_name

SEGMENT_CALLS_CONCURRENT_MAX = 64
NO_SCALING = 0  # ScaleType byte for segments that never auto-scale (transaction segments, txn duplicates)

Result = TypeVar("Result")


def generalised_segment_id(parent_segment_id: int, transaction_epoch: int) -> int:
    """The parent's number with the transaction epoch in place of its creation epoch."""
    return segment_id(segment_number_of(parent_segment_id), transaction_epoch)


def transaction_segment(scope: str, stream: str, parent_segment_id: int, transaction_epoch: int,
                        transaction_id: uuid.UUID) -> str:
    """The name the client writes a transaction's events for ``parent_segment_id`` to."""
    parent = stream_segment_name(scope, stream, generalised_segment_id(parent_segment_id, transaction_epoch))
    return transaction_segment_name(parent, transaction_id)


async def _bounded(calls: Iterable[Awaitable[Result]]) -> list[Result]:
    """Runs the calls concurrently, at most SEGMENT_CALLS_CONCURRENT_MAX at once; results in order."""
    limit = asyncio.Semaphore(SEGMENT_CALLS_CONCURRENT_MAX)

    async def run(call: Awaitable[Result]) -> Result:
        async with limit:
            return await call

    return list(await asyncio.gather(*(run(call) for call in calls)))


async def create_transaction_segments(client: SegmentStoreClient, scope: str, stream: str,
                                      parent_segment_ids: Sequence[int], transaction_epoch: int,
                                      transaction_id: uuid.UUID) -> None:
    """CreateSegment(txn name, scale type 0, rate 0) for every parent (existing ones are fine)."""
    await _bounded(client.create_segment(transaction_segment(scope, stream, parent, transaction_epoch,
                                                             transaction_id), NO_SCALING, 0)
                   for parent in parent_segment_ids)


async def delete_transaction_segments(client: SegmentStoreClient, scope: str, stream: str,
                                      parent_segment_ids: Sequence[int], transaction_epoch: int,
                                      transaction_id: uuid.UUID) -> None:
    """DeleteSegment for every transaction segment (missing ones are fine)."""
    await _bounded(client.delete_segment(transaction_segment(scope, stream, parent, transaction_epoch,
                                                             transaction_id))
                   for parent in parent_segment_ids)


async def merge_transactions(client: SegmentStoreClient, scope: str, stream: str, target_segment_ids: Sequence[int],
                             transaction_epoch: int, transaction_ids: Sequence[uuid.UUID]
                             ) -> dict[uuid.UUID, dict[int, int]]:
    """MergeSegmentsBatch into every target: its transaction segments, in ``transaction_ids`` order.

    Returns, per transaction, the target offsets right after its merge (for writer marks).
    """
    async def merge_into(target: int) -> list[int]:
        sources = [transaction_segment(scope, stream, target, transaction_epoch, transaction_id)
                   for transaction_id in transaction_ids]
        return await client.merge_segments_batch(stream_segment_name(scope, stream, target), sources)

    lengths = await _bounded(merge_into(target) for target in target_segment_ids)
    offsets: dict[uuid.UUID, dict[int, int]] = {transaction_id: {} for transaction_id in transaction_ids}
    for target, target_lengths in zip(target_segment_ids, lengths):
        for transaction_id, length in zip(transaction_ids, target_lengths):
            offsets[transaction_id][target] = length
    return offsets


async def create_segments(client: SegmentStoreClient, scope: str, stream: str, segment_ids: Sequence[int],
                          scale_type: int, target_rate: int, rollover_size_bytes: int = 0) -> None:
    await _bounded(client.create_segment(stream_segment_name(scope, stream, segment), scale_type, target_rate,
                                         rollover_size_bytes)
                   for segment in segment_ids)


async def seal_segments(client: SegmentStoreClient, scope: str, stream: str,
                        segment_ids: Sequence[int]) -> dict[int, int]:
    """Seals the segments. Returns each one's final length (for the sealed-sizes records)."""
    async def seal(segment: int) -> int:
        name = stream_segment_name(scope, stream, segment)
        await client.seal_segment(name)
        return (await client.segment_info(name)).write_offset

    sizes = await _bounded(seal(segment) for segment in segment_ids)
    return dict(zip(segment_ids, sizes))
