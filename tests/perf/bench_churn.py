"""What churn and bursts leave behind on one node (issue 25): writer ids that come and go, and a write burst
that a large cache would let pile up in Tier-1.

Two phases, each on a fresh `tributary standalone` child of this repository's code (bench_scale's ``Store``:
free loopback ports, ``--metrics-port``, ``--log-level info``, stopped by PID whatever happens):

1. **writers** (``--writers``, default 100,000): writer ids each set up on one segment, append one event and go
   away (their connection closes after ``--writers-per-connection`` of them), as Spark tasks or functions do.
   The store runs with ``--writer-retention`` (default 10 s) and ``--checkpoint-interval 1``. Measured: the
   append rate (every append must be acknowledged), the writer attributes the store keeps at the peak and once
   the retention has passed (``tributary_segmentstore_writer_attributes``), the newest checkpoint of the
   segment's container before and after the expiry (read from the log, read-only), whether the log truncates
   after a flush, and after a SIGKILL the restart until the segment is read. Bars: every append acknowledged and
   one more after the churn; at most 1% of the ids kept after the retention; the newest checkpoint then <= 1 MiB;
   the log truncates after the flush; restart to first read <= 10 s.
2. **burst** (``--burst-gib``, default 3): 8 writers (one connection each) append 1 MiB blocks of 64 KiB events
   to 8 segments as fast as the store takes them, on a store with ``--cache-size 3072`` (3 GiB of unflushed
   bytes would fit the cache), while a sampler reads ``tributary_tier1_replay_backlog_bytes`` and
   ``tributary_tier2_flush_lag_bytes`` every 0.2 s. Then SIGKILL (no flush) and a restart timed until a read of
   every segment's first event is served. Bars: restart to first read <= 10 s; the peak replay backlog within the
   containers' bound (``--replay-max`` 256 MiB each, plus the 64 MiB each connection may have in flight when
   appends start to wait).

Usage: python tests/perf/bench_churn.py [--writers 100000] [--burst-gib 3] [--phases writers,burst] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from clients.connection import WireConnection, next_request_id  # noqa: E402
from tests.perf.bars import Bars, Figures  # noqa: E402
from tests.perf.bench_scale import (  # noqa: E402
    EVENT,
    LogScan,
    MiB,
    Progress,
    Store,
    append_event,
    code_under_test,
    container_dirs,
    first_reads,
    flush,
    load_average,
    pipelined,
    process_memory,
    remove_tree,
    run_async,
    say,
    store_metrics,
    tier1_bytes,
)
from wire import commands as c  # noqa: E402
from wire.envelope import envelope  # noqa: E402
from wire.naming import container_of  # noqa: E402

Found = dict[str, Any]
CONTAINERS = 4
BUSY = "bench/busy/0.#epoch.0"
REPLAY_MAX_MIB = 256  # the store's default --replay-max
CONNECTION_IN_FLIGHT_MIB = 64  # SegmentStoreConfig.append_bytes_outstanding_max


# --------------------------------------------------------------------------- writers


async def churn_writers(store: Store, writers: int, per_connection: int, window: int, progress: Progress) -> None:
    """``writers`` fresh ids, each SetupAppend + one event on BUSY; a connection closes after ``per_connection``
    of them (its writers go away); two connections at a time."""
    def writer_ids(first: int) -> Callable[[int, int], Iterable[int]]:
        return lambda k, _: range(first + k * per_connection, min(writers, first + (k + 1) * per_connection))

    for first in range(0, writers, 2 * per_connection):  # pipelined closes its connections when they are done
        await pipelined(store, progress, writer_ids(first), lambda connection, _, done: append_event(
            connection, BUSY, done), 2, window)


async def one_more_append(store: Store) -> float:
    """Seconds for a new writer's setup and one append to BUSY (the container still takes writes)."""
    started = time.monotonic()
    connection = await WireConnection.connect("127.0.0.1", store.port)
    try:
        writer = uuid.uuid4()
        assert isinstance(await connection.request(c.SetupAppend(next_request_id(), writer, BUSY, "")), c.AppendSetup)
        request_id = next_request_id()
        reply = connection.expect(request_id)
        connection.send(c.AppendBlockEnd(writer, len(EVENT), EVENT, 1, 1, request_id))
        assert isinstance(await asyncio.wait_for(reply, 30), c.DataAppended)
    finally:
        await connection.close()
    return time.monotonic() - started


async def create(store: Store, names: list[str]) -> None:
    connection = await WireConnection.connect("127.0.0.1", store.port)
    try:
        for name in names:
            reply = await connection.request(c.CreateSegment(next_request_id(), name, 0, 0, ""))
            assert isinstance(reply, c.SegmentCreated), reply
    finally:
        await connection.close()


