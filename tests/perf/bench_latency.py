"""Latency against load, the way the OpenMessaging Benchmark reports streaming systems: write-ack and
end-to-end latency of 1 KiB events over a 10-segment stream at a ladder of offered rates, for Tributary
on its local Tier-1 log, Tributary on the replicated log, and Redis Streams (`appendfsync always`),
all measured in the same run on this machine; a PNG of p99 against throughput.

Usage: python tests/perf/bench_latency.py [--runs 3] [--seconds 10] [--systems local,redis,replicated]
                                          [--plot docs/latency-vs-throughput.png] [--output results.json]

How one system is measured (one run):

* The server starts on a fresh data directory: `tributary standalone` (local Tier-1, filesystem
  Tier-2); for `replicated`, a ZooKeeper, three `tributary logstore` processes and the standalone with
  `--tier1 replicated` (3/3/2); for `redis`, Debian's redis-server with `--appendonly yes --appendfsync
  always`. Tributary gets one stream of 10 fixed segments; Redis one stream key (XADD MAXLEN ~ 1M).
* ``--producers`` producer processes and one consumer process, started once and kept for every step.
  A Tributary producer is an SDK event writer (no routing key: each event goes to a random segment); a
  consumer is a reader group of ``--readers`` SDK readers at the stream's tail. A Redis producer pipelines
  XADD on its connection, the consumer loops on XREAD BLOCK.
* Warm-up: 1,000 events/s for ``--warmup`` seconds, not recorded (the segments' Tier-2 chunks get made).
* Before each step the system goes quiet (for a whole second the disk writes less than 2 MB/s and the
  servers' processes use less than 10% of a core; at most 120 s): the maximum leaves Tributary's Tier-2 a
  gigabyte to flush and Redis an append-only file to rewrite, and a step measured during that measures the
  previous one. Scratch directories are deleted at the end, not between systems (deleting gigabytes on a
  disk mounted with ``discard`` slows every sync for a while).
* The maximum: every producer writes flat out for ``--seconds``; the achieved rate is the maximum.
* Then the offered rates, each for ``--seconds``: 1k, 10k, 50k, 100k, 200k events/s (those below the
  maximum) and 50% and 80% of the maximum. Producers pace with a clock (the events due at each wake-up
  are written together; a producer that falls behind does not catch up, so a shortfall shows in the
  achieved rate). Redis gets the same offered rates as Tributary on the local log, plus its own maximum.
* Write-ack latency: from the ``write`` call (XADD sent) to its acknowledgement (the event durable), every
  event. End-to-end: from the send time stamped in the event to the consumer holding it. HdrHistograms of
  microseconds; p50, p95, p99, p99.9 and max per step.

Bars (issue 27), judged on the median of ``--runs`` runs:
* local, 1,000 events/s: end-to-end p99 <= 2 ms and max <= 10 ms;
* local, every offered rate up to 50% of the maximum: write-ack p99 <= 5 ms; up to 80%: <= 10 ms; and at
  each of those rates, write-ack p99 <= Redis's write-ack p99 at the same offered rate;
* replicated, 1,000 events/s: write-ack p99 <= 3 ms.
Exits 1 when a bar misses.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.perf.bars import Bars  # noqa: E402
from tests.perf.bench_e2e import process_cpu_seconds, read_resp, resp, start_redis, start_standalone  # noqa: E402 - RESP, and the servers, come from there

EVENT_SIZE = 1024
SEGMENTS = 10
FIXED_RATES = (1_000, 10_000, 50_000, 100_000, 200_000)
FRACTIONS_OF_MAX = (0.5, 0.8)
WARMUP_RATE = 1_000
SYSTEMS = ("local", "redis", "replicated")
PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p99.9", 99.9))
HEADER = struct.Struct(">qI")  # send time (ns since the epoch), step number
REDIS_STREAM = b"latency"
REDIS_MAXLEN = b"1000000"
HISTOGRAM_RANGE_US = (1, 3_600_000_000)


def new_histogram():
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(*HISTOGRAM_RANGE_US, 3)


def event(step: int, filler: bytes) -> bytes:
    return HEADER.pack(time.time_ns(), step) + filler


# ---------------------------------------------------------------------- children: producers and consumers
#
# A child reads one JSON command per line on stdin and answers one JSON line on stdout.
# Producer commands: {"step", "rate" (0: flat out), "seconds", "start_at" (wall clock)} -> the step's result.
# Consumer: started with the stream; prints {"ready": true} once reading, then on {"expect": {step: count}}
# reads until it has every event and answers {step: {"events", "e2e"}}; histograms are hdrh's encoding.


class Pacer:
    """Paces ``rate`` events/s from ``start`` (``rate`` 0: batches, flat out). ``due()`` is how many events are
    due now; a producer more than ``CATCH_UP`` seconds behind skips the excess (missed time is not made up)."""

    BATCH = 64
    CATCH_UP = 0.1
    TICK = 0.001

    def __init__(self, rate: float, start: float):
        self.rate, self.start, self.sent, self.scheduled = rate, start, 0, 0

    def due(self) -> int:
        if not self.rate:
            return self.BATCH
        due = int((time.monotonic() - self.start) * self.rate) + 1 - self.scheduled
        most = max(1, int(self.rate * self.CATCH_UP))
        if due > most:
            self.scheduled += due - most
            due = most
        return max(0, due)

    def sent_now(self, count: int) -> None:
        self.sent += count
        self.scheduled += count

    async def wait(self) -> None:
        if self.rate:  # at least a tick of the loop's timer (1 ms): a shorter sleep would spin
            delay = self.start + self.scheduled / self.rate - time.monotonic()
            await asyncio.sleep(max(delay, self.TICK) if delay > 0 else 0)
        else:
            await asyncio.sleep(0)


async def paced_step(command: dict, write_batch: Callable, settle: Callable) -> dict:
    """Runs one producer step: waits for ``start_at``, writes what is due until ``seconds`` passed."""
    histogram = new_histogram()
    await asyncio.sleep(max(0.0, command["start_at"] - time.time()))
    started_wall, started = time.time(), time.monotonic()
    pacer, stop = Pacer(command["rate"], started), started + command["seconds"]
    while time.monotonic() < stop:
        count = pacer.due()
        if count:
            await write_batch(count, command["step"], histogram)
            pacer.sent_now(count)
        await pacer.wait()
    ended_wall = time.time()
    await settle()
    return {"events": pacer.sent, "start": started_wall, "end": ended_wall,
            "ack": histogram.encode().decode()}


async def serve_commands(step: Callable) -> None:
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        result = await step(json.loads(line))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


async def sdk_producer(uri: str) -> None:
    import clients

    filler = b"x" * (EVENT_SIZE - HEADER.size)
    async with clients.connect(uri) as client, client.create_writer("bench", "latency") as writer:
        trackers: set[asyncio.Task] = set()
        waiting: dict[int, list[int]] = {}

        async def track(ack, sent: list[int], histogram) -> None:
            await ack
            now = time.perf_counter_ns()
            del waiting[id(ack)]
            for started in sent:
                histogram.record_value(max(1, (now - started) // 1000))

        async def write_batch(count: int, step: int, histogram) -> None:
            write = writer.write
            for _ in range(count):
                started = time.perf_counter_ns()
                ack = await write(event(step, filler))
                sent = waiting.get(id(ack))
                if sent is None:
                    sent = waiting[id(ack)] = [started]
                    task = asyncio.ensure_future(track(ack, sent, histogram))
                    trackers.add(task)
                    task.add_done_callback(trackers.discard)
                else:
                    sent.append(started)

        async def settle() -> None:
            await writer.flush()
            await asyncio.gather(*trackers)

        await serve_commands(lambda command: paced_step(command, write_batch, settle))


async def redis_producer(port: int) -> None:
    filler = b"x" * (EVENT_SIZE - HEADER.size)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent: collections.deque[tuple[int, object]] = collections.deque()
    replies_done = asyncio.Event()

    async def read_replies() -> None:
        while line := await reader.readline():
            if line[:1] == b"$":  # the entry id follows
                await reader.readline()
            elif line[:1] == b"-":
                raise RuntimeError(f"redis refused XADD: {line!r}")
            started, histogram = sent.popleft()
            histogram.record_value(max(1, (time.perf_counter_ns() - started) // 1000))
            if not sent:
                replies_done.set()

    replies = asyncio.ensure_future(read_replies())

    async def write_batch(count: int, step: int, histogram) -> None:
        commands = []
        for _ in range(count):
            sent.append((time.perf_counter_ns(), histogram))
            commands.append(resp(b"XADD", REDIS_STREAM, b"MAXLEN", b"~", REDIS_MAXLEN, b"*", b"d",
                                 event(step, filler)))
        replies_done.clear()
        writer.write(b"".join(commands))
        await writer.drain()

    async def settle() -> None:
        if sent:
            await asyncio.wait([asyncio.ensure_future(replies_done.wait()), replies], return_when="FIRST_COMPLETED")
        if replies.done():
            replies.result()

    await serve_commands(lambda command: paced_step(command, write_batch, settle))


class Arrivals:
    """The consumer's per-step counts and end-to-end histograms."""

    def __init__(self) -> None:
        self.counts: collections.Counter[int] = collections.Counter()
        self.histograms: dict[int, object] = {}

    def record(self, data: bytes) -> None:
        sent, step = HEADER.unpack_from(data)
        histogram = self.histograms.get(step)
        if histogram is None:
            histogram = self.histograms[step] = new_histogram()
        histogram.record_value(max(1, (time.time_ns() - sent) // 1000))
        self.counts[step] += 1

    def complete(self, expected: dict[int, int]) -> bool:
        return all(self.counts[step] >= count for step, count in expected.items())

    def take(self, expected: dict[int, int]) -> dict:
        return {step: {"events": self.counts.pop(step, 0),
                       "e2e": self.histograms.pop(step).encode().decode() if step in self.histograms else None}
                for step in expected}


async def consume(arrivals: Arrivals, read_forever: Callable) -> None:
    """Reads (``read_forever``) beside the command loop; answers each ``expect`` once its events came."""
    reading = asyncio.ensure_future(read_forever())
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()

    async def step(command: dict) -> dict:
        expected = {int(step): count for step, count in command["expect"].items()}
        deadline = time.monotonic() + command.get("timeout", 120)
        while not arrivals.complete(expected) and time.monotonic() < deadline and not reading.done():
            await asyncio.sleep(0.05)
        if reading.done():
            reading.result()
        return arrivals.take(expected)

    await serve_commands(step)


async def sdk_consumer(uri: str, readers: int) -> None:
    import clients

    arrivals = Arrivals()
    async with clients.connect(uri) as client:
        group = await client.create_reader_group("bench", "latency", ["latency"], start_at="tail")

        async def read_one(name: str) -> None:
            async with group.create_reader(name) as reader:
                record = arrivals.record
                while True:
                    read = await reader.read_next(1.0)
                    if read is not None:
                        record(read.data)

        async def read_forever() -> None:
            await asyncio.gather(*(read_one(f"reader-{number}") for number in range(readers)))

        await consume(arrivals, read_forever)


async def redis_consumer(port: int) -> None:
    arrivals = Arrivals()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def read_forever() -> None:
        last = b"$"
        while True:
            writer.write(resp(b"XREAD", b"COUNT", b"10000", b"BLOCK", b"1000", b"STREAMS", REDIS_STREAM, last))
            await writer.drain()
            reply = await read_resp(reader)
            for entry_id, fields in (reply[0][1] if reply else ()):
                arrivals.record(fields[1])
                last = entry_id

    await consume(arrivals, read_forever)


CHILDREN = {"sdk_producer": sdk_producer, "sdk_consumer": sdk_consumer, "redis_producer": redis_producer,
            "redis_consumer": redis_consumer}


def child_main() -> None:
    import uvloop

    role, arguments = sys.argv[2], json.loads(sys.argv[3])
    try:
        uvloop.run(CHILDREN[role](**arguments))
    finally:
        sys.stdout.flush()
        os._exit(0)


class Child:
    """A producer or consumer process; ``ask`` sends one command and waits for its answer."""

    def __init__(self, role: str, scratch: pathlib.Path, **arguments):
        self.log = scratch / f"{role}-{time.monotonic_ns()}.log"
        self.process = subprocess.Popen([sys.executable, __file__, "--child", role, json.dumps(arguments)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log.open("wb"), text=True, cwd=ROOT)

    def send(self, command: dict) -> None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.log.name} ended:\n{self.log.read_text(errors='replace')[-3000:]}")
        return json.loads(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


# ---------------------------------------------------------------------- servers


class Servers:
    """The processes of one system under test; ``stop`` ends each by its PID."""

    def __init__(self, system: str, scratch: pathlib.Path):
        self.system, self.processes, self.zookeeper, self.log_stores = system, [], None, None
        if system == "redis":
            process, self.port = start_redis(scratch)
            self.processes.append(process)
            return
        extra: list[str] = []
        if system == "replicated":
            from tests.support.replicated_processes import LogStores
            from tests.support.zookeeper import ZooKeeperServer

            self.zookeeper = ZooKeeperServer(scratch / "zookeeper").start()
            self.log_stores = LogStores(scratch, self.zookeeper.connect_string, journal_mib=64).start()
            extra = self.log_stores.segment_store_args(10.0)
        process, controller_port = start_standalone(scratch, extra)
        self.processes.append(process)
        self.uri = f"tcp://127.0.0.1:{controller_port}"
        asyncio.run(self.create_stream())

    async def create_stream(self) -> None:
        import clients

        async with clients.connect(self.uri) as client:
            await client.create_scope("bench")
            await client.create_stream("bench", "latency",
                                       clients.StreamConfiguration(clients.ScalingPolicy.fixed(SEGMENTS)))

    def children(self, scratch: pathlib.Path, producers: int, readers: int) -> tuple[list[Child], Child]:
        if self.system == "redis":
            return ([Child("redis_producer", scratch, port=self.port) for _ in range(producers)],
                    Child("redis_consumer", scratch, port=self.port))
        return ([Child("sdk_producer", scratch, uri=self.uri) for _ in range(producers)],
                Child("sdk_consumer", scratch, uri=self.uri, readers=readers))

    def pids(self) -> list[int]:
        """The processes of the system under test (the servers, the log stores, ZooKeeper)."""
        pids = [process.pid for process in self.processes]
        for process in (*(self.log_stores.processes if self.log_stores else ()), self.zookeeper):
            if process is not None and process.process is not None:
                pids.append(process.process.pid)
        return pids

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()
        if self.log_stores is not None:
            self.log_stores.stop_all()
        if self.zookeeper is not None:
            self.zookeeper.stop()


# ---------------------------------------------------------------------- one system, one run


def distribution(histogram) -> dict:
    if histogram is None or histogram.get_total_count() == 0:
        return {}
    figures = {name: histogram.get_value_at_percentile(value) / 1000 for name, value in PERCENTILES}
    figures["max"] = histogram.get_max_value() / 1000
    return figures


def merged(encoded: list[str | None]):
    from hdrh.histogram import HdrHistogram

    total = new_histogram()
    for item in encoded:
        if item:
            total.add(HdrHistogram.decode(item.encode()))
    return total


class Quiet:
    """Waits for the system under test to go quiet: the disk holding ``directory`` (its
    /sys/dev/block/MAJOR:MINOR/stat) and the CPU time of the servers' processes."""

    DISK_BYTES_PER_SECOND = 2_000_000
    CPU_SHARE = 0.1
    WAIT_MAX = 120.0

    def __init__(self, directory: pathlib.Path, pids: list[int]):
        device = directory.stat().st_dev
        stat = pathlib.Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat")
        self.disk_stat = stat if stat.exists() else None
        self.pids = pids

    def _reading(self) -> tuple[int, float]:
        written = int(self.disk_stat.read_text().split()[6]) * 512 if self.disk_stat else 0
        cpu = 0.0
        for pid in self.pids:
            try:
                cpu += process_cpu_seconds(pid)
            except OSError:
                pass
        return written, cpu

    def wait(self) -> float:
        """Waits until one second passes with both below their bounds; returns the seconds waited."""
        started = time.monotonic()
        before = self._reading()
        while time.monotonic() - started < self.WAIT_MAX:
            time.sleep(1.0)
            now = self._reading()
            if now[0] - before[0] < self.DISK_BYTES_PER_SECOND and now[1] - before[1] < self.CPU_SHARE:
                break
            before = now
        return time.monotonic() - started


class Session:
    """Producers and a consumer of one system, driven step by step."""

    def __init__(self, servers: Servers, scratch: pathlib.Path, producers: int, readers: int, seconds: float):
        self.producers, self.consumer = servers.children(scratch, producers, readers)
        self.seconds, self.step_number, self.quiet = seconds, 0, Quiet(scratch, servers.pids())
        if self.consumer.answer() != {"ready": True}:
            raise RuntimeError("the consumer did not start")
        time.sleep(0.5)  # the group's readers take their segments

    def step(self, rate: float, seconds: float | None = None) -> dict:
        """Offers ``rate`` events/s in total (0: flat out) for ``seconds``; the step's figures."""
        self.step_number += 1
        seconds = seconds or self.seconds
        waited = self.quiet.wait()
        if waited > 5:
            print(f"  (waited {waited:.0f} s for the system to go quiet)", file=sys.stderr)
        start_at = time.time() + 0.3
        for producer in self.producers:
            producer.send({"step": self.step_number, "rate": rate / len(self.producers), "seconds": seconds,
                           "start_at": start_at})
        results = [producer.answer() for producer in self.producers]
        events = sum(result["events"] for result in results)
        elapsed = max(result["end"] for result in results) - min(result["start"] for result in results)
        self.consumer.send({"expect": {self.step_number: events}, "timeout": 60 + seconds})
        arrived = self.consumer.answer()[str(self.step_number)]
        if arrived["events"] < events:
            raise RuntimeError(f"step {self.step_number}: {events} events acknowledged, {arrived['events']} read")
        return {"offered": rate, "achieved": events / elapsed, "events": events,
                "ack": distribution(merged([result["ack"] for result in results])),
                "e2e": distribution(merged([arrived["e2e"]]))}

    def stop(self) -> None:
        for child in (*self.producers, self.consumer):
            child.stop()


def offered_rates(maximum: float) -> list[tuple[str, float]]:
    """The labelled offered rates below ``maximum``: the fixed ones and the fractions of it."""
    rates = [(f"{rate // 1000}k", float(rate)) for rate in FIXED_RATES if rate < maximum]
    rates += [(f"{fraction:.0%} of max", round(fraction * maximum, -2)) for fraction in FRACTIONS_OF_MAX]
    return sorted(rates, key=lambda item: item[1])


def measure_system(system: str, scratch: pathlib.Path, options, rates: list[tuple[str, float]] | None) -> dict:
    """One run of ``system``: its maximum, then each offered rate (its own ladder unless ``rates``)."""
    servers = Servers(system, scratch)
    session = None
    try:
        session = Session(servers, scratch, options.producers, options.readers, options.seconds)
        session.step(WARMUP_RATE, options.warmup)
        steps = {}
        if options.rates:
            ladder = [(f"{rate:,.0f}/s", rate) for rate in options.rates]
        else:
            steps["max"] = session.step(0)
            ladder = rates if rates is not None else offered_rates(steps["max"]["achieved"])
        for label, rate in ladder:
            steps[label] = session.step(rate)
            print(f"  {system:>10} {label:>11}: offered {rate:>9,.0f} achieved {steps[label]['achieved']:>9,.0f} "
                  f"ack p99 {steps[label]['ack'].get('p99', 0):7.2f} e2e p99 {steps[label]['e2e'].get('p99', 0):7.2f}"
                  " ms", file=sys.stderr)
        return {"steps": steps, "ladder": ladder}
    finally:
        if session is not None:
            session.stop()
        servers.stop()


def one_run(options, scratches: list[pathlib.Path]) -> dict:
    """Every system once; their scratch directories are added to ``scratches`` (deleted at the very end)."""
    results: dict[str, dict] = {}
    local_ladder = None
    for system in options.systems:
        scratch = pathlib.Path(tempfile.mkdtemp(prefix=f"lat-{system}-", dir=options.dir))
        scratches.append(scratch)
        ladder = local_ladder if system == "redis" else None
        results[system] = measure_system(system, scratch, options, ladder)
        if system == "local":
            local_ladder = results[system]["ladder"]
    return results


# ---------------------------------------------------------------------- report, bars, plot


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return "/".join(fmt.format(value) for value in (min(values), statistics.median(values), max(values)))


def labels_of(runs: list[dict], system: str) -> list[str]:
    labels: list[str] = []
    for run in runs:
        for label in run.get(system, {}).get("steps", {}):
            if label not in labels:
                labels.append(label)
    order = {label: step["offered"] or float("inf") for run in runs
             for label, step in run.get(system, {}).get("steps", {}).items()}
    return sorted(labels, key=lambda label: order[label])


def values(runs: list[dict], system: str, label: str, kind: str, figure: str) -> list[float]:
    found = []
    for run in runs:
        step = run.get(system, {}).get("steps", {}).get(label)
        if step is not None and figure in step[kind]:
            found.append(step[kind][figure])
    return found


def rates_of(runs: list[dict], system: str, label: str, key: str) -> list[float]:
    return [run[system]["steps"][label][key] for run in runs if label in run.get(system, {}).get("steps", {})]


def report(runs: list[dict]) -> None:
    print(f"\n1 KiB events, {SEGMENTS} segments; latencies in ms; each cell min/median/max over {len(runs)} run(s)")
    for system in SYSTEMS:
        if not any(system in run for run in runs):
            continue
        print(f"\n{system}:")
        print(f"  {'step':>11} {'offered ev/s':>14} {'achieved ev/s':>22} " + " ".join(
            f"{'ack ' + name:>17}" for name in ("p50", "p95", "p99", "p99.9", "max")) + " " + " ".join(
            f"{'e2e ' + name:>17}" for name in ("p50", "p99", "max")))
        for label in labels_of(runs, system):
            offered = statistics.median(rates_of(runs, system, label, "offered"))
            print(f"  {label:>11} {offered or 0:>14,.0f} "
                  f"{spread(rates_of(runs, system, label, 'achieved'), '{:,.0f}'):>22} "
                  + " ".join(f"{spread(values(runs, system, label, 'ack', name)):>17}"
                             for name in ("p50", "p95", "p99", "p99.9", "max")) + " "
                  + " ".join(f"{spread(values(runs, system, label, 'e2e', name)):>17}"
                             for name in ("p50", "p99", "max")))


def median_of(runs: list[dict], system: str, label: str, kind: str, figure: str) -> float | None:
    found = values(runs, system, label, kind, figure)
    return statistics.median(found) if found else None


def judge(runs: list[dict]) -> Bars:
    bars = Bars()
    if any("local" in run for run in runs):
        p99, worst = median_of(runs, "local", "1k", "e2e", "p99"), median_of(runs, "local", "1k", "e2e", "max")
        bars.check("local, 1,000 events/s: end-to-end p99 <= 2 ms", p99 is not None and p99 <= 2.0, f"{p99} ms")
        bars.check("local, 1,000 events/s: end-to-end max <= 10 ms", worst is not None and worst <= 10.0,
                   f"{worst} ms")
        maximum = statistics.median(rates_of(runs, "local", "max", "achieved"))
        for label in labels_of(runs, "local"):
            offered = statistics.median(rates_of(runs, "local", label, "offered"))
            if not offered or offered > 0.8 * maximum:
                continue
            limit = 5.0 if offered <= 0.5 * maximum else 10.0
            p99 = median_of(runs, "local", label, "ack", "p99")
            bars.check(f"local, {label} ({offered:,.0f} events/s): write-ack p99 <= {limit:g} ms",
                       p99 is not None and p99 <= limit, f"{p99} ms")
            theirs = median_of(runs, "redis", label, "ack", "p99")
            if theirs is not None:
                bars.check(f"local, {label}: write-ack p99 <= Redis's p99", p99 is not None and p99 <= theirs,
                           f"{p99} vs {theirs} ms")
    if any("replicated" in run for run in runs):
        p99 = median_of(runs, "replicated", "1k", "ack", "p99")
        bars.check("replicated, 1,000 events/s: write-ack p99 <= 3 ms", p99 is not None and p99 <= 3.0, f"{p99} ms")
    return bars


def plot(runs: list[dict], path: pathlib.Path, machine: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 5), dpi=120)
    styles = {"local": ("tab:blue", "Tributary, local Tier-1"),
              "replicated": ("tab:green", "Tributary, replicated 3/3/2"),
              "redis": ("tab:red", "Redis Streams, appendfsync always")}
    for system, (colour, name) in styles.items():
        labels = [label for label in labels_of(runs, system) if values(runs, system, label, "ack", "p99")]
        if not labels:
            continue
        throughput = [statistics.median(rates_of(runs, system, label, "achieved")) for label in labels]
        for kind, line in (("ack", "-o"), ("e2e", "--x")):
            p99 = [median_of(runs, system, label, kind, "p99") or float("nan") for label in labels]
            axes.plot(throughput, p99, line, color=colour,
                      label=f"{name}: {'write-ack' if kind == 'ack' else 'end-to-end'} p99")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("throughput (1 KiB events/s, achieved)")
    axes.set_ylabel("p99 latency (ms)")
    axes.set_title(f"p99 latency against throughput (median of {len(runs)} run(s))\n{machine}", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    print(f"plot written to {path}", file=sys.stderr)


def machine_line() -> str:
    model = next((line.split(":", 1)[1].strip() for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    memory = int(pathlib.Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return f"{os.cpu_count()} cores ({model}), {memory:.0f} GiB"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each step")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds at 1,000 events/s before measuring")
    parser.add_argument("--producers", type=int, default=2, help="producer processes")
    parser.add_argument("--readers", type=int, default=1, help="SDK readers in the consumer process")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        type=lambda text: [name for name in SYSTEMS if name in text.split(",")],
                        help="which of local, redis, replicated (comma-separated)")
    parser.add_argument("--rates", type=lambda text: [float(rate) for rate in text.split(",")],
                        help="only these offered rates (comma-separated events/s), no maximum and no bars")
    parser.add_argument("--plot", type=pathlib.Path, help="write the p99-against-throughput PNG there")
    parser.add_argument("--output", type=pathlib.Path, help="write every run's figures there (JSON)")
    parser.add_argument("--from-results", type=pathlib.Path, help="report and plot a previous --output instead")
    parser.add_argument("--dir", type=pathlib.Path, default=ROOT / ".bench", help="scratch directory")
    options = parser.parse_args()
    machine = machine_line()
    if options.from_results:
        saved = json.loads(options.from_results.read_text())
        runs, machine = saved["runs"], saved["machine"]
    else:
        options.dir.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        runs, scratches = [], []
        try:
            for number in range(options.runs):
                runs.append(one_run(options, scratches))
                print(f"run {number + 1} of {options.runs} done", file=sys.stderr)
                if options.output:
                    options.output.write_text(json.dumps({"machine": machine, "runs": runs}, indent=1))
        finally:
            for scratch in scratches:
                shutil.rmtree(scratch, ignore_errors=True)
    print(f"machine: {machine}")
    report(runs)
    if options.plot:
        plot(runs, options.plot, machine)
    print()
    if not any("max" in system.get("steps", {}) for run in runs for system in run.values()):
        print("no maximum measured (--rates): no bars judged")
        return 0
    return judge(runs).exit_code()


if __name__ == "__main__":
    sys.exit(main())
