"""What each failure of a cluster costs a writer: the longest wait for an acknowledgement, for Tributary's SDK
and for the real ``pravega`` client (the Rust binding), writing side by side (issue 28; docs/cluster.md's
failure table comes from this).

The cluster is the one of docs/cluster.md, with its settings (ZooKeeper sessions of 4 s, a rebalance grace of
2 s): ZooKeeper, three log stores, two segment stores (replicated Tier-1, shared Tier-2), two controllers, all
real processes on loopback, stopped by PID. Both clients are given the first controller's address. While both
write (each to a stream of 8 segments; the SDK with 32 events in flight, the real client one event at a time,
as its ``write_event`` with no in-flight window does), one failure at a time:

* a segment store SIGKILLed, and restarted at its address 15 s later (the real client retries the address it
  resolved until something answers there);
* a segment store SIGSTOPped for ``--pause`` seconds (45 by default), then resumed;
* the controller both clients were given SIGKILLed, and restarted 15 s later;
* a log store SIGKILLed, and restarted 15 s later.

For each: the longest gap between two acknowledgements from the fault until 10 s after the cluster is whole
again, and when the containers were served again ("failover"). Afterwards every acknowledged event must be
read once. Bars (exit 1 when missed, judged on the median of ``--runs``): the SDK's stall after a store kill
or pause <= failover + 2 s; after a controller or log store kill <= 5 s. The real client has no bar: its
retry schedule is its own.

    .venv/bin/python tests/perf/bench_failover.py [--runs 3] [--pause 45] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from clients.model import ScalingPolicy, StreamConfiguration  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402
from tests.support.continuous_writer import (  # noqa: E402
    ContinuousWriter,
    assert_all_acknowledged_read_once,
    longest_gap,
)
from tests.support.pravega_driver import Scenario  # noqa: E402
from tests.support.sdk import check_each_once_in_key_order, read_all, sdk  # noqa: E402
from wire import naming  # noqa: E402

SESSION_TIMEOUT, GRACE = 4.0, 2.0  # docs/cluster.md's settings
RESTART_AFTER = 15.0
SETTLE = 10.0
SLACK = 2.0
SEGMENTS = 8
CONTAINERS = 8
FAULTS = ("segment store killed", "segment store paused", "controller killed", "log store killed")


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)




def longest_reported_gap(gaps: list[list[float]], start: float, end: float) -> float:
    """The longest of the real client's reported gaps [begin, length] that overlaps [start, end]."""
    overlapping = [min(begin + length, end) - max(begin, start) for begin, length in gaps
                   if begin < end and begin + length > start]
    return max(overlapping, default=0.0)


