"""The operation pipeline of one container: decide -> frame -> log -> apply.

Theory of operation.

* **Decide.** A mutation is decided synchronously by :class:`PendingState` (the
  container's serialization point; no await between validation, sequence
  numbering and framing). The decided operation joins the *current frame*.
* **Frame.** All operations decided in one event-loop turn share one frame: the
  first decision schedules a flush for the end of the turn. The flush encodes the
  frame and hands it to the Tier-1 log without waiting, so several frames can be
  in flight and the log group-commits them. When no frame is in flight (the log is
  idle), a connection that has decided everything one read brought it flushes at
  once (``flush_if_idle``): waiting for the end of the turn would only delay a lone
  append. The log's completion comes back as a future's callback, with no task.
* **Apply.** Frames complete in order. When a frame is durable its operations are
  applied to the committed state (the same ``apply`` recovery uses), their
  overlays released, parked readers woken, and only then the callers' futures
  resolved: every acknowledged mutation is already visible to reads.
* **Failure is fail-stop.** If a log write fails, every operation in flight fails
  and ``on_failure`` stops the container; a new instance recovers from the log.
* **Checkpoints.** After enough operations (or logged bytes), or when asked
  (``request_checkpoint``: the container asks when the newest one grew old), the
  pipeline holds new mutations (in arrival order), lets the frames in flight
  commit, and logs a Checkpoint holding a snapshot of the metadata, then decides
  the held mutations.
  Recovery (:meth:`replay`) skips to the log's first checkpoint, loads it, replays
  the rest, and checks each later checkpoint against the replayed state. The
  pipeline remembers where each checkpoint lies, so the log can be truncated
  before one once Tier-2 holds everything it precedes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import errors
from ..tier1 import DurableDataLog, LogAddress, LogError
from . import operations as ops
from .pending import Decision, PendingState
from .recovery_progress import RecoveryProgress
from .state import ContainerState, InconsistentState, wake_readers
from .views import ContainerStatus

if TYPE_CHECKING:

    from .metadata import SegmentMetadata

log = logging.getLogger("tributary.container")
FRAME_HEADROOM = 4096  # frame and operation headers, attribute updates

Decide = Callable[[PendingState], Decision]
# The future of a submitted mutation: its decision's result (whose type depends on the mutation).
Outcome = asyncio.Future[Any]


class _Frame:
    __slots__ = ("decisions", "futures", "size", "done", "timestamp_ms", "first_sequence", "address", "_settled")

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self.futures: list[Outcome] = []  # the callers': a caller that gives up may cancel its own
        self.size = 0
        self.done = False
        self.timestamp_ms = 0
        self.first_sequence = 0
        self.address: LogAddress | None = None  # once durable
        self._settled: asyncio.Future[None] | None = None  # made when someone waits: see settled()

    def settled(self) -> asyncio.Future[None]:
        """Resolved once the frame is committed or failed: the pipeline's own, which no caller can cancel (waiting on
        the callers' futures instead, a cancelled one ended the wait at once, and a retry waiting for the original's
        frame spun without time moving: found by the simulation, a slow log store and a closed connection)."""
        if self._settled is None:
            self._settled = asyncio.get_running_loop().create_future()
        return self._settled

    def settle(self) -> None:
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)


class _CheckpointParts:
    """Replay's assembly of a checkpoint logged in parts: the parts so far, and where the first one lies."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.start: tuple[int, LogAddress, int] | None = None  # (sequence, address, logged bytes before it)

    def add(self, part: ops.CheckpointPart, start: tuple[int, LogAddress, int]) -> ops.Checkpoint | None:
        """The whole checkpoint once its last part came (parts out of order or missing restart the assembly)."""
        if part.number == 0:
            self.data, self.start = [], start
        elif self.start is None or part.number != len(self.data):
            self.data, self.start = [], None
            return None
        self.data.append(part.data)
        if len(self.data) < part.parts:
            return None
        snapshot, self.data = b"".join(self.data), []
        return ops.Checkpoint(snapshot)


