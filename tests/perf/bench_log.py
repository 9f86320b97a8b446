"""Tier-1 local log throughput and latency, each figure next to raw-disk baselines from the same run.

Baselines (same directory, same run; PERF-NOTES says absolute disk figures drift up to 2x):
  (a) raw fdatasync p50 of a 1 KiB overwrite in a preallocated file
  (b) raw fdatasync'd bandwidth of 1 MiB writes: appending to a new file, and overwriting a
      preallocated one (what the log actually does)
Log (uvloop, LocalDurableDataLog with default 64 MiB files and 1 MiB batches):
  (c) 1 appender, one append in flight, 1 KiB     (d) 64 concurrent appenders, 1 KiB
  (e) 8 concurrent appenders of 64 KiB and of 1 MiB
  (f) one-in-flight append latency p50/p99 next to (a)
Bars: (f) p50 within ~150 us of (a); (e) MB/s >= 0.7x of (b).

The log is truncated behind the appenders as a container would after flushing to Tier-2, so
files are recycled rather than preallocated during the measurement (steady state).

Usage: python tests/perf/bench_log.py [--seconds S] [--directory DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import uvloop

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from server.tier1 import FileOperations, LocalDurableDataLog, LogAddress  # noqa: E402
from tests.perf.bars import Bars, percentile  # noqa: E402

MiB = 1024 * 1024
TRUNCATE_EVERY_BYTES = 32 * MiB



def preallocate(path: str, size: int) -> None:
    """A file of ``size`` written zeros, exactly as the log preallocates its own files."""
    FileOperations().create_preallocated(path, path + ".tmp", size)


def raw_sync_latencies(directory: str, seconds: float, write_bytes: int = 1024) -> list[float]:
    """(a): fdatasync latency of small overwrites in a preallocated file, in seconds."""
    path = os.path.join(directory, "raw-small.dat")
    preallocate(path, 64 * MiB)
    payload = os.urandom(write_bytes)
    latencies, offset = [], 0
    fd = os.open(path, os.O_RDWR)
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            os.pwrite(fd, payload, offset)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - start)
            offset = (offset + write_bytes) % (64 * MiB)
    finally:
        os.close(fd)
        os.unlink(path)
    return latencies


def raw_bandwidth(directory: str, seconds: float, *, preallocated: bool) -> float:
    """(b): MB/s of 1 MiB writes each followed by fdatasync."""
    path = os.path.join(directory, "raw-big.dat")
    size = 256 * MiB
    if preallocated:
        preallocate(path, size)
    payload = os.urandom(MiB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | (0 if preallocated else os.O_TRUNC))
    written, offset = 0, 0
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            os.pwrite(fd, payload, offset)
            os.fdatasync(fd)
            written += MiB
            offset += MiB
            if offset >= size:
                offset = 0
                if not preallocated:  # keep appending to a fresh file
                    os.ftruncate(fd, 0)
                    os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6


class Truncator:
    """Truncates the log behind the appenders every TRUNCATE_EVERY_BYTES, like a container would."""

    def __init__(self, log: LocalDurableDataLog):
        self.log = log
        self.bytes_since = 0
        self.task: asyncio.Task | None = None

    def account(self, address: LogAddress, size: int) -> None:
        self.bytes_since += size
        if self.bytes_since >= TRUNCATE_EVERY_BYTES and (self.task is None or self.task.done()):
            self.bytes_since = 0
            self.task = asyncio.ensure_future(self.log.truncate(address))


async def log_throughput(log: LocalDurableDataLog, appenders: int, size: int, seconds: float):
    """Appends/s, MB/s and per-append latencies with ``appenders`` concurrent one-in-flight appenders."""
    payload = os.urandom(size)
    truncator = Truncator(log)
    latencies: list[float] = []
    count = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def appender() -> None:
        nonlocal count
        clock = time.perf_counter
        while loop.time() < deadline:
            start = clock()
            address = await log.append(payload)
            latencies.append(clock() - start)
            count += 1
            truncator.account(address, size)

    start = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(appenders)))
    elapsed = time.perf_counter() - start
    if truncator.task is not None:
        await truncator.task
    return count / elapsed, count * size / elapsed / 1e6, latencies


async def warm_up(log: LocalDurableDataLog) -> None:
    """Fills and truncates a few files so the measurements run on recycled, already-written files."""
    payload = os.urandom(MiB)
    for _ in range(3):
        address = None
        for _ in range(64 + 1):
            address = await log.append(payload)
        await log.truncate(address)


async def measure_log(directory: str, seconds: float) -> dict:
    log = LocalDurableDataLog(os.path.join(directory, "log"))
    await log.open()
    try:
        await warm_up(log)
        results = {}
        for name, appenders, size in (("c", 1, 1024), ("d", 64, 1024), ("e64k", 8, 64 * 1024), ("e1m", 8, MiB)):
            results[name] = await log_throughput(log, appenders, size, seconds)
        return results
    finally:
        await log.close()


def describe_directory(directory: str) -> str:
    try:
        line = subprocess.run(["df", "-hT", directory], capture_output=True, text=True).stdout.splitlines()[-1]
    except (OSError, IndexError):
        line = "?"
    return f"{directory}  [{' '.join(line.split())}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each measurement")
    parser.add_argument("--directory", default=None, help="parent directory for the test files (default /tmp)")
    arguments = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="tributary-bench-log-", dir=arguments.directory)
    try:
        print(f"directory: {describe_directory(directory)}")
        raw_latencies = raw_sync_latencies(directory, arguments.seconds)
        raw_p50 = statistics.median(raw_latencies)
        raw_append = raw_bandwidth(directory, arguments.seconds, preallocated=False)
        raw_overwrite = raw_bandwidth(directory, arguments.seconds, preallocated=True)
        results = uvloop.run(measure_log(directory, arguments.seconds))
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    us = 1e6
    print(f"(a) raw fdatasync, 1 KiB overwrite in preallocated file: p50 {raw_p50 * us:.0f} us, "
          f"p99 {percentile(raw_latencies, 0.99) * us:.0f} us ({1 / raw_p50:,.0f} syncs/s at p50)")
    print(f"(b) raw 1 MiB writes + fdatasync: append {raw_append:.0f} MB/s, "
          f"overwrite preallocated {raw_overwrite:.0f} MB/s")
    rows = (("(c) log, 1 appender, 1 KiB", "c"), ("(d) log, 64 appenders, 1 KiB", "d"),
            ("(e) log, 8 appenders, 64 KiB", "e64k"), ("(e) log, 8 appenders, 1 MiB", "e1m"))
    for label, key in rows:
        rate, megabytes, latencies = results[key]
        ack_p50 = statistics.median(latencies) * us
        line = f"{label}: {rate:>9,.0f} appends/s {megabytes:7.1f} MB/s  ack p50 {ack_p50:6.0f} us"
        if key.startswith("e"):
            line += f"  = {megabytes / raw_append:.2f}x raw append, {megabytes / raw_overwrite:.2f}x raw overwrite"
        print(line)
    latencies = results["c"][2]
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(f"(f) one-in-flight append latency: p50 {p50 * us:.0f} us, p99 {p99 * us:.0f} us; "
          f"raw fdatasync p50 {raw_p50 * us:.0f} us; p50 overhead {(p50 - raw_p50) * us:+.0f} us")
    bars = Bars()
    bars.check("one-in-flight log append p50 <= raw fdatasync p50 + 150 us", p50 - raw_p50 <= 150e-6,
               f"{(p50 - raw_p50) * us:+.0f} us")
    sys.exit(bars.exit_code())


if __name__ == "__main__":
    main()
