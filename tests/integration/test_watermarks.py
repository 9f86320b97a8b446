"""Watermarks end to end (issue 16): SDK writers note times, the controller's watermarking job
(every 0.2 s here) writes watermarks into the stream's ``_MARK`` stream, and an SDK reader's time
window follows them. An in-process segment store and controller (tests/support/controller_harness)
with the SDK connected over loopback; times are synthetic (the writers' own numbers), so the checks
do not depend on the wall clock."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

import clients.client as sdk
from clients import errors
from clients.config import WriterConfig
from clients.errors import InvalidArgument
from clients.mark_segment import mark_segment, marks_between, segment_bounds
from clients.model import ScalingPolicy, StreamConfiguration
from clients.reader.reader_group import ReaderGroupConfig
from controller.service import watermark_rules as rules
from controller.service.context import ServiceSettings
from controller.service.watermarks import NEWEST_MARK
from controller.store import State
from controller.store import readers as store_readers
from tests.support.controller_harness import running_cluster
from wire.watermark import mark_stream

SETTINGS = ServiceSettings(watermark_period_seconds=0.2, redrive_interval_seconds=3600)
GROUP = ReaderGroupConfig(reader_timeout_ms=3000, refresh_ms=100)
DEADLINE_SECONDS = 20.0


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path / "data", SETTINGS) as running:
        yield running


@pytest.fixture
async def client(cluster):
    async with sdk.connect(f"tcp://127.0.0.1:{cluster.app.port}") as client:
        yield client


async def test_mark_stream_lives_and_dies_with_its_stream(cluster, client):
    """Creating ``s`` creates ``_MARKs`` (one segment, internal: left out of the SDK's listing);
    reader-group streams get none; deleting ``s`` deletes ``_MARKs`` and its segment."""
    await client.create_scope("marks")
    await client.create_stream("marks", "s", StreamConfiguration(ScalingPolicy.fixed(3)))
    await client.create_reader_group("marks", "g", ["s"])
    assert await client.stream_exists("marks", "_MARKs")
    assert [segment.segment.segment_id for segment in
            await client._controller.get_current_segments("marks", "_MARKs")] == [0]
    assert [name async for name in client.list_streams("marks")] == ["s"]
    assert sorted([name async for name in client.list_streams("marks", include_internal=True)]) == [
        "_MARKs", "_RGg", "s"]  # the group's stream has no mark stream
    assert await segment_bounds(cluster.app.client, mark_segment("marks", "s")) == (0, 0)
    await client.seal_stream("marks", "s")
    assert await client.delete_stream("marks", "s")
    assert not await client.stream_exists("marks", "_MARKs")
    with pytest.raises(errors.NoSuchSegment):
        await cluster.app.client.segment_info(mark_segment("marks", "s"))


class Sampler:
    """Samples a reader's time window and checks each sample against the slowest open writer."""

    def __init__(self, reader, scope: str, stream: str):
        self.reader, self.scope, self.stream = reader, scope, stream
        self.lowers: list[int] = []

    async def sample(self, slowest_open: int | None) -> int | None:
        window = await self.reader.current_time_window(self.scope, self.stream)
        lower = window.lower_time_bound
        if lower is not None:
            assert not self.lowers or lower >= self.lowers[-1], f"went back: {self.lowers[-1]} -> {lower}"
            assert slowest_open is None or lower <= slowest_open, f"{lower} passed the slowest writer {slowest_open}"
            if window.upper_time_bound is not None:
                assert window.upper_time_bound >= lower
            self.lowers.append(lower)
        return lower


async def keep_reading(reader, stop: asyncio.Event, events: list[bytes]) -> list[bytes]:
    try:
        while not stop.is_set():
            event = await reader.read_next(0.05)
            if event is not None:
                events.append(bytes(event.data))
    except errors.ClosedError:
        pass  # the test failed and closed the reader
    return events


EVENTS_PER_ROUND = 3


async def note_round(writer, label: str, step: int, time: int) -> None:
    for number in range(EVENTS_PER_ROUND):
        await writer.write(f"{label}-{step}-{number}".encode(), routing_key=f"{label}-{number}")
    await writer.note_time(time)


async def test_three_writers_watermarks_follow_the_slowest_and_a_closed_writer_stops_holding_back(cluster, client):
    """Writers join at time 0, then note times 100, 60 and 20 per step: the reader's lower bound
    only grows and never passes the slow writer's time while it is open; once the slow writer closes (removeWriter), the
    lower bound moves past its last time. The mark stream's lower bounds strictly increase."""
    written_before = REGISTRY.get_sample_value("tributary_controller_watermarks_total") or 0.0
    await client.create_scope("wm")
    await client.create_stream("wm", "s", StreamConfiguration(ScalingPolicy.fixed(2),
                                                              timestamp_aggregation_timeout_ms=60_000))
    group = await client.create_reader_group("wm", "g", ["s"], config=GROUP)
    writers = {label: client.create_writer("wm", "s", WriterConfig(writer_id=f"writer-{label}"))
               for label in ("fast", "medium", "slow")}
    paces = {"fast": 100, "medium": 60, "slow": 20}
    stop, events, rounds = asyncio.Event(), [], 0
    async with group.create_reader("r") as reader:
        reading = asyncio.create_task(keep_reading(reader, stop, events))
        sampler = Sampler(reader, "wm", "s")
        step, slow_last = 0, 0
        for label, writer in writers.items():  # a writer counts from its first mark: all join at time 0
            await note_round(writer, label, 0, 0)
            rounds += 1
        with pytest.raises(InvalidArgument):
            await reader.current_time_window("wm", "other")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_SECONDS
        while (await sampler.sample(slow_last) or 0) < 10 * paces["slow"]:  # phase 1: until it advanced a while
            assert loop.time() < deadline, f"no watermark passed 200 in time: {sampler.lowers}"
            step += 1
            for label, writer in writers.items():
                await note_round(writer, label, step, paces[label] * step)
                rounds += 1
            slow_last = paces["slow"] * step
            await asyncio.sleep(0.05)
        await writers.pop("slow").close()
        deadline = loop.time() + DEADLINE_SECONDS
        while (await sampler.sample(None) or 0) <= slow_last:  # phase 2: the closed writer is forgotten
            assert loop.time() < deadline, f"stuck at the closed writer's {slow_last}: {sampler.lowers[-5:]}"
            step += 1
            for label, writer in writers.items():
                await note_round(writer, label, step, paces[label] * step)
                rounds += 1
            await asyncio.sleep(0.05)
        while len(events) < rounds * EVENTS_PER_ROUND and loop.time() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await reading
    for writer in writers.values():
        await writer.close()
    assert sorted(events) == sorted(set(events)) and len(events) == rounds * EVENTS_PER_ROUND
    assert sampler.lowers[-1] > slow_last and len(set(sampler.lowers)) > 3
    segment = mark_segment("wm", "s")
    _, length = await segment_bounds(cluster.app.client, segment)
    lowers = [mark.lower_time_bound async for _, _, mark in marks_between(cluster.app.client, segment, 0, length)]
    assert lowers == sorted(set(lowers)) and len(lowers) > 3
    written = REGISTRY.get_sample_value("tributary_controller_watermarks_total") - written_before
    assert written >= len(lowers)  # the controller's metric counted every watermark (this process's registry)
    assert await cluster.app.client.get_attribute(segment, NEWEST_MARK) >= 0  # the hint was written


async def test_a_writer_that_stops_noting_is_dropped_after_the_timeout(cluster, client):
    """With a 1 s timestampAggregationTimeout, a writer that stops noting (without closing) holds the
    watermark for about that long, then is dropped from the store and the others' times pass."""
    await client.create_scope("quiet")
    await client.create_stream("quiet", "s", StreamConfiguration(ScalingPolicy.fixed(1),
                                                                 timestamp_aggregation_timeout_ms=1000))
    async with client.create_writer("quiet", "s", WriterConfig(writer_id="busy")) as busy, \
            client.create_writer("quiet", "s", WriterConfig(writer_id="quiet")) as quiet:
        await note_round(quiet, "quiet", 1, 50)
        loop = asyncio.get_running_loop()
        start = loop.time()
        watermarking = cluster.app.services.watermarking
        time = 0
        while True:
            time += 100
            await note_round(busy, "busy", time, time)
            known = watermarking.known("quiet", "s")
            if known is not None and known.previous is not None and known.previous.lower_time_bound > 50:
                break
            assert loop.time() - start < DEADLINE_SECONDS, "the quiet writer was never dropped"
            await asyncio.sleep(0.1)
        assert loop.time() - start >= 0.9  # not before the timeout
        store = cluster.app.context.store.stream("quiet", "s")
        marks, _ = await store_readers.list_writer_marks(store)
        assert "quiet" not in marks and "busy" in marks


async def wait_for_watermark(cluster, scope: str, stream: str, above: int) -> int:
    """Waits until the controller's job wrote a watermark with a lower bound above ``above``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_SECONDS
    while True:
        known = cluster.app.services.watermarking.known(scope, stream)
        if known is not None and known.previous is not None and known.previous.lower_time_bound > above:
            return known.previous.lower_time_bound
        assert loop.time() < deadline, f"no watermark above {above} on {scope}/{stream}"
        await asyncio.sleep(0.05)


async def test_a_restarted_controller_goes_on_from_the_newest_watermark(cluster, client):
    """After a controller restart the job loads the newest watermark from the mark segment (from the
    offset its hint attribute names) and the watermarks written afterwards still only grow."""
    await client.create_scope("again")
    await client.create_stream("again", "s")
    async with client.create_writer("again", "s", WriterConfig(writer_id="w")) as writer:
        await note_round(writer, "w", 1, 100)
        await wait_for_watermark(cluster, "again", "s", 99)
        await note_round(writer, "w", 2, 200)
        await wait_for_watermark(cluster, "again", "s", 199)
    await cluster.restart_controller(settings=SETTINGS)  # on another port: a new client finds it
    async with sdk.connect(f"tcp://127.0.0.1:{cluster.app.port}") as again, \
            again.create_writer("again", "s", WriterConfig(writer_id="w")) as same_writer:
        await note_round(same_writer, "w", 3, 300)
        assert await wait_for_watermark(cluster, "again", "s", 299) == 300
    segment = mark_segment("again", "s")
    _, length = await segment_bounds(cluster.app.client, segment)
    lowers = [mark.lower_time_bound async for _, _, mark in marks_between(cluster.app.client, segment, 0, length)]
    assert lowers == [100, 200, 300]


async def test_a_stream_without_a_mark_stream_gets_one_when_writers_note_times(cluster, client):
    """A stream created before mark streams existed (simulated by deleting its mark stream's records
    and segment) gets its mark stream from the job once a writer notes a time."""
    await client.create_scope("old")
    await client.create_stream("old", "s")
    store = cluster.app.context.store
    mark = store.stream("old", mark_stream("s"))
    await mark.transition_state(State.SEALED)
    await cluster.app.client.delete_segment(mark_segment("old", "s"))
    await store.delete_stream("old", mark_stream("s"))
    assert not await client.stream_exists("old", "_MARKs")
    async with client.create_writer("old", "s") as writer:
        await note_round(writer, "w", 1, 42)
        assert await wait_for_watermark(cluster, "old", "s", 0) == 42
    assert await client.stream_exists("old", "_MARKs")


@pytest.mark.slow
async def test_with_the_default_timeout_a_writer_noting_less_often_than_the_period_holds_the_watermarks(cluster,
                                                                                                         client):
    """Issue 24: with ``timestamp_aggregation_timeout_ms=0`` (the default) a live writer that notes every
    1.5 watermark periods, beside one noting four times a period, still holds the watermarks back: the
    reader's lower bound never passes the last time the slow writer began to note, and it still
    advances through the slow writer's times. Once the slow writer stops noting (without closing), it
    stops counting after six periods (watermark_rules.DEFAULT_TIMEOUT_PERIODS) behind the newest watermark,
    not before: then the fast writer's times pass its last one and its mark is removed."""
    period = SETTINGS.watermark_period_seconds
    await client.create_scope("default-timeout")
    await client.create_stream("default-timeout", "s", StreamConfiguration(ScalingPolicy.fixed(2)))  # timeout 0
    group = await client.create_reader_group("default-timeout", "g", ["s"], config=GROUP)
    loop = asyncio.get_running_loop()
    start = loop.time()

    def now_ms() -> int:
        return 1 + int((loop.time() - start) * 1000)

    slow_noting = [0]  # the times handed to the slow writer's note_time, each appended before the call
    stop_fast, stop_reading, events = asyncio.Event(), asyncio.Event(), []

    async def fast_writer(writer) -> None:
        step = 0
        while not stop_fast.is_set():
            step += 1
            await note_round(writer, "fast", step, now_ms())
            await asyncio.sleep(period / 4)

    async with client.create_writer("default-timeout", "s", WriterConfig(writer_id="fast")) as fast, \
            client.create_writer("default-timeout", "s", WriterConfig(writer_id="slow")) as slow, \
            group.create_reader("r") as reader:
        await note_round(slow, "slow", 0, 0)  # both join at time 0: a writer counts from its first mark
        await note_round(fast, "fast", 0, 0)
        reading = asyncio.create_task(keep_reading(reader, stop_reading, events))
        fast_task = asyncio.create_task(fast_writer(fast))
        try:
            lowers: list[int] = []
            next_note, step = loop.time(), 0
            deadline = loop.time() + DEADLINE_SECONDS
            # Phase 1: until the lower bound went through eight of the slow writer's times.
            while len([time for time in slow_noting if lowers and 0 < time <= lowers[-1]]) < 8:
                assert loop.time() < deadline, f"the lower bound did not advance: {lowers[-5:]}, {slow_noting[-5:]}"
                if loop.time() >= next_note:
                    step += 1
                    slow_noting.append(now_ms())
                    await note_round(slow, "slow", step, slow_noting[-1])
                    next_note += 1.5 * period
                window = await reader.current_time_window("default-timeout", "s")
                noted = slow_noting[-1]  # read after the window: every note it can reflect had begun
                lower = window.lower_time_bound
                if lower is not None:
                    assert lower <= noted, f"lower bound {lower} passed the slow writer's last time {noted}"
                    assert not lowers or lower >= lowers[-1]
                    lowers.append(lower)
                await asyncio.sleep(0.02)
            assert len(set(lowers)) > 4
            # Phase 2: the slow writer stops noting, and stays open.
            last, stopped = slow_noting[-1], loop.time()
            above = await wait_for_watermark(cluster, "default-timeout", "s", last)
            held = loop.time() - stopped
        finally:
            stop_fast.set()
            await fast_task
            stop_reading.set()
            await reading
        assert above > last
        assert held >= rules.DEFAULT_TIMEOUT_PERIODS * period - 0.01, f"dropped after {held:.2f} s"
        marks, _ = await store_readers.list_writer_marks(cluster.app.context.store.stream("default-timeout", "s"))
        assert "slow" not in marks and "fast" in marks
    assert len(events) == len(set(events)) > 0


async def test_a_closed_transactional_writer_that_committed_with_times_is_forgotten(cluster, client):
    """A transactional writer notes times through its commits (``timestamp_ms``); when it closes it tells the
    controller it is gone, as the event writer does, so its last time stops holding the watermarks back at once
    (it used to stay until the stream's timeout: about a minute by default)."""
    await client.create_scope("txn-marks")
    await client.create_stream("txn-marks", "s", StreamConfiguration(ScalingPolicy.fixed(1)))
    store = cluster.app.context.store.stream("txn-marks", "s")
    async with client.create_transactional_writer("txn-marks", "s", WriterConfig(writer_id="batcher")) as writer:
        async with await writer.begin() as transaction:
            await transaction.write(b"event", routing_key="k")
            await transaction.commit(wait=True, timestamp_ms=1_000)
        marks, _ = await store_readers.list_writer_marks(store)
        assert marks["batcher"].is_alive
    marks, _ = await store_readers.list_writer_marks(store)
    assert "batcher" not in marks or not marks["batcher"].is_alive  # shut down: the next round drops it
