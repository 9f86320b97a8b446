"""Tributary's SDK under faults: connections dropped and stalled by a proxy, the standalone
SIGKILLed and restarted under a writer, a reader process SIGKILLed, a manual scale under load,
a 1 GiB large event (bounded memory on both sides) and an abandoned one."""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
import sys
import time

import pytest

from clients.config import ClientConfig, WriterConfig
from clients.errors import NoSuchSegment
from clients.model import ScalingPolicy, StreamConfiguration
from clients.reader.reader_group import ReaderGroupConfig
from clients.segment_store_client import SegmentStoreClient
from tests.support.processes import ServerProcess, free_port, kill_process, listening, wait_until_ready
from tests.support.sdk import check_each_once_in_key_order, event_of, parse_event, sdk, write_keyed
from tests.support.standalone import StandaloneProcess
from tests.support.tcp_proxy import FaultyProxy

pytestmark = pytest.mark.process

MIB = 1024 * 1024
FAST_GROUP = ReaderGroupConfig(reader_timeout_ms=3000, refresh_ms=200)


def role(name: str, uri: str, args: dict, out_path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.support.sdk_roles", name, uri,
                             json.dumps({**args, "out": str(out_path)})], stderr=subprocess.DEVNULL)


def records(path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_record(path, key: str, process: subprocess.Popen, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in records(path):
            if key in record:
                return record
        assert process.poll() is None, f"role exited with {process.returncode} before {key!r}"
        time.sleep(0.05)
    raise AssertionError(f"no {key!r} record within {timeout}s")


async def read_until(reader, count: int, timeout: float) -> list[bytes]:
    got = []
    async with asyncio.timeout(timeout):
        while len(got) < count:
            event = await reader.read_next(0.5)
            if event is not None:
                got.append(event.data)
    return got


# ---------------------------------------------------------------------- connection faults


@pytest.mark.slow
async def test_dropped_and_stalled_connections_lose_and_duplicate_nothing(tmp_path):
    """A proxy between every client and the segment store drops and stalls connections at random
    (seeded) while a writer streams 100,000 keyed events and a reader group of two reads them:
    every event arrives exactly once, each key's in order."""
    store = ServerProcess("segmentstore", tmp_path / "store", extra_args=["--containers", "2",
                                                                          "--log-file-size", "16"]).start()
    proxy = FaultyProxy("127.0.0.1", store.port)
    proxy_port = await proxy.start()
    controller_port = free_port()
    controller = subprocess.Popen([sys.executable, "-m", "tributary", "controller", "--port", str(controller_port),
                                   "--segment-store", f"127.0.0.1:{proxy_port}", "--containers", "2"],
                                  stderr=subprocess.DEVNULL)
    count, keys = 100_000, 31
    try:
        await asyncio.to_thread(wait_until_ready, controller, listening(controller_port), "controller", 30)
        config = ClientConfig(keepalive_seconds=0.5)
        async with sdk.connect(f"tcp://127.0.0.1:{controller_port}", config) as client:
            await client.create_scope("chaos")
            await client.create_stream("chaos", "s", StreamConfiguration(ScalingPolicy.fixed(4)))
            group = await client.create_reader_group("chaos", "g", ["s"], config=FAST_GROUP)
            chaos = proxy.start_chaos(seed=20261124, drop_probability_per_second=0.7,
                                      stall_probability_per_second=0.5, stall_seconds_max=3.0, drop_fraction=0.5,
                                      stall_fraction=0.5)
            received: list[bytes] = []

            async def write() -> None:
                writer_config = WriterConfig(ack_timeout_seconds=1.5)
                async with client.create_writer("chaos", "s", writer_config) as writer:
                    for start in range(0, count, 2500):  # about 20 s of writing, so faults hit all along
                        await write_keyed(writer, 2500, keys, start=start)
                        await asyncio.sleep(0.5)

            async def read(name: str) -> None:
                async with group.create_reader(name) as reader:
                    while len(received) < count:
                        event = await reader.read_next(0.5)
                        if event is not None:
                            received.append(event.data)

            async with asyncio.timeout(240):
                await asyncio.gather(write(), read("r1"), read("r2"))
            faults = await proxy.stop_chaos()
            assert chaos.done() and faults > 0 and proxy.stats.dropped > 0 and proxy.stats.stalled > 0
            await asyncio.sleep(1)  # anything duplicated would arrive now
            async with group.create_reader("late") as late:
                assert await late.read_next(1.0) is None
        check_each_once_in_key_order(received, count, keys)
    finally:
        kill_process(controller)
        await proxy.stop()
        store.kill()


# ---------------------------------------------------------------------- process faults


@pytest.mark.slow
async def test_a_writer_rides_out_a_standalone_sigkill_and_restart(tmp_path):
    """The standalone is SIGKILLed while a writer streams and restarted on the same data dir and
    ports a few seconds later: the writer resumes by itself (no error reaches the application),
    and every acknowledged event is read exactly once, each key's in order."""
    standalone = StandaloneProcess(tmp_path / "data").start()
    count, keys = 60_000, 13
    try:
        async with sdk.connect(standalone.controller_uri) as client:
            await client.create_scope("crash")
            await client.create_stream("crash", "s", StreamConfiguration(ScalingPolicy.fixed(3)))
            writer = client.create_writer("crash", "s")
            acks = []

            async def write() -> None:
                for start in range(0, count, 1000):
                    acks.extend(await write_keyed(writer, 1000, keys, start=start))
                    await asyncio.sleep(0.02)
                await writer.flush()

            async def crash() -> None:
                await asyncio.sleep(1.0)
                standalone.kill()
                await asyncio.sleep(2.0)
                await asyncio.to_thread(standalone.start)

            async with asyncio.timeout(180):
                await asyncio.gather(write(), crash())
            assert all(ack.done() and ack.exception() is None for ack in acks)
            await writer.close()
            end = await client.tail_cut("crash", "s")
            group = await client.create_reader_group("crash", "g", ["s"], end_cuts=[end])
            async with group.create_reader("r") as reader:
                received = [event.data async for event in reader]
        check_each_once_in_key_order(received, count, keys)
    finally:
        standalone.remove_data()


@pytest.mark.slow
async def test_a_killed_readers_segments_go_to_the_others(tmp_path):
    """A reader process of a group is SIGKILLed: after the group's reader timeout its segments go to
    the reader that is left, and every event is read; events read twice are only ones the killed
    reader read after its last heartbeat (at-least-once from there), and each reader saw each
    key in order."""
    standalone = StandaloneProcess(tmp_path / "data").start()
    count, keys = 6_000, 11
    try:
        async with sdk.connect(standalone.controller_uri) as client:
            await client.create_scope("kill")
            await client.create_stream("kill", "s", StreamConfiguration(ScalingPolicy.fixed(4)))
            async with client.create_writer("kill", "s") as writer:
                await write_keyed(writer, count, keys)
            group = await client.create_reader_group("kill", "g", ["s"], config=FAST_GROUP)
            out = tmp_path / "victim.jsonl"
            victim = role("group_reader", standalone.controller_uri,
                          {"scope": "kill", "group": "g", "reader": "victim", "pace_seconds": 0.001}, out)
            try:
                wait_for_record(out, "ready", victim)
                async with group.create_reader("survivor") as survivor:
                    survived = await read_until(survivor, 500, 30)
                    while len([r for r in records(out) if "event" in r]) < 1000:  # the victim is reading
                        await asyncio.sleep(0.05)
                    kill_process(victim)
                    killed_at = time.monotonic()
                    victim_events = [r["event"].encode() for r in records(out) if "event" in r]
                    rest = count + 10_000  # read until everything is there (duplicates allowed)
                    async with asyncio.timeout(60):
                        while len(set(survived) | set(victim_events)) < count:
                            event = await survivor.read_next(0.5)
                            if event is not None:
                                survived.append(event.data)
                            assert len(survived) < rest
                    assert time.monotonic() - killed_at >= FAST_GROUP.reader_timeout_ms / 1000 * 0.9
                    assert "victim" not in await group.online_readers()
            finally:
                kill_process(victim)
        both = collections.Counter(survived + victim_events)
        assert set(both) == {event_of(n % keys, n // keys) for n in range(count)}
        twice = {event for event, seen in both.items() if seen > 1}
        assert twice <= set(victim_events[-2000:])  # only what the victim read lately, after a heartbeat
        for reader_events in (survived, victim_events):
            last = {}
            for data in reader_events:
                key, sequence = parse_event(data)
                assert sequence > last.get(key, -1) or data in twice
                last[key] = max(sequence, last.get(key, -1))
    finally:
        standalone.remove_data()


# ---------------------------------------------------------------------- scaling under load


@pytest.mark.slow
async def test_split_and_merge_under_two_writers_and_three_readers(tmp_path):
    """Two writers (their own keys) and three readers run while segment 0 is split in two and then
    two neighbouring segments are merged: no event is lost or duplicated, and each key's events
    come in order across predecessors and successors."""
    standalone = StandaloneProcess(tmp_path / "data").start()
    per_writer, keys = 15_000, 7
    try:
        async with sdk.connect(standalone.controller_uri) as client:
            await client.create_scope("scale")
            await client.create_stream("scale", "s", StreamConfiguration(ScalingPolicy.fixed(3)))
            group = await client.create_reader_group("scale", "g", ["s"], config=FAST_GROUP)
            received: list[bytes] = []
            total = 2 * per_writer

            async def write(prefix: str) -> None:
                async with client.create_writer("scale", "s") as writer:
                    for number in range(per_writer):
                        key = number % keys
                        await writer.write(f"{prefix}{key}:{number // keys}".encode(), f"{prefix}{key}")
                        if number % 500 == 0:
                            await asyncio.sleep(0.02)

            async def read(name: str) -> None:
                async with group.create_reader(name) as reader:
                    while len(received) < total:
                        event = await reader.read_next(0.5)
                        if event is not None:
                            received.append(event.data)

            async def scale() -> None:
                await asyncio.sleep(0.5)
                first = (await client.get_segments("scale", "s"))[0]
                middle = (first.low + first.high) / 2
                await client.scale_stream("scale", "s", [first.segment], [(first.low, middle), (middle, first.high)])
                await asyncio.sleep(0.5)
                ranges = await client.get_segments("scale", "s")
                left, right = ranges[-2], ranges[-1]
                await client.scale_stream("scale", "s", [left.segment, right.segment], [(left.low, right.high)])

            async with asyncio.timeout(180):
                await asyncio.gather(write("a"), write("b"), read("r1"), read("r2"), read("r3"), scale())
            assert len(await client.get_segments("scale", "s")) == 3
        assert len(received) == total and len(set(received)) == total
        per_key = collections.defaultdict(list)
        for data in received:
            key, _, sequence = data.decode().partition(":")
            per_key[key].append(int(sequence))
        for key, sequences in per_key.items():  # readers interleave, but a key's segment has one owner at a
            assert sequences == list(range(len(sequences))), key  # time and successors wait for predecessors
    finally:
        standalone.remove_data()


# ---------------------------------------------------------------------- large events


@pytest.mark.slow
def test_a_one_gib_event_round_trips_in_bounded_memory(tmp_path):
    """A 1 GiB event written in 1 MiB pieces by one process and read as chunks by another: the bytes
    match (streaming hash), it sits between its neighbours, and neither process grows by 128 MiB."""
    standalone = StandaloneProcess(tmp_path / "data", log_file_mib=64).start()
    try:
        uri = standalone.controller_uri
        asyncio.run(_create(uri, "large", "s"))
        size = 1024 * MIB
        writer = role("write_large", uri, {"scope": "large", "stream": "s", "size": size}, tmp_path / "w.jsonl")
        assert writer.wait(300) == 0
        written = records(tmp_path / "w.jsonl")[-1]["result"]
        reader = role("read_large", uri, {"scope": "large", "stream": "s", "group": "g"}, tmp_path / "r.jsonl")
        assert reader.wait(300) == 0
        read = records(tmp_path / "r.jsonl")[-1]["result"]
        assert read["events"] == ["before", {"size": size, "sha256": written["sha256"]}, "after"]
        assert written["rss_growth"] < 128 * MIB and read["rss_growth"] < 128 * MIB, (written, read)
    finally:
        standalone.remove_data()


@pytest.mark.slow
def test_an_abandoned_large_event_leaves_nothing_visible_and_its_transient_segment_goes(tmp_path):
    """A process writing a large event is SIGKILLed half way: no event appears in the stream (only
    the small one written before it), and the transient segment holding its bytes is deleted."""
    standalone = StandaloneProcess(tmp_path / "data").start()
    try:
        uri = standalone.controller_uri
        asyncio.run(_create(uri, "abandon", "s"))
        out = tmp_path / "w.jsonl"
        writer = role("write_large", uri, {"scope": "abandon", "stream": "s", "size": 64 * MIB,
                                           "stall_after": 24 * MIB}, out)
        try:
            transient = wait_for_record(out, "transient", writer)["transient"]
            wait_for_record(out, "ready", writer)
        finally:
            kill_process(writer)
        assert asyncio.run(_after_abandon(uri, standalone.store_port, transient)) == [b"before"]
    finally:
        standalone.remove_data()


async def _create(uri: str, scope: str, stream: str) -> None:
    async with sdk.connect(uri) as client:
        await client.create_scope(scope)
        await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(1)))


async def _after_abandon(uri: str, store_port: int, transient: str) -> list[bytes]:
    raw = SegmentStoreClient(("127.0.0.1", store_port))
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    await raw.segment_info(transient)
                except NoSuchSegment:
                    break
                await asyncio.sleep(0.1)
    finally:
        await raw.close()
    async with sdk.connect(uri) as client:
        end = await client.tail_cut("abandon", "s")
        group = await client.create_reader_group("abandon", "g", ["s"], end_cuts=[end])
        async with group.create_reader("r") as reader:
            return [event.data async for event in reader]

