"""The operation pipeline (server/containers/pipeline.py) against an in-memory log whose acks the test
releases: decisions of one loop turn share a frame, frames commit in order whatever order the log
acks them in, a log failure fails everything in flight, checkpoints hold later mutations until they
are logged, and replaying the log rebuilds the same state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from server import errors
from server.containers import operations as ops
from server.containers.metadata import SegmentType
from server.containers.pipeline import OperationPipeline
from server.containers.state import ContainerState
from server.tier1 import DurableDataLog, LogAddress, LogWriteFailed
from server.tier1.api import AppendData

from .fakes import settle


class GatedLog(DurableDataLog):
    """Keeps records in memory; with ``gated`` each append (with ``gate_checkpoints`` each checkpoint's)
    waits until the test releases it."""

    def __init__(self, records: list[bytes] | None = None, *, gated: bool = False):
        self.records = list(records or [])
        self.gated = gated
        self.gate_checkpoints = False
        self.gates: list[asyncio.Future] = []
        self.fail_next = False
        self.truncated_upto: LogAddress | None = None
        self._epoch = 0

    @property
    def epoch(self) -> int:
        return self._epoch

    async def open(self) -> int:
        self._epoch += 1
        return self._epoch

    async def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        for index, record in enumerate(self.records):
            yield LogAddress(index + 1), memoryview(record)

    async def append(self, data: AppendData) -> LogAddress:
        if self.fail_next:
            raise LogWriteFailed("injected")
        parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        self.records.append(b"".join(bytes(part) for part in parts))
        address = LogAddress(len(self.records))
        if self.gated or (self.gate_checkpoints and isinstance(ops.decode_frame(self.records[-1])[2][0],
                                                                  ops.Checkpoint)):
            gate = asyncio.get_running_loop().create_future()
            self.gates.append(gate)
            await gate
        return address

    async def truncate(self, upto: LogAddress) -> None:
        self.truncated_upto = upto

    async def close(self) -> None:
        pass

    @property
    def truncation_address(self) -> LogAddress | None:
        return self.truncated_upto


def pipeline(log: GatedLog, state: ContainerState | None = None, *, every: int = 1_000_000,
             failures: list | None = None) -> tuple[OperationPipeline, ContainerState]:
    state = state or ContainerState()
    failed = failures if failures is not None else []
    made = OperationPipeline(0, log, state, checkpoint_every_operations=every, checkpoint_every_bytes=1 << 40,
                             wall_clock_ms=lambda: 1_000, on_failure=failed.append)
    return made, state


def create(name: str):
    return lambda pending: pending.create(name, SegmentType.STREAM, {})


def append(name: str, data: bytes):
    return lambda pending: pending.append(name, data)


def operations(log: GatedLog) -> list[list]:
    return [ops.decode_frame(record)[2] for record in log.records]


async def test_one_turn_is_one_frame_and_callers_hear_only_after_apply():
    log = GatedLog(gated=True)
    made, state = pipeline(log)
    made.open()
    created = made.submit(create("s"))
    first, second = made.submit(append("s", b"abc")), made.submit(append("s", b"de"))
    await settle()
    assert len(log.records) == 1  # three decisions of one turn, one log record
    assert [type(op).__name__ for op in operations(log)[0]] == ["CreateSegment", "Append", "Append"]
    assert not any(future.done() for future in (created, first, second))
    assert "s" not in state.by_name  # nothing applied before the log says durable
    log.gates[0].set_result(None)
    await settle()
    assert (first.result(), second.result()) == (0, 3)  # the offsets decided
    assert state.by_name["s"].length == 5


async def test_frames_commit_in_order_whatever_order_the_log_acks_them_in():
    log = GatedLog(gated=True)
    made, state = pipeline(log)
    made.open()
    made.submit(create("s"))
    await settle()
    log.gates[0].set_result(None)
    await settle()
    early = made.submit(append("s", b"1"))
    await settle()
    late = made.submit(append("s", b"22"))
    await settle()
    assert len(log.gates) == 3
    log.gates[2].set_result(None)  # the later frame is acked first
    await settle()
    assert not late.done() and state.by_name["s"].length == 0
    log.gates[1].set_result(None)
    await settle()
    assert (early.result(), late.result()) == (0, 1)
    assert state.by_name["s"].length == 3


async def test_a_rejected_decision_fails_alone_and_changes_nothing():
    log = GatedLog()
    made, state = pipeline(log)
    made.open()
    await made.submit(create("s"))
    with pytest.raises(errors.NoSuchSegment):
        await made.submit(append("missing", b"x"))
    with pytest.raises(errors.SegmentAlreadyExists):
        await made.submit(create("s"))
    assert len(log.records) == 1 and state.by_name["s"].length == 0


async def test_a_log_failure_fails_everything_in_flight_and_refuses_what_follows():
    log = GatedLog(gated=True)
    failures: list = []
    made, _ = pipeline(log, failures=failures)
    made.open()
    in_flight = made.submit(create("s"))
    await settle()
    log.gated, log.fail_next = False, True
    failing = made.submit(create("t"))
    await settle()
    assert len(failures) == 1 and isinstance(failures[0], LogWriteFailed)
    made.fail(failures[0])  # what the container does on_failure
    for future in (in_flight, failing):
        with pytest.raises(errors.ContainerUnavailable):
            await future
    with pytest.raises(errors.ContainerUnavailable):
        await made.submit(create("u"))


async def test_a_due_checkpoint_holds_later_mutations_until_it_is_logged_and_replay_rebuilds_the_state():
    log = GatedLog()
    made, state = pipeline(log, every=3)
    made.open()
    await made.write_checkpoint()  # a fresh log starts with one
    await made.submit(create("s"))
    results = await asyncio.gather(*(made.submit(append("s", bytes([n]) * n)) for n in range(1, 6)))
    assert results == [0, 1, 3, 6, 10]
    log.gate_checkpoints = True
    await settle()  # a checkpoint is due (six operations since the last): it is being logged
    held = made.submit(append("s", b""))
    await settle()
    assert not held.done() and len(log.records) == 4  # decided only once the checkpoint is durable
    log.gates[-1].set_result(None)
    assert await held == 15
    kinds = [[type(op).__name__ for op in frame] for frame in operations(log)]
    assert kinds == [["Checkpoint"], ["CreateSegment"], ["Append"] * 5, ["Checkpoint"], ["Append"]]
    assert len(made.checkpoints) == 2

    again = ContainerState()
    replayed, _ = pipeline(GatedLog(log.records), again)
    assert await replayed.replay(has_tier2=False)
    assert again.describe() == state.describe()
    assert again.by_name["s"].length == 15


async def test_the_log_is_truncated_before_the_newest_checkpoint_every_pending_operation_follows():
    log = GatedLog()
    made, _ = pipeline(log, every=2)
    made.open()
    await made.write_checkpoint()
    await made.submit(create("s"))
    for _ in range(6):
        await made.submit(append("s", b"x"))
    positions = [sequence for sequence, _, _ in made.checkpoints]
    assert len(positions) >= 3
    await made.truncate_log(lowest_pending=positions[1] + 1)  # Tier-2 holds everything before the second
    assert log.truncated_upto == LogAddress(made.checkpoints[0][1].sequence - 1)
    assert made.checkpoints[0][0] == positions[1]


async def test_flush_if_idle_hands_a_frame_over_at_once_only_when_nothing_is_in_flight():
    log = GatedLog(gated=True)
    made, state = pipeline(log)
    made.open()
    made.submit(create("s"))
    made.submit(append("s", b"a"))
    made.flush_if_idle()  # idle log: the frame goes now, in this turn
    assert len(log.records) == 0  # GatedLog.append is a coroutine: it runs as a task, on the next step
    await asyncio.sleep(0)
    assert len(log.records) == 1
    busy = made.submit(append("s", b"b"))
    made.flush_if_idle()  # a frame is in flight: this one waits for the end of the turn, with later decisions
    also = made.submit(append("s", b"c"))
    await settle()
    assert len(log.records) == 2
    assert [type(op).__name__ for op in operations(log)[1]] == ["Append", "Append"]
    for gate in log.gates:
        gate.set_result(None)
    await settle()
    assert (busy.result(), also.result()) == (1, 2)
    assert state.by_name["s"].length == 3


async def test_a_log_that_returns_futures_and_raises_at_once():
    """The local log's style: append returns a future (no task), and refuses a record by raising."""

    class FutureLog(GatedLog):
        def append(self, data):
            if self.fail_next:
                raise LogWriteFailed("refused at once")
            future = asyncio.get_running_loop().create_future()
            self.records.append(b"".join(bytes(part) for part in data))
            self.gates.append(future)
            return future

    log, failures = FutureLog(), []
    made, state = pipeline(log, failures=failures)
    made.open()
    created = made.submit(create("s"))
    made.flush_if_idle()
    assert len(log.records) == 1  # handed over synchronously
    log.gates[0].set_result(LogAddress(1))
    await settle()
    assert created.done() and "s" in state.by_name
    log.fail_next = True
    refused = made.submit(append("s", b"x"))
    made.flush_if_idle()
    assert failures and isinstance(failures[0], LogWriteFailed)
    made.fail(failures[0])
    with pytest.raises(errors.ContainerUnavailable):
        await refused
