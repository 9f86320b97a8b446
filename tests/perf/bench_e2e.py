"""End-to-end benchmark: `tributary standalone` driven by the real pravega client, against
Debian's redis-server (append-only file, fsync on every write) driven with pipelined XADD.

Run by hand:  .venv/bin/python tests/perf/bench_e2e.py [--scale 0.5]

What is measured, per system, in the same run:

* throughput of *acknowledged* events: event sizes 100 B, 1 KiB, 64 KiB with 1 and 8 producers.
  Each producer is its own process (the pravega binding holds the GIL while it blocks). A
  Tributary producer writes with ``write_event_async`` in windows of WINDOW events and awaits
  each window (every event acknowledged), then ``flush``; a Redis producer pipelines WINDOW XADDs
  over raw RESP and reads their replies. Producers start together; events/s = all events / the
  time until the last producer is done.
* end-to-end latency: 1,000 events/s of 1 KiB from one producer to one tail reader (the
  producer stamps each event with its send time; both run on this host), p50/p99/p99.9.
* the pravega client's own ceiling: the same 1 KiB x 1 producer run against a trivial sink that
  acknowledges every append at once without storing it (and the minimal test controller), to
  tell client cost from server cost.

redis-server is installed with apt-get if it is missing; it runs on a temporary dir with
``--appendonly yes --appendfsync always --save ''`` on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import pathlib
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.perf.bars import percentile  # noqa: E402

WINDOW = 256  # events in flight per producer (one RESP pipeline / one await window)
SIZES = (100, 1024, 64 * 1024)
PRODUCERS = (1, 8)
EVENTS_BY_SIZE = {100: 60_000, 1024: 40_000, 64 * 1024: 2_000}  # per producer; 8-producer runs use 1/4
LATENCY_RATE = 1000
LATENCY_SECONDS = 10
BARS = {(1024, 1): 2.0, (1024, 8): 1.0, (64 * 1024, 8): 1.0}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")



# ---------------------------------------------------------------------- child roles


def role_pravega_producer(uri: str, stream: str, size: int, count: int, start_at: float,
                          module: str = "pravega_client") -> dict:
    """The binding's writer (``module`` names a module with its API: tributary.compat.pravega_client)."""
    pravega_client = importlib.import_module(module)
    manager = pravega_client.StreamManager(uri, False, False)
    writer = manager.create_writer("bench", stream)
    payload = "x" * size  # the binding's async write takes text (sent as UTF-8: ASCII keeps the size)
    time.sleep(max(0.0, start_at - time.time()))
    started, cpu_started = time.time(), time.process_time()

    async def write() -> None:
        for first in range(0, count, WINDOW):
            futures = [writer.write_event_async(payload) for _ in range(min(WINDOW, count - first))]
            for future in futures:
                await future

    asyncio.run(write())
    writer.flush()
    return {"start": started, "end": time.time(), "cpu": time.process_time() - cpu_started}


def role_redis_producer(port: int, stream: str, size: int, count: int, start_at: float) -> dict:
    payload = b"x" * size

    async def run() -> dict:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        command = resp(b"XADD", stream.encode(), b"*", b"d", payload)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        started, cpu_started = time.time(), time.process_time()
        for first in range(0, count, WINDOW):
            batch = min(WINDOW, count - first)
            writer.write(command * batch)
            await writer.drain()
            for _ in range(batch):
                line = await reader.readline()
                if not line.startswith(b"$"):
                    raise RuntimeError(f"XADD failed: {line!r}")
                await reader.readexactly(int(line[1:]) + 2)
        writer.close()
        return {"start": started, "end": time.time(), "cpu": time.process_time() - cpu_started}

    return asyncio.run(run())


def role_pravega_latency_writer(uri: str, stream: str, rate: int, seconds: float) -> dict:
    import pravega_client

    manager = pravega_client.StreamManager(uri, False, False)  # keep it: it owns the client's runtime
    writer = manager.create_writer("bench", stream)
    filler = b"x" * 1000
    count = int(rate * seconds)
    started = time.monotonic()
    for number in range(count):
        time.sleep(max(0.0, started + number / rate - time.monotonic()))
        writer.write_event_bytes(b"%020d" % time.time_ns() + filler)
    writer.flush()
    return {"written": count}