def newest_checkpoint_bytes(log_dir: pathlib.Path) -> int:
    checkpoint = LogScan(log_dir).newest_checkpoint
    return checkpoint[2] if checkpoint else 0


def wait_for(condition: Callable[[], bool], timeout: float, what: str, store: Store) -> float:
    started = time.monotonic()
    while not condition():
        store.alive()
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.5)
    return time.monotonic() - started


def writers_phase(home: pathlib.Path, args: argparse.Namespace) -> Found:
    data = home / "data"
    store = Store(data, CONTAINERS, 1.0, ["--writer-retention", str(args.writer_retention), *args.store_arg])
    found: Found = {}
    try:
        store.start(home / "store-1.log")
        store.wait_ready(args.stage_timeout)
        log_dir = container_dirs(data)[container_of(BUSY, CONTAINERS)]
        run_async(create(store, [BUSY]), 60, "creating the segment")
        progress = Progress(f"{args.writers:,} writers", args.writers, store)
        run_async(churn_writers(store, args.writers, args.writers_per_connection, args.window, progress),
                  args.stage_timeout, "the writers' appends")
        churned = time.monotonic()
        found["append/s"] = args.writers / (churned - progress.started)
        kept = store_metrics(store, ("tributary_segmentstore_writer_attributes",))
        found["writers kept peak"] = kept.get("tributary_segmentstore_writer_attributes", 0)
        time.sleep(2.5)  # an age checkpoint (interval 1 s) holds the writers
        found["checkpoint before"] = newest_checkpoint_bytes(log_dir)
        found["rss peak"] = store.memory()[0]
        say(f"writers: {found['append/s']:,.0f} setups+appends/s; {found['writers kept peak']:,.0f} writer attributes "
            f"kept; newest checkpoint {found['checkpoint before'] / 1e6:,.2f} MB; waiting for the retention")

        def expired() -> bool:
            seen = store_metrics(store, ("tributary_segmentstore_writer_attributes",))
            return bool(seen.get("tributary_segmentstore_writer_attributes", args.writers) <= args.writers / 100)
        wait_for(expired, args.writer_retention + 120, "the writers' expiry", store)
        found["expiry s"] = time.monotonic() - churned  # from the last writer's append (within the second)
        found["writers kept after"] = store_metrics(store, ("tributary_segmentstore_writer_attributes",)).get(
            "tributary_segmentstore_writer_attributes", 0)
        found["one more append s"] = run_async(one_more_append(store), 60, "one more append")
        time.sleep(2.5)
        found["checkpoint after"] = newest_checkpoint_bytes(log_dir)
        found["rss after"] = store.memory()[0]

        run_async(flush(store, data), args.stage_timeout, "FlushToStorage")
        tails = [LogScan(path).tail for path in container_dirs(data)]
        try:
            wait_for(lambda: all(LogScan.truncated_past(path, tail) for path, tail in
                                 zip(container_dirs(data), tails, strict=True)), 60, "truncation", store)
            found["truncated"] = True
        except TimeoutError:
            found["truncated"] = False
        found["tier1 after"] = tier1_bytes(data)
        say(f"writers: expired {found['expiry s']:.1f} s after the last append, "
            f"{found['writers kept after']:,.0f} kept; checkpoint {found['checkpoint after'] / 1e6:,.3f} MB; "
            f"{'truncated' if found['truncated'] else 'NOT truncated'}; SIGKILL")
        store.kill()
        store.start(home / "store-2.log")
        reads = run_async(first_reads(store, {0: BUSY}, args.stage_timeout), args.stage_timeout + 5, "first read")
        found["first read s"] = reads[0]
        store.stop()
    finally:
        store.kill()
    return found


# --------------------------------------------------------------------------- burst


