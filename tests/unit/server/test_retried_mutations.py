"""A retried seal, merge or create meeting the original still being logged (server/containers/mutations.py): the
callers (a controller's retried seal, a transaction commit's retried merge) take "already sealed" and "already merged"
for done, so that answer comes only once the original is durable; if the log fails first, the retry fails too. Found by
the simulation (cluster seed 40): a retried merge was answered "already merged" while the first was being logged,
the store failed before it was durable, and the committed transaction's events in that segment were lost."""

from __future__ import annotations

import asyncio

import pytest

from server import errors
from server.containers.container import SegmentContainer
from server.tier1 import LogWriteFailed

from .fakes import settle
from .test_pipeline import GatedLog

TARGET, SOURCE = "scope/stream/1.#epoch.0", "scope/stream/1.#epoch.0#transaction.0000000000000000000000000000002b"
NEW = "scope/stream/2.#epoch.1"
MUTATIONS = ["merge", "seal", "create"]


async def started(log: GatedLog) -> SegmentContainer:
    owner = SegmentContainer(0, log)
    await owner.start()
    await owner.create_segment(TARGET)
    await owner.create_segment(SOURCE)
    await owner.append(TARGET, b"t" * 10)
    await owner.append(SOURCE, b"s" * 52)
    return owner


async def retried_while_in_flight(mutation: str) -> tuple[GatedLog, SegmentContainer, asyncio.Future, asyncio.Future]:
    """A started container, the first ``mutation`` (merge SOURCE into TARGET, seal SOURCE, or create NEW) being
    logged, and its retry made meanwhile."""
    log = GatedLog()
    owner = await started(log)
    call = {"merge": lambda: owner.merge(TARGET, SOURCE), "seal": lambda: owner.seal(SOURCE),
            "create": lambda: owner.create_segment(NEW)}[mutation]
    log.gated = True
    first = asyncio.ensure_future(call())
    await settle()
    retried = asyncio.ensure_future(call())
    await settle()
    return log, owner, first, retried


@pytest.mark.parametrize("mutation", MUTATIONS)
async def test_a_retry_is_answered_once_the_original_is_durable(mutation):
    log, owner, first, retried = await retried_while_in_flight(mutation)
    assert not retried.done(), "the retry was answered while the original was still being logged"
    for gate in log.gates:
        gate.set_result(None)
    log.gated = False
    if mutation == "merge":
        assert await first == await retried == 62
        assert owner.get_info(TARGET).length == 62
    elif mutation == "create":
        await first
        with pytest.raises(errors.SegmentAlreadyExists):
            await retried  # now durable: there
        assert owner.get_info(NEW).length == 0
    else:
        assert await first == 52
        with pytest.raises(errors.SegmentIsSealed):
            await retried  # now durable: sealed
        assert owner.get_info(SOURCE).sealed


@pytest.mark.parametrize("mutation", MUTATIONS)
async def test_a_retry_fails_when_the_original_is_lost(mutation):
    log, _, first, retried = await retried_while_in_flight(mutation)
    for gate in log.gates:
        gate.set_exception(LogWriteFailed("the log failed"))
    for outcome in (first, retried):
        with pytest.raises(errors.ContainerUnavailable):
            await outcome


@pytest.mark.parametrize("mutation", MUTATIONS)
async def test_a_retry_waits_without_spinning_when_the_original_s_caller_gave_up(mutation):
    """The original's caller is cancelled (its connection closed) while its mutation is being logged. The retry
    still waits for that mutation's frame, idle: before, it waited on the callers' futures, found the cancelled
    one done, and decided again at once, for ever, without time moving (found by the simulation: a slow log
    store and a closed connection left a segment store's loop spinning). Once the frame is durable the retry
    is answered as before."""
    log, owner, first, retried = await retried_while_in_flight(mutation)
    first.cancel()
    submitted = 0
    submit = owner._pipeline.submit

    def counting(decide):
        nonlocal submitted
        submitted += 1
        return submit(decide)

    owner._pipeline.submit = counting
    await asyncio.sleep(0.05)
    assert not retried.done()
    assert submitted == 0, f"the retry decided {submitted} times while the original was still being logged"
    for gate in log.gates:
        gate.set_result(None)
    log.gated = False
    if mutation == "merge":
        assert await retried == 62
    else:
        with pytest.raises(errors.SegmentIsSealed if mutation == "seal" else errors.SegmentAlreadyExists):
            await retried


async def test_a_stop_waits_for_a_frame_whose_callers_all_gave_up():
    """A container stopping waits for the frames in flight to be durable, even when every caller of one has
    gone (before, it waited on the callers' futures, and a cancelled one ended the wait at once)."""
    log = GatedLog()
    owner = await started(log)
    log.gated = True
    sealing = asyncio.ensure_future(owner.seal(SOURCE))
    await settle()
    sealing.cancel()
    stopping = asyncio.ensure_future(owner.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done(), "the stop did not wait for the frame in flight"
    for gate in log.gates:
        gate.set_result(None)
    await asyncio.wait_for(stopping, 5)
