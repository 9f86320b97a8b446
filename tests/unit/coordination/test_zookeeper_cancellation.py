"""A call through the ZooKeeper wrapper (coordination.zookeeper.ZooKeeper._call) whose caller is cancelled in the
very loop turn its answer arrives ends cancelled. Python 3.11's asyncio.wait_for returns the answer instead (or
raises the call's error), losing the cancellation: a log store's registration loop, cancelled by its stop just as
an answer came, went on checking its node for ever, and the stop never ended (found by the simulation)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from coordination.zookeeper import ZooKeeper, ZooKeeperUnavailable


class Answer:
    """What a kazoo ``*_async`` call returns, answered when the test says."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Answer], None]] = []
        self._value: Any = None
        self._error: BaseException | None = None

    def rawlink(self, callback: Callable[[Answer], None]) -> None:
        self._callbacks.append(callback)

    def get_nowait(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def answer(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        for callback in self._callbacks:
            callback(self)


@pytest.mark.parametrize("error", [None, ConnectionLoss()], ids=["answered", "connection lost"])
async def test_a_call_cancelled_as_its_answer_arrives_ends_cancelled(error):
    zk = ZooKeeper("127.0.0.1:1", session_timeout=4.0)
    answers: list[Answer] = []

    def call(*_args: Any) -> Answer:
        answers.append(Answer())
        return answers[-1]

    task = asyncio.ensure_future(zk._call(call, "/node"))
    while not answers:
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    # the answer is handed to the loop (as kazoo's thread does), and the cancel comes in the same turn
    loop.call_soon(answers[0].answer, "value", error)
    loop.call_soon(task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_call_that_gets_no_answer_in_time_is_unavailable():
    zk = ZooKeeper("127.0.0.1:1", session_timeout=4.0)
    zk.operation_timeout = 0.05

    with pytest.raises(ZooKeeperUnavailable, match="no answer in time"):
        await zk._call(lambda *_args: Answer(), "/node")
