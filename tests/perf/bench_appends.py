"""Durable append throughput and latency of the segment store over loopback, next to the machine's
limits measured in the same run.

The server runs as its own process (`tributary segmentstore`, uvloop) on a fresh data dir. Writers
batch as the Rust client does: events queue while one AppendBlockEnd per writer is in flight, and
the next block takes everything queued (at most 500 events or 8 MiB). Only acknowledged events count.

Bars (issues #3, #12), judged on the median of ``--runs`` runs unless said: 1 KiB x 1 writer >= 65,000
events/s; 1 KiB x 8 >= 120,000; 100 B x 8 >= 450,000; 64 KiB x 8 >= 0.7 x the 1 MiB fdatasync'd append
bandwidth in every run; one-in-flight ack p50 <= fdatasync p50 + 150 us; p99 at 1,000 events/s <= 1 ms,
or fdatasync p99 + 0.5 ms where the disk's own p99 is worse. Exits 1 when a bar misses.

Usage: python tests/perf/bench_appends.py [--seconds S] [--runs N] [--dir DIR]
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pathlib
import socket
import statistics
import sys
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from clients.connection import WireConnection, next_request_id  # noqa: E402
from tests.perf.bars import Bars, Figures, percentile, run_benchmark  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402
from wire import commands as c  # noqa: E402
from wire.envelope import ENVELOPE_HEADER  # noqa: E402

MAX_BLOCK_EVENTS = 500
MAX_BLOCK_BYTES = 8 * 1024 * 1024


# --------------------------------------------------------------------------- machine baselines


def fdatasync_overwrite_samples(directory: pathlib.Path, iterations: int = 400) -> list[float]:
    path = directory / "sync-probe"
    with open(path, "wb") as file:
        file.write(b"\0" * (1 << 20))
        file.flush()
        os.fsync(file.fileno())
    samples = []
    fd = os.open(path, os.O_WRONLY)
    try:
        block = os.urandom(4096)
        for index in range(iterations):
            os.pwrite(fd, block, (index % 200) * 4096)
            start = time.perf_counter()
            os.fdatasync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return samples


def fdatasync_append_bandwidth(directory: pathlib.Path, seconds: float) -> float:
    path = directory / "append-probe"
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    written, start = 0, time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            written += len(block)
    finally:
        os.close(fd)
        path.unlink()
    return written / (time.perf_counter() - start)


def _sink(port_queue) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port_queue.put(server.getsockname()[1])
        connection, _ = server.accept()
        buffer = bytearray(1 << 20)
        while connection.recv_into(buffer):
            pass


def loopback_tcp_bandwidth(seconds: float) -> float:
    ports = multiprocessing.Queue()
    sink = multiprocessing.Process(target=_sink, args=(ports,), daemon=True)
    sink.start()
    port = ports.get(timeout=10)
    block = os.urandom(1 << 20)
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as connection:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            connection.sendall(block)
            sent += len(block)
        elapsed = time.perf_counter() - start
    sink.join(5)
    if sink.is_alive():
        sink.kill()
    return sent / elapsed


# --------------------------------------------------------------------------- writers


class BatchingWriter:
    """One writer on its own connection and segment, batching like the Rust client."""

    def __init__(self, connection: WireConnection, segment: str, event: bytes):
        self.connection = connection
        self.segment = segment
        self.writer_id = uuid.uuid4()
        self.enveloped = ENVELOPE_HEADER.pack(0, len(event)) + event
        self.acked_events = 0
        self.event_number = 0

    async def setup(self) -> None:
        await self.connection.request(c.CreateSegment(next_request_id(), self.segment, 0, 0, ""))
        await self.connection.request(c.SetupAppend(next_request_id(), self.writer_id, self.segment, ""))

    async def run_saturated(self, until: float) -> None:
        """Always has events queued: each block carries the maximum batch."""
        per_block = max(1, min(MAX_BLOCK_EVENTS, MAX_BLOCK_BYTES // len(self.enveloped)))
        block = self.enveloped * per_block
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            self.event_number += per_block
            request_id = next_request_id()
            future = self.connection.expect(request_id)
            self.connection.send(c.AppendBlockEnd(self.writer_id, len(block), block, per_block,
                                                  self.event_number, request_id))
            reply = await future
            assert isinstance(reply, c.DataAppended), reply
            self.acked_events += per_block

    async def one_in_flight(self, count: int) -> list[float]:
        samples = []
        for _ in range(count):
            self.event_number += 1
            request_id = next_request_id()
            start = time.perf_counter()
            reply = await self.connection.request(c.AppendBlockEnd(
                self.writer_id, len(self.enveloped), self.enveloped, 1, self.event_number, request_id))
            samples.append(time.perf_counter() - start)
            assert isinstance(reply, c.DataAppended), reply
        return samples

    async def paced(self, rate: float, seconds: float) -> list[float]:
        """Sends one event every 1/rate s without waiting for acks; returns each event's ack latency."""
        loop = asyncio.get_running_loop()
        latencies: list[float] = []
        pending = []
        start = loop.time()
        total = int(rate * seconds)
        for index in range(total):
            await asyncio.sleep(max(0.0, start + index / rate - loop.time()))
            self.event_number += 1
            request_id = next_request_id()
            future = self.connection.expect(request_id)
            sent = time.perf_counter()
            future.add_done_callback(lambda _, sent=sent: latencies.append(time.perf_counter() - sent))
            self.connection.send(c.AppendBlockEnd(self.writer_id, len(self.enveloped), self.enveloped, 1,
                                                  self.event_number, request_id))
            pending.append(future)
        await asyncio.gather(*pending)
        return latencies


