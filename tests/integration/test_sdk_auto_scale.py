"""Auto-scaling as an application sees it (issue 16, must-show 1), against `tributary standalone` run with
small auto-scale windows given on its command line: a stream with an event-rate policy of 100 events/s
per segment and one initial segment, fed ~2,000 events/s by an SDK EventWriter with routing keys, is split
while the load lasts and merged back to one segment once it stops; a reader group reading throughout gets
every event exactly once, each key's in write order."""

from __future__ import annotations

import asyncio
import time

import pytest

from clients.model import ScalingPolicy, StreamConfiguration
from clients.reader.reader_group import ReaderGroupConfig
from tests.support.sdk import check_each_once_in_key_order, event_of, sdk
from tests.support.standalone import serve

SCOPE, STREAM = "autoscale", "events"
RATE = 2000  # events/s
SECONDS = 10.0  # of load
KEYS = 16
# Windows 1/2/3/3 s, 3 s cooldown and mute, a tick every 0.2 s; cold marks last 30 s.
AUTO_SCALE_ARGS = ["--auto-scale-windows", "1,2,3,3", "--auto-scale-cooldown", "3", "--auto-scale-mute", "3",
                   "--auto-scale-tick", "0.2", "--auto-scale-report-interval", "0.4", "--auto-scale-cold-mark", "30"]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-auto-scale", extra_args=AUTO_SCALE_ARGS)


async def write_at_rate(writer, rate: int, seconds: float) -> int:
    """Writes ``rate`` events/s over ``KEYS`` routing keys for ``seconds`` (event n: key n % KEYS). Returns
    how many it wrote, all acknowledged."""
    acks, number = [], 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate)
        while number < due:
            key = number % KEYS
            acks.append(await writer.write(event_of(key, number // KEYS), f"key-{key}"))
            number += 1
        await asyncio.sleep(0.01)
    await writer.flush()
    await asyncio.gather(*acks)
    return number


async def segment_counts_while(client, until: asyncio.Event, counts: list[int]) -> None:
    while not until.is_set():
        counts.append(len(await client.get_segments(SCOPE, STREAM)))
        await asyncio.sleep(0.2)


@pytest.mark.process
async def test_event_rate_stream_scales_up_under_load_and_down_after_while_readers_read_each_event_once(standalone):
    """2,000 events/s against 100 events/s per segment: more than one segment while the load lasts, one
    segment again once it stopped; the group's reader, reading throughout, gets each event exactly once,
    in per-key order."""
    async with sdk.connect(standalone.controller_uri) as client:
        await client.create_scope(SCOPE)
        assert await client.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.by_event_rate(100, 2, 1)))
        group = await client.create_reader_group(SCOPE, "g", [STREAM],
                                                 config=ReaderGroupConfig(reader_timeout_ms=10_000, refresh_ms=200))
        received: list[bytes] = []
        done_reading = asyncio.Event()

        async def read() -> None:
            async with group.create_reader("r1") as reader:
                while not done_reading.is_set():
                    event = await reader.read_next(0.5)
                    if event is not None:
                        received.append(bytes(event.data))

        stop_watching = asyncio.Event()
        counts: list[int] = []
        reading = asyncio.create_task(read())
        watching = asyncio.create_task(segment_counts_while(client, stop_watching, counts))
        try:
            async with client.create_writer(SCOPE, STREAM) as writer:
                written = await write_at_rate(writer, RATE, SECONDS)
            most = max(counts)
            assert most > 1, f"never scaled up: {counts}"
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and len(await client.get_segments(SCOPE, STREAM)) > 1:
                await asyncio.sleep(0.5)
            final = len(await client.get_segments(SCOPE, STREAM))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(received) < written:
                await asyncio.sleep(0.2)
        finally:
            done_reading.set()
            stop_watching.set()
            await asyncio.gather(reading, watching)
        assert written >= 0.9 * RATE * SECONDS
        assert final == 1, f"not merged back to one segment ({final}) after scaling up to {most}"
        check_each_once_in_key_order(received, written, KEYS)


@pytest.mark.parametrize("windows", ["1,2,3", "1,2,x,4", "1,2,0,4"])
def test_bad_auto_scale_windows_are_a_usage_error(windows):
    """--auto-scale-windows needs four positive numbers: anything else exits 2 with the option named."""
    from click.testing import CliRunner

    from tributary.cli import main

    result = CliRunner().invoke(main, ["segmentstore", "--auto-scale-windows", windows])
    assert result.exit_code == 2, result.output
    assert "--auto-scale-windows" in result.output
