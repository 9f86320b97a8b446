"""Manual scale (spec §4.4, §6.4): submit the epoch transition, then run it in the background.

Theory of operation. ``request_scale`` answers as soon as the epoch transition record (ETR) is
stored; the scale itself runs under the stream's workflow intent (``WorkflowRunner``) in these
steps, each of which finds itself done when re-run:

    SCALING      ACTIVE -> SCALING (waits while a transaction commit holds the stream)
    rebase       a rolling transaction may have moved the epoch after the ETR was written: the
                 ETR is recomputed against the current epoch, sealed segments mapped by number
    create       CreateSegment for every new segment
    epoch        new epoch record + history + sealed-epoch records (successor queries work now)
    seal         SealSegment for every old segment, then its final length
    move         sealed sizes + the current-epoch pointer to the new epoch
    complete     ETR cleared, SCALING -> ACTIVE

Scale and transactions meet only through the stream state (one of SCALING / COMMITTING_TXN at a
time) and the rebase: commits of transactions created before the scale are rolled forward by the
transaction service into duplicate epochs (§6.5), which is exactly what the rebase follows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Sequence

from controller_api.model import StreamConfiguration
from wire.naming import segment_number_of

from .. import metrics
from ..store import NotFound, ScaleConflict, ScaleInputInvalid, State, StreamStore, WriteConflict, layout
from ..store import scale as store_scale
from ..store.key_space import equal_ranges, plan_epoch_transition
from ..store.records import (
    EMPTY_EPOCH_TRANSITION,
    EpochRecord,
    EpochTransitionRecord,
    StateRecord,
    StreamConfigurationRecord,
    WorkflowIntentRecord,
    WorkflowKind,
)
from . import payloads
from .context import ControllerContext
from .errors import ScalePreconditionFailed, ScaleRejected, StreamSealed
from .segment_calls import SegmentCalls
from .stream_access import SEALED_STATES, move_state, require_state, require_usable
from .workflows import WorkflowRunner

log = logging.getLogger("tributary.controller")


class ScaleStatus(enum.IntEnum):
    """The wire's ``ScaleStatusResponse.ScaleStatus``."""

    IN_PROGRESS = 0
    SUCCESS = 1
    INVALID_INPUT = 2
    INTERNAL_ERROR = 3


@dataclasses.dataclass(frozen=True)
class ScaleAccepted:
    transition: EpochTransitionRecord  # the new segments (ids and ranges) to report
    epoch: int  # the active epoch when the scale was accepted; checkScale polls with it


