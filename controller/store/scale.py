"""Scale and rolling-transaction commits as idempotent, resumable steps (spec §6.4, §6.5; PDP-32).

Theory of operation. A scale moves the stream from epoch e to e + 1 in four steps; the caller
does the segment-store work in between (create the new segments before step 2, seal the old
ones between steps 2 and 3):

1. ``submit_scale``        write the epoch transition record (ETR); an identical one counts as done.
2. ``create_new_epoch``    ONE atomic batch: epoch record e + 1, its history delta (chunk), the time
                           index leaf (and root when a leaf opens), and the sealed-epoch record of
                           every sealed segment. Successor queries work from here on, before the
                           old segments are sealed. Done if epoch e + 1 already exists.
3. ``seal_old_segments``   ONE atomic batch: the sealed segments' sizes into their shards, and the
                           current-epoch pointer moved to e + 1. Done if the pointer has moved.
4. ``complete_scale``      reset the ETR and set SCALING -> ACTIVE, in one batch.

Each step reads what it needs in one store call and writes in one, conditional on the versions
it read, so a controller that crashes anywhere re-runs the same step and either finds it done or
does it; two controllers cannot both do it. Rolling transactions (``create_rolling_epochs``,
``complete_rolling_epochs``) append the two duplicate epochs with the same machinery.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import layout
from .errors import NotFound, ScaleConflict, WriteConflict
from .history import append_to_chunk, index_epoch
from .key_space import duplicate_epoch, next_epoch, plan_epoch_transition
from .key_value import ABSENT, Versioned, Write
from .records import (
    EMPTY_EPOCH_TRANSITION,
    EpochRecord,
    EpochTransitionRecord,
    HistoryChunk,
    HistoryIndexLeaf,
    HistoryIndexRoot,
    HistoryTimeSeriesRecord,
    SealedEpochRecord,
    SealedSizesShard,
    StateRecord,
)
from .states import State
from .stream_store import StreamStore


def same_transition(first: EpochTransitionRecord, second: EpochTransitionRecord) -> bool:
    """Equal up to the request time, which differs between retries of one request."""
    return (first.active_epoch, first.segments_to_seal, first.new_segments) == (
        second.active_epoch, second.segments_to_seal, second.new_segments)


async def submit_scale(stream: StreamStore, segments_to_seal: Sequence[int],
                       new_ranges: Sequence[tuple[float, float]], time: int) -> EpochTransitionRecord:
    """Step 1: records the scale as the pending epoch transition. Returns it (or the identical pending one).

    Raises:
        ScaleInputInvalid: the input does not describe a scale of the current epoch.
        ScaleConflict: a different scale is pending.
    """
    (current, _), (pending, version) = await stream.read_records(
        (layout.CURRENT_EPOCH, EpochRecord), (layout.EPOCH_TRANSITION, EpochTransitionRecord))
    planned = plan_epoch_transition(current, segments_to_seal, new_ranges, time)
    if not pending.is_empty:
        if same_transition(pending, planned):
            return pending
        raise ScaleConflict(f"{stream}: another scale from epoch {pending.active_epoch} is pending")
    try:
        await stream.kv.replace(stream.tables.metadata, layout.EPOCH_TRANSITION, planned.encode(), version)
    except WriteConflict:
        pending, _ = await stream.read(layout.EPOCH_TRANSITION, EpochTransitionRecord)
        if not same_transition(pending, planned):
            raise ScaleConflict(f"{stream}: another scale was submitted concurrently") from None
        return pending
    return planned


async def create_new_epoch(stream: StreamStore, transition: EpochTransitionRecord) -> EpochRecord:
    """Step 2: writes epoch ``transition.new_epoch`` with its history, index and sealed-epoch records.

    Returns the new epoch record (the stored one if the step was done before).

    Raises:
        ScaleConflict: the current epoch is not the transition's active epoch (a stale transition).
    """
    found = await _read_for_append(stream, transition.active_epoch, [transition.new_epoch])
    written = found[layout.epoch_key(transition.new_epoch)]
    if written is not None:
        return EpochRecord.decode(written.value)
    current = EpochRecord.decode(_required(found, layout.CURRENT_EPOCH).value)
    if current.epoch != transition.active_epoch:
        raise ScaleConflict(f"{stream}: transition from epoch {transition.active_epoch}, current is {current.epoch}")
    record, delta = next_epoch(current, transition)
    sealed_epochs = dict.fromkeys(transition.segments_to_seal, record.epoch)
    await stream.write(plan_epoch_appends(found, [(record, delta)], sealed_epochs, stream.sizes))
    return record


async def seal_old_segments(stream: StreamStore, transition: EpochTransitionRecord,
                            sealed_sizes: dict[int, int]) -> None:
    """Step 3: stores the sealed segments' final sizes and moves the current epoch to the new one."""
    await _move_current_epoch(stream, transition.active_epoch, transition.new_epoch, sealed_sizes)


