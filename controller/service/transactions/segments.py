"""The segment-store side of transactions: create, merge, delete (spec §5.4, §6.5, §6.12).

Names. A transaction's segment for parent number ``n`` is the qualified name of the
*generalised* id ``segment_id(n, transaction_epoch)`` followed by ``#transaction.<32 hex>``:
the transaction epoch replaces the parent's creation epoch, exactly as the client computes it
from the ids that createTransaction returns. A merge targets the parent's *actual* name.

Every call here is idempotent on the segment store (create: "already exists" is success;
delete: "no such segment" is success; MergeSegmentsBatch: a source already merged into the
target answers the target's length), so a re-driven step may repeat any of them. Calls on
different segments run concurrently, at most ``segment_calls_concurrency_max`` at a time
(``segment_calls.bounded_gather``); creating and sealing whole segments is ``SegmentCalls``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence

from wire.naming import segment_id, segment_number_of, stream_segment_name, transaction_segment_name

from ..context import ControllerContext
from ..segment_calls import bounded_gather

NO_SCALING = 0  # ScaleType byte for transaction segments, which never auto-scale


def generalised_segment_id(parent_segment_id: int, transaction_epoch: int) -> int:
    """The parent's number with the transaction epoch in place of its creation epoch."""
    return segment_id(segment_number_of(parent_segment_id), transaction_epoch)


def transaction_segment(scope: str, stream: str, parent_segment_id: int, transaction_epoch: int,
                        transaction_id: uuid.UUID) -> str:
    """The name the client writes a transaction's events for ``parent_segment_id`` to."""
    parent = stream_segment_name(scope, stream, generalised_segment_id(parent_segment_id, transaction_epoch))
    return transaction_segment_name(parent, transaction_id)


async def create_transaction_segments(context: ControllerContext, scope: str, stream: str,
                                      parent_segment_ids: Sequence[int], transaction_epoch: int,
                                      transaction_id: uuid.UUID) -> None:
    """CreateSegment(txn name, scale type 0, rate 0) for every parent (existing ones are fine)."""
    names = [transaction_segment(scope, stream, parent, transaction_epoch, transaction_id)
             for parent in parent_segment_ids]
    await bounded_gather([functools.partial(context.segments.create_segment, name, NO_SCALING, 0) for name in names],
                         context.settings.segment_calls_concurrency_max)


async def delete_transaction_segments(context: ControllerContext, scope: str, stream: str,
                                      parent_segment_ids: Sequence[int], transaction_epoch: int,
                                      transaction_id: uuid.UUID) -> None:
    """DeleteSegment for every transaction segment (missing ones are fine)."""
    names = [transaction_segment(scope, stream, parent, transaction_epoch, transaction_id)
             for parent in parent_segment_ids]
    await bounded_gather([functools.partial(context.segments.delete_segment, name) for name in names],
                         context.settings.segment_calls_concurrency_max)


async def merge_transactions(context: ControllerContext, scope: str, stream: str, target_segment_ids: Sequence[int],
                             transaction_epoch: int, transaction_ids: Sequence[uuid.UUID]
                             ) -> dict[uuid.UUID, dict[int, int]]:
    """MergeSegmentsBatch into every target: its transaction segments, in ``transaction_ids`` order.

    Returns, per transaction, the target offsets right after its merge (for writer marks).
    """
    async def merge_into(target: int) -> list[int]:
        sources = [transaction_segment(scope, stream, target, transaction_epoch, transaction_id)
                   for transaction_id in transaction_ids]
        return await context.segments.merge_segments_batch(stream_segment_name(scope, stream, target), sources)

    lengths = await bounded_gather([functools.partial(merge_into, target) for target in target_segment_ids],
                                   context.settings.segment_calls_concurrency_max)
    offsets: dict[uuid.UUID, dict[int, int]] = {transaction_id: {} for transaction_id in transaction_ids}
    for target, target_lengths in zip(target_segment_ids, lengths, strict=True):  # one result per target
        for transaction_id, length in zip(transaction_ids, target_lengths, strict=True):  # one per source
            offsets[transaction_id][target] = length
    return offsets
