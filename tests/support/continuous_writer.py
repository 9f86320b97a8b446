"""An SDK writer that keeps writing numbered events while a test injects a fault, noting every acknowledgement
and when it came; and the check that every acknowledged event is read back exactly once."""

from __future__ import annotations

import asyncio
import time

from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.sdk import parse_event
from tests.support.waiting import eventually


class ContinuousWriter:
    """Writes numbered events with up to ``window`` unacknowledged, noting when each acknowledgement arrives.
    Event n is ``k<n % KEYS>:<n>`` with routing key ``key-<n % KEYS>``."""

    KEYS = 5

    def __init__(self, client, scope: str, stream: str, window: int = 32):
        self.client, self.scope, self.stream, self.window = client, scope, stream, window
        self.acknowledged: list[int] = []
        self.ack_times: list[float] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with self.client.create_writer(self.scope, self.stream) as writer:
            in_flight: list[tuple[int, object]] = []
            number = 0
            while not self.stop.is_set() or in_flight:
                if not self.stop.is_set() and len(in_flight) < self.window:
                    key = number % self.KEYS
                    in_flight.append((number, await writer.write(f"k{key}:{number}".encode(), f"key-{key}")))
                    number += 1
                    continue
                acked_number, ack = in_flight.pop(0)
                await ack
                self.acknowledged.append(acked_number)
                self.ack_times.append(time.monotonic())

    def longest_stall(self, after: float) -> float:
        times = [t for t in self.ack_times if t >= after]
        return max((b - a for a, b in zip(times, times[1:])), default=float("inf"))


def longest_gap(times: list[float], start: float, end: float | None = None) -> float:
    """The longest wait for progress from ``start`` on: between ``start``, the moments of ``times`` from then on
    (up to ``end``) and ``end`` when given (infinite when nothing came and no ``end`` closes the wait)."""
    moments = [start, *[moment for moment in times if moment >= start and (end is None or moment <= end)]]
    if end is not None:
        moments.append(end)
    return max((b - a for a, b in zip(moments, moments[1:])), default=float("inf"))


def numbers_of(events) -> list[int]:
    return [parse_event(event.data)[1] for event in events]


async def run_writer_through(client, scope: str, stream: str, fault, seconds: float) -> ContinuousWriter:
    """Writes for ``seconds`` while ``fault()`` (a coroutine) runs alongside; returns the writer's record."""
    await client.create_scope(scope)
    await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(2)))
    writer = ContinuousWriter(client, scope, stream)
    task = asyncio.ensure_future(writer.run())
    await eventually(lambda: writer.acknowledged or task.done(), "the writer's first acknowledgement", timeout=30)
    assert writer.acknowledged, "nothing acknowledged before the fault"
    await fault()
    await asyncio.sleep(max(0.0, seconds))
    writer.stop.set()
    await asyncio.wait_for(task, 60)
    return writer


def assert_all_acknowledged_read_once(acknowledged: list[int], events) -> None:
    read = sorted(numbers_of(events))
    assert len(read) == len(set(read)), "an event was read twice"
    missing = set(acknowledged) - set(read)
    assert not missing, f"{len(missing)} acknowledged events lost, e.g. {sorted(missing)[:5]}"
