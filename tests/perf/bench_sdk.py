"""SDK benchmark: `tributary standalone` driven by Tributary's own SDK, against the same standalone
driven by the real `pravega` client and against Debian's redis-server (appendonly yes, appendfsync
always, pipelined XADD), all in the same run on this machine.

Run by hand:  .venv/bin/python tests/perf/bench_sdk.py [--runs 3] [--scale 1.0]

Measured (acknowledged events only; each producer is its own process, started together):

* throughput: event sizes 100 B, 1 KiB, 64 KiB with 1 and 8 producers, for the SDK and Redis; the
  `pravega` client, and the same program through Tributary's drop-in for it
  (``tributary.compat.pravega_client``, rows "compat"), at 1 KiB x 1 and x 8. An SDK producer writes
  with ``await writer.write(payload)`` (no routing key) and ends with ``flush()``; a pravega (or compat)
  producer awaits ``write_event_async`` in windows of 256 and ends with ``flush()``; events/s = all
  events / (last end - first start).
* end-to-end latency: one SDK writer at 1,000 events/s of 1 KiB (each event stamped with its send
  time), one SDK reader of a group at the tail, in separate processes; only durable bytes are
  served by the store.
* backlog read: 1 GiB of 1 KiB events written by one SDK producer, then read by a group of one
  reader from the head to the tail; read events/s against that producer's write rate.

Every throughput figure is taken ``--runs`` times; the table shows min / median / max of the ratio
of each run (figures of one run are measured side by side), and a bar is judged on the median.
Exits 1 if a bar is missed. Bars (issue 9): SDK 1 KiB x 1 >= 2x Redis and >= 5x pravega;
1 KiB x 8 >= 1.5x Redis; 100 B x 8 >= 1x; 64 KiB x 8 >= 1x; latency p99 <= 1 ms; backlog read
>= 1x the single-producer write rate. Issue 30: compat 1 KiB x 1 and x 8 >= 5x pravega.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import bench_e2e  # noqa: E402 - the Redis and pravega roles and the servers come from there
from tests.perf.bars import percentile  # noqa: E402

SIZES = (100, 1024, 64 * 1024)
PRODUCERS = (1, 8)
EVENTS = {100: 300_000, 1024: 200_000, 64 * 1024: 6_000}  # per producer with 1; 8-producer runs use 1/4 each
PRAVEGA_EVENTS = 40_000
LATENCY_RATE, LATENCY_SECONDS = 1000, 10
BACKLOG_BYTES = 1024 * 1024 * 1024
BARS = {("sdk", "redis", 1024, 1): 2.0, ("sdk", "pravega", 1024, 1): 5.0, ("sdk", "redis", 1024, 8): 1.5,
        ("sdk", "redis", 100, 8): 1.0, ("sdk", "redis", 64 * 1024, 8): 1.0,
        ("compat", "pravega", 1024, 1): 5.0, ("compat", "pravega", 1024, 8): 5.0}
BINDING_KINDS = {"pravega": "pravega_client", "compat": "tributary.compat.pravega_client"}  # module per kind
LATENCY_P99_BAR_MS = 1.0
BACKLOG_BAR = 1.0


# ---------------------------------------------------------------------- child roles (SDK)


def _run(coroutine):
    import uvloop

    return uvloop.run(coroutine)


def role_sdk_producer(uri: str, stream: str, size: int, count: int, start_at: float) -> dict:
    import clients

    async def produce() -> dict:
        async with clients.connect(uri) as client:
            writer = client.create_writer("bench", stream)
            await writer.start()
            payload = b"x" * size
            await asyncio.sleep(max(0.0, start_at - time.time()))
            started, cpu_started = time.time(), time.process_time()
            write = writer.write
            for _ in range(count):
                await write(payload)
            await writer.flush()
            result = {"start": started, "end": time.time(), "cpu": time.process_time() - cpu_started}
            await writer.close()
            return result

    return _run(produce())


def role_sdk_latency_writer(uri: str, stream: str, rate: int, seconds: float) -> dict:
    import clients

    async def write() -> dict:
        async with clients.connect(uri) as client, client.create_writer("bench", stream) as writer:
            filler = b"x" * 1000
            count = int(rate * seconds)
            started = time.monotonic()
            for number in range(count):
                await asyncio.sleep(max(0.0, started + number / rate - time.monotonic()))
                await writer.write(b"%020d" % time.time_ns() + filler)
        return {"written": count}

    return _run(write())


def role_sdk_latency_reader(uri: str, stream: str, count: int, ready_file: str) -> dict:
    import clients

    async def read() -> dict:
        async with clients.connect(uri) as client:
            group = await client.create_reader_group("bench", "latency", [stream], start_at="tail")
            latencies: list[float] = []
            async with group.create_reader("reader") as reader:
                pathlib.Path(ready_file).touch()
                deadline = time.monotonic() + LATENCY_SECONDS * 3 + 30
                while len(latencies) < count and time.monotonic() < deadline:
                    event = await reader.read_next(1.0)
                    if event is not None:
                        latencies.append((time.time_ns() - int(event.data[:20])) / 1e6)
        return {"latencies_ms": latencies}

    return _run(read())


def role_sdk_backlog_reader(uri: str, stream: str) -> dict:
    import clients

    async def read() -> dict:
        async with clients.connect(uri) as client:
            end = await client.tail_cut("bench", stream)
            group = await client.create_reader_group("bench", "backlog", [stream], end_cuts=[end])
            started, cpu_started = time.time(), time.process_time()
            count = size = 0
            async with group.create_reader("reader") as reader:
                async for event in reader:
                    count += 1
                    size += len(event.data)
            return {"start": started, "end": time.time(), "cpu": time.process_time() - cpu_started,
                    "events": count, "bytes": size}

    return _run(read())


ROLES = {name[len("role_"):]: function for name, function in globals().items() if name.startswith("role_")}


class Child(bench_e2e.Child):
    """A role of this file (SDK) in its own process; bench_e2e.Child runs Redis and pravega roles."""

    def __init__(self, role: str, scratch: pathlib.Path, **arguments):
        self.log = scratch / f"{role}-{time.monotonic_ns()}.log"
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen([sys.executable, __file__, "--role", role, json.dumps(arguments)],
                                            stdout=sink, stderr=subprocess.STDOUT)


def run_role() -> None:
    role, arguments = sys.argv[2], json.loads(sys.argv[3])
    result = ROLES[role](**arguments)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------- measuring


def throughput(kind: str, scratch: pathlib.Path, producers: int, size: int, count: int, target: dict,
               server_pid: int) -> dict:
    if kind == "sdk":
        return bench_e2e.throughput("sdk_producer", scratch, producers, size, count, target, server_pid, Child)
    if kind == "redis":
        return bench_e2e.throughput("redis_producer", scratch, producers, size, count, target, server_pid)
    return bench_e2e.throughput("pravega_producer", scratch, producers, size, count,
                                {**target, "module": BINDING_KINDS[kind]}, server_pid)


def measure_latency(scratch: pathlib.Path, uri: str) -> list[float]:
    count = LATENCY_RATE * LATENCY_SECONDS
    ready = scratch / "latency.ready"
    reader = Child("sdk_latency_reader", scratch, uri=uri, stream="latency", count=count, ready_file=str(ready))
    deadline = time.monotonic() + 60
    while not ready.exists():
        if reader.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the latency reader did not start:\n{reader.log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)
    time.sleep(0.5)
    Child("sdk_latency_writer", scratch, uri=uri, stream="latency", rate=LATENCY_RATE,
          seconds=LATENCY_SECONDS).result()
    return reader.result()["latencies_ms"]


def measure_backlog(scratch: pathlib.Path, uri: str, server_pid: int) -> dict:
    count = BACKLOG_BYTES // 1024
    write = throughput("sdk", scratch, 1, 1024, count, {"uri": uri, "stream": "backlog"}, server_pid)
    read = Child("sdk_backlog_reader", scratch, uri=uri, stream="backlog").result(1800)
    assert read["events"] == count, read
    read_rate = read["events"] / (read["end"] - read["start"])
    return {"write_rate": write["rate"], "read_rate": read_rate, "read_client_us": 1e6 * read["cpu"] / count,
            "read_mb_s": read["bytes"] / (read["end"] - read["start"]) / 1e6}


def create_streams(uri: str, names: list[str], segments: int) -> None:
    import clients

    async def create() -> None:
        async with clients.connect(uri) as client:
            await client.create_scope("bench")
            for name in names:
                await client.create_stream("bench", name, clients.StreamConfiguration(
                    clients.ScalingPolicy.fixed(segments)))

    asyncio.run(create())


def summary(values: list[float]) -> str:
    return f"{min(values):5.2f} {statistics.median(values):5.2f} {max(values):5.2f}"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        run_role()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="repetitions of the throughput matrix")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every event count")
    parser.add_argument("--skip-backlog", action="store_true", help="skip the 1 GiB backlog read")
    parser.add_argument("--skip-throughput", action="store_true", help="skip the throughput matrix")
    parser.add_argument("--skip-latency", action="store_true", help="skip the end-to-end latency")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="event sizes of the matrix")
    parser.add_argument("--clients", default="sdk,pravega,compat",
                        help="clients of the matrix (Redis always runs: every row is a ratio to it)")
    arguments = parser.parse_args()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench-sdk-"))
    standalone, controller_port = bench_e2e.start_standalone(scratch)
    redis, redis_port = bench_e2e.start_redis(scratch)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    uri = f"tcp://127.0.0.1:{controller_port}"
    measured: dict[tuple, list[dict]] = {}
    redis_measured: dict[tuple, list[dict]] = {}
    try:
        sizes = [int(size) for size in arguments.sizes.split(",")]
        names = [f"{kind}-{size}-{producers}-{run}" for run in range(arguments.runs)
                 for kind in ("sdk", *BINDING_KINDS) for size in sizes for producers in PRODUCERS] + [
                     "latency", "backlog"]
        create_streams(uri, names, 8)
        for run in range(0 if arguments.skip_throughput else arguments.runs):
            for size in sizes:
                for producers in PRODUCERS:
                    divisor = 4 if producers > 1 else 1
                    count = max(1, int(EVENTS[size] * arguments.scale / divisor))
                    theirs = throughput("redis", scratch, producers, size, count,
                                        {"port": redis_port, "stream": f"r-{size}-{producers}-{run}"}, redis.pid)
                    redis_measured.setdefault((size, producers), []).append(theirs)
                    kinds = ("sdk", *BINDING_KINDS) if size == 1024 else ("sdk",)
                    for kind in (kind for kind in kinds if kind in arguments.clients.split(",")):
                        events = count if kind != "pravega" else max(1, int(PRAVEGA_EVENTS * arguments.scale / divisor))
                        figure = throughput(kind, scratch, producers, size, events,
                                            {"uri": uri, "stream": f"{kind}-{size}-{producers}-{run}"},
                                            standalone.pid)
                        measured.setdefault((kind, size, producers), []).append(figure)
                        print(f"  run {run} {kind:>7} {size:>6} B x {producers}: {figure['rate']:>10,.0f} ev/s "
                              f"(redis {theirs['rate']:>10,.0f})", file=sys.stderr)
        latency = None if arguments.skip_latency else measure_latency(scratch, uri)
        backlog = None if arguments.skip_backlog else measure_backlog(scratch, uri, standalone.pid)
    finally:
        for process in (standalone, redis):
            os.kill(process.pid, signal.SIGTERM)
            process.wait(30)
        shutil.rmtree(scratch, ignore_errors=True)
    return report(measured, redis_measured, latency, backlog)


def report_latency(latency: list[float]) -> list[str]:
    p99 = percentile(latency, 0.99)
    print(f"\nend-to-end latency (SDK writer -> SDK tail reader), {LATENCY_RATE} events/s of 1 KiB, ms: "
          f"events {len(latency)}, p50 {statistics.median(latency):.2f}, p99 {p99:.2f}, "
          f"p99.9 {percentile(latency, 0.999):.2f}, max {max(latency):.2f} "
          f"({'ok' if p99 <= LATENCY_P99_BAR_MS else 'MISS'} p99 <= {LATENCY_P99_BAR_MS} ms)")
    return [f"latency p99 {p99:.2f} ms"] if p99 > LATENCY_P99_BAR_MS else []


def report(measured: dict, redis_measured: dict, latency: list[float] | None, backlog: dict | None) -> int:
    missed = []
    print("\nacknowledged events/s; ratios min / median / max over runs (each run measured side by side)")
    print(f"{'client':>8} {'event':>7} {'prod':>4} {'median ev/s':>12} {'vs redis':>18} {'vs pravega':>18} "
          f"{'cli us':>7} {'srv us':>7} {'bar':>16}")
    for (kind, size, producers), figures in sorted(measured.items()):
        redis_figures = redis_measured[(size, producers)]
        versus_redis = [ours["rate"] / theirs["rate"] for ours, theirs in zip(figures, redis_figures)]
        pravega = measured.get(("pravega", size, producers))
        versus_pravega = ([ours["rate"] / theirs["rate"] for ours, theirs in zip(figures, pravega)]
                          if pravega and kind != "pravega" else None)
        verdicts = []
        for against, ratios in (("redis", versus_redis), ("pravega", versus_pravega)):
            bar = BARS.get((kind, against, size, producers))
            if bar is not None and ratios:
                ok = statistics.median(ratios) >= bar
                verdicts.append(f"{'ok' if ok else 'MISS'} {against[0]}>={bar:g}x")
                if not ok:
                    missed.append(f"{kind} {size} B x {producers} vs {against}: median {statistics.median(ratios):.2f}x")
        print(f"{kind:>8} {size:>6}B {producers:>4} {statistics.median(f['rate'] for f in figures):>12,.0f} "
              f"{summary(versus_redis):>18} {summary(versus_pravega) if versus_pravega else '':>18} "
              f"{statistics.median(f['client_us'] for f in figures):>7.1f} "
              f"{statistics.median(f['server_us'] for f in figures):>7.1f} {' '.join(verdicts):>16}")
    for (size, producers), figures in sorted(redis_measured.items()):
        print(f"{'redis':>8} {size:>6}B {producers:>4} {statistics.median(f['rate'] for f in figures):>12,.0f}"
              f" {'':>18} {'':>18} {statistics.median(f['client_us'] for f in figures):>7.1f}"
              f" {statistics.median(f['server_us'] for f in figures):>7.1f}")
    if latency is not None:
        missed += report_latency(latency)
    if backlog is not None:
        ratio = backlog["read_rate"] / backlog["write_rate"]
        print(f"\n1 GiB backlog of 1 KiB events: written at {backlog['write_rate']:,.0f} ev/s by one producer, "
              f"read at {backlog['read_rate']:,.0f} ev/s ({backlog['read_mb_s']:.0f} MB/s, "
              f"{backlog['read_client_us']:.2f} us/event) by one reader: {ratio:.2f}x "
              f"({'ok' if ratio >= BACKLOG_BAR else 'MISS'} >= {BACKLOG_BAR:g}x)")
        if ratio < BACKLOG_BAR:
            missed.append(f"backlog read {ratio:.2f}x")
    if missed:
        print("\nbars missed: " + "; ".join(missed))
        return 1
    print("\nevery bar met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
