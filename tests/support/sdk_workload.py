"""An SDK workload for fault tests: a writer, a reader and a loop of small transactions on one client, each noting
when it made progress and any error that reached the application; and the checks of what it did.

In-process (``Workload(client)``), or as a program in another process or network namespace (partition tests):

    python -m tests.support.sdk_workload CONTROLLER_URI RESULT.json STOP_FILE

runs the workload until STOP_FILE exists, then writes what it did to RESULT.json (``Workload.record()``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import time
from pathlib import Path

from clients.model import ScalingPolicy, StreamConfiguration
from clients.reader.reader_group import ReaderGroupConfig
from tests.support.continuous_writer import ContinuousWriter, assert_all_acknowledged_read_once
from tests.support.sdk import check_key_order, parse_event, read_all, sdk
from tests.support.waiting import eventually

FAST_GROUP = ReaderGroupConfig(reader_timeout_ms=3000, refresh_ms=200)
TRANSACTION_EVENTS = 10


class Workload:
    """A writer, a reader and a loop of small transactions on one client, each noting when it made progress
    and any error that reached it."""

    def __init__(self, client, scope: str = "failover"):
        self.client = client
        self.scope = scope
        self.writer = ContinuousWriter(client, scope, "events")
        self.read: list[int] = []
        self.read_times: list[float] = []
        self.committed: list[int] = []  # transaction numbers, each of 10 events
        self.commit_times: list[float] = []
        self.errors: list[BaseException] = []
        self.stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        await self.client.create_scope(self.scope)
        for stream in ("events", "transactions"):
            await self.client.create_stream(self.scope, stream, StreamConfiguration(ScalingPolicy.fixed(2)))
        self._tasks = [asyncio.ensure_future(self._guard(work)) for work in
                       (self.writer.run(), self._read(), self._transact())]
        await eventually(lambda: self.writer.acknowledged and self.read and self.committed or self.errors,
                         "the workload's first progress", timeout=60)
        assert not self.errors, self.errors

    async def finish(self) -> None:
        self.stop.set()
        self.writer.stop.set()
        await asyncio.wait_for(asyncio.gather(*self._tasks), 60)

    def record(self) -> dict:
        """What it did, as JSON: acknowledged event numbers and the times of every kind of progress."""
        return {"acknowledged": self.writer.acknowledged, "ack_times": self.writer.ack_times, "read": self.read,
                "read_times": self.read_times, "committed": self.committed, "commit_times": self.commit_times,
                "errors": [repr(error) for error in self.errors]}

    async def _guard(self, work) -> None:
        try:
            await work
        except Exception as error:  # noqa: BLE001 - the assertion is that nothing reaches the application
            self.errors.append(error)

    async def _read(self) -> None:
        group = await self.client.create_reader_group(self.scope, "readers", ["events"], config=FAST_GROUP)
        async with group.create_reader("r") as reader:
            while not self.stop.is_set():
                event = await reader.read_next(0.2)
                if event is not None:
                    self.read.append(parse_event(event.data)[1])
                    self.read_times.append(time.monotonic())

    async def _transact(self) -> None:
        writer = self.client.create_transactional_writer(self.scope, "transactions")
        number = 0
        while not self.stop.is_set():
            transaction = await writer.begin()
            for index in range(TRANSACTION_EVENTS):
                await transaction.write(f"t{number}:{index}".encode(), f"key-{index % 3}")
            await transaction.commit(wait=True)  # committed: its events are visible (not only COMMITTING)
            self.committed.append(number)
            self.commit_times.append(time.monotonic())
            number += 1




async def check_read_back(client, record: dict, scope: str = "failover") -> None:
    """Every acknowledged event is read once, each key's in order; every committed transaction appears whole
    and no transaction appears in part (``record``: what ``Workload.record()`` gave)."""
    (events,) = await read_all(client, scope, "events", "check-events")
    assert_all_acknowledged_read_once(record["acknowledged"], events)
    check_key_order([event.data for event in events])
    (transactions,) = await read_all(client, scope, "transactions", "check-transactions")
    per_transaction = collections.Counter(bytes(event.data).split(b":")[0] for event in transactions)
    assert all(count == TRANSACTION_EVENTS for count in per_transaction.values()), "a transaction appeared in part"
    missing = {f"t{number}".encode() for number in record["committed"]} - per_transaction.keys()
    assert not missing, f"committed transactions missing: {sorted(missing)[:5]}"


async def _run(uri: str, result: Path, stop_file: Path) -> None:
    async with sdk.connect(uri) as client:
        workload = Workload(client)
        try:
            await workload.start()
            while not stop_file.exists():
                await asyncio.sleep(0.1)
            await workload.finish()
        finally:
            result.write_text(json.dumps(workload.record()))


if __name__ == "__main__":
    asyncio.run(_run(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
