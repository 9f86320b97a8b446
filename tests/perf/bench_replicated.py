"""Append throughput and latency of a segment store on the replicated Tier-1 log next to the local log,
measured in the same run.

Each run starts a segment store on the local log (the baseline), measures it, stops it; then starts
a ZooKeeper, three `tributary logstore` processes (each with its own data dir on the disk under test)
and a segment store with ``--tier1 replicated`` (3/3/2), and measures the same: 1 KiB x 8 batching
writers, one append in flight at a time, and 1 KiB events paced at 1,000/s (writers as in
bench_appends.py). Every process is on this machine, so the replicas share its 2 cores and one disk.

Bars (issue #13), judged on the median of ``--runs`` runs: replicated 1 KiB x 8 throughput >= 0.5 x the
local log's; one-in-flight ack p50 <= local p50 + 300 us; p99 at 1,000 events/s <= 3 ms.
Exits 1 when a bar misses.

Usage: python tests/perf/bench_replicated.py [--seconds S] [--runs N] [--dir DIR]
"""

from __future__ import annotations

import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.perf.bars import Bars, Figures, percentile, run_benchmark  # noqa: E402
from tests.perf.bench_appends import latencies, throughput  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402
from tests.support.replicated_processes import LogStores  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402


async def measure(port: int, seconds: float) -> dict:
    events, _ = await throughput(port, 8, 1024, seconds, "w8s1024")
    one, paced = await latencies(port)
    return {"events": events, "one": one, "paced": paced}


def run_against(server: ServerProcess, seconds: float) -> dict:
    import uvloop

    server.start(timeout=60)
    try:
        return uvloop.run(measure(server.port, seconds))
    finally:
        server.terminate()


def one_run(scratch: pathlib.Path, seconds: float, figures: Figures) -> None:
    local = run_against(ServerProcess("segmentstore", scratch / "local", log_path=scratch / "local.log"), seconds)
    zookeeper = ZooKeeperServer(scratch / "zookeeper").start()
    stores = LogStores(scratch, zookeeper.connect_string, journal_mib=64)
    try:
        stores.start()
        replicated = run_against(ServerProcess("segmentstore", scratch / "replicated", log_path=scratch / "rep.log",
                                               extra_args=stores.segment_store_args(10.0)), seconds)
    finally:
        stores.stop_all()
        zookeeper.stop()
    us, ms = "{:,.0f} us".format, "{:.2f} ms".format
    for name, results in (("local", local), ("replicated", replicated)):
        figures.add(f"{name}: 1 KiB x 8 writers, events/s", results["events"], "{:,.0f}".format)
        figures.add(f"{name}: one in flight, ack p50", statistics.median(results["one"]) * 1e6, us)
        figures.add(f"{name}: one in flight, ack p99", percentile(results["one"], 0.99) * 1e6, us)
        figures.add(f"{name}: 1,000 events/s of 1 KiB, ack p50", statistics.median(results["paced"]) * 1e3, ms)
        figures.add(f"{name}: 1,000 events/s of 1 KiB, ack p99", percentile(results["paced"], 0.99) * 1e3, ms)
    figures.add("replicated / local 1 KiB x 8 throughput", replicated["events"] / local["events"])
    figures.add("one in flight: replicated p50 - local p50",
                (statistics.median(replicated["one"]) - statistics.median(local["one"])) * 1e6, us)


def judge(figures: Figures) -> Bars:
    median = figures.median
    verdict = Bars()
    name = "replicated / local 1 KiB x 8 throughput"
    verdict.check("replicated 1 KiB x 8 >= 0.5 x local (median)", median(name) >= 0.5, figures.spread(name))
    name = "one in flight: replicated p50 - local p50"
    verdict.check("one-in-flight ack p50 <= local p50 + 300 us (median)", median(name) <= 300, figures.spread(name))
    name = "replicated: 1,000 events/s of 1 KiB, ack p99"
    verdict.check("p99 at 1,000 events/s <= 3 ms (median)", median(name) <= 3.0, figures.spread(name))
    return verdict


def main() -> None:
    run_benchmark("bench_replicated", __doc__.splitlines()[0], one_run, judge)


if __name__ == "__main__":
    main()