class OperationPipeline:
    """Turns decided mutations into durable, applied operations, in order."""

    def __init__(self, container_id: int, durable_log: DurableDataLog, state: ContainerState, *,
                 checkpoint_every_operations: int, checkpoint_every_bytes: int,
                 wall_clock_ms: Callable[[], int], on_failure: Callable[[BaseException], None],
                 on_checkpoint_logged: Callable[[], None] = lambda: None,
                 on_log_changed: Callable[[], None] = lambda: None, segment_limit: int | None = None):
        self._container_id = container_id
        self._segment_limit = segment_limit  # segments the container may hold (PendingState.create)
        self._log = durable_log
        self._state = state
        self._checkpoint_every = checkpoint_every_operations
        self._checkpoint_every_bytes = checkpoint_every_bytes
        self._wall_clock_ms = wall_clock_ms
        self._on_failure = on_failure
        self.on_checkpoint_logged = on_checkpoint_logged
        self.on_log_changed = on_log_changed  # frames committed or the log truncated: its backlog changed
        self._max_frame_bytes = durable_log.max_append_size - FRAME_HEADROOM
        self._pending: PendingState  # made by open(), over the recovered state
        # The container's status, kept here: mutations are decided only while it is RUNNING.
        self.status = ContainerStatus.NEW
        self._frame: _Frame | None = None
        self._in_flight: deque[_Frame] = deque()  # frames handed to the log, in order
        self._next_sequence = 1  # of the first operation of the next frame
        self._held: deque[tuple[Decide, Outcome]] | None = None  # mutations waiting for a checkpoint, when one is due
        self._checkpoint_started = False
        self._operations_since_checkpoint = 0
        # Bytes of every frame so far but checkpoints (replayed ones included): what Tier-2 must catch up with.
        self.logged_bytes = 0
        self._logged_bytes_at_checkpoint = 0
        self._snapshot_bytes = 0  # of the newest checkpoint: the next one waits for at least as much logged
        self._checkpoint_start: tuple[int, LogAddress, int] | None = None  # the first part of one being logged
        self.checkpoints_logged = 0  # by this instance (not replayed ones)
        # (sequence, address, logged bytes before it) of each checkpoint still in the log
        self.checkpoints: deque[tuple[int, LogAddress, int]] = deque()
        self.recovery: RecoveryProgress | None = None  # the replay's, once it started

    # ------------------------------------------------------------------ recovery and lifecycle

    async def replay(self, has_tier2: bool) -> bool:
        """Replays the log into the committed state. Returns whether a checkpoint was found."""
        progress = self.recovery = RecoveryProgress(self._log.readable_records())
        found_checkpoint = False
        parts = _CheckpointParts()
        async for address, record in self._log.read():
            progress.records += 1
            progress.bytes += len(record)
            timestamp_ms, first_sequence, operations = ops.decode_frame(record)
            for index, operation in enumerate(operations):
                sequence = first_sequence + index
                here = (sequence, address, self.logged_bytes)
                if isinstance(operation, ops.CheckpointPart):
                    whole = parts.add(operation, here)
                    if whole is not None and parts.start is not None:
                        operation, here = whole, parts.start
                if isinstance(operation, ops.Checkpoint):
                    self._replay_checkpoint(operation, found_checkpoint, has_tier2)
                    found_checkpoint = True
                    self.checkpoints.append(here)
                    self._snapshot_bytes = len(operation.snapshot)
                elif found_checkpoint and not isinstance(operation, ops.CheckpointPart):
                    self._state.apply(operation, timestamp_ms, sequence)
                    progress.operations += 1
                self._state.last_sequence = sequence
            if not _is_checkpoint(operations[0]):
                self.logged_bytes += len(record)
            if progress.due_for_log():
                log.info("recovery progress", extra={"container": self._container_id, **progress.fields()})
        progress.finished = time.monotonic()
        log.info("recovery done", extra={"container": self._container_id, **progress.fields()})
        return found_checkpoint

    def _replay_checkpoint(self, checkpoint: ops.Checkpoint, found_before: bool, has_tier2: bool) -> None:
        if not found_before:
            if self._state.restore(checkpoint.snapshot) and not has_tier2:
                raise InconsistentState("the log begins with a checkpoint whose bytes are in Tier-2, "
                                        "but no Tier-2 is configured")
        elif not self._state.matches_snapshot(checkpoint.snapshot):
            raise InconsistentState("replayed state differs from a checkpoint in the log")

    @property
    def max_operation_bytes(self) -> int:
        """The largest operation a frame (one log record) takes."""
        return self._max_frame_bytes - FRAME_HEADROOM

    def open(self) -> None:
        """Starts accepting mutations after the recovered state."""
        self._next_sequence = self._state.last_sequence + 1
        self._pending = PendingState(self._state, self.max_operation_bytes, self._container_id, self._segment_limit)
        self.status = ContainerStatus.RUNNING

    def has_pending(self, name: str) -> bool:
        """Whether a mutation of ``name`` is decided and not committed yet."""
        return self._pending.has_overlay(name)

    async def close(self) -> None:
        """Refuses new mutations and waits for the frames in flight."""
        if self.status is not ContainerStatus.RUNNING:
            return
        self.status = ContainerStatus.STOPPED
        if self._frame is not None:
            self._flush()
        if self._in_flight:
            await asyncio.shield(self._in_flight[-1].settled())  # frames commit (or fail) in order

    def fail(self, error: BaseException) -> None:
        """Fails every mutation in flight or held with ContainerUnavailable; refuses new ones."""
        self.status = ContainerStatus.FAILED
        unavailable = f"container failed: {error!r}"
        frames = list(self._in_flight) + ([self._frame] if self._frame is not None else [])
        self._in_flight, self._frame = deque(), None
        for frame in frames:
            for future in frame.futures:
                if not future.done():
                    future.set_exception(errors.ContainerUnavailable("", unavailable))
            frame.settle()
        held, self._held = self._held or (), None
        for _, future in held:
            future.set_exception(errors.ContainerUnavailable("", unavailable))
        for segment in self._state.by_id.values():
            wake_readers(segment)

    # ------------------------------------------------------------------ submission

    def submit(self, decide: Decide) -> Outcome:
        """Decides a mutation now (or, while a checkpoint is due, in arrival order after it).

        Returns a future resolved with the decision's result once the operation is
        durable and applied, or failed with the operating error that rejected it.
        """
        future: Outcome = asyncio.get_running_loop().create_future()
        if self.status is not ContainerStatus.RUNNING:
            future.set_exception(errors.ContainerUnavailable("", f"container {self._container_id} is "
                                                                 f"{self.status.value}"))
        elif self._held is not None:
            self._held.append((decide, future))
        else:
            self._decide(decide, future)
        return future

    async def settled(self) -> None:
        """Waits until every operation decided so far is durable and applied (or failed)."""
        frame = self._frame if self._frame is not None else (self._in_flight[-1] if self._in_flight else None)
        if frame is not None:
            await asyncio.shield(frame.settled())  # frames commit in order: the newest one is the last

    def _decide(self, decide: Decide, future: Outcome) -> None:
        try:
            decision = decide(self._pending)
        except errors.SegmentStoreError as error:
            future.set_exception(error)
            return
        self._add_to_frame(decision, future)

    def _add_to_frame(self, decision: Decision, future: Outcome) -> None:
        size = _operation_size(decision.operation)
        frame = self._frame
        if frame is not None and frame.size + size > self._max_frame_bytes:
            self._flush()
            frame = None
        if frame is None:
            frame = self._frame = _Frame()
            asyncio.get_running_loop().call_soon(self._flush_if, frame)
        frame.decisions.append(decision)
        frame.futures.append(future)
        frame.size += size

    def _flush_if(self, frame: _Frame) -> None:
        if self._frame is frame:
            self._flush()

    def flush_if_idle(self) -> None:
        """Flushes the current frame now if no frame is in flight; otherwise it waits for the turn's end."""
        if self._frame is not None and not self._in_flight:
            self._flush()

    def _flush(self) -> None:
        frame, self._frame = self._frame, None
        if frame is None or self.status is ContainerStatus.FAILED:
            return
        frame.timestamp_ms = self._wall_clock_ms()
        frame.first_sequence = self._next_sequence
        self._next_sequence += len(frame.decisions)
        parts = ops.encode_frame(frame.timestamp_ms, frame.first_sequence,
                                 [decision.operation for decision in frame.decisions])
        self._in_flight.append(frame)
        try:
            written = asyncio.ensure_future(self._log.append(parts))
        except (LogError, OSError) as error:
            self._on_failure(error)
            return
        written.add_done_callback(functools.partial(self._written, frame))

    # ------------------------------------------------------------------ log and apply

    def _written(self, frame: _Frame, written: asyncio.Future[LogAddress]) -> None:
        if written.cancelled():
            self._on_failure(LogError("a log append was cancelled"))
            return
        failure = written.exception()
        if failure is not None:
            self._on_failure(failure)
            return
        frame.address = written.result()
        frame.done = True
        try:
            self._commit_ready_frames()
        except InconsistentState as error:
            self._on_failure(error)

    def _commit_ready_frames(self) -> None:
        """Applies durable frames in order (a frame never commits before the ones ahead of it)."""
        while self._in_flight and self._in_flight[0].done:
            frame = self._in_flight.popleft()
            self._note_checkpoint(frame)
            woken: set[SegmentMetadata] = set()
            for index, decision in enumerate(frame.decisions):
                segment = self._state.apply(decision.operation, frame.timestamp_ms, frame.first_sequence + index)
                self._pending.release(decision)
                if segment is not None:
                    woken.add(segment)
            for segment in woken:
                wake_readers(segment)
            for decision, future in zip(frame.decisions, frame.futures, strict=True):
                if not future.done():
                    future.set_result(decision.result)
            frame.settle()
            self._operations_since_checkpoint += len(frame.decisions)
            if not _is_checkpoint(frame.decisions[0].operation):
                self.logged_bytes += frame.size
        if self._held is None and self._checkpoint_due():
            self._hold_for_checkpoint()
        self._start_checkpoint_if_settled()
        self.on_log_changed()

    def _note_checkpoint(self, frame: _Frame) -> None:
        """Remembers where a durable checkpoint lies (a checkpoint in parts: its first, once its last is durable)."""
        operation = frame.decisions[0].operation
        if not _is_checkpoint(operation):
            return
        assert frame.address is not None
        here = (frame.first_sequence, frame.address, self.logged_bytes)
        if isinstance(operation, ops.CheckpointPart):
            if operation.number == 0:
                self._checkpoint_start = here
            if operation.number < operation.parts - 1:
                return
            here, self._checkpoint_start = self._checkpoint_start or here, None
        self.checkpoints.append(here)
        self.checkpoints_logged += 1
        self.on_checkpoint_logged()

    def _hold_for_checkpoint(self) -> None:
        """From now on mutations wait; the current frame goes to the log (the checkpoint follows it)."""
        self._held = deque()
        if self._frame is not None:
            self._flush()

    def _start_checkpoint_if_settled(self) -> None:
        """Starts the checkpoint that is due once no frame is open or in flight (its snapshot then covers them)."""
        if self._held is not None and not self._checkpoint_started and not self._in_flight and self._frame is None:
            self._checkpoint_started = True
            asyncio.get_running_loop().create_task(self._checkpoint_then_release())

    def _checkpoint_due(self) -> bool:
        """Enough operations, or enough bytes logged: at least ``checkpoint_every_bytes`` and at least the size of
        the newest snapshot, so that checkpoints never take more than half of what is logged."""
        return (self._operations_since_checkpoint >= self._checkpoint_every
                or self.logged_bytes - self._logged_bytes_at_checkpoint
                >= max(self._checkpoint_every_bytes, self._snapshot_bytes))

    # ------------------------------------------------------------------ checkpoints and log truncation

    async def _checkpoint_then_release(self) -> None:
        """Runs once every frame before the checkpoint is durable; then decides the held mutations.

        A checkpoint that fails (the log, or a bug) fails the container: the held mutations must not wait
        for one that will never come, and a new instance recovers from the log."""
        try:
            await self.write_checkpoint()
        except errors.ContainerUnavailable:
            return
        except Exception as error:  # fail-stop: the container restarts and the log says why
            log.error("checkpoint failed", extra={"container": self._container_id, "error": repr(error)},
                      exc_info=error)
            self._on_failure(error)
            return
        held, self._held = self._held, None
        self._checkpoint_started = False
        for decide, future in held or ():
            if self.status is ContainerStatus.RUNNING:
                self._decide(decide, future)
            elif not future.done():  # its caller may have given up (cancelled) meanwhile
                future.set_exception(errors.ContainerUnavailable("", "container stopped"))

    async def write_checkpoint(self) -> None:
        """Logs a snapshot of the committed state (after every frame decided before it).

        A snapshot larger than one record goes in parts, each alone in a frame, logged back to back (nothing
        else is decided meanwhile); the checkpoint counts, for replay and truncation, once its last part is
        durable, and lies where its first part does."""
        snapshot = self._state.snapshot()
        loop = asyncio.get_running_loop()
        written: Outcome | None = None
        for operation in ops.checkpoint_operations(snapshot, self._max_frame_bytes - FRAME_HEADROOM):
            written = loop.create_future()
            self._add_to_frame(Decision(operation, ()), written)
            self._flush()
        assert written is not None
        await written  # frames commit in order: the last part's commit means every part is durable
        self._operations_since_checkpoint = 0
        self._logged_bytes_at_checkpoint = self.logged_bytes
        self._snapshot_bytes = len(snapshot)

    def request_checkpoint(self) -> None:
        """Logs a checkpoint as soon as the frames in flight commit, as when one is due by size.

        For a container that went quiet: the log can be truncated only before a checkpoint, so without
        a new one, operations logged since the newest checkpoint stay in it (and are replayed) for good.
        """
        if self.status is ContainerStatus.RUNNING and self._held is None:
            self._hold_for_checkpoint()
            self._start_checkpoint_if_settled()

    def operations_after_checkpoint(self) -> int:
        """Operations applied after the newest checkpoint in the log (all of them without one)."""
        newest = self.checkpoints[-1][0] if self.checkpoints else 0
        return self._state.last_sequence - newest

    def logged_since_first_checkpoint(self) -> int:
        """Bytes the log holds after its first checkpoint, checkpoints aside (0 before one is logged): what a
        recovery replays."""
        return self.logged_bytes - self.checkpoints[0][2] if self.checkpoints else 0

    def operations_since_first_checkpoint(self) -> int:
        """Operations the log holds after its first checkpoint (all of them without one): what a recovery applies."""
        return self._state.last_sequence - (self.checkpoints[0][0] if self.checkpoints else 0)

    async def truncate_log(self, lowest_pending: int | None) -> None:
        """Truncates the log before the newest checkpoint that every operation still pending follows.

        ``lowest_pending`` is the sequence of the oldest operation Tier-2 has not finished (None: none).
        """
        bound = self._state.last_sequence + 1 if lowest_pending is None else lowest_pending
        checkpoints, chosen = self.checkpoints, None
        while len(checkpoints) > 1 and checkpoints[1][0] < bound:
            checkpoints.popleft()
            chosen = checkpoints[0]
        if chosen is not None and self.status is ContainerStatus.RUNNING:
            await self._log.truncate(LogAddress(chosen[1].sequence - 1))
            self.on_log_changed()


def _is_checkpoint(operation: ops.Operation) -> bool:
    return isinstance(operation, (ops.Checkpoint, ops.CheckpointPart))


def _operation_size(operation: ops.Operation) -> int:
    if isinstance(operation, ops.Append):
        return len(operation.data) + 64 + 24 * len(operation.attributes)
    if isinstance(operation, ops.Checkpoint):
        return len(operation.snapshot) + 16
    if isinstance(operation, ops.CheckpointPart):
        return len(operation.data) + 24
    if isinstance(operation, ops.Merge):
        return len(operation.header) + 96 + 24 * len(operation.attributes)
    if isinstance(operation, ops.CreateSegment):
        return len(operation.name) * 3 + 64 + 24 * len(operation.attributes)
    if isinstance(operation, ops.UpdateAttributes):
        return 32 + 24 * len(operation.attributes)
    return 32
