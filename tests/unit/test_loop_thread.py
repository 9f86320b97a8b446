"""clients.loop_thread: the event-loop thread that the synchronous APIs (Spark's bridge, the pravega_client
compatibility module) run the SDK on, and the one-per-process holder that remakes it after a fork."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from clients.loop_thread import LoopThread, PerProcess, current_pid


@pytest.fixture(scope="module")
def loop_thread():
    return LoopThread("test-loop-thread")


def test_run_returns_the_result_and_raises_the_failure(loop_thread):
    async def answer():
        await asyncio.sleep(0.001)
        return threading.current_thread().name

    assert loop_thread.run(answer()) == "test-loop-thread"

    async def fail():
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        loop_thread.run(fail())


def test_a_timeout_cancels_the_coroutine(loop_thread):
    cancelled = threading.Event()

    async def slow():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        loop_thread.run(slow(), timeout=0.1)
    assert time.monotonic() - started < 5
    assert cancelled.wait(5)


def test_other_threads_run_while_a_call_waits(loop_thread):
    """The wait releases the GIL: a counting thread makes progress during a 0.3 s call."""
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        before = counted[0]
        loop_thread.run(asyncio.sleep(0.3))
        during = counted[0] - before
    finally:
        stop.set()
        counter.join()
    assert during > 10_000, during


def test_a_blocking_call_from_the_loop_thread_is_refused(loop_thread):
    async def inner():
        return loop_thread.run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="cannot run on the event loop it waits for"):
        loop_thread.run(inner())


def test_later_runs_in_the_background_and_swallows_failures(loop_thread):
    done = threading.Event()

    async def work():
        done.set()
        raise ValueError("only logged")

    loop_thread.later(work())
    assert done.wait(5)


def _in_child(check) -> str:
    """Runs ``check()`` in a forked child; returns what it returned (or the error it raised) as text."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once (no pytest teardown here)
        try:
            answer = str(check())
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            answer = f"{type(error).__name__}: {error}"
        os.write(write_end, answer.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        answer = reader.read().decode()
    os.waitpid(pid, 0)
    return answer


def test_per_process_makes_one_object_and_a_new_one_after_a_fork():
    made: list[LoopThread] = []

    def make() -> LoopThread:
        made.append(LoopThread("per-process"))
        return made[-1]

    holder = PerProcess(make)
    first = holder.get()
    assert holder.get() is first and holder.peek() is first and len(made) == 1
    assert first.alive and first.pid == current_pid() == os.getpid()

    def child_view() -> str:
        stale_alive = first.alive
        assert holder.peek() is None  # the parent's is not this process's
        fresh = holder.get()
        answer = fresh.run(asyncio.sleep(0, result="ran"))
        return f"{stale_alive} {fresh is not first} {answer} {current_pid() == os.getpid()}"

    assert _in_child(child_view) == "False True ran True"

    def stale_use() -> str:
        return first.run(asyncio.sleep(0))

    assert _in_child(stale_use).startswith("RuntimeError: this object's event loop belongs to another process")
