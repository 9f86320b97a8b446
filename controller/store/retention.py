"""Truncation record, retention set + stream-cut records, and sealed-segment sizes (spec §6.6, §6.9).

Retention keeps one small index (the retention set: time and size of every recorded cut) and
one record per cut, as PDP-32 prescribes, so recording a cut rewrites a list of 16-byte rows
instead of every cut ever taken. The set and a new cut are written in one batch; dropping old
cuts shrinks the set first, so the set never names a missing cut (an orphaned cut record left
by a crash is harmless and is removed by the next purge).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from . import layout
from .errors import WriteConflict
from .key_value import ABSENT, Write
from .records import RetentionSet, SealedSizesShard, StreamCutRecord, TruncationRecord
from .scale import sealed_size_writes
from .stream_store import StreamStore


async def get_truncation(stream: StreamStore) -> tuple[TruncationRecord, int]:
    return await stream.read(layout.TRUNCATION, TruncationRecord)


async def start_truncation(stream: StreamStore, record: TruncationRecord) -> int:
    """Writes the new truncation record with ``updating`` set. Returns its version.

    Raises:
        WriteConflict: another truncation is in progress (its record is still updating).
    """
    current, version = await get_truncation(stream)
    if current.updating:
        if current == dataclasses.replace(record, updating=True):
            return version  # this truncation, re-driven
        raise WriteConflict(f"{stream}: another truncation is in progress", stream.tables.metadata, layout.TRUNCATION)
    updated = dataclasses.replace(record, updating=True)
    return await stream.kv.replace(stream.tables.metadata, layout.TRUNCATION, updated.encode(), version)


async def complete_truncation(stream: StreamStore) -> TruncationRecord:
    """Clears ``updating`` and the segments to delete (they are gone now). Idempotent."""
    current, version = await get_truncation(stream)
    if not current.updating:
        return current
    completed = dataclasses.replace(current, updating=False, to_delete=frozenset())
    await stream.kv.replace(stream.tables.metadata, layout.TRUNCATION, completed.encode(), version)
    return completed


async def get_retention_set(stream: StreamStore) -> tuple[RetentionSet, int]:
    return await stream.read(layout.RETENTION_SET, RetentionSet)


async def add_stream_cut(stream: StreamStore, record: StreamCutRecord) -> None:
    """Stores a retention stream cut and appends it to the retention set, in one batch.

    Raises:
        AlreadyExists: a cut was already recorded at that time.
        WriteConflict: the retention set changed concurrently.
    """
    retention, version = await get_retention_set(stream)
    if any(time >= record.recording_time for time, _ in retention.records):
        raise WriteConflict(f"{stream}: stream cuts must be recorded in time order", stream.tables.metadata,
                            layout.RETENTION_SET)
    updated = RetentionSet(retention.records + ((record.recording_time, record.recording_size),))
    await stream.write([Write(layout.stream_cut_key(record.recording_time), record.encode(), ABSENT),
                        Write(layout.RETENTION_SET, updated.encode(), version)])


async def get_stream_cut(stream: StreamStore, recording_time: int) -> StreamCutRecord:
    """Raises NotFound if no cut was recorded at that time."""
    record, _ = await stream.read(layout.stream_cut_key(recording_time), StreamCutRecord)
    return record


async def remove_stream_cuts_through(stream: StreamStore, recording_time: int) -> int:
    """Drops every recorded cut at or before ``recording_time``. Returns how many were dropped."""
    retention, version = await get_retention_set(stream)
    dropped = [time for time, _ in retention.records if time <= recording_time]
    if not dropped:
        return 0
    kept = RetentionSet(tuple(row for row in retention.records if row[0] > recording_time))
    await stream.kv.replace(stream.tables.metadata, layout.RETENTION_SET, kept.encode(), version)
    await stream.kv.remove_batch(stream.tables.metadata, [(layout.stream_cut_key(time), None) for time in dropped])
    return len(dropped)


async def get_sealed_sizes(stream: StreamStore, segment_ids: Iterable[int]) -> dict[int, int]:
    """Sizes at sealing of the given segments, reading each shard once. Unknown segments are left out."""
    segment_ids = list(segment_ids)
    keys = stream.sizes.sealed_sizes_keys(segment_ids)
    if not keys:
        return {}
    merged: dict[int, int] = {}
    for found in await stream.kv.get_many(stream.tables.metadata, keys):
        if found is not None:
            merged.update(SealedSizesShard.decode(found.value).sizes)
    return {segment_id: merged[segment_id] for segment_id in segment_ids if segment_id in merged}


async def record_sealed_sizes(stream: StreamStore, sealed_sizes: dict[int, int]) -> None:
    """Adds sizes to their shards (read once, written in one conditional batch)."""
    keys = stream.sizes.sealed_sizes_keys(sealed_sizes)
    if not keys:
        return
    found = dict(zip(keys, await stream.kv.get_many(stream.tables.metadata, keys), strict=True))  # one per key
    await stream.write(sealed_size_writes(found, sealed_sizes, stream.sizes))

