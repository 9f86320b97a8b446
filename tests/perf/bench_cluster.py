"""A cluster on one machine (docs/cluster.md): throughput with 2 segment stores against 1, and failovers.

Each run starts a ZooKeeper, three log stores (3/3/2) and two controllers, then:

1. *throughput*: `tributary loadgen` (1 KiB events, 8 writers flat out, 8 segments, through a controller)
   against a fresh cluster with one segment store, then against a fresh one with two (each store
   serving half the containers). On a 2-core machine the ratio shows the cost of the extra process
   (its loop, its connections), not scaling;
2. *failovers*: on the second cluster, ``--kills`` times, an SDK writer writes while one store is
   SIGKILLed (the one most of its keys' segments live on): the failover time
   is from the kill until every container is served again (read from ZooKeeper as `tributary status`
   does), the client-visible stall the writer's longest gap between acknowledgements around the kill;
   the store is restarted and the map balanced again before the next kill.

Bars (issue #14's must-show, judged on every kill): failover under 10 s, the writer's stall under 10 s.
Exits 1 when a bar misses.

Usage: python tests/perf/bench_cluster.py [--seconds S] [--runs N] [--kills K] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.perf.bars import Bars, Figures, percentile, run_benchmark
from tests.support.cluster import Cluster
from tests.support.continuous_writer import ContinuousWriter
from wire import naming

FAILOVER_LIMIT = 10.0
SEGMENTS = 8  # of the stream the failover writer writes


def loadgen(controller_uri: str, stream: str, seconds: float, output: pathlib.Path) -> float:
    """Events/s written by `tributary loadgen` (1 KiB x 8 writers, flat out)."""
    result = subprocess.run([sys.executable, "-m", "tributary", "loadgen", "--controller", controller_uri, "--scope",
                             "bench", "--stream", stream, "--segments", "8", "--writers", "8", "--readers", "0",
                             "--event-size", "1024", "--rate", "0", "--duration", str(seconds), "--output",
                             str(output), "--no-progress"], capture_output=True, text=True, timeout=seconds + 180)
    if result.returncode:
        raise RuntimeError(f"loadgen failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(output.read_text())["rates"]["write_events_per_second"]


def busiest_store(cluster: Cluster, segments: int) -> int:
    """The index of the segment store owning the most segments the writer's keys go to (so the kill stalls it)."""
    owners = cluster.owners()
    counts = [0] * len(cluster.segment_stores)
    for key in range(ContinuousWriter.KEYS):
        segment = int(naming.routing_key_fraction(f"key-{key}") * segments)
        name = naming.stream_segment_name("bench", "failover", segment)
        owner = owners[naming.container_of(name, cluster.containers)]
        counts[[cluster.store_id(store) for store in cluster.segment_stores].index(owner)] += 1
    return counts.index(max(counts))


async def one_failover(cluster: Cluster, controller_index: int) -> tuple[float, float]:
    """(failover seconds, the writer's longest stall) for one SIGKILL of the store most of its keys use."""
    from tests.support.sdk import sdk

    victim = cluster.segment_stores[busiest_store(cluster, SEGMENTS)]
    async with sdk.connect(cluster.controllers[controller_index].uri) as client:
        writer = ContinuousWriter(client, "bench", "failover")
        task = asyncio.ensure_future(writer.run())
        await asyncio.sleep(1.0)
        killed_at = time.monotonic()
        victim.kill()
        failover = await asyncio.to_thread(cluster.wait_until_served, 60.0, cluster.store_id(victim))
        await asyncio.sleep(2.0)
        writer.stop.set()
        await asyncio.wait_for(task, 120)
        stall = writer.longest_stall(after=killed_at - 0.5)
    await asyncio.to_thread(victim.start, 60)
    await asyncio.to_thread(wait_balanced, cluster)  # the restarted store has its share back
    return failover, stall


def wait_balanced(cluster: Cluster, timeout: float = 60.0) -> None:
    """Waits until every container is served and each segment store serves its even share."""
    deadline = time.monotonic() + timeout
    share = cluster.containers // len(cluster.segment_stores)
    while True:
        cluster.wait_until_served(timeout)
        served = list(cluster.owners().values())
        if all(served.count(cluster.store_id(store)) == share for store in cluster.segment_stores):
            return
        assert time.monotonic() < deadline, f"the containers are not balanced: {cluster.owners()}"
        time.sleep(0.2)


def one_run(scratch: pathlib.Path, seconds: float, kills: int, figures: Figures) -> None:
    from clients.model import ScalingPolicy, StreamConfiguration
    from tests.support.sdk import sdk

    with Cluster(scratch / "one", containers=8, segment_stores=1) as cluster:
        one = loadgen(cluster.controllers[0].uri, "one-store", seconds, scratch / "one.json")
    with Cluster(scratch / "two", containers=8, segment_stores=2, session_timeout=2.0, grace=0.5) as cluster:
        wait_balanced(cluster)
        two = loadgen(cluster.controllers[0].uri, "two-stores", seconds, scratch / "two.json")

        async def create() -> None:
            async with sdk.connect(cluster.controllers[0].uri) as client:
                await client.create_stream("bench", "failover", StreamConfiguration(ScalingPolicy.fixed(SEGMENTS)))

        asyncio.run(create())
        failovers, stalls = [], []
        for kill in range(kills):
            failover, stall = asyncio.run(one_failover(cluster, kill % 2))
            failovers.append(failover)
            stalls.append(stall)
            print(f"kill {kill + 1}: failover {failover:.2f} s, writer stall {stall:.2f} s", file=sys.stderr)
    figures.add("1 store: 1 KiB x 8 writers, events/s", one, "{:,.0f}".format)
    figures.add("2 stores: 1 KiB x 8 writers, events/s", two, "{:,.0f}".format)
    figures.add("2 stores / 1 store throughput", two / one)
    seconds_format = "{:.2f} s".format
    figures.add("failover p50", statistics.median(failovers), seconds_format)
    figures.add("failover max", max(failovers), seconds_format)
    figures.add("writer stall p50", statistics.median(stalls), seconds_format)
    figures.add("writer stall p90", percentile(stalls, 0.9), seconds_format)
    figures.add("writer stall max", max(stalls), seconds_format)


def judge(figures: Figures) -> Bars:
    verdict = Bars()
    verdict.check(f"every failover under {FAILOVER_LIMIT:.0f} s", figures.max("failover max") < FAILOVER_LIMIT,
                  figures.spread("failover max"))
    verdict.check(f"every writer stall under {FAILOVER_LIMIT:.0f} s", figures.max("writer stall max") < FAILOVER_LIMIT,
                  figures.spread("writer stall max"))
    return verdict


def main() -> None:
    def kills_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--kills", type=int, default=10, help="failovers measured per run")

    run_benchmark("bench_cluster", __doc__.splitlines()[0],
                  lambda scratch, seconds, figures, args: one_run(scratch, seconds, args.kills, figures), judge,
                  add_options=kills_option, seconds=5.0)


if __name__ == "__main__":
    main()