class Run:
    def __init__(self, home: Path, pause: float):
        self.home = home
        self.pause = pause
        self.cluster = Cluster(home, containers=CONTAINERS, segment_stores=2, controllers=2,
                               session_timeout=SESSION_TIMEOUT, grace=GRACE)
        self.windows: dict[str, tuple[float, float, float]] = {}  # fault -> (start, end, failover seconds)

    async def measure(self) -> dict[str, dict[str, float]]:
        with self.cluster as cluster:
            uri = cluster.controllers[0].uri
            stop_file = self.home / "stop-real-client"
            real = Scenario("write_timed", uri,
                            {"scope": "bench", "stream": "real", "create": True, "segments": SEGMENTS,
                             "seconds": 3600, "rate": 200, "stop_file": str(stop_file)}, self.home / "real-client.out")
            try:
                async with sdk.connect(uri) as client:
                    await client.create_scope("bench")
                    await client.create_stream("bench", "sdk", StreamConfiguration(ScalingPolicy.fixed(SEGMENTS)))
                    writer = ContinuousWriter(client, "bench", "sdk")
                    writing = asyncio.ensure_future(writer.run())
                    await asyncio.sleep(5.0)
                    for fault in FAULTS:
                        progress(f"{fault}")
                        self.windows[fault] = await getattr(self, "_" + fault.replace(" ", "_"))()
                    writer.stop.set()
                    stop_file.touch()
                    await asyncio.wait_for(writing, 120)
                    result = await asyncio.to_thread(real.result, 120)
                    progress("checking what was read")
                    (events,) = await read_all(client, "bench", "sdk", "check-sdk")
                    assert_all_acknowledged_read_once(writer.acknowledged, events)
                    (events,) = await read_all(client, "bench", "real", "check-real")
                    check_each_once_in_key_order([event.data for event in events], result["written"], result["keys"])
            finally:
                real.kill()
        return {fault: {"failover": failover, "sdk": longest_gap(writer.ack_times, start, end),
                        "real": longest_reported_gap(result["gaps"], start, end)}
                for fault, (start, end, failover) in self.windows.items()}

    async def _served(self, without: str | None = None) -> float:
        return await asyncio.to_thread(self.cluster.wait_until_served, 120.0, without)

    def _victim(self):
        """The segment store serving segments of both clients' streams (else the one serving the most)."""
        owners = self.cluster.owners()

        def serves(store, stream: str) -> int:
            return sum(owners.get(naming.container_of(naming.stream_segment_name("bench", stream, number),
                                                      CONTAINERS)) == self.cluster.store_id(store)
                       for number in range(SEGMENTS))

        return max(self.cluster.segment_stores,
                   key=lambda store: (min(serves(store, "sdk"), serves(store, "real")), serves(store, "sdk")))

    async def _segment_store_killed(self) -> tuple[float, float, float]:
        victim = self._victim()
        start = time.monotonic()
        victim.kill()
        failover = await self._served(self.cluster.store_id(victim))
        await asyncio.sleep(max(0.0, start + RESTART_AFTER - time.monotonic()))
        await asyncio.to_thread(victim.start, 60)
        await self._served()
        await asyncio.sleep(SETTLE)
        return start, time.monotonic(), failover

    async def _segment_store_paused(self) -> tuple[float, float, float]:
        victim = self._victim()
        start = time.monotonic()
        self.cluster.pause(victim.process)
        try:
            failover = await self._served(self.cluster.store_id(victim))
            await asyncio.sleep(max(0.0, start + self.pause - time.monotonic()))
        finally:
            self.cluster.resume(victim.process)
        await self._served()
        await asyncio.sleep(SETTLE)
        return start, time.monotonic(), failover

    async def _controller_killed(self) -> tuple[float, float, float]:
        victim = self.cluster.controllers[0]
        start = time.monotonic()
        victim.kill()
        await asyncio.sleep(RESTART_AFTER)
        await asyncio.to_thread(victim.start)
        await asyncio.sleep(SETTLE)
        return start, time.monotonic(), 0.0

    async def _log_store_killed(self) -> tuple[float, float, float]:
        log_stores = self.cluster.log_stores
        assert log_stores is not None
        start = time.monotonic()
        log_stores.kill(0)
        await asyncio.sleep(RESTART_AFTER)
        await asyncio.to_thread(log_stores.restart, 0)
        await asyncio.sleep(SETTLE)
        return start, time.monotonic(), 0.0


def summary(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--pause", type=float, default=45.0, help="seconds a segment store stays paused")
    parser.add_argument("--json", type=Path, help="write the figures here")
    options = parser.parse_args()
    runs = []
    for index in range(options.runs):
        home = Path(tempfile.mkdtemp(prefix="bench-failover-"))
        try:
            progress(f"run {index + 1} of {options.runs} in {home}")
            runs.append(asyncio.run(Run(home, options.pause).measure()))
        finally:
            shutil.rmtree(home, ignore_errors=True)
    print(f"\nlongest acknowledgement gap in seconds, min / median / max of {options.runs} run(s); "
          f"ZooKeeper session {SESSION_TIMEOUT:.0f} s, grace {GRACE:.0f} s, pause {options.pause:.0f} s")
    print(f"{'failure':<24} {'containers served again':>24} {'SDK':>20} {'pravega client':>20}")
    missed = []
    for fault in FAULTS:
        failover = [run[fault]["failover"] for run in runs]
        sdk_stall = [run[fault]["sdk"] for run in runs]
        real_stall = [run[fault]["real"] for run in runs]
        print(f"{fault:<24} {summary(failover) if any(failover) else '-':>24} {summary(sdk_stall):>20} "
              f"{summary(real_stall):>20}")
        bound = statistics.median(failover) + SLACK if "segment store" in fault else 5.0
        if statistics.median(sdk_stall) > bound:
            missed.append(f"{fault}: SDK stall {statistics.median(sdk_stall):.2f} s > {bound:.2f} s")
    if options.json:
        options.json.write_text(json.dumps({"runs": runs, "pause": options.pause}, indent=2))
    for line in missed:
        print(f"MISSED {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
