"""Latency of the PDP-32 hot queries as a stream's history grows (issue #4, "Metadata store per PDP-32").

For streams of 1k, 10k and 100k epochs (seeded with tests/unit/controller_store/seeding.py) it
times current segments, successors of a random sealed segment and segments at a random time, and
prints the median and 99th percentile next to the store calls each made. The in-memory store shows
the cost of the records and algorithms alone; the table-segment store (a real segment store
started in-process, same lengths) adds the wire round trips. A flat row across
history lengths is the point: nothing here may grow with the number of epochs.

Usage: python tests/perf/bench_metadata.py [--queries N] [--memory-epochs 1000,10000,100000]
                                           [--table-epochs 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import pathlib
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from clients.segment_store_client import SegmentStoreClient  # noqa: E402
from controller.store import CountingKeyValueStore, MetadataStore, TableSegmentKeyValueStore, queries  # noqa: E402
from server.config import SegmentStoreConfig  # noqa: E402
from server.service import SegmentStoreService  # noqa: E402
from tests.support.doubles.key_value_store import InMemoryKeyValueStore  # noqa: E402
from tests.unit.controller_store.seeding import epoch_time, seed_stream  # noqa: E402


async def pick_targets(stream, epoch_count: int, count: int, rng: random.Random) -> list[tuple[int, int]]:
    """(sealed segment id, time) pairs at random places in the history, chosen before timing."""
    targets = []
    for _ in range(count):
        epoch = rng.randrange(1, epoch_count + 1)
        before, after = await stream.get_epoch(epoch - 1), await stream.get_epoch(epoch)
        sealed = sorted(before.segment_ids - after.segment_ids)
        targets.append((rng.choice(sealed), epoch_time(0, rng.randrange(epoch_count + 1)) + rng.randrange(1000)))
    return targets


async def time_query(counter: CountingKeyValueStore, make_call, targets) -> tuple[float, float, int]:
    """Median and p99 latency (microseconds) of one query over the targets, and its store calls."""
    samples, calls = [], set()
    for target in targets:
        counter.reset()
        start = time.perf_counter()
        await make_call(target)
        samples.append((time.perf_counter() - start) * 1e6)
        calls.add(counter.total)
    samples.sort()
    return statistics.median(samples), samples[math.ceil(len(samples) * 0.99) - 1], max(calls)  # nearest rank


async def bench_stream(kind: str, kv, epoch_count: int, query_count: int) -> None:
    counter = CountingKeyValueStore(kv)
    metadata = MetadataStore(counter)
    start = time.perf_counter()
    stream = await seed_stream(metadata, "bench", f"stream{epoch_count}", epoch_count)
    seeded = time.perf_counter() - start
    targets = await pick_targets(stream, epoch_count, query_count, random.Random(epoch_count))
    results = {
        "current segments": await time_query(counter, lambda _: queries.current_segments(stream), targets),
        "successors": await time_query(counter, lambda target: queries.successors(stream, target[0]), targets),
        "segments at time": await time_query(counter, lambda target: queries.segments_at_time(stream, target[1]),
                                             targets),
    }
    for name, (median, p99, calls) in results.items():
        print(f"{kind:<14}{epoch_count:>9,}  {name:<18}{median:>9.1f}{p99:>9.1f}{calls:>7}"
              f"   (seeded in {seeded:.1f} s)")


async def bench_table_segments(epoch_counts: list[int], query_count: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        service = SegmentStoreService(SegmentStoreConfig(data_dir=pathlib.Path(directory), port=0, container_count=2,
                                                         log_file_size=64 << 20))
        await service.start()
        client = SegmentStoreClient(("127.0.0.1", service.port))
        try:
            for epoch_count in epoch_counts:
                await bench_stream("table segment", TableSegmentKeyValueStore(client), epoch_count, query_count)
        finally:
            await client.close()
            await service.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=500, help="queries timed per row")
    parser.add_argument("--memory-epochs", default="1000,10000,100000")
    parser.add_argument("--table-epochs", default="1000,10000,100000", help="empty: skip the table-segment store")
    arguments = parser.parse_args()
    print(f"{'store':<14}{'epochs':>9}  {'query':<18}{'p50 us':>9}{'p99 us':>9}{'calls':>7}")
    for epoch_count in (int(value) for value in arguments.memory_epochs.split(",") if value):
        await bench_stream("memory", InMemoryKeyValueStore(), epoch_count, arguments.queries)
    table_epochs = [int(value) for value in arguments.table_epochs.split(",") if value]
    if table_epochs:
        await bench_table_segments(table_epochs, arguments.queries)


if __name__ == "__main__":
    asyncio.run(main())
