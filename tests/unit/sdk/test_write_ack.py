"""WriteAck (clients/writer/acks.py): the shared acknowledgement of an append block —
counting, settling, failing, and awaiting from several tasks."""

from __future__ import annotations

import asyncio
import gc

import pytest

from clients.errors import ConnectionFailed, StreamSealed
from clients.writer.acks import WriteAck


async def _spin(times: int = 3) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


def test_settling_every_expected_event_completes_the_ack():
    """The ack is done only when all expected events are settled, in any chunks."""
    ack = WriteAck()
    ack.expect(3)
    assert not ack.done()
    ack.settle(1)
    ack.expect(2)
    ack.settle(2)
    assert not ack.done() and "pending=2" in repr(ack)
    ack.settle(2)
    assert ack.done() and ack.exception() is None
    assert "done" in repr(ack)


def test_fail_records_the_error_and_later_calls_change_nothing():
    """fail() completes the ack with its error; a later settle or fail does not change the outcome."""
    ack = WriteAck()
    ack.expect(2)
    error = ConnectionFailed("lost")
    ack.fail(error)
    assert ack.done() and ack.exception() is error and "failed" in repr(ack)
    ack.fail(StreamSealed("other"))
    ack.settle(2)
    assert ack.exception() is error


def test_fail_after_success_is_ignored():
    """Once all events are acknowledged, fail() does not turn the ack into a failure."""
    ack = WriteAck()
    ack.expect(1)
    ack.settle(1)
    ack.fail(ConnectionFailed("late"))
    assert ack.done() and ack.exception() is None


def test_awaiting_a_done_ack_returns_without_suspending():
    """Awaiting a settled ack finishes at the first step (no event-loop round trip, no loop needed)."""
    ack = WriteAck()
    ack.expect(1)
    ack.settle(1)
    with pytest.raises(StopIteration) as stop:
        ack.__await__().send(None)
    assert stop.value.value is None


def test_awaiting_a_failed_ack_raises_at_once():
    """Awaiting a failed ack raises its error at the first step."""
    ack = WriteAck()
    error = ConnectionFailed("lost")
    ack.fail(error)
    with pytest.raises(ConnectionFailed) as raised:
        ack.__await__().send(None)
    assert raised.value is error


async def test_await_completes_when_settled_later():
    """An awaiter of a pending ack resumes when the last event is settled, not before."""
    ack = WriteAck()
    ack.expect(2)
    waiter = asyncio.ensure_future(_await(ack))
    await _spin()
    assert not waiter.done()
    ack.settle(1)
    await _spin()
    assert not waiter.done()
    ack.settle(1)
    assert await asyncio.wait_for(waiter, 1) == "acked"


async def _await(ack: WriteAck) -> str:
    await ack
    return "acked"


async def test_await_raises_when_failed_later():
    """Every awaiter of a pending ack gets the very error passed to fail()."""
    ack = WriteAck()
    ack.expect(1)
    waiters = [asyncio.ensure_future(_await(ack)) for _ in range(3)]
    await _spin()
    error = StreamSealed("sealed")
    ack.fail(error)
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 1)
    assert all(result is error for result in results)
    with pytest.raises(StreamSealed):
        await ack  # and awaiting again afterwards raises too


async def test_many_awaiters_all_complete():
    """Several tasks awaiting one ack all complete on settle, and later awaits return at once."""
    ack = WriteAck()
    ack.expect(1)
    waiters = [asyncio.ensure_future(_await(ack)) for _ in range(5)]
    await _spin()
    ack.settle(1)
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1) == ["acked"] * 5
    assert await _await(ack) == "acked"


async def test_cancelling_one_awaiter_does_not_affect_the_others_on_success():
    """A cancelled awaiter is cancelled alone: the ack stays pending and the other awaiters still complete."""
    ack = WriteAck()
    ack.expect(1)
    cancelled, survivor = asyncio.ensure_future(_await(ack)), asyncio.ensure_future(_await(ack))
    await _spin()
    cancelled.cancel()
    await _spin()
    assert cancelled.cancelled()
    assert not ack.done() and not survivor.done()
    ack.settle(1)
    assert await asyncio.wait_for(survivor, 1) == "acked"
    assert await _await(ack) == "acked"  # a new awaiter after the cancellation also works


async def test_cancelling_one_awaiter_does_not_affect_the_others_on_failure():
    """After one awaiter is cancelled, fail() still reaches the others with the error."""
    ack = WriteAck()
    ack.expect(1)
    cancelled, survivor = asyncio.ensure_future(_await(ack)), asyncio.ensure_future(_await(ack))
    await _spin()
    cancelled.cancel()
    await _spin()
    error = ConnectionFailed("lost")
    ack.fail(error)
    with pytest.raises(ConnectionFailed) as raised:
        await asyncio.wait_for(survivor, 1)
    assert raised.value is error and cancelled.cancelled()


async def test_failing_an_ack_nobody_awaits_any_more_logs_nothing():
    """A failure whose only awaiter was cancelled (or that nobody awaited) reports no unretrieved exception."""
    loop = asyncio.get_running_loop()
    reported = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        awaited = WriteAck()
        awaited.expect(1)
        task = asyncio.ensure_future(_await(awaited))
        await _spin()
        task.cancel()
        await _spin()
        awaited.fail(ConnectionFailed("lost"))
        never_awaited = WriteAck()
        never_awaited.expect(1)
        never_awaited.fail(ConnectionFailed("lost too"))
        await _spin()
        del awaited, never_awaited, task
        gc.collect()
        await _spin()
    finally:
        loop.set_exception_handler(previous)
    assert reported == []
