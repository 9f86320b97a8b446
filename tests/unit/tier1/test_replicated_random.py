"""A seeded, randomized fault test of the replicated log: three in-process log stores, one log, a real ZooKeeper.

Each seed runs a reproducible sequence of steps chosen at random: append a batch (sometimes left in
flight across the next steps), stop a log store, restart a stopped one (same data directory), kill
the owner (abandon its log without closing it and end its ZooKeeper session, so that a new owner
with a fresh ``ReplicatedTier1`` can take over while the old one lingers as a zombie), close and
reopen cleanly, truncate at an acknowledged address. After every new owner's open, what it reads
must be exactly the log's known content (everything acknowledged or recovered before, minus what
was truncated), in order with contiguous sequences, followed by nothing or by a prefix of what the
previous owner appended after it: never a lost acknowledged record, a reordering or a gap. At the
end, every append that was ever acknowledged (by an owner or a zombie) is in the log at its address.

The seed and the steps taken are in the failure message; ``SEEDS`` reproduces a run.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from server.tier1 import LogAddress
from server.tier1.errors import LogError, LogWriteFailed
from server.tier1.replicated import ReplicatedDurableDataLog, ReplicatedTier1, ReplicationSettings
from tests.support.replicated import ReplicatedCluster, replicated_tier1

from .helpers import read_all

pytestmark = pytest.mark.timeout(60)

SEEDS = [11, 23, 37, 41, 59]
STEPS = 60
NAME = "container-7"
SETTINGS = ReplicationSettings(ledger_size_max=4096, add_timeout=1.0, connect_timeout=1.0, stall_timeout=2.5,
                               quarantine_seconds=0.5, read_batch=16)
SETTLE_SECONDS = SETTINGS.stall_timeout + SETTINGS.add_timeout + 5  # an append ends by then, or hangs


class Run:
    def __init__(self, rng: random.Random, cluster: ReplicatedCluster, zk_hosts: str):
        self.rng = rng
        self.cluster = cluster
        self.zk_hosts = zk_hosts
        self.running = {int(store.store.data_dir.rsplit("-", 1)[1]): store for store in cluster.stores}
        self.stopped: set[int] = set()
        self.tiers: list[ReplicatedTier1] = []
        self.zombies: list[ReplicatedDurableDataLog] = []
        self.tier: ReplicatedTier1 | None = None
        self.log: ReplicatedDurableDataLog | None = None
        self.steps: list[str] = []
        self.counter = 0
        # What the log holds: content[i] is the record with sequence i + 1, acknowledged or recovered.
        self.content: list[bytes] = []
        self.truncation = 0
        self.maybe_truncated: set[int] = set()  # truncations whose outcome is unknown (the call failed)
        self.base = 0  # len(content) when the current owner opened: its first record is base + 1
        self.appended: list[tuple[bytes, asyncio.Future[LogAddress]]] = []  # by the current owner, in order
        self.every_append: list[tuple[bytes, asyncio.Future[LogAddress]]] = []
        self.in_flight: list[asyncio.Future[LogAddress]] = []
        self.reopens = 0
        self.acknowledged = 0

    # ------------------------------------------------------------------ owners

    async def new_tier(self) -> ReplicatedTier1:
        tier = ReplicatedTier1(self.zk_hosts, SETTINGS)
        await tier.start()
        self.tiers.append(tier)
        return tier

    async def open_owner(self, tier: ReplicatedTier1) -> None:
        """A new owner on ``tier``; the stopped stores come back while it opens (it needs three for a ledger)."""
        restarts = [asyncio.ensure_future(self.restart(index, delay=self.rng.uniform(0, 1.0)))
                    for index in sorted(self.stopped)]
        try:
            for attempt in range(3):
                log = tier.log(NAME)
                try:
                    await asyncio.wait_for(log.open(), 30)
                    break
                except LogWriteFailed:  # too few replicas answered in time: they are coming back
                    if attempt == 2:
                        raise
                    await asyncio.gather(*restarts)
        finally:
            await asyncio.gather(*restarts)
        self.tier, self.log = tier, log
        self.reopens += 1
        await self.check_recovered(log)

    async def check_recovered(self, log: ReplicatedDurableDataLog) -> None:
        records = await read_all(log)
        truncation = log.truncation_address.sequence if log.truncation_address is not None else 0
        assert truncation in {self.truncation} | self.maybe_truncated, (truncation, self.truncation)
        assert [sequence for sequence, _ in records] == list(range(truncation + 1, truncation + 1 + len(records)))
        acked = self.acknowledged_prefix()
        # The content so far, then what the last owner appended in order: the log is a prefix of that.
        candidate = self.content + [payload for payload, _ in self.appended]
        end = truncation + len(records)
        assert [payload for _, payload in records] == candidate[truncation:end], "reordered or foreign records"
        assert end >= self.base + acked, f"lost acknowledged records: the log ends at {end}, " \
                                         f"{self.base + acked} were acknowledged"
        self.content = candidate[:end]
        self.truncation = truncation
        self.maybe_truncated.clear()
        self.base = end
        self.appended = []
        self.in_flight = []

    def acknowledged_prefix(self) -> int:
        """How many of the current owner's appends are acknowledged (they must be the first ones)."""
        outcomes = [future.done() and not future.cancelled() and future.exception() is None
                    for _, future in self.appended]
        acked = sum(outcomes)
        assert outcomes == [True] * acked + [False] * (len(outcomes) - acked), "acknowledged out of order"
        for index, (_, future) in enumerate(self.appended[:acked]):
            assert future.result() == LogAddress(self.base + index + 1), "an address out of sequence"
        return acked

    # ------------------------------------------------------------------ steps

    async def append(self) -> None:
        assert self.log is not None
        for _ in range(self.rng.randint(1, 12)):
            self.counter += 1
            stem = f"r{self.counter}|".encode()
            payload = (stem * 100)[:self.rng.randint(len(stem), 600)]
            try:
                future = self.log.append(payload)
            except LogError:
                break  # failed before: the next step reopens
            self.appended.append((payload, future))
            self.every_append.append((payload, future))
            self.in_flight.append(future)
        if self.rng.random() < 0.6:
            await self.settle()

    async def settle(self) -> None:
        if self.in_flight:
            _, pending = await asyncio.wait(self.in_flight, timeout=SETTLE_SECONDS)
            assert not pending, f"{len(pending)} appends neither acknowledged nor failed in {SETTLE_SECONDS}s"
        self.in_flight = []
        self.acknowledged_prefix()

    async def stop_store(self) -> None:
        index = self.rng.choice(sorted(self.running))
        await self.cluster.stop_store(self.running.pop(index))
        self.stopped.add(index)

    async def restart(self, index: int, delay: float = 0.0) -> None:
        await asyncio.sleep(delay)
        if index in self.stopped:
            self.stopped.discard(index)
            self.running[index] = await self.cluster.start_store(index)

    async def kill(self) -> None:
        """The owner dies: its session (and owner lock) ends, its log object and connections linger."""
        assert self.tier is not None and self.log is not None
        await self.tier.zk.stop()
        self.zombies.append(self.log)
        await self.open_owner(await self.new_tier())

    async def reopen(self) -> None:
        """A clean close (or the end of a failed log), then a new owner on the same tier."""
        assert self.tier is not None and self.log is not None
        await self.log.close()
        await self.open_owner(self.tier)

    async def truncate(self) -> None:
        assert self.log is not None
        await self.settle()
        acked = self.base + self.acknowledged_prefix()
        if acked <= self.truncation:
            return
        upto = self.rng.randint(self.truncation + 1, acked)
        try:
            await asyncio.wait_for(self.log.truncate(LogAddress(upto)), 40)
        except LogError:
            self.maybe_truncated.add(upto)
            return
        assert self.log.truncation_address == LogAddress(upto)
        self.truncation = upto

    async def step(self) -> str:
        assert self.log is not None
        if self.log._failure is not None:
            await self.reopen()
            return "reopen after failure"
        if len(self.running) < 2:  # below the ack quorum: never for more than one step
            await self.restart(self.rng.choice(sorted(self.stopped)))
            return "restart (forced)"
        choice = self.rng.choices(["append", "stop", "restart", "kill", "reopen", "truncate"],
                                  weights=[50, 10, 10, 8, 4, 8])[0]
        if choice == "stop" and (len(self.running) == 3 or self.rng.random() < 0.3):
            await self.stop_store()
        elif choice == "restart" and self.stopped:
            await self.restart(self.rng.choice(sorted(self.stopped)))
        elif choice == "kill":
            await self.kill()
        elif choice == "reopen":
            await self.reopen()
        elif choice == "truncate":
            await self.truncate()
        else:
            choice = "append"
            await self.append()
        return choice

    async def play(self, steps: int) -> None:
        await self.open_owner(await self.new_tier())
        for _ in range(steps):
            started = time.monotonic()
            name = await self.step()
            self.steps.append(f"{name}({time.monotonic() - started:.2f}s, {len(self.running)} up)")
        if self.log is not None and self.log._failure is None:
            await self.settle()
        self.steps.append("final reopen")
        await self.reopen()
        assert self.log is not None
        # Every append ever acknowledged, by any owner or zombie, is in the log at its address.
        for payload, future in self.every_append:
            if future.done() and not future.cancelled() and future.exception() is None:
                sequence = future.result().sequence
                assert sequence <= len(self.content), f"acknowledged record {sequence} is missing"
                assert self.content[sequence - 1] == payload, f"record {sequence} is not what was acknowledged"
                self.acknowledged += 1

    async def shut_down(self) -> None:
        for log in [*self.zombies, *([self.log] if self.log is not None else [])]:
            await log.close()
        for tier in self.tiers:
            await tier.stop()
        for _, future in self.every_append:
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: failed appends of zombies are expected


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_faults_never_lose_reorder_or_invent_an_acknowledged_record(tmp_path: Path, zk_hosts, seed):
    rng = random.Random(seed)
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        run = Run(rng, cluster, zk_hosts)
        try:
            await run.play(STEPS)
        except BaseException as error:
            trail = ", ".join(run.steps)
            print(f"replicated log random test failed: seed={seed}; steps: {trail}")
            error.add_note(f"seed={seed}; steps so far: {trail}")
            raise
        finally:
            await run.shut_down()
        assert run.acknowledged > 0 and run.reopens >= 2
        print(f"seed {seed}: {len(run.content)} records, truncated up to {run.truncation}, "
              f"{run.acknowledged} acknowledged, {run.reopens} owners; steps: {', '.join(run.steps)}")
