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

The table shows min / median / max over the runs of events/s, MB/s and each Spark/SDK ratio; a
bar is judged on the median. Bars (issue 10): Spark read >= 0.5x the SDK read, Spark write >= 0.5x
the SDK write. Exits 1 if a bar is missed.
"""

from __future__ import annotations

import argparse
import asyncio
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
SCOPE = "bench"


async def create_stream(uri: str, stream: str) -> None:
    async with connect(uri) as client:
        await client.create_scope(SCOPE)
        await client.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(4)))


async def sdk_write(uri: str, stream: str, events: int) -> float:
    await create_stream(uri, stream)
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


def spark_read(spark, uri: str, stream: str, events: int) -> float:
    from pyspark.sql import functions as F

    frame = (spark.read.format("tributary").option("controller", uri).option("scope", SCOPE)
             .option("stream", stream).load())
    started = time.perf_counter()
    row = frame.agg(F.count(F.lit(1)).alias("events"), F.sum(F.length("event")).alias("bytes")).collect()[0]
    elapsed = time.perf_counter() - started
    assert row.events == events and row.bytes == events * SIZE, row
    return events / elapsed


def summary(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    low, mid, high = min(values) * scale, statistics.median(values) * scale, max(values) * scale
    return f"{low:,.{digits}f} / {mid:,.{digits}f} / {high:,.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=300_000)
    args = parser.parse_args()

    from spark_io.session import local_session

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench-spark-"))
    server = StandaloneProcess(scratch / "data", log_file_mib=256).start()
    uri = server.controller_uri
    spark = local_session(app="bench-spark")
    rates: dict[str, list[float]] = {"sdk write": [], "spark write": [], "sdk read": [], "spark read": []}
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
    finally:
        spark.stop()
        server.remove_data()
    print(f"\n{args.events:,} events of {SIZE} B per figure, {args.runs} runs: min / median / max\n")
    print(f"{'path':<12} {'events/s':>32} {'MB/s':>24}")
    for name, values in rates.items():
        print(f"{name:<12} {summary(values):>32} {summary(values, SIZE / 1e6, 1):>24}")
    missed = 0
    print()
    for kind, bar in BARS.items():
        ratios = [spark / sdk for spark, sdk in zip(rates[f"spark {kind}"], rates[f"sdk {kind}"])]
        ok = statistics.median(ratios) >= bar
        missed += not ok
        print(f"Spark {kind} / SDK {kind}: {summary(ratios, digits=2)}  (bar >= {bar}x: {'met' if ok else 'MISSED'})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