async def burst(store: Store, names: list[str], total_bytes: int, block_events: int, window: int,
                progress: Progress) -> None:
    """Each segment's writer appends blocks of ``block_events`` 64 KiB events until ``total_bytes`` went in all;
    the first event of each segment is bench_scale's EVENT (for first_reads)."""
    payload = envelope(b"b" * (64 * 1024 - 8))
    block = payload * block_events
    per_segment = total_bytes // len(names)

    async def one(name: str) -> None:
        connection = await WireConnection.connect("127.0.0.1", store.port)
        writer = uuid.uuid4()
        try:
            assert isinstance(await connection.request(c.SetupAppend(next_request_id(), writer, name, "")),
                              c.AppendSetup)
            request_id = next_request_id()
            first = connection.expect(request_id)
            connection.send(c.AppendBlockEnd(writer, len(EVENT), EVENT, 1, 1, request_id))
            assert isinstance(await first, c.DataAppended)
            number, sent = 1, 0
            in_flight: set[asyncio.Future[Any]] = set()
            while sent < per_segment:
                while len(in_flight) >= window:
                    done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    for future in done:
                        assert isinstance(future.result(), c.DataAppended), future.result()
                number += block_events
                request_id = next_request_id()
                in_flight.add(connection.expect(request_id))
                connection.send(c.AppendBlockEnd(writer, len(block), block, block_events, number, request_id))
                sent += len(block)
                progress.done += len(block) // MiB
                await connection.drain()
            for reply in await asyncio.gather(*in_flight):
                assert isinstance(reply, c.DataAppended), reply
        finally:
            await connection.close()

    reporter = asyncio.create_task(progress.report())
    try:
        await asyncio.gather(*(one(name) for name in names))
    finally:
        reporter.cancel()


class Sampler(threading.Thread):
    """Peaks of the store's replay backlog and flush lag, read every 0.2 s."""

    def __init__(self, store: Store):
        super().__init__(daemon=True)
        self.store, self.stopping = store, threading.Event()
        self.peak_backlog = self.peak_lag = 0.0

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            seen = store_metrics(self.store, ("tributary_tier1_replay_backlog_bytes",
                                              "tributary_tier2_flush_lag_bytes"))
            self.peak_backlog = max(self.peak_backlog, seen.get("tributary_tier1_replay_backlog_bytes", 0))
            self.peak_lag = max(self.peak_lag, seen.get("tributary_tier2_flush_lag_bytes", 0))