async def throughput(port: int, writers: int, size: int, seconds: float, tag: str) -> tuple[float, float]:
    connections = [await WireConnection.connect("127.0.0.1", port) for _ in range(writers)]
    event = os.urandom(size)
    group = [BatchingWriter(connection, f"bench/{tag}/{index}.#epoch.0", event)
             for index, connection in enumerate(connections)]
    await asyncio.gather(*(writer.setup() for writer in group))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(*(writer.run_saturated(start + seconds) for writer in group))
    elapsed = loop.time() - start
    for connection in connections:
        await connection.close()
    events = sum(writer.acked_events for writer in group)
    return events / elapsed, events * size / elapsed


async def latencies(port: int) -> tuple[list[float], list[float]]:
    connection = await WireConnection.connect("127.0.0.1", port)
    writer = BatchingWriter(connection, "bench/latency/0.#epoch.0", os.urandom(1024))
    await writer.setup()
    one = await writer.one_in_flight(2000)
    paced = await writer.paced(1000, 5)
    await connection.close()
    return one, paced



async def run_benchmarks(port: int, seconds: float) -> dict:
    results = {}
    for writers in (1, 8):
        for size in (100, 1024, 65536):
            results[(writers, size)] = await throughput(port, writers, size, seconds, f"w{writers}s{size}")
    results["latency"] = await latencies(port)
    return results


def one_run(scratch: pathlib.Path, seconds: float, figures: Figures) -> None:
    """Measures the machine's baselines, then the segment store, and adds this run's figures."""
    sync = fdatasync_overwrite_samples(scratch)
    sync_p50, sync_p99 = statistics.median(sync), percentile(sync, 0.99)
    append_bandwidth = fdatasync_append_bandwidth(scratch, 2.0)
    tcp_bandwidth = loopback_tcp_bandwidth(2.0)
    server = ServerProcess("segmentstore", scratch / "data", log_path=scratch / "server.log").start()
    try:
        import uvloop
        results = uvloop.run(run_benchmarks(server.port, seconds))
    finally:
        server.terminate()
    us, ms = "{:,.0f} us".format, "{:.2f} ms".format
    figures.add("baseline: fdatasync p50 (4 KiB overwrite)", sync_p50 * 1e6, us)
    figures.add("baseline: fdatasync p99 (4 KiB overwrite)", sync_p99 * 1e6, us)
    figures.add("baseline: fdatasync'd 1 MiB appends, MB/s", append_bandwidth / 1e6, "{:,.0f}".format)
    figures.add("baseline: loopback TCP, GB/s", tcp_bandwidth / 1e9)
    for writers in (1, 8):
        for size in (100, 1024, 65536):
            events, rate = results[(writers, size)]
            figures.add(f"{writers} writer(s) x {size} B: events/s", events, "{:,.0f}".format)
            figures.add(f"{writers} writer(s) x {size} B: x fdatasync'd bandwidth", rate / append_bandwidth)
    one, paced = results["latency"]
    figures.add("one in flight (1 KiB): ack p50", statistics.median(one) * 1e6, us)
    figures.add("one in flight (1 KiB): ack p99", percentile(one, 0.99) * 1e6, us)
    figures.add("one in flight: ack p50 - fdatasync p50", (statistics.median(one) - sync_p50) * 1e6, us)
    figures.add("1,000 events/s of 1 KiB: ack p50", statistics.median(paced) * 1e3, ms)
    figures.add("1,000 events/s of 1 KiB: ack p99", percentile(paced, 0.99) * 1e3, ms)
    figures.add("1,000 events/s: p99 bar (max(1 ms, fdatasync p99 + 0.5 ms))",
                max(1.0, sync_p99 * 1e3 + 0.5), ms)


def judge(figures: Figures) -> Bars:
    """Throughput and latency bars on the median run; the 64 KiB bar in every run (issues #3, #12)."""
    median = figures.median
    verdict = Bars()
    for writers, size, floor in ((1, 1024, 65_000), (8, 1024, 120_000), (8, 100, 450_000)):
        name = f"{writers} writer(s) x {size} B: events/s"
        verdict.check(f"{size} B x {writers} >= {floor:,} events/s (median)", median(name) >= floor,
                      figures.spread(name))
    name = "8 writer(s) x 65536 B: x fdatasync'd bandwidth"
    verdict.check("64 KiB x 8 >= 0.7 x fdatasync'd 1 MiB bandwidth in every run", figures.min(name) >= 0.7,
                  figures.spread(name))
    name = "one in flight: ack p50 - fdatasync p50"
    verdict.check("one-in-flight ack p50 <= fdatasync p50 + 150 us (median)", median(name) <= 150,
                  figures.spread(name))
    # each run against its own disk's bar; passed when at least half of the runs meet theirs
    met = [value <= bar for value, bar in zip(figures.values["1,000 events/s of 1 KiB: ack p99"],
                                              figures.values["1,000 events/s: p99 bar (max(1 ms, fdatasync p99 + 0.5 ms))"],
                                              strict=True)]
    verdict.check("p99 at 1,000 events/s <= max(1 ms, fdatasync p99 + 0.5 ms) (median run)",
                  2 * sum(met) >= len(met), figures.spread("1,000 events/s of 1 KiB: ack p99"))
    return verdict


def main() -> None:
    run_benchmark("bench_appends", __doc__.splitlines()[0], one_run, judge)


if __name__ == "__main__":
    main()
