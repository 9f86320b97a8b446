"""Recovery bounded by design (issue 25): what a container's log holds to replay stays under its bound.

With Tier-2 down, acknowledged appends can only stay in Tier-1. They used to be bounded by the cache alone
(a 3 GiB cache let 2.9 GB wait, 83 s of replay at the next start). Now, once a container's log holds more than
``replay_bytes_max`` since its first checkpoint, appends wait store-wide (the writer keeps them waiting, they
do not fail); when Tier-2 is back, everything is flushed, a checkpoint logged, the log truncated, and appends go
on. In-process segment store, appends over the wire, a Tier-2 made unavailable by FaultyChunkStorage.
"""

from __future__ import annotations

import asyncio

import pytest

from server.containers import ReplayBound
from server.tier2.filesystem import FileSystemChunkStorage
from tests.integration.test_tier2_segment_store import create, flush
from tests.support.bulk import MiB, append_pattern, verify_pattern
from tests.support.faults.tier2 import FaultyChunkStorage
from tests.support.segment_store import running_segment_store
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

SEGMENT = "scope/stream/0.#epoch.0"
BOUND = 8 * MiB
IN_FLIGHT = 4  # 1 MiB appends a writer keeps in flight
CONFIG = {"container_count": 1, "cache_size": 128 * MiB, "flush_size": 256 * 1024, "flush_interval": 0.1,
          "checkpoint_every_bytes": 2 * MiB, "checkpoint_interval_seconds": 0.5, "replay_bytes_max": BOUND,
          "tier2_timeout": 0.5}


def test_the_rule_holds_past_ninety_percent_of_a_bound_and_lets_go_under_eighty_percent_of_both():
    bound = ReplayBound(bytes_max=1000, operations_max=100)
    assert not bound.over(False, 900, 90) and bound.over(False, 901, 0) and bound.over(False, 0, 91)
    assert bound.over(True, 850, 10) and bound.over(True, 10, 85)  # holding: until under 80% of both
    assert not bound.over(True, 800, 80)


async def test_appends_wait_at_the_replay_bound_while_tier2_is_down_and_go_on_when_it_is_back(tmp_path):
    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **CONFIG) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 2 * MiB) == 2 * MiB
        await flush(store.port)
        storage.set_unavailable()
        writing = asyncio.ensure_future(append_pattern(store.port, SEGMENT, 40 * MiB, first_block=2,
                                                       in_flight=IN_FLIGHT))
        container, peak = store.containers[0], 0

        def throttled() -> bool:
            nonlocal peak
            peak = max(peak, container.replay_backlog()[0])
            return store.cache.throttled

        await eventually(throttled, "the appends to wait at the replay bound", timeout=12, interval=0.02)
        # They must stay waiting: only time can show that they do not fail meanwhile.
        await asyncio.sleep(1.0)
        assert not writing.done()  # waiting, not failed
        peak = max(peak, container.replay_backlog()[0])
        assert BOUND * 0.9 < peak <= BOUND + IN_FLIGHT * MiB, peak  # passed by at most the appends in flight

        storage.set_unavailable(False)
        assert await asyncio.wait_for(writing, 60) == 42 * MiB
        assert await verify_pattern(store.port, SEGMENT, 42 * MiB) == 42 * MiB
        await flush(store.port)
        # a checkpoint after the flush lets the log drop it all
        await eventually(lambda: container.replay_backlog()[0] <= 2 * MiB and not store.cache.throttled,
                         "the log to drop what Tier-2 now holds", timeout=10, interval=0.05)


async def test_a_restart_replays_at_most_the_bound(tmp_path):
    """Killed (stopped without a flush) while Tier-2 is down: the next start replays what the bound allowed."""
    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **CONFIG) as store:
        await create(store.port)
        storage.set_unavailable()
        writing = asyncio.ensure_future(append_pattern(store.port, SEGMENT, 40 * MiB, in_flight=IN_FLIGHT))
        await eventually(lambda: store.cache.throttled, "the appends to wait at the replay bound", timeout=12,
                         interval=0.02)
        acknowledged = store.containers[0].get_info(SEGMENT).length
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)
    async with running_segment_store(tmp_path / "data", chunk_storage=FileSystemChunkStorage(tmp_path / "tier2"),
                                     **CONFIG) as store:
        replayed_bytes, _ = store.containers[0].replay_backlog()
        assert replayed_bytes <= BOUND + IN_FLIGHT * MiB, replayed_bytes
        assert store.containers[0].get_info(SEGMENT).length >= acknowledged