def role_pravega_latency_reader(uri: str, stream: str, count: int, ready_file: str) -> dict:
    import pravega_client

    manager = pravega_client.StreamManager(uri, False, False)  # keep it: it owns the client's runtime
    group = manager.create_reader_group("latency", "bench", stream)
    reader = group.create_reader("reader")
    pathlib.Path(ready_file).touch()
    latencies: list[float] = []

    async def read() -> None:
        deadline = time.monotonic() + LATENCY_SECONDS * 3 + 30
        while len(latencies) < count and time.monotonic() < deadline:
            segment_slice = await reader.get_segment_slice_async()
            for event in segment_slice:
                latencies.append((time.time_ns() - int(event.data()[:20])) / 1e6)
            reader.release_segment(segment_slice)

    asyncio.run(read())
    return {"latencies_ms": latencies}


def run_role() -> None:
    roles = {"pravega_producer": role_pravega_producer, "redis_producer": role_redis_producer, "sink": role_sink,
             "pravega_latency_writer": role_pravega_latency_writer,
             "pravega_latency_reader": role_pravega_latency_reader}
    role, arguments = sys.argv[2], json.loads(sys.argv[3])
    result = roles[role](**arguments)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip the binding's runtime teardown


class Child:
    def __init__(self, role: str, scratch: pathlib.Path, **arguments):
        self.log = scratch / f"{role}-{time.monotonic_ns()}.log"
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen([sys.executable, __file__, "--role", role, json.dumps(arguments)],
                                            stdout=sink, stderr=subprocess.STDOUT)

    def result(self, timeout: float = 600) -> dict:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for line in reversed(self.log.read_text(errors="replace").splitlines()):
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        raise RuntimeError(f"{self.log} has no result:\n{self.log.read_text(errors='replace')[-3000:]}")


# ---------------------------------------------------------------------- RESP


def resp(*parts: bytes) -> bytes:
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


async def redis_call(reader, writer, *parts: bytes) -> bytes:
    writer.write(resp(*parts))
    await writer.drain()
    return await reader.readline()


async def redis_latency(port: int, rate: int, seconds: float) -> list[float]:
    """XADD at ``rate``/s on one connection, XREAD BLOCK on another; latency of every event in ms."""
    count = int(rate * seconds)
    read_reader, read_writer = await asyncio.open_connection("127.0.0.1", port)
    write_reader, write_writer = await asyncio.open_connection("127.0.0.1", port)
    latencies: list[float] = []

    async def consume() -> None:
        last = b"$"
        while len(latencies) < count:
            read_writer.write(resp(b"XREAD", b"BLOCK", b"0", b"STREAMS", b"latency", last))
            await read_writer.drain()
            reply = await read_resp(read_reader)
            now = time.time_ns()
            for entry_id, fields in reply[0][1]:
                latencies.append((now - int(fields[1][:20])) / 1e6)
                last = entry_id

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    started = time.monotonic()
    filler = b"x" * 1000
    for number in range(count):
        await asyncio.sleep(max(0.0, started + number / rate - time.monotonic()))
        write_writer.write(resp(b"XADD", b"latency", b"*", b"d", b"%020d" % time.time_ns() + filler))
        await write_writer.drain()
        await write_reader.readline()
        await write_reader.readline()
    await asyncio.wait_for(consumer, 30)
    read_writer.close()
    write_writer.close()
    return latencies


async def read_resp(reader):
    """One RESP reply: arrays as lists, bulk strings as bytes, nil (a timed-out XREAD BLOCK) as None;
    an error reply raises."""
    line = await reader.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [await read_resp(reader) for _ in range(count)]
    if kind == b"$":
        length = int(rest)
        return None if length < 0 else (await reader.readexactly(length + 2))[:-2]
    if kind == b"-":
        raise RuntimeError(f"redis: {rest.decode(errors='replace')}")
    return rest


# ---------------------------------------------------------------------- servers


def ensure_redis() -> str:
    path = shutil.which("redis-server")
    if path is None:
        print("installing redis-server with apt-get ...", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if shutil.which("redis-server") is None:
            subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True,
                           stdout=subprocess.DEVNULL)
        path = shutil.which("redis-server")
    return path


