"""Retention by consumption from a streaming query (option ``subscriber``, spark_io/subscription.py): a stream
whose policy keeps nothing it need not (size, minimum 0) is truncated behind the query's committed micro-batches
and never ahead of the batch being read, across a restart of the query from its checkpoint."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import clients.client as sdk
from clients.model import RetentionPolicy, ScalingPolicy, StreamConfiguration
from spark_io.offsets import cut_of
from tests.spark.support import number_of, write_events
from tests.spark.test_stream_read import offsets_of
from tests.support.standalone import serve

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def retaining(tmp_path_factory):
    """A standalone whose retention runs every second."""
    yield from serve(tmp_path_factory, "spark-retention", extra_args=["--retention-period", "1"])


def head(controller: str, scope: str) -> int:
    async def ask():
        async with sdk.connect(controller) as client:
            return (await client.head_cut(scope, "s")).positions.get(0, 0)
    return asyncio.run(ask())


class Watcher:
    """A foreachBatch sink that keeps the events and checks, as each batch runs, that the stream's head is not
    past the batch's first event (retention never truncates what a batch still has to read)."""

    def __init__(self, controller: str, scope: str):
        self.controller, self.scope = controller, scope
        self.events: list[bytes] = []
        self.ahead: list[tuple[int, int, int]] = []  # (batch id, head, first offset) where the head was past it
        self._lock = threading.Lock()

    def __call__(self, frame, batch_id):
        rows = frame.select("event", "offset").collect()
        now = head(self.controller, self.scope)
        with self._lock:
            self.events.extend(bytes(row.event) for row in rows)
            if rows and now > min(row.offset for row in rows):
                self.ahead.append((batch_id, now, min(row.offset for row in rows)))


def run_query(spark, controller: str, scope: str, checkpoint, watcher: Watcher) -> None:
    query = (spark.readStream.format("tributary").option("controller", controller).option("scope", scope)
             .option("stream", "s").option("start_stream_cut", "earliest").option("subscriber", "totals")
             .option("max_events_per_trigger", "250").load()
             .writeStream.foreachBatch(watcher).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None


def committed_ends(checkpoint) -> list[int]:
    """The end offset (segment 0) of every micro-batch in the query's commit log."""
    committed = {int(path.name) for path in (checkpoint / "commits").iterdir() if path.name.isdigit()}
    return [cut_of(offset).positions[0] for batch, offset in enumerate(offsets_of(checkpoint)) if batch in committed]


def wait_for_head(controller: str, scope: str, at_least: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while (now := head(controller, scope)) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def test_a_stream_is_truncated_behind_the_query_commits_never_ahead(spark, retaining, scope_name, tmp_path):
    controller, checkpoint = retaining.controller_uri, tmp_path / "checkpoint"

    async def create():
        async with sdk.connect(controller) as client:
            await client.create_scope(scope_name)
            await client.create_stream(scope_name, "s", StreamConfiguration(
                ScalingPolicy.fixed(1), RetentionPolicy.by_size(0, 10**12)))
    asyncio.run(create())
    watcher = Watcher(controller, scope_name)
    run_query(spark, controller, scope_name, checkpoint, watcher)  # an empty stream: the query subscribes at 0
    write_events(controller, scope_name, "s", range(1000), size=100)
    time.sleep(2.5)  # retention rounds run; alone, a policy of minimum 0 would truncate everything recorded
    assert head(controller, scope_name) == 0, "retention went past the subscriber's cut"

    run_query(spark, controller, scope_name, checkpoint, watcher)
    assert sorted(map(number_of, watcher.events)) == list(range(1000))
    ends = committed_ends(checkpoint)
    assert len(ends) >= 4, ends
    reached = wait_for_head(controller, scope_name, ends[-2])
    assert ends[-2] <= reached <= ends[-1], (reached, ends)  # released up to a committed end, not past the last

    async def subscribers():
        async with sdk.connect(controller) as client:
            return await client._controller.list_subscribers(scope_name, "s")
    assert asyncio.run(subscribers()) == [f"{scope_name}/totals"]

    write_events(controller, scope_name, "s", range(1000, 1500), size=100)  # the driver restarts from its checkpoint
    run_query(spark, controller, scope_name, checkpoint, watcher)
    assert sorted(map(number_of, watcher.events)) == list(range(1500))  # nothing skipped, nothing twice
    ends = committed_ends(checkpoint)
    reached = wait_for_head(controller, scope_name, ends[-2])
    assert ends[-2] <= reached <= ends[-1], (reached, ends)
    assert not watcher.ahead, f"the head was past a batch's first event: {watcher.ahead}"
