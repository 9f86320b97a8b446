"""Spark benchmark: batch read and batch write of 1 KiB events through format ``tributary`` on
``local[2]``, next to the SDK's own single-process read and write rates on the same data, in the
same run, against one `tributary standalone`.

Run by hand:  .venv/bin/python tests/perf/bench_spark.py [--runs 3] [--events 300000]

Each run, with a warm SparkSession (a first query has run):

* SDK write: one process, one event writer, ``--events`` events of 1 KiB (no routing key) into a
  4-segment stream, then ``flush()``; events/s from the first write to the flush.
* Spark write: ``spark.range(n)`` turned into 1 KiB binary events in the JVM, ``df.write`` with
  the defaults (exactly once: a transaction per task, committed by the driver) into another
  4-segment stream; events/s over ``save()``.
* SDK read: one process, the batch client reading every slice of the SDK-written stream at once;
  events/s.
* Spark read: ``spark.read`` of the same stream, ``count(*)`` and ``sum(length(event))`` (every
  event is materialized in the JVM); events/s over the action.

Then the split read (issue 29), on one stream of a single segment holding ``--split-mib`` MiB
(1 GiB) of 1 KiB events, written once by the SDK: each run reads it with Spark (``count`` and
``sum(length(event))``) as one partition (``max_partition_bytes`` larger than the segment) and
with the default ``max_partition_bytes`` (128 MiB: 8 partitions, read by both cores).

The table shows min / median / max over the runs of events/s, MB/s and each ratio; a bar is judged
on the median. Bars: Spark read >= 0.5x the SDK read and Spark write >= 0.5x the SDK write (issue
10); the split read >= 1.7x the one-partition read (issue 29). Exits 1 if a bar is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from clients.client import connect  # noqa: E402
from clients.model import ScalingPolicy, StreamConfiguration  # noqa: E402
from tests.support.standalone import StandaloneProcess  # noqa: E402

SIZE = 1024
BARS = {"read": 0.5, "write": 0.5}
SPLIT_BAR = 1.7
ONE_PARTITION = str(2**50)  # max_partition_bytes larger than any segment
SCOPE = "bench"


async def create_stream(uri: str, stream: str, segments: int = 4) -> None:
    async with connect(uri) as client:
        await client.create_scope(SCOPE)
        await client.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))


async def sdk_write(uri: str, stream: str, events: int, segments: int = 4) -> float:
    await create_stream(uri, stream, segments)
    payload = b"x" * SIZE
    async with connect(uri) as client, client.create_writer(SCOPE, stream) as writer:
        started = time.perf_counter()
        for _ in range(events):
            await writer.write(payload)
        await writer.flush()
        return events / (time.perf_counter() - started)


async def sdk_read(uri: str, stream: str, events: int) -> float:
    async with connect(uri) as client:
        batch = client.create_batch_client()
        started = time.perf_counter()
        slices = await batch.slices(SCOPE, stream)

        async def read(piece) -> int:
            count = 0
            async for chunk in batch.read(piece):
                count += len(chunk)
            return count

        counted = sum(await asyncio.gather(*(read(piece) for piece in slices)))
        elapsed = time.perf_counter() - started
    assert counted == events, f"the SDK read {counted} events of {events}"
    return events / elapsed


def spark_write(spark, uri: str, stream: str, events: int) -> float:
    from pyspark.sql import functions as F

    frame = spark.range(events, numPartitions=2).select(
        F.concat(F.lpad(F.col("id").cast("string"), 24, "0").cast("binary"),
                 F.lit(b"x" * (SIZE - 24))).alias("event"))
    started = time.perf_counter()
    (frame.write.format("tributary").mode("append").option("controller", uri).option("scope", SCOPE)
     .option("stream", stream).option("default_num_segments", "4").save())
    return events / (time.perf_counter() - started)


def spark_read(spark, uri: str, stream: str, events: int, partitions: int | None = None, **options: str) -> float:
    from pyspark.sql import functions as F

    frame = (spark.read.format("tributary").option("controller", uri).option("scope", SCOPE)
             .option("stream", stream).options(**options).load())
    started = time.perf_counter()
    if partitions is not None:
        assert frame.rdd.getNumPartitions() == partitions, frame.rdd.getNumPartitions()
    row = frame.agg(F.count(F.lit(1)).alias("events"), F.sum(F.length("event")).alias("bytes")).collect()[0]
    elapsed = time.perf_counter() - started
    assert row.events == events and row.bytes == events * SIZE, row
    return events / elapsed


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and everything under it: the JVM, Spark's Python workers and
    the server."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            parents[int(entry)] = int(fields[1])
            times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    mine, pending = {os.getpid()}, [os.getpid()]
    while pending:
        parent = pending.pop()
        children = [pid for pid, of in parents.items() if of == parent and pid not in mine]
        mine.update(children)
        pending.extend(children)
    return sum(times[pid] for pid in mine if pid in times)


def cores_busy(read) -> tuple[float, float]:
    """(events/s, cores kept busy on average) of ``read()``, which returns events/s."""
    before, started = cpu_seconds(), time.perf_counter()
    rate = read()
    return rate, (cpu_seconds() - before) / (time.perf_counter() - started)


def summary(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    low, mid, high = min(values) * scale, statistics.median(values) * scale, max(values) * scale
    return f"{low:,.{digits}f} / {mid:,.{digits}f} / {high:,.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--split-mib", type=int, default=1024, help="the one-segment stream's size (0: skip)")
    args = parser.parse_args()
    split_events = args.split_mib * 1024 * 1024 // SIZE
    split_partitions = -(-split_events * (SIZE + 8) // (128 * 1024 * 1024))

    from spark_io.session import local_session

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench-spark-"))
    server = StandaloneProcess(scratch / "data", log_file_mib=256).start()
    uri = server.controller_uri
    spark = local_session(app="bench-spark")
    rates: dict[str, list[float]] = {"sdk write": [], "spark write": [], "sdk read": [], "spark read": [],
                                     "one partition": [], "split": []}
    busy: dict[str, list[float]] = {"one partition": [], "split": []}  # cores kept busy (server included)
    try:
        print("warming up the session (a first write and read)...", flush=True)
        spark_write(spark, uri, "warm", 2000)
        spark_read(spark, uri, "warm", 2000)
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}: SDK write", flush=True)
            rates["sdk write"].append(asyncio.run(sdk_write(uri, f"sdk-{run}", args.events)))
            print(f"run {run + 1}/{args.runs}: Spark write", flush=True)
            rates["spark write"].append(spark_write(spark, uri, f"spark-{run}", args.events))
            print(f"run {run + 1}/{args.runs}: SDK read", flush=True)
            rates["sdk read"].append(asyncio.run(sdk_read(uri, f"sdk-{run}", args.events)))
            print(f"run {run + 1}/{args.runs}: Spark read", flush=True)
            rates["spark read"].append(spark_read(spark, uri, f"sdk-{run}", args.events))
        if split_events:
            print(f"writing {args.split_mib} MiB into one segment with the SDK", flush=True)
            asyncio.run(sdk_write(uri, "large", split_events, segments=1))
            for run in range(args.runs):
                print(f"run {run + 1}/{args.runs}: Spark read of one segment, one partition", flush=True)
                rate, cores = cores_busy(lambda: spark_read(spark, uri, "large", split_events, 1,
                                                            max_partition_bytes=ONE_PARTITION))
                rates["one partition"].append(rate)
                busy["one partition"].append(cores)
                print(f"run {run + 1}/{args.runs}: Spark read of one segment, split", flush=True)
                rate, cores = cores_busy(lambda: spark_read(spark, uri, "large", split_events, split_partitions))
                rates["split"].append(rate)
                busy["split"].append(cores)
    finally:
        spark.stop()
        server.remove_data()
    print(f"\n{args.events:,} events of {SIZE} B per figure ({split_events:,} for the one-segment reads), "
          f"{args.runs} runs: min / median / max\n")
    print(f"{'path':<14} {'events/s':>32} {'MB/s':>24}")
    for name, values in rates.items():
        if values:
            print(f"{name:<14} {summary(values):>32} {summary(values, SIZE / 1e6, 1):>24}")
    for name, values in busy.items():
        if values:
            print(f"cores busy, {name} (of {os.cpu_count()}; Spark, its Python workers and the server): "
                  f"{summary(values, digits=2)}")
    print()
    comparisons = [(f"Spark {kind} / SDK {kind}", rates[f"spark {kind}"], rates[f"sdk {kind}"], bar)
                   for kind, bar in BARS.items()]
    if split_events:
        comparisons.append((f"split ({split_partitions} partitions) / one partition", rates["split"],
                            rates["one partition"], SPLIT_BAR))
    missed = 0
    for title, measured, baseline, bar in comparisons:
        ratios = [value / base for value, base in zip(measured, baseline, strict=True)]
        ok = statistics.median(ratios) >= bar
        missed += not ok
        print(f"{title}: {summary(ratios, digits=2)}  (bar >= {bar}x: {'met' if ok else 'MISSED'})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