class Scaling:
    def __init__(self, context: ControllerContext, runner: WorkflowRunner):
        self._context = context
        self._runner = runner
        runner.register(WorkflowKind.SCALE, self._redrive)

    # ------------------------------------------------------------------ scale RPC

    async def request_scale(self, scope: str, stream: str, segments_to_seal: Sequence[int],
                            new_ranges: Sequence[tuple[float, float]]) -> ScaleAccepted:
        """Accepts a manual scale and starts it in the background.

        New segments are numbered in ascending ``start`` order (spec §4.4 Rec.).

        Raises:
            StreamNotFound / StreamNotReady: no such stream, or it is still being created.
            ScaleRejected: the stream is sealed, another scale is pending, or the ranges do not
                replace the segments exactly.
            ScalePreconditionFailed: the segments are not all active, or too few segments would remain.
        """
        handle = self._context.store.stream(scope, stream)
        state = await require_usable(handle)
        if state in SEALED_STATES:
            raise ScaleRejected(f"stream {scope}/{stream} is {state.name}")
        ranges = tuple(sorted((float(start), float(end)) for start, end in new_ranges))
        to_seal = tuple(segments_to_seal)
        current, pending, configuration = await _scale_inputs(handle)
        planned = _plan(current, to_seal, ranges, configuration.scaling.min_num_segments, self._context.now_ms())
        if not pending.is_empty:
            if store_scale.same_transition(pending, planned):
                return ScaleAccepted(pending, pending.active_epoch)
            raise ScaleRejected(f"stream {scope}/{stream}: another scale is pending")
        intent = WorkflowIntentRecord(WorkflowKind.SCALE, self._context.now_ms(),
                                      payload=payloads.encode_scale(to_seal, ranges))
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()
        task = self._runner.spawn(self._runner.run(handle, intent, lambda: self._scale(handle, to_seal, ranges,
                                                                                         accepted)))
        await asyncio.wait([accepted, task], return_when=asyncio.FIRST_COMPLETED)
        if accepted.done():
            return accepted.result()
        return task.result()  # failed before accepting: raises its error

    async def _scale(self, handle: StreamStore, to_seal: tuple[int, ...], ranges: tuple[tuple[float, float], ...],
                     accepted: asyncio.Future | None) -> ScaleAccepted:
        """The workflow body: submit (step 1), report acceptance, run the remaining steps."""
        current, pending, configuration = await _scale_inputs(handle)
        if pending.is_empty:
            _plan(current, to_seal, ranges, configuration.scaling.min_num_segments, self._context.now_ms())
        try:
            transition = await store_scale.submit_scale(handle, to_seal, ranges, self._context.now_ms())
        except (ScaleInputInvalid, ScaleConflict) as error:
            raise ScaleRejected(str(error)) from None
        result = ScaleAccepted(transition, transition.active_epoch)
        if accepted is not None and not accepted.done():
            accepted.set_result(result)
        await self.execute(handle, transition)
        return result

    async def _redrive(self, handle: StreamStore, intent: WorkflowIntentRecord) -> None:
        pending, _ = await handle.read(layout.EPOCH_TRANSITION, EpochTransitionRecord)
        if not pending.is_empty:
            await self.execute(handle, pending)
        elif (await require_state(handle)) == State.SCALING:
            await handle.transition_state(State.ACTIVE, expected=State.SCALING)

    # ------------------------------------------------------------------ the steps

    async def execute(self, handle: StreamStore, transition: EpochTransitionRecord) -> EpochRecord:
        """Runs a submitted transition to completion (every step idempotent). Returns the new epoch.

        Raises:
            StreamSealed: the stream was sealed before the scale started (the ETR is dropped).
        """
        try:
            await move_state(self._context, handle, State.SCALING)
        except StreamSealed:
            await _drop_transition(handle, transition)
            raise
        transition = await self._rebase(handle, transition)
        stored, _ = await handle.get_configuration()
        segments = SegmentCalls(self._context, handle.scope, handle.name)
        faults = self._context.fault_points
        await segments.create([new.segment_id for new in transition.new_segments], stored.configuration)
        faults.reach("scale.segments_created")
        record = await store_scale.create_new_epoch(handle, transition)
        faults.reach("scale.epoch_written")
        sizes = await segments.seal(transition.segments_to_seal)
        faults.reach("scale.segments_sealed")
        await store_scale.seal_old_segments(handle, transition, sizes)
        faults.reach("scale.epoch_moved")
        await store_scale.complete_scale(handle, transition)
        metrics.SCALES.inc()
        log.info("stream scaled", extra={"stream": f"{handle.scope}/{handle.name}", "epoch": record.epoch,
                                         "sealed": list(transition.segments_to_seal),
                                         "new_segments": [new.segment_id for new in transition.new_segments]})
        return record

    async def _rebase(self, handle: StreamStore, transition: EpochTransitionRecord) -> EpochTransitionRecord:
        """The transition re-planned against the current epoch if a rolling transaction moved it (§6.4 step 2)."""
        current, _ = await handle.get_current_epoch()
        if current.epoch == transition.active_epoch or _applied(current, transition):
            return transition
        try:
            next_epoch = await handle.get_epoch(transition.new_epoch)
        except NotFound:
            next_epoch = None
        if next_epoch is not None and _applied(next_epoch, transition):
            return transition  # our epoch exists; the current pointer is about to move to it
        by_number = {segment.number: segment.segment_id for segment in current.segments}
        to_seal = [by_number[segment_number_of(segment_id)] for segment_id in transition.segments_to_seal]
        ranges = [(new.key_start, new.key_end) for new in transition.new_segments]
        rebased = plan_epoch_transition(current, to_seal, ranges, transition.time)
        pending, version = await handle.read(layout.EPOCH_TRANSITION, EpochTransitionRecord)
        if pending != transition:
            raise WriteConflict(f"{handle}: the pending transition changed during a rebase")
        await handle.kv.replace(handle.tables.metadata, layout.EPOCH_TRANSITION, rebased.encode(), version)
        return rebased

    # ------------------------------------------------------------------ update's rescale

    async def rescale_evenly(self, handle: StreamStore, segment_count: int) -> None:
        """Seals every active segment and creates ``segment_count`` equal ones (update, spec §6.8 step 4)."""
        current, _ = await handle.get_current_epoch()
        ranges = equal_ranges(0.0, 1.0, segment_count)
        pending, version = await handle.read(layout.EPOCH_TRANSITION, EpochTransitionRecord)
        if not pending.is_empty and set(pending.segments_to_seal) != current.segment_ids:
            await handle.kv.replace(handle.tables.metadata, layout.EPOCH_TRANSITION,
                                    EMPTY_EPOCH_TRANSITION.encode(), version)
        transition = await store_scale.submit_scale(handle, [segment.segment_id for segment in current.segments],
                                                    ranges, self._context.now_ms())
        await self.execute(handle, transition)

    # ------------------------------------------------------------------ checkScale

    async def check_scale(self, scope: str, stream: str, epoch: int) -> ScaleStatus:
        """Whether the scale accepted at ``epoch`` has finished (spec §4.4 checkScale table)."""
        handle = self._context.store.stream(scope, stream)
        try:
            found = await handle.read_records((layout.CURRENT_EPOCH, EpochRecord), (layout.STATE, StateRecord),
                                              (layout.EPOCH_TRANSITION, EpochTransitionRecord))
        except NotFound:  # no such stream, or not all of its records (yet)
            return ScaleStatus.INVALID_INPUT
        (active, _), (state, _), (pending, _) = found
        if epoch > active.epoch:
            return ScaleStatus.INVALID_INPUT
        if epoch in (active.epoch, active.reference_epoch):
            return ScaleStatus.IN_PROGRESS
        if (epoch + 1 == active.reference_epoch and state.state == State.SCALING
                and (pending.is_empty or pending.new_epoch == active.epoch)):
            return ScaleStatus.IN_PROGRESS
        return ScaleStatus.SUCCESS


