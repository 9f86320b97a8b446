"""Retention and deletion give disk space back, measured on a real ``tributary standalone`` process.

Scenario (one test, one process, small knobs so it takes seconds): a time-retention stream (keep 3 s)
and a size-retention stream (keep 8 MiB) get 16 + 32 MiB through the SDK, the size one in three rounds
so the controller records a stream cut between them (``--retention-period 1``); then a third stream
gets 16 MiB and is deleted. The test measures the bytes under ``DATA/tier1`` and ``DATA/tier2`` while
this happens (a sampler keeps the peaks) and once retention, garbage collection (``--gc-delay 0.5``,
1 MiB chunks) and the age checkpoints that let Tier-1 be truncated (``--checkpoint-interval 8``;
checkpoints by size are out of reach: ``--checkpoint-size 256``) are done, and asserts that both
shrank by a clear margin. Reading from the new heads works, also after a SIGKILL and a restart, and
the store and the controller logged the truncations and deletions at info.

What is measured: the apparent size (``st_size``) of every file, summed. ``st_blocks`` is printed too,
but not asserted on: preallocated Tier-1 files are zeros, which a compressing or deduplicating file
system (ZFS, btrfs) stores in next to no blocks, and some file systems update ``st_blocks`` only when
they commit, so block counts would make the test depend on the file system. Apparent sizes are what
the store itself controls: each Tier-1 file is preallocated whole, each chunk holds exactly its bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import struct

import pytest

import tributary
from tests.support.processes import ServerProcess, free_port, listening, wait_until_ready
from tests.support.waiting import eventually
from tributary import RetentionPolicy, ScalingPolicy, StreamConfiguration

pytestmark = [pytest.mark.timeout(180), pytest.mark.process]

MiB = 1024 * 1024
LOG_FILE = 16 * MiB  # --log-file-size 16, the smallest
EVENT = 64 * 1024  # bytes per event: 16 events per MiB
STORED_EVENT = EVENT + 8  # with its header in the segment
SCOPE = "space"
STORE_ARGS = ["--containers", "1", "--log-file-size", "16", "--checkpoint-size", "256", "--checkpoint-interval", "8",
              "--log-spare-files", "0", "--max-chunk-size", "1", "--gc-delay", "0.5", "--retention-period", "1",
              "--cache-size", "64", "--log-level", "info"]


@dataclasses.dataclass
class Usage:
    apparent: int = 0
    allocated: int = 0

    def __str__(self) -> str:
        return f"{self.apparent / MiB:6.1f} MiB ({self.allocated / MiB:6.1f} MiB in blocks)"


def usage(root: pathlib.Path, within: str = "") -> Usage:
    """Sizes of the files under ``root`` (only those whose path has ``within`` in it, if given)."""
    total = Usage()
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if within not in path:
                continue
            try:
                status = os.stat(path)
            except FileNotFoundError:  # deleted while walking
                continue
            total.apparent += status.st_size
            total.allocated += status.st_blocks * 512
    return total


class Sampler:
    """Measures Tier-1 and Tier-2 every 50 ms in the background and keeps the peaks."""

    def __init__(self, data_dir: pathlib.Path):
        self.tier1, self.tier2 = data_dir / "tier1", data_dir / "tier2"
        self.peak_tier1, self.peak_tier2 = Usage(), Usage()
        self._task: asyncio.Task | None = None

    def sample(self) -> tuple[Usage, Usage]:
        tier1, tier2 = usage(self.tier1), usage(self.tier2)
        if tier1.apparent > self.peak_tier1.apparent:
            self.peak_tier1 = tier1
        if tier2.apparent > self.peak_tier2.apparent:
            self.peak_tier2 = tier2
        return tier1, tier2

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.05)

    def __enter__(self) -> Sampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc_info) -> None:
        assert self._task is not None
        self._task.cancel()


def event(index: int) -> bytes:
    return struct.pack(">Q", index) + bytes([index % 251]) * (EVENT - 8)


async def write(client, stream: str, first: int, mebibytes: int) -> int:
    """Writes events ``first`` ... (``mebibytes`` MiB of them), all durable on return; returns the next index."""
    count = mebibytes * MiB // EVENT
    async with client.create_writer(SCOPE, stream) as writer:
        for index in range(first, first + count):
            await writer.write(event(index), routing_key="k")
    return first + count


async def head_offset(client, stream: str) -> int:
    [offset] = (await client.head_cut(SCOPE, stream)).positions.values()
    return offset


async def tail_offset(client, stream: str) -> int:
    [offset] = (await client.tail_cut(SCOPE, stream)).positions.values()
    return offset


async def read_from_head(client, stream: str, group: str) -> list[int]:
    """The indexes of every event from the stream's head to its tail now (a bounded reader group)."""
    end = await client.tail_cut(SCOPE, stream)
    readers = await client.create_reader_group(SCOPE, group, [stream], end_cuts=[end])
    indexes = []
    async with readers.create_reader("r") as reader:
        async for read in reader:
            index = struct.unpack_from(">Q", read.data)[0]
            assert read.data == event(index), f"event {index} of {stream} is damaged"
            indexes.append(index)
    return indexes