def burst_phase(home: pathlib.Path, args: argparse.Namespace) -> Found:
    data = home / "data"
    store = Store(data, CONTAINERS, 60.0, ["--cache-size", "3072", *args.store_arg])
    names = [f"bench/burst{index}/0.#epoch.0" for index in range(8)]
    found: Found = {}
    sampler: Sampler | None = None
    try:
        store.start(home / "store-1.log")
        store.wait_ready(args.stage_timeout)
        run_async(create(store, names), 60, "creating the segments")
        sampler = Sampler(store)
        sampler.start()
        total = int(args.burst_gib * 1024) * MiB
        progress = Progress(f"burst of {args.burst_gib:g} GiB (MiB)", total // MiB, store)
        run_async(burst(store, names, total, 16, 8, progress), args.stage_timeout, "the burst")
        found["burst MB/s"] = total / 1e6 / (time.monotonic() - progress.started)
        sampler.stopping.set()
        sampler.join()
        found["peak backlog"], found["peak lag"] = sampler.peak_backlog, sampler.peak_lag
        found["tier1 at kill"] = tier1_bytes(data)
        found["live log at kill"] = sum(LogScan(path).live_bytes for path in container_dirs(data))
        say(f"burst: {found['burst MB/s']:,.0f} MB/s; peak replay backlog {found['peak backlog'] / MiB:,.0f} MiB, "
            f"peak flush lag {found['peak lag'] / MiB:,.0f} MiB; live logs {found['live log at kill'] / MiB:,.0f} MiB;"
            f" SIGKILL")
        store.kill()
        store.start(home / "store-2.log")
        probes = dict(enumerate(names))
        reads = run_async(first_reads(store, probes, args.stage_timeout), args.stage_timeout + 5, "first reads")
        found["first read s"] = max(reads.values())
        found["ready s"] = store.wait_ready(args.stage_timeout)
        store.stop()
    finally:
        if sampler is not None:
            sampler.stopping.set()
        store.kill()
    return found


# --------------------------------------------------------------------------- report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--phases", default="writers,burst")
    parser.add_argument("--writers", type=int, default=100_000)
    parser.add_argument("--writers-per-connection", type=int, default=1_000)
    parser.add_argument("--writer-retention", type=float, default=10.0)
    parser.add_argument("--window", type=int, default=256, help="writers in flight per connection")
    parser.add_argument("--burst-gib", type=float, default=3.0)
    parser.add_argument("--stage-timeout", type=float, default=900.0)
    parser.add_argument("--store-arg", action="append", default=[])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--dir", type=pathlib.Path, default=ROOT / ".bench")
    args = parser.parse_args()
    phases = args.phases.split(",")
    args.dir.mkdir(parents=True, exist_ok=True)
    code = code_under_test()
    say(f"store code: {code}; phases {phases}; load average {load_average()}")
    figures, bars = Figures(), Bars()
    seconds, count = "{:,.2f}".format, "{:,.0f}".format
    runs: dict[str, list[Found]] = {}
    for run in range(args.runs):
        for phase in phases:
            home = pathlib.Path(tempfile.mkdtemp(dir=args.dir))
            try:
                found = writers_phase(home, args) if phase == "writers" else burst_phase(home, args)
            except BaseException:
                say(f"{phase}: failed; the store's logs are in {home}")
                raise
            remove_tree(home)
            runs.setdefault(phase, []).append(found)
            if phase == "writers":
                w = f"{args.writers:,} writer ids"
                figures.add(f"{w}: setups + appends/s", found["append/s"], count)
                figures.add(f"{w}: writer attributes kept, peak", found["writers kept peak"], count)
                figures.add(f"{w}: writer attributes kept after the retention", found["writers kept after"], count)
                figures.add(f"{w}: s from the last append to the expiry (retention {args.writer_retention:g} s)",
                            found["expiry s"], seconds)
                figures.add(f"{w}: newest checkpoint before expiry (MB)", found["checkpoint before"] / 1e6)
                figures.add(f"{w}: newest checkpoint after expiry (MB)", found["checkpoint after"] / 1e6,
                            "{:,.4f}".format)
                figures.add(f"{w}: store RSS at the peak (MiB)", found["rss peak"] / MiB, count)
                figures.add(f"{w}: store RSS after expiry (MiB)", found["rss after"] / MiB, count)
                figures.add(f"{w}: one more setup + append (s)", found["one more append s"], "{:,.3f}".format)
                figures.add(f"{w}: log truncated after the flush (1 = yes)", float(found["truncated"]), count)
                figures.add(f"{w}: restart until the segment is read (s)", found["first read s"], seconds)
            else:
                b = f"{args.burst_gib:g} GiB burst, --cache-size 3072"
                figures.add(f"{b}: MB/s", found["burst MB/s"], count)
                figures.add(f"{b}: peak replay backlog, all containers (MiB)", found["peak backlog"] / MiB, count)
                figures.add(f"{b}: peak flush lag (MiB)", found["peak lag"] / MiB, count)
                figures.add(f"{b}: live logs at the SIGKILL (MiB)", found["live log at kill"] / MiB, count)
                figures.add(f"{b}: restart until every segment is read (s)", found["first read s"], seconds)
                figures.add(f"{b}: restart until /health/ready (s)", found["ready s"], seconds)
        say(f"run {run + 1} of {args.runs} done")
    figures.print("bench_churn")
    print(f"\nstore code: {code}; load average at the end {load_average()}; "
          f"benchmark RSS peak {process_memory(os.getpid())[1] / MiB:,.0f} MiB\n")
    if "writers" in runs:
        w = f"{args.writers:,} writer ids"
        found_runs = runs["writers"]
        bars.check(f"{w}: every append acknowledged, and one more after the churn within 1 s (every run)",
                   all(run["one more append s"] <= 1 for run in found_runs),
                   figures.spread(f"{w}: one more setup + append (s)"))
        bars.check(f"{w}: at most 1% of the ids kept after the retention (every run)",
                   all(run["writers kept after"] <= args.writers / 100 for run in found_runs),
                   figures.spread(f"{w}: writer attributes kept after the retention"))
        bars.check(f"{w}: newest checkpoint <= 1 MiB after the expiry (every run)",
                   all(run["checkpoint after"] <= MiB for run in found_runs),
                   figures.spread(f"{w}: newest checkpoint after expiry (MB)") + " MB")
        bars.check(f"{w}: the log truncates after the flush (every run)",
                   all(run["truncated"] for run in found_runs), str([run["truncated"] for run in found_runs]))
        bars.check(f"{w}: restart to first read <= 10 s (median)",
                   statistics.median(run["first read s"] for run in found_runs) <= 10,
                   figures.spread(f"{w}: restart until the segment is read (s)"))
    if "burst" in runs:
        b = f"{args.burst_gib:g} GiB burst, --cache-size 3072"
        bound = CONTAINERS * (REPLAY_MAX_MIB + CONNECTION_IN_FLIGHT_MIB)
        bars.check(f"{b}: restart to first read <= 10 s (median)",
                   figures.median(f"{b}: restart until every segment is read (s)") <= 10,
                   figures.spread(f"{b}: restart until every segment is read (s)"))
        bars.check(f"{b}: peak replay backlog <= {bound:,} MiB ({CONTAINERS} x (--replay-max {REPLAY_MAX_MIB} + "
                   f"{CONNECTION_IN_FLIGHT_MIB} in flight)) (every run)",
                   figures.max(f"{b}: peak replay backlog, all containers (MiB)") <= bound,
                   figures.spread(f"{b}: peak replay backlog, all containers (MiB)"))
    sys.exit(bars.exit_code())


if __name__ == "__main__":
    main()