async def _scale_inputs(handle: StreamStore) -> tuple[EpochRecord, EpochTransitionRecord, StreamConfiguration]:
    """The current epoch, the pending transition and the configuration, in one read. Raises NotFound."""
    (current, _), (pending, _), (stored, _) = await handle.read_records(
        (layout.CURRENT_EPOCH, EpochRecord), (layout.EPOCH_TRANSITION, EpochTransitionRecord),
        (layout.CONFIGURATION, StreamConfigurationRecord))
    return current, pending, stored.configuration


def _plan(current: EpochRecord, to_seal: Sequence[int], ranges: Sequence[tuple[float, float]],
          min_segments: int, time: int) -> EpochTransitionRecord:
    """Validates a scale against the current epoch (spec §4.4 table) and plans it.

    Raises:
        ScalePreconditionFailed: unknown segments, or too few left.
        ScaleRejected: bad ranges.
    """
    if not to_seal or any(current.segment(segment_id) is None for segment_id in to_seal):
        raise ScalePreconditionFailed(f"segments to seal must be active in epoch {current.epoch}")
    try:
        planned = plan_epoch_transition(current, to_seal, ranges, time)
    except ScaleInputInvalid as error:
        raise ScaleRejected(str(error)) from None
    if len(current.segments) - len(set(to_seal)) + len(ranges) < min_segments:
        raise ScalePreconditionFailed(f"the stream needs at least {min_segments} segments")
    return planned


def _applied(epoch: EpochRecord, transition: EpochTransitionRecord) -> bool:
    """True if ``epoch`` holds the transition's new segments (the scale got that far)."""
    ids = epoch.segment_ids
    return all(new.segment_id in ids for new in transition.new_segments) and epoch.epoch >= transition.new_epoch


async def _drop_transition(handle: StreamStore, transition: EpochTransitionRecord) -> None:
    pending, version = await handle.read(layout.EPOCH_TRANSITION, EpochTransitionRecord)
    if pending == transition:
        await handle.kv.replace(handle.tables.metadata, layout.EPOCH_TRANSITION, EMPTY_EPOCH_TRANSITION.encode(),
                                version)