async def complete_scale(stream: StreamStore, transition: EpochTransitionRecord) -> None:
    """Step 4: clears the ETR and sets SCALING -> ACTIVE (both in one batch; idempotent)."""
    (pending, transition_version), (state, state_version) = await stream.read_records(
        (layout.EPOCH_TRANSITION, EpochTransitionRecord), (layout.STATE, StateRecord))
    writes = []
    if same_transition(pending, transition):
        writes.append(Write(layout.EPOCH_TRANSITION, EMPTY_EPOCH_TRANSITION.encode(), transition_version))
    if state.state == State.SCALING:
        writes.append(Write(layout.STATE, StateRecord(State.ACTIVE).encode(), state_version))
    if writes:
        await stream.write(writes)


async def commit_scale(stream: StreamStore, transition: EpochTransitionRecord,
                       sealed_sizes: dict[int, int]) -> EpochRecord:
    """Steps 2-4 back to back, with the state moved to SCALING first (no segment-store work between)."""
    await stream.transition_state(State.SCALING, expected=State.ACTIVE)
    record = await create_new_epoch(stream, transition)
    await seal_old_segments(stream, transition, sealed_sizes)
    await complete_scale(stream, transition)
    return record


async def create_rolling_epochs(stream: StreamStore, transaction_epoch: int, active_epoch: int,
                                time: int) -> tuple[EpochRecord, EpochRecord]:
    """Rolling-transaction step: duplicate the txn epoch as ``active_epoch + 1`` and the active
    epoch as ``active_epoch + 2``, with history, index and sealed-epoch records, in one batch.

    Returns both duplicates (the stored ones if the step was done before).
    """
    first, second = active_epoch + 1, active_epoch + 2
    found = await _read_for_append(stream, active_epoch, [first, second], extra=[layout.epoch_key(transaction_epoch)])
    written = found[layout.epoch_key(first)]
    if written is not None:  # both duplicates are written in one batch
        return EpochRecord.decode(written.value), EpochRecord.decode(_required(found, layout.epoch_key(second)).value)
    current = EpochRecord.decode(_required(found, layout.CURRENT_EPOCH).value)
    if current.epoch != active_epoch:
        raise ScaleConflict(f"{stream}: rolling from epoch {active_epoch}, current is {current.epoch}")
    transaction_found = found[layout.epoch_key(transaction_epoch)]
    if transaction_found is None:
        raise NotFound(f"{stream}: no transaction epoch {transaction_epoch}")
    transaction_record = EpochRecord.decode(transaction_found.value)
    first_time = max(time, current.creation_time + 1)
    transaction_duplicate = duplicate_epoch(transaction_record, first, first_time)
    active_duplicate = duplicate_epoch(current, second, first_time + 1)
    sealed_epochs = {segment.segment_id: first for segment in current.segments}
    sealed_epochs.update({segment.segment_id: second for segment in transaction_duplicate[0].segments})
    await stream.write(plan_epoch_appends(found, [transaction_duplicate, active_duplicate], sealed_epochs,
                                          stream.sizes))
    return transaction_duplicate[0], active_duplicate[0]


async def complete_rolling_epochs(stream: StreamStore, active_epoch: int, sealed_sizes: dict[int, int]) -> None:
    """Rolling-transaction step: sizes of the sealed old-active segments and txn duplicates, and
    the current epoch moved to ``active_epoch + 2``."""
    await _move_current_epoch(stream, active_epoch, active_epoch + 2, sealed_sizes)


# ---------------------------------------------------------------------- shared machinery


def _required(found: dict[str, Versioned | None], key: str) -> Versioned:
    """``found[key]`` for a record that must exist: written with the stream (its current epoch and
    history index root) or by the same batch as one found. Raises NotFound if it is absent."""
    value = found[key]
    if value is None:
        raise NotFound(f"no key {key!r} in the stream's metadata", key=key)
    return value


def _append_keys(sizes: layout.ChunkSizes, epochs: Sequence[int]) -> list[str]:
    chunks = sorted({sizes.chunk_of(epoch) for epoch in epochs})
    leaves = sorted({sizes.leaf_of(epoch) for epoch in epochs})
    return ([layout.HISTORY_INDEX_ROOT] + [layout.history_chunk_key(chunk) for chunk in chunks]
            + [layout.history_leaf_key(leaf) for leaf in leaves])


