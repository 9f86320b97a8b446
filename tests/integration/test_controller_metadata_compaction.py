"""Controller metadata stays bounded (issue 25): the segment store compacts every table segment the controller
writes once its dead records outweigh its live ones and a threshold, so thousands of scales of one stream, or
of create/seal/delete cycles, leave tables within about twice their live entries, in Tier-2 too.

Small knobs make it take seconds: 64 KiB Tier-2 chunks, a 16 KiB compaction threshold, flushes every 0.1 s,
and (for scales) 100 epochs per history chunk. The sizes are printed (``pytest -s``): bytes written over the
table's life, bytes kept (what a recovery reads), live bytes and bytes in Tier-2. Services are called in
process, as the gRPC adapter calls them."""

from __future__ import annotations

import asyncio
import time

import pytest

from controller.service.context import ServiceSettings
from controller.service.scaling import ScaleStatus
from controller.store import layout
from controller.store.layout import ChunkSizes
from controller_api.model import ScalingPolicy, StreamConfiguration
from tests.support.controller_harness import running_cluster
from wire import naming

THRESHOLD, CHUNK = 16 << 10, 64 << 10
STORE = {"max_chunk_size": CHUNK, "table_compaction_threshold": THRESHOLD, "flush_interval": 0.1}
SETTINGS = ServiceSettings(redrive_interval_seconds=3600)
ONE_SEGMENT = StreamConfiguration(ScalingPolicy(min_num_segments=1))


async def table_sizes(cluster, prefix: str) -> dict[str, tuple[int, int, int, int]]:
    """name -> (bytes written, kept, live, in Tier-2) of the table segments named ``prefix``..., once all is
    in Tier-2 (white box: the containers' committed state)."""
    for _ in range(2):  # the compactions of the first flush's pass reach Tier-2 in the second
        for container in cluster.store.containers.values():
            await container.flush_to_storage()
    sizes = {}
    for container in cluster.store.containers.values():
        for name in container.segment_names():
            segment = container._committed(name)
            if segment.table is not None and name.startswith(prefix):
                stored = sum(chunk.length for chunk in await container.storage_chunks(name))
                sizes[name] = (segment.length, segment.length - segment.start_offset, segment.table.live_bytes,
                               stored)
    return sizes


def report(title: str, sizes: dict[str, tuple[int, int, int, int]]) -> None:
    print(f"\n{title}")
    for name, (written, kept, live, stored) in sorted(sizes.items()):
        print(f"  {name}: {written:,} B written, {kept:,} kept, {live:,} live, {stored:,} in Tier-2")


def check_bounded(sizes: dict[str, tuple[int, int, int, int]]) -> None:
    """Each table: dead bytes at most max(threshold, live) (the rule, after the last pass), Tier-2 at most
    one chunk more than what is kept (truncated head chunks are freed)."""
    for name, (_, kept, live, stored) in sizes.items():
        assert kept - live <= max(THRESHOLD, live), (name, kept, live)
        assert stored <= kept + CHUNK, (name, kept, stored)


@pytest.mark.slow
async def test_two_thousand_scales_keep_a_streams_metadata_within_twice_its_live_entries(tmp_path):
    """Every scale re-writes the history chunk, index leaf and sealed sizes: without compaction the table
    keeps every version (before: 884 B grew to 117 MB over 2,000 scales with the default chunk sizes)."""
    async with running_cluster(tmp_path / "data", SETTINGS, store_config=STORE) as cluster:
        cluster.app.context.store.sizes = ChunkSizes(100, 100, 100)  # before any stream exists
        services = cluster.app.services
        await services.scopes.create_scope("scaled")
        await services.creation.create_stream("scaled", "s", ONE_SEGMENT)
        table = layout.StreamTables("scaled", "s").metadata
        report("a new stream", await table_sizes(cluster, table))
        active, started = 0, time.perf_counter()
        for _ in range(2000):
            accepted = await services.scaling.request_scale("scaled", "s", [active], [(0.0, 1.0)])
            active = accepted.transition.new_segments[0].segment_id
            while await services.scaling.check_scale("scaled", "s", accepted.epoch) is not ScaleStatus.SUCCESS:
                await asyncio.sleep(0.001)
        print(f"\n2,000 scales in {time.perf_counter() - started:.1f} s")
        sizes = await table_sizes(cluster, table)
        report("after 2,000 scales", sizes)
        written, kept, live, _ = sizes[table]
        assert written > 20 * kept  # what the scales wrote; the table keeps only...
        assert kept <= 2 * live  # ...about its live entries (live is far above the threshold here)
        check_bounded(sizes)
        current, _ = await cluster.app.context.store.stream("scaled", "s").get_current_epoch()
        assert current.epoch == 2000 and set(current.segment_ids) == {active}


@pytest.mark.slow
async def test_create_seal_delete_cycles_leave_the_controllers_tables_within_twice_their_live_entries(tmp_path):
    """520 cycles over 40 names: a deleted stream's records (its tables, its listing, its workflow intents and
    their index entries) are all removed when its delete ends, so what the cycles leave is dead versions,
    which compaction drops. What stays is what Pravega keeps: per deleted name, its last segment number
    (``deletedStreams``), so a re-created stream numbers its segments above the old ones."""
    async with running_cluster(tmp_path / "data", SETTINGS, store_config=STORE) as cluster:
        services = cluster.app.services
        await services.scopes.create_scope("cycled")
        started = time.perf_counter()
        for cycle in range(520):
            name = f"s{cycle % 40}"
            assert await services.creation.create_stream("cycled", name, ONE_SEGMENT)
            current, _ = await cluster.app.context.store.stream("cycled", name).get_current_epoch()
            assert [naming.segment_number_of(segment) for segment in current.segment_ids] == [cycle // 40]
            await services.sealing.seal_stream("cycled", name)
            assert await services.deletion.delete_stream("cycled", name)
        print(f"\n520 create/seal/delete cycles in {time.perf_counter() - started:.1f} s")
        sizes = await table_sizes(cluster, layout.TABLE_PREFIX)
        report("the controller's tables after 520 cycles", sizes)
        assert set(sizes) >= {layout.DELETED_STREAMS_TABLE, layout.PENDING_WORKFLOWS_TABLE,
                              layout.streams_table("cycled")}
        deleted_tables = {table for number in range(40) for stream in (f"s{number}", f"_MARKs{number}")
                          for table in layout.StreamTables("cycled", stream).all}
        assert not deleted_tables & set(sizes)  # no table of a deleted stream (or of its mark stream) is left
        check_bounded(sizes)
        kept, live = sum(size[1] for size in sizes.values()), sum(size[2] for size in sizes.values())
        assert kept <= 2 * live + THRESHOLD * len(sizes)
        _, _, workflows_live, _ = sizes[layout.PENDING_WORKFLOWS_TABLE]
        _, _, streams_live, _ = sizes[layout.streams_table("cycled")]
        assert workflows_live == streams_live == 0  # no intent, no listing outlives its stream