def start_redis(scratch: pathlib.Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    directory = scratch / "redis"
    directory.mkdir()
    process = subprocess.Popen([ensure_redis(), "--port", str(port), "--dir", str(directory), "--appendonly", "yes",
                                "--appendfsync", "always", "--save", "", "--bind", "127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(port)
    return process, port


def start_standalone(scratch: pathlib.Path, extra_args: Sequence[str] = ()) -> tuple[subprocess.Popen, int]:
    """A standalone on ``scratch``, with ``extra_args`` and $TRIBUTARY_BENCH_STANDALONE_ARGS (e.g.
    "--replay-max 1024") added to its command line; returns it and its controller port."""
    store_port, controller_port = free_port(), free_port()
    log = (scratch / "standalone.log").open("wb")
    extra = [*extra_args, *shlex.split(os.environ.get("TRIBUTARY_BENCH_STANDALONE_ARGS", ""))]
    process = subprocess.Popen([sys.executable, "-m", "tributary", "standalone", "--data-dir", str(scratch / "data"),
                                "--port", str(store_port), "--controller-port", str(controller_port), *extra],
                               stdout=log, stderr=log, cwd=ROOT)
    wait_listening(controller_port)
    wait_listening(store_port)
    return process, controller_port


def role_sink(port_file: str) -> dict:
    """Serves the minimal test controller plus a listener that acknowledges every append at once,
    without storing it, on uvloop in this process; writes the controller port to ``port_file``."""
    import uvloop

    import wire
    from tests.support.minimal_controller import start_minimal_controller
    from tests.support.recording_segment_store import _reply_to

    async def serve(reader, writer) -> None:
        decoder = wire.Decoder()
        try:
            while data := await reader.read(1 << 20):
                decoder.feed(data)
                replies = [_reply_to(command) for command in decoder.commands()]
                writer.write(b"".join(wire.encode(reply) for reply in replies if reply is not None))
                await writer.drain()
        finally:
            writer.close()

    async def run() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        _, controller_port = await start_minimal_controller("127.0.0.1", server.sockets[0].getsockname()[1])
        pathlib.Path(port_file).write_text(str(controller_port))
        await asyncio.Event().wait()

    uvloop.run(run())
    return {}


def create_pravega_streams(uri: str, names: list[str], segments: int) -> None:
    code = ("import pravega_client,sys,os;m=pravega_client.StreamManager(sys.argv[1],False,False);m.create_scope('bench');"
            "[m.create_stream('bench',n,int(sys.argv[2])) for n in sys.argv[3:]];sys.stdout.flush();os._exit(0)")
    subprocess.run([sys.executable, "-c", code, uri, str(segments), *names], check=True, timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ---------------------------------------------------------------------- runs


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(role: str, scratch: pathlib.Path, producers: int, size: int, count: int, target: dict,
               server_pid: int | None = None, child=None) -> dict:
    """Events/s of ``producers`` producers, and CPU microseconds per event in clients and server.

    ``child`` is the class that runs ``role`` in a process (this file's ``Child`` by default).
    """
    start_at = time.time() + 1.5
    server_cpu = process_cpu_seconds(server_pid) if server_pid else 0.0
    children = [(child or Child)(role, scratch, size=size, count=count, start_at=start_at, **target)
                for _ in range(producers)]
    results = [child.result() for child in children]
    server_cpu = (process_cpu_seconds(server_pid) - server_cpu) if server_pid else 0.0
    elapsed = max(result["end"] for result in results) - min(result["start"] for result in results)
    events = producers * count
    return {"rate": events / elapsed, "client_us": 1e6 * sum(result["cpu"] for result in results) / events,
            "server_us": 1e6 * server_cpu / events}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        run_role()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every event count")
    arguments = parser.parse_args()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    standalone, controller_port = start_standalone(scratch)
    redis, redis_port = start_redis(scratch)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the clean-up below on SIGTERM too
    uri = f"tcp://127.0.0.1:{controller_port}"
    rows = []
    try:
        runs = [(size, producers) for size in SIZES for producers in PRODUCERS]
        create_pravega_streams(uri, [f"t-{size}-{producers}" for size, producers in runs] + ["latency"], 8)
        for size, producers in runs:
            count = max(1, int(EVENTS_BY_SIZE[size] * arguments.scale / (4 if producers > 1 else 1)))
            stream = f"t-{size}-{producers}"
            ours = throughput("pravega_producer", scratch, producers, size, count, {"uri": uri, "stream": stream},
                              standalone.pid)
            theirs = throughput("redis_producer", scratch, producers, size, count,
                                {"port": redis_port, "stream": stream}, redis.pid)
            rows.append((size, producers, ours, theirs))
            print(f"  {size:>6} B x {producers}: tributary {ours['rate']:>10,.0f} ev/s   "
                  f"redis {theirs['rate']:>10,.0f} ev/s", file=sys.stderr)
        latency = measure_latency(scratch, uri, redis_port)
        ceiling = measure_client_ceiling(scratch, arguments.scale)
    finally:
        for process in (standalone, redis):
            os.kill(process.pid, signal.SIGTERM)
            process.wait(30)
        shutil.rmtree(scratch, ignore_errors=True)
    report(rows, latency, ceiling)


def measure_latency(scratch: pathlib.Path, uri: str, redis_port: int) -> dict:
    count = LATENCY_RATE * LATENCY_SECONDS
    ready = scratch / "latency.ready"
    reader = Child("pravega_latency_reader", scratch, uri=uri, stream="latency", count=count, ready_file=str(ready))
    deadline = time.monotonic() + 60
    while not ready.exists():
        if reader.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the latency reader did not start:\n{reader.log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)
    time.sleep(0.5)
    Child("pravega_latency_writer", scratch, uri=uri, stream="latency", rate=LATENCY_RATE,
          seconds=LATENCY_SECONDS).result()
    ours = reader.result()["latencies_ms"]
    theirs = asyncio.run(redis_latency(redis_port, LATENCY_RATE, LATENCY_SECONDS))
    return {"tributary": ours, "redis": theirs}


def measure_client_ceiling(scratch: pathlib.Path, scale: float) -> dict:
    """1 KiB x 1 producer into the trivial sink (its own process, uvloop)."""
    port_file = scratch / f"sink-{time.monotonic_ns()}.port"
    sink = Child("sink", scratch, port_file=str(port_file))
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if sink.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the sink did not start:\n{sink.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)
        uri = f"tcp://127.0.0.1:{port_file.read_text()}"
        create_pravega_streams(uri, ["sink"], 1)
        return throughput("pravega_producer", scratch, 1, 1024, int(EVENTS_BY_SIZE[1024] * scale),
                          {"uri": uri, "stream": "sink"}, sink.process.pid)
    finally:
        os.kill(sink.process.pid, signal.SIGKILL)
        sink.process.wait()


def report(rows, latency: dict, ceiling: dict) -> None:
    print("\nacknowledged events/s (Tributary: real pravega client 0.3.8 -> standalone; "
          "Redis 7 XADD, appendfsync always); CPU us/event in the producers and in the server")
    print(f"{'event':>8} {'prod':>4} {'tributary':>11} {'redis':>11} {'ratio':>7} {'bar':>10}"
          f" {'trib cli':>9} {'trib srv':>9} {'redis cli':>9} {'redis srv':>9}")
    for size, producers, ours, theirs in rows:
        bar = BARS.get((size, producers))
        ratio = ours["rate"] / theirs["rate"]
        verdict = "" if bar is None else f"{'ok' if ratio >= bar else 'MISS'} >={bar:g}x"
        print(f"{size:>7}B {producers:>4} {ours['rate']:>11,.0f} {theirs['rate']:>11,.0f} {ratio:>6.2f}x {verdict:>10}"
              f" {ours['client_us']:>9.1f} {ours['server_us']:>9.1f} {theirs['client_us']:>9.1f}"
              f" {theirs['server_us']:>9.1f}")
    print(f"\nend-to-end latency, {LATENCY_RATE} events/s of 1 KiB, ms (write -> tail read):")
    print(f"{'':>10} {'events':>7} {'p50':>8} {'p99':>8} {'p99.9':>8} {'max':>8}")
    for name in ("tributary", "redis"):
        values = latency[name]
        print(f"{name:>10} {len(values):>7} {statistics.median(values):>8.2f} {percentile(values, 0.99):>8.2f} "
              f"{percentile(values, 0.999):>8.2f} {max(values):>8.2f}")
    ratio = percentile(latency["tributary"], 0.99) / percentile(latency["redis"], 0.99)
    print(f"p99 ratio tributary/redis: {ratio:.2f}x ({'ok' if ratio <= 1.5 else 'MISS'} <=1.5x)")
    print(f"\npravega client alone (1 KiB x 1 producer into a sink that acknowledges at once, own process): "
          f"{ceiling['rate']:,.0f} ev/s, client CPU {ceiling['client_us']:.1f} us/event "
          f"(sink {ceiling['server_us']:.1f} us/event)")


if __name__ == "__main__":
    main()