async def _read_for_append(stream: StreamStore, active_epoch: int, new_epochs: Sequence[int],
                           extra: Sequence[str] = ()) -> dict[str, Versioned | None]:
    """Everything appending ``new_epochs`` needs, in one store call."""
    keys = [layout.CURRENT_EPOCH, *extra] + [layout.epoch_key(epoch) for epoch in new_epochs]
    keys += _append_keys(stream.sizes, new_epochs)
    found = await stream.kv.get_many(stream.tables.metadata, keys)
    return dict(zip(keys, found, strict=True))  # get_many answers each key


def plan_epoch_appends(found: dict[str, Versioned | None],
                       new_epochs: list[tuple[EpochRecord, HistoryTimeSeriesRecord]],
                       sealed_epochs: dict[int, int], sizes: layout.ChunkSizes) -> list[Write]:
    """The batch that appends ``new_epochs``: epoch records, history chunks, index leaves and root,
    and sealed-epoch records, each conditional on the version in ``found`` (ABSENT if it was absent)."""
    root_found = _required(found, layout.HISTORY_INDEX_ROOT)
    root = stored_root = HistoryIndexRoot.decode(root_found.value)
    chunks: dict[str, HistoryChunk | None] = {}
    leaves: dict[str, HistoryIndexLeaf | None] = {}
    for key, stored in found.items():
        if key.startswith(layout.HISTORY_CHUNK_PREFIX):
            chunks[key] = None if stored is None else HistoryChunk.decode(stored.value)
        elif key.startswith(layout.HISTORY_LEAF_PREFIX):
            leaves[key] = None if stored is None else HistoryIndexLeaf.decode(stored.value)
    writes = []
    for record, delta in new_epochs:
        chunk_key = layout.history_chunk_key(sizes.chunk_of(record.epoch))
        leaf_key = layout.history_leaf_key(sizes.leaf_of(record.epoch))
        chunks[chunk_key] = append_to_chunk(chunks[chunk_key], delta, sizes)
        root, leaves[leaf_key] = index_epoch(root, leaves[leaf_key], record.epoch, record.creation_time, sizes)
        writes.append(Write(layout.epoch_key(record.epoch), record.encode(), ABSENT))
    for key, value in list(chunks.items()) + list(leaves.items()):
        assert value is not None, "every chunk and leaf read is one that a new epoch went into (_append_keys)"
        writes.append(Write(key, value.encode(), _version_or_absent(found[key])))
    if root != stored_root:
        writes.append(Write(layout.HISTORY_INDEX_ROOT, root.encode(), root_found.version))
    writes += [Write(layout.sealed_epoch_key(segment_id), SealedEpochRecord(epoch).encode())
               for segment_id, epoch in sealed_epochs.items()]
    return writes


def _version_or_absent(found: Versioned | None) -> int:
    return ABSENT if found is None else found.version


async def _move_current_epoch(stream: StreamStore, from_epoch: int, to_epoch: int,
                              sealed_sizes: dict[int, int]) -> None:
    """Sealed sizes into their shards and the current-epoch pointer to ``to_epoch``, in one batch."""
    keys = [layout.CURRENT_EPOCH, layout.epoch_key(to_epoch)] + stream.sizes.sealed_sizes_keys(sealed_sizes)
    found = dict(zip(keys, await stream.kv.get_many(stream.tables.metadata, keys), strict=True))  # one per key
    current_found = _required(found, layout.CURRENT_EPOCH)
    current = EpochRecord.decode(current_found.value)
    if current.epoch >= to_epoch:
        return
    if current.epoch != from_epoch:
        raise ScaleConflict(f"{stream}: moving from epoch {from_epoch}, current is {current.epoch}")
    new_current = found[layout.epoch_key(to_epoch)]
    if new_current is None:
        raise NotFound(f"{stream}: epoch {to_epoch} has not been written")
    writes = sealed_size_writes(found, sealed_sizes, stream.sizes)
    writes.append(Write(layout.CURRENT_EPOCH, new_current.value, current_found.version))
    await stream.write(writes)


def sealed_size_writes(found: dict[str, Versioned | None], sealed_sizes: dict[int, int],
                       sizes: layout.ChunkSizes) -> list[Write]:
    """Conditional writes adding ``sealed_sizes`` to their shards (as read into ``found``)."""
    by_shard: dict[int, dict[int, int]] = {}
    for segment_id, size in sealed_sizes.items():
        by_shard.setdefault(sizes.shard_of(segment_id), {})[segment_id] = size
    writes = []
    for shard, additions in sorted(by_shard.items()):
        key = layout.sealed_sizes_key(shard)
        stored = found[key]
        existing = {} if stored is None else SealedSizesShard.decode(stored.value).sizes
        writes.append(Write(key, SealedSizesShard(shard, {**existing, **additions}).encode(),
                            _version_or_absent(stored)))
    return writes
