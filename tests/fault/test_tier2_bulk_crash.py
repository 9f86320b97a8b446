"""5 GiB through a standalone server with a 256 MiB cache: memory stays bounded, the Tier-1 log is
truncated behind the Tier-2 flush, and every byte reads back exactly, right away and after SIGKILL."""

from __future__ import annotations

import asyncio
import shutil
import threading

import psutil
import pytest

from clients.connection import WireConnection, next_request_id
from tests.support.bulk import MiB, append_pattern, verify_pattern
from tests.support.standalone import StandaloneProcess
from wire import commands as c

pytestmark = pytest.mark.process

GiB = 1024 * MiB
TOTAL = 5 * GiB
SEGMENTS = [f"bulk/stream/{number}.#epoch.0" for number in range(4)]  # spread over the containers
PER_SEGMENT = TOTAL // len(SEGMENTS)
RSS_LIMIT = 1 * GiB
# What the log may hold, whatever was written: the unflushed bytes (at most the cache), plus per busy container
# the truncation step (a checkpoint every 16 MiB; truncation happens at the end of a writer pass) and its files
# (current, two spares, one being preallocated; 16 MiB each). 1 GiB is a fifth of what goes through it.
TIER1_LIMIT = 1 * GiB


class Sampler:
    """Samples the server's resident memory and the Tier-1 log's size on disk in a thread."""

    def __init__(self, pid: int, tier1_dir):
        self._process = psutil.Process(pid)
        self._tier1 = tier1_dir
        self.max_rss = 0
        self.max_tier1 = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.25):
            try:
                self.max_rss = max(self.max_rss, self._process.memory_info().rss)
            except psutil.Error:
                return
            size = 0
            for path in self._tier1.rglob("*"):
                try:
                    size += path.stat().st_size if path.is_file() else 0
                except FileNotFoundError:
                    pass  # a log file recycled while we looked
            self.max_tier1 = max(self.max_tier1, size)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


async def verify_all(port: int) -> None:
    results = await asyncio.gather(*(verify_pattern(port, name, PER_SEGMENT, seed=index)
                                     for index, name in enumerate(SEGMENTS)))
    assert sum(results) == TOTAL


@pytest.mark.slow
async def test_five_gib_with_a_256_mib_cache_then_sigkill(tmp_path):
    data_dir = tmp_path / "data"
    server = StandaloneProcess(data_dir, log_path=tmp_path / "server.log", extra_args=["--cache-size", "256"])
    server.start()
    try:
        with Sampler(server.process.pid, data_dir / "tier1") as sampler:
            connection = await WireConnection.connect("127.0.0.1", server.store_port)
            for name in SEGMENTS:
                reply = await connection.request(c.CreateSegment(next_request_id(), name, 0, 0, "", 0))
                assert isinstance(reply, c.SegmentCreated), reply
            await connection.close()
            written = await asyncio.gather(*(append_pattern(server.store_port, name, PER_SEGMENT, seed=index)
                                             for index, name in enumerate(SEGMENTS)))
            assert written == [PER_SEGMENT] * len(SEGMENTS)
            await verify_all(server.store_port)
        print(f"5 GiB written and read back: max RSS {sampler.max_rss / MiB:.0f} MiB, "
              f"max Tier-1 on disk {sampler.max_tier1 / MiB:.0f} MiB")
        assert sampler.max_rss < RSS_LIMIT, f"resident memory reached {sampler.max_rss / MiB:.0f} MiB"
        assert sampler.max_tier1 < TIER1_LIMIT, f"the Tier-1 log reached {sampler.max_tier1 / MiB:.0f} MiB"
        tier2_bytes = sum(path.stat().st_size for path in (data_dir / "tier2").rglob("*") if path.is_file())
        assert tier2_bytes >= TOTAL * 0.9  # the bulk of it is in Tier-2 already (the rest is in the log)
        connection = await WireConnection.connect("127.0.0.1", server.store_port)
        reply = await connection.request(c.FlushToStorage(-1, "", next_request_id()), timeout=300)
        assert isinstance(reply, c.StorageFlushed), reply
        await connection.close()
        tier2_bytes = sum(path.stat().st_size for path in (data_dir / "tier2").rglob("*") if path.is_file())
        assert tier2_bytes >= TOTAL
        await asyncio.sleep(1.0)  # the flush's own metadata commit is flushed and truncated by the next pass
        tier1_bytes = sum(path.stat().st_size for path in (data_dir / "tier1").rglob("*") if path.is_file())
        assert tier1_bytes <= 4 * 5 * 16 * MiB, f"after a flush the log still holds {tier1_bytes / MiB:.0f} MiB"

        server.kill()
        server.start(timeout=120)
        with Sampler(server.process.pid, data_dir / "tier1") as sampler:
            await verify_all(server.store_port)
        assert sampler.max_rss < RSS_LIMIT, f"resident memory reached {sampler.max_rss / MiB:.0f} MiB after restart"
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
