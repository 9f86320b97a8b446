"""Controller metadata under churn (issue 25): 10,000 scales of one stream and 10,000 stream create/seal/delete
cycles, with the store's default table compaction, then a restart of the segment store and the controller.

A segment store (4 containers, default settings but 16 MiB log files) and a controller run in this process, as
the integration tests run them; services are called as the gRPC adapter calls them. Measured:

* scale latency (request + the workflow until ``check_scale`` says done) per block of 1,000 scales: p50 and p99 of
  the first block against the last (flat: nothing may grow with the history);
* cycle latency per block of 1,000 create/seal/delete cycles over 100 names, first block against last;
* the controller's table segments once everything is in Tier-2: bytes written over their life, bytes kept (what
  a recovery reads) and live bytes;
* a restart: both stopped (SIGTERM-like, in process), then started again on the same data dir; seconds until the
  controller answers the scaled stream's current segments.

Bars: metadata kept <= 2 x live + the compaction threshold per table; the last block's p50 scale and cycle
latency <= 1.5 x the first block's; restart <= 5 s. Exits 1 when one misses.

Usage: python tests/perf/bench_controller_churn.py [--scales 10000] [--cycles 10000] [--names 100]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controller.app import ControllerApp  # noqa: E402
from controller.service.context import ServiceSettings  # noqa: E402
from controller.service.scaling import ScaleStatus  # noqa: E402
from controller.store import layout  # noqa: E402
from controller.store.records import ScalingPolicy, StreamConfiguration  # noqa: E402
from server.config import SegmentStoreConfig  # noqa: E402
from tests.perf.bars import Bars, Figures, percentile  # noqa: E402
from tests.support.segment_store import segment_store  # noqa: E402

ONE_SEGMENT = StreamConfiguration(ScalingPolicy(min_num_segments=1))
SETTINGS = ServiceSettings(redrive_interval_seconds=3600)
BLOCK = 1_000
THRESHOLD = SegmentStoreConfig.table_compaction_threshold


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def start(data_dir: pathlib.Path):
    store = segment_store(data_dir, container_count=4)
    await store.start()
    app = ControllerApp(port=0, segment_store=("127.0.0.1", store.port), settings=SETTINGS)
    await app.start()
    return store, app


async def stop(store, app) -> None:
    await app.stop()
    await store.stop()


async def table_sizes(store) -> dict[str, tuple[int, int, int]]:
    """name -> (written, kept, live) of the controller's tables, once all is in Tier-2 (white box)."""
    for _ in range(2):  # compactions of the first flush's pass reach Tier-2 in the second
        for container in store.containers.values():
            await container.flush_to_storage()
    sizes = {}
    for container in store.containers.values():
        for name in container.segment_names():
            segment = container._committed(name)
            if segment.table is not None and name.startswith(layout.TABLE_PREFIX):
                sizes[name] = (segment.length, segment.length - segment.start_offset, segment.table.live_bytes)
    return sizes


def blocks(latencies: list[float]) -> list[tuple[float, float]]:
    """(p50, p99) in ms of each block of BLOCK latencies."""
    return [(statistics.median(block) * 1e3, percentile(block, 0.99) * 1e3)
            for block in (latencies[index:index + BLOCK] for index in range(0, len(latencies), BLOCK)) if block]


async def run(args: argparse.Namespace, data_dir: pathlib.Path, figures: Figures) -> dict:
    found: dict = {}
    store, app = await start(data_dir)
    try:
        services = app.services
        await services.scopes.create_scope("churn")
        await services.creation.create_stream("churn", "scaled", ONE_SEGMENT)
        active, scale_latencies = 0, []
        for number in range(args.scales):
            started = time.perf_counter()
            accepted = await services.scaling.request_scale("churn", "scaled", [active], [(0.0, 1.0)])
            active = accepted.transition.new_segments[0].segment_id
            while await services.scaling.check_scale("churn", "scaled", accepted.epoch) is not ScaleStatus.SUCCESS:
                await asyncio.sleep(0.001)
            scale_latencies.append(time.perf_counter() - started)
            if (number + 1) % BLOCK == 0:
                say(f"{number + 1:,} scales; last block p50 {blocks(scale_latencies)[-1][0]:.1f} ms")
        cycle_latencies = []
        for cycle in range(args.cycles):
            name = f"s{cycle % args.names}"
            started = time.perf_counter()
            assert await services.creation.create_stream("churn", name, ONE_SEGMENT)
            await services.sealing.seal_stream("churn", name)
            assert await services.deletion.delete_stream("churn", name)
            cycle_latencies.append(time.perf_counter() - started)
            if (cycle + 1) % BLOCK == 0:
                say(f"{cycle + 1:,} cycles; last block p50 {blocks(cycle_latencies)[-1][0]:.1f} ms")
        sizes = await table_sizes(store)
        found["sizes"] = sizes
        found["scale blocks"], found["cycle blocks"] = blocks(scale_latencies), blocks(cycle_latencies)
    finally:
        await stop(store, app)
    started = time.monotonic()
    store, app = await start(data_dir)
    try:
        current, _ = await app.context.store.stream("churn", "scaled").get_current_epoch()
        found["restart s"] = time.monotonic() - started
        assert current.epoch == args.scales and set(current.segment_ids) == {active}
    finally:
        await stop(store, app)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scales", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--names", type=int, default=100, help="stream names the cycles go over")
    parser.add_argument("--dir", type=pathlib.Path, default=ROOT / ".bench")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(dir=args.dir))
    figures = Figures()
    try:
        found = asyncio.run(run(args, scratch / "data", figures))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sizes = found["sizes"]
    written = sum(size[0] for size in sizes.values())
    kept = sum(size[1] for size in sizes.values())
    live = sum(size[2] for size in sizes.values())
    print(f"bench_controller_churn: {args.scales:,} scales, {args.cycles:,} cycles over {args.names} names")
    for label, rows in (("scale", found["scale blocks"]), ("cycle", found["cycle blocks"])):
        for index, (p50, p99) in enumerate(rows):
            print(f"  {label} latency, block {index + 1} of {BLOCK:,}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"  controller tables: {len(sizes)}; {written:,} B written, {kept:,} kept, {live:,} live")
    for name, (table_written, table_kept, table_live) in sorted(sizes.items(), key=lambda item: -item[1][0])[:8]:
        print(f"    {name}: {table_written:,} written, {table_kept:,} kept, {table_live:,} live")
    print(f"  restart of the store and the controller until the scaled stream is answered: {found['restart s']:.2f} s")
    bars = Bars()
    over = [name for name, (_, table_kept, table_live) in sizes.items() if table_kept > 2 * table_live + THRESHOLD]
    bars.check("controller metadata on disk <= 2 x live (+ the compaction threshold) for every table",
               not over, f"{kept:,} kept, {live:,} live; over: {over[:3]}")
    for label, rows in (("scale", found["scale blocks"]), ("cycle", found["cycle blocks"])):
        if len(rows) > 1:
            bars.check(f"{label} latency flat: last block p50 <= 1.5 x the first",
                       rows[-1][0] <= 1.5 * rows[0][0], f"{rows[0][0]:.1f} -> {rows[-1][0]:.1f} ms")
    bars.check("restart of the store and the controller <= 5 s", found["restart s"] <= 5,
               f"{found['restart s']:.2f} s")
    sys.exit(bars.exit_code())


if __name__ == "__main__":
    main()