def start_standalone(data_dir: pathlib.Path, log_path: pathlib.Path) -> tuple[ServerProcess, str]:
    controller_port = free_port()
    process = ServerProcess("standalone", data_dir, extra_args=["--controller-port", str(controller_port),
                                                                *STORE_ARGS], log_path=log_path)
    process.start()
    assert process.process is not None
    wait_until_ready(process.process, listening(controller_port), "the standalone's controller", 30.0)
    return process, f"tcp://127.0.0.1:{controller_port}"


def logged(log_path: pathlib.Path, message: str) -> list[dict]:
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line["msg"] == message and line["level"] == "info"]


async def test_retention_and_deletion_shrink_tier1_and_tier2(tmp_path):
    data_dir, log_path = tmp_path / "data", tmp_path / "standalone.log"
    process, uri = start_standalone(data_dir, log_path)
    try:
        async with tributary.connect(uri) as client:
            await client.create_scope(SCOPE)
            await client.create_stream(SCOPE, "timed", StreamConfiguration(
                ScalingPolicy.fixed(1), RetentionPolicy.by_time(3000)))
            await client.create_stream(SCOPE, "sized", StreamConfiguration(
                ScalingPolicy.fixed(1), RetentionPolicy.by_size(8 * MiB)))
            await client.create_stream(SCOPE, "doomed", StreamConfiguration(ScalingPolicy.fixed(1)))
            with Sampler(data_dir) as sampler:
                start = sampler.sample()
                # (a) + (b): 16 MiB timed, 32 MiB sized in rounds a retention period apart
                timed_end, sized_end = await asyncio.gather(write(client, "timed", 0, 16),
                                                            write(client, "sized", 0, 16))
                await eventually(lambda: _at_least(data_dir / "tier2", 32 * MiB), "round 1 in Tier-2",
                                 timeout=30.0, interval=0.1)
                for _ in range(2):
                    await asyncio.sleep(1.5)
                    sized_end = await write(client, "sized", sized_end, 8)

                # (c): 16 MiB into a stream without retention, flushed to Tier-2, then deleted
                await write(client, "doomed", 0, 16)
                await eventually(lambda: _at_least(data_dir / "tier2", 16 * MiB, within="doomed"),
                                 "the doomed stream in Tier-2", timeout=30.0, interval=0.1)
                doomed_before = usage(data_dir / "tier2", within="doomed")
                await client.seal_stream(SCOPE, "doomed")
                assert await client.delete_stream(SCOPE, "doomed")
                await eventually(lambda: _at_most(data_dir / "tier2", 0, within="doomed"),
                                 "the doomed stream's chunks deleted", timeout=15.0, interval=0.1)
                doomed_after = usage(data_dir / "tier2", within="doomed")

                # retention truncates both streams, the collector deletes their chunks, age checkpoints let
                # the log be truncated past everything (the deleted stream's 16 MiB included)
                async def settled() -> bool:
                    tier1, tier2 = sampler.sample()
                    return (await head_offset(client, "timed") == await tail_offset(client, "timed")
                            and await head_offset(client, "sized") >= 256 * STORED_EVENT  # 16 MiB of events
                            and tier1.apparent <= 2 * LOG_FILE + MiB
                            and tier2.apparent <= 20 * MiB)

                await eventually(settled, "retention, GC and log truncation", timeout=60.0, interval=0.1)
                end_tier1, end_tier2 = sampler.sample()
                peak_tier1, peak_tier2 = sampler.peak_tier1, sampler.peak_tier2

            print(f"\n           {'Tier-1':>34} {'Tier-2':>34}\nstart      {start[0]} {start[1]}\n"
                  f"peak       {peak_tier1} {peak_tier2}\nend        {end_tier1} {end_tier2}\n"
                  f"deleted stream in Tier-2: {doomed_before} before deletion, {doomed_after} after")
            sized_head = await head_offset(client, "sized")
            print(f"heads: timed {await head_offset(client, 'timed')} of {await tail_offset(client, 'timed')}, "
                  f"sized {sized_head} of {await tail_offset(client, 'sized')} bytes")
            # Tier-1 grew to at least 4 files (32 MiB logged at once, no checkpoint by size) and is back to the
            # live file and the one prepared ahead. Of the 64 MiB that reached Tier-2 (never all at once:
            # retention frees while later rounds arrive) at most 20 MiB are left: the sized stream's last 8-16
            # MiB, its head chunk, metadata and journals.
            assert peak_tier1.apparent >= 4 * LOG_FILE
            assert end_tier1.apparent <= 2 * LOG_FILE + MiB
            assert peak_tier2.apparent >= 32 * MiB
            assert end_tier2.apparent <= min(20 * MiB, peak_tier2.apparent - 16 * MiB)
            assert doomed_before.apparent >= 16 * MiB and doomed_after.apparent == 0

            # reading from the new heads: the sized stream from its head on; the timed one, empty now, reads
            # what is written next (within its 3 s: a cut holding the new events becomes old enough after)
            sized_from_head = await read_from_head(client, "sized", "sized-readers")
            assert sized_from_head == list(range(sized_head // STORED_EVENT, sized_end))
            assert await read_from_head(client, "timed", "timed-empty") == []
            timed_end = await write(client, "timed", timed_end, 1)
            assert await read_from_head(client, "timed", "timed-readers") == list(range(timed_end - 16, timed_end))

        process.kill()  # SIGKILL: what was acknowledged and retained must come back
        process, uri = start_standalone(data_dir, log_path)
        async with tributary.connect(uri) as client:
            assert await head_offset(client, "sized") == sized_head
            assert await read_from_head(client, "sized", "after-restart") == sized_from_head
    finally:
        process.kill()

    retention = logged(log_path, "stream truncated by its retention policy")
    assert any(line["stream"] == f"{SCOPE}/timed" for line in retention)
    assert any(line["stream"] == f"{SCOPE}/sized" for line in logged(log_path, "stream truncated"))
    assert any(line["stream"] == f"{SCOPE}/doomed" for line in logged(log_path, "stream deleted"))
    truncated = [line for line in logged(log_path, "tier-2 segment truncated") if "/sized/" in line["segment"]]
    assert truncated and all(line["chunks_released"] > 0 for line in truncated)
    assert any("/doomed/" in line["segment"] and line["bytes_released"] >= 16 * MiB
               for line in logged(log_path, "tier-2 segment deleted"))
    assert sum(line["bytes"] for line in logged(log_path, "tier-2 garbage chunks deleted")) >= 48 * MiB
    assert sum(line["files_deleted"] for line in logged(log_path, "tier-1 log truncated")) >= 2


async def _at_least(root: pathlib.Path, size: int, within: str = "") -> bool:
    return usage(root, within).apparent >= size


async def _at_most(root: pathlib.Path, size: int, within: str = "") -> bool:
    return usage(root, within).apparent <= size
