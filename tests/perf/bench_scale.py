"""What grows with the number of segments on one node (issue 25): checkpoints, Tier-1, memory and restart.

For each size N (``--sizes``, default 10k, 100k, 300k, 1M; ``--quick``: 2,000 and 10,000) a fresh
`tributary standalone` runs as a child process (``--containers``, default 4; free loopback ports;
``--metrics-port``; ``--checkpoint-interval 1`` so that quiet containers checkpoint within a second;
``--log-level info``, whose JSON lines the benchmark reads). Against its wire port the benchmark

1. optionally creates ``--streams`` M streams through the controller (SDK, ``tributary.connect``);
2. creates N segments ``bench/sNNNNNNN/0.#epoch.0`` with pipelined CreateSegment requests
   (``--connections`` connections, ``--window`` requests in flight on each): the creation rate;
3. appends one small event (SetupAppend + AppendBlockEnd, a fresh writer id each) to ``--active``
   of them (default 1%) and measures the store's RSS (VmRSS of /proc/PID/status): the bar's "1% active";
   then to ``--written`` of them in all (default: the same), as the issue's probe did with 1;
4. forces every container to Tier-2 (FlushToStorage -1), notes each container's log tail and waits
   (``--settle`` seconds at most) until each container's log holds nothing up to that tail but a checkpoint:
   "truncates after the flush"; Tier-1 on disk (allocated bytes of the files under DATA/tier1) before and after;
5. SIGKILLs the store and reads its logs read-only (METADATA and the record headers, no code of the store):
   the newest complete checkpoint of each container (bytes, parts), the live log after the truncation point;
6. restarts the store on the same data dir and measures the time from the process start until a
   ReadSegment of a written segment in *every* container is answered with its event (the first one too),
   until /health/ready, the replay ("recovery done" lines: seconds, records, operations) and the RSS
   (VmRSS a few seconds after it serves, and the peak VmHWM); then stops it by PID.

Every stage has a timeout (``--stage-timeout``); a progress line goes to stderr every few seconds; the
benchmark keeps only counters per segment (its own RSS is printed at the end); every process it starts
is stopped by PID, also on failure. Ports, scratch directories and the data dirs are its own.

Bars (issue 25), judged when N = 1,000,000 was run: the log truncates after the flush (every container's
log holds nothing logged up to the end of the flush but a checkpoint, and what it holds is back to its
floor: at most twice its newest checkpoint + 16 MiB); store RSS <= 2 GiB with 1% of the segments active
(with ``--active`` <= 1%: live, and after the restart too when ``--written`` <= 1%); restart until a read
is served in every container <= 10 s. Exits 1 when a bar misses, and prints a markdown table like the
issue's. With ``--written 1`` at 300k segments the flush alone takes ~6 minutes on a 2-core machine (a
chunk file, its fsyncs and a metadata record per segment); 1M with 1% written takes ~5 minutes.

The package the store runs is the one in this file's repository (PYTHONPATH and the working directory of
the child are set to it), so a checkout of an older commit measures that commit; the table says which.

Usage: python tests/perf/bench_scale.py [--sizes 10000,100000] [--quick] [--containers 4] [--active 0.01]
                                        [--written 1] [--streams M] [--runs N] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from clients.connection import WireConnection, next_request_id  # noqa: E402
from clients.errors import TributaryError  # noqa: E402
from tests.perf.bars import Bars, Figures  # noqa: E402
from tests.support.processes import free_port, kill_process, terminate_process  # noqa: E402
from wire import commands as c  # noqa: E402
from wire.envelope import envelope  # noqa: E402
from wire.naming import container_of  # noqa: E402

T = TypeVar("T")
Found = dict[str, Any]  # one size's figures, by name
MiB = 1024 * 1024
GiB = 1024 * MiB
DEFAULT_SIZES = (10_000, 100_000, 300_000, 1_000_000)
QUICK_SIZES = (2_000, 10_000)
BAR_SIZE = 1_000_000
EVENT = envelope(b"e" * 64)
PROGRESS_SECONDS = 5.0


def segment_name(index: int) -> str:
    return f"bench/s{index:07d}/0.#epoch.0"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the store process


class Store:
    """One `tributary standalone` child of this repository's code, on free loopback ports."""

    def __init__(self, data_dir: pathlib.Path, containers: int, checkpoint_interval: float, extra: list[str]):
        self.data_dir = data_dir
        self.containers = containers
        self.checkpoint_interval = checkpoint_interval
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: pathlib.Path | None = None
        self.started = 0.0
        self.port = self.controller_port = self.metrics_port = 0

    def start(self, log_path: pathlib.Path) -> Store:
        self.port, self.controller_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log_path = log_path
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        with open(log_path, "ab") as log:
            self.started = time.monotonic()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tributary", "standalone", "--data-dir", str(self.data_dir),
                 "--port", str(self.port), "--controller-port", str(self.controller_port),
                 "--metrics-port", str(self.metrics_port), "--containers", str(self.containers),
                 "--checkpoint-interval", str(self.checkpoint_interval), "--log-level", "info", *self.extra],
                stdout=log, stderr=log, cwd=ROOT, env=env)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the store exited with {self.process.returncode}; see {self.log_path}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/health/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout: float) -> float:
        """Seconds from the process start until /health/ready answers 200."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            self.alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the store was not ready within {timeout:g} s; see {self.log_path}")
            time.sleep(0.1)
        return time.monotonic() - self.started

    def memory(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in bytes."""
        return process_memory(self.pid)

    def kill(self) -> None:
        kill_process(self.process)

    def stop(self) -> None:
        terminate_process(self.process, 30)


def process_memory(pid: int) -> tuple[int, int]:
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


def log_records(path: pathlib.Path, message: str) -> list[dict[str, Any]]:
    """The store's JSON log lines whose msg is ``message`` (read line by line)."""
    found: list[dict[str, Any]] = []
    with open(path, "rb") as log:
        for line in log:
            if message.encode() in line:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("msg") == message:
                    found.append(record)
    return found


def code_under_test() -> str:
    """Which commit the store runs (this file's repository) and whether its server files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "server", "wire", "coordination", "tributary",
                "clients")
    probe = subprocess.run([sys.executable, "-c", "import server, tributary; print(server.__file__)"],
                           capture_output=True, text=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.strip()
    return f"{commit}{' + uncommitted server changes' if dirty else ''} ({probe})"


# --------------------------------------------------------------------------- Tier-1, read from outside

_RECORD = struct.Struct("<Q4sIQII")  # checksum, magic, length, sequence, epoch, batch_index
_RECORD_SIZE = 32
_MAGIC = b"TLg\x01"
_FRAME_HEADER = 21  # version (B), timestamp (q), first sequence (q), count (I)
_OP_HEADER = struct.Struct(">BI")
_PART = struct.Struct(">II")
CHECKPOINT, CHECKPOINT_PART = 8, 11  # operation type ids (server/containers/operations.py)
_PEEK = _RECORD_SIZE + _FRAME_HEADER + _OP_HEADER.size + _PART.size


def tier1_bytes(data_dir: pathlib.Path) -> int:
    """Bytes allocated on disk by the files under DATA/tier1 (preallocated log files count whole)."""
    total = 0
    for path in (data_dir / "tier1").rglob("*"):
        try:
            total += path.lstat().st_blocks * 512
        except FileNotFoundError:
            pass
    return total


def log_metadata(log_dir: pathlib.Path) -> dict[str, Any]:
    for _ in range(20):  # replaced atomically (rename); retry a read that raced one
        try:
            metadata: dict[str, Any] = json.loads((log_dir / "METADATA").read_bytes())
            return metadata
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)
    raise RuntimeError(f"cannot read {log_dir / 'METADATA'}")


class LogScan:
    """One container's local log as its files say (read-only): the live records' sequences and bytes, and
    its checkpoints (a record whose first operation is a Checkpoint or a CheckpointPart)."""

    def __init__(self, log_dir: pathlib.Path, until: int | None = None):
        self.metadata = log_metadata(log_dir)
        self.until = until  # the last sequence to read (None: to the tail)
        self.others = 0  # live records that are not (parts of) checkpoints
        self.truncation = self.metadata["truncation_sequence"]
        self.tail = self.truncation  # the last valid record's sequence
        self.live_bytes = 0  # records after the truncation point, headers included
        self.records = 0
        self.checkpoints: list[tuple[int, int, int]] = []  # (first sequence, parts, bytes), complete ones
        self._open_parts: tuple[int, int, int] | None = None  # (first sequence, parts, bytes) so far
        files = self.metadata["files"]
        for index, entry in enumerate(files):
            end = files[index + 1]["first_sequence"] if index + 1 < len(files) else None
            self._scan(log_dir / entry["name"], entry["first_sequence"], end)

    def _scan(self, path: pathlib.Path, sequence: int, end: int | None) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # recycled meanwhile (a scan of a running store)
            return
        try:
            size, offset = os.fstat(fd).st_size, 0
            while offset + _RECORD_SIZE <= size and (end is None or sequence < end) and (
                    self.until is None or sequence <= self.until):
                head = os.pread(fd, _PEEK, offset)  # the record's header and its payload's first bytes
                if len(head) < _RECORD_SIZE:
                    break
                _, magic, length, found, _, _ = _RECORD.unpack_from(head, 0)
                if magic != _MAGIC or found != sequence or offset + _RECORD_SIZE + length > size:
                    break
                if sequence > self.truncation:
                    self._record(head, length, sequence)
                offset += _RECORD_SIZE + length
                sequence += 1
        finally:
            os.close(fd)

    def _record(self, head: bytes, length: int, sequence: int) -> None:
        self.tail = sequence
        self.records += 1
        self.live_bytes += _RECORD_SIZE + length
        start = _RECORD_SIZE + _FRAME_HEADER
        if len(head) < start + _OP_HEADER.size or length < _FRAME_HEADER + _OP_HEADER.size:
            self.others += 1
            return
        kind, body = _OP_HEADER.unpack_from(head, start)
        if kind not in (CHECKPOINT, CHECKPOINT_PART):
            self.others += 1
        if kind == CHECKPOINT:
            self.checkpoints.append((sequence, 1, body))
            self._open_parts = None
        elif kind == CHECKPOINT_PART and len(head) >= start + _OP_HEADER.size + _PART.size:
            number, parts = _PART.unpack_from(head, start + _OP_HEADER.size)
            data = body - _PART.size
            if number == 0:
                self._open_parts = (sequence, parts, data)
            elif self._open_parts is not None:
                first, count, total = self._open_parts
                self._open_parts = (first, count, total + data)
            if self._open_parts is not None and number == parts - 1:
                self.checkpoints.append(self._open_parts)
                self._open_parts = None

    @staticmethod
    def truncated_past(log_dir: pathlib.Path, tail: int) -> bool:
        """Whether the log holds nothing up to ``tail`` but a checkpoint: truncated at or past it, or just before
        a checkpoint that nothing up to ``tail`` follows (a quiet log ends with its newest checkpoint)."""
        if log_metadata(log_dir)["truncation_sequence"] >= tail:
            return True
        scan = LogScan(log_dir, until=tail)
        return scan.others == 0 and scan.records > 0

    @property
    def newest_checkpoint(self) -> tuple[int, int, int] | None:
        return self.checkpoints[-1] if self.checkpoints else None


def container_dirs(data_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted((data_dir / "tier1").glob("container-*"), key=lambda path: int(path.name.split("-")[1]))


# --------------------------------------------------------------------------- pipelined wire requests


class Progress:
    """A progress line on stderr every few seconds while a stage runs."""

    def __init__(self, label: str, total: int, store: Store):
        self.label, self.total, self.store = label, total, store
        self.done = 0
        self.started = time.monotonic()

    async def report(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_SECONDS)
            elapsed = time.monotonic() - self.started
            rss, _ = self.store.memory()
            say(f"{self.label}: {self.done:,}/{self.total:,} ({self.done / elapsed:,.0f}/s), "
                f"store RSS {rss / MiB:,.0f} MiB, bench RSS {process_memory(os.getpid())[0] / MiB:,.0f} MiB")


async def pipelined(store: Store, progress: Progress, indices: Callable[[int, int], Iterable[int]],
                    start: Callable[[WireConnection, int, Callable[[BaseException | None], None]], None],
                    connections: int, window: int) -> None:
    """Runs one operation per index over ``connections`` connections (connection k takes ``indices(k, count)``),
    at most ``window`` in flight on each. ``start(connection, index, done)`` sends the operation's first request
    and calls ``done(error or None)`` from its last reply's callback; nothing per index is kept once done."""
    failures: list[BaseException] = []

    async def one_connection(number: int) -> None:
        connection = await WireConnection.connect("127.0.0.1", store.port)
        slots = asyncio.Semaphore(window)
        try:
            def done(error: BaseException | None) -> None:
                slots.release()
                progress.done += 1
                if error is not None and len(failures) < 10:
                    failures.append(error)

            for index in indices(number, connections):
                if failures:
                    break
                await slots.acquire()
                start(connection, index, done)
                await connection.drain()
            for _ in range(window):  # every operation of this connection answered
                await slots.acquire()
        finally:
            await connection.close()

    reporter = asyncio.create_task(progress.report())
    try:
        await asyncio.gather(*(one_connection(number) for number in range(connections)))
    finally:
        reporter.cancel()
    if failures:
        raise RuntimeError(f"{progress.label}: {len(failures)}+ failed, first: {failures[0]!r}")


def reply_check(expected: type, then: Callable[[], None] | None, done: Callable[[BaseException | None], None]
                ) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback for a reply future: ``then()`` after the expected reply, else ``done(error)``."""
    def callback(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            done(RuntimeError("cancelled"))
        elif future.exception() is not None:
            done(future.exception())
        elif not isinstance(future.result(), expected):
            done(RuntimeError(f"unexpected reply {future.result()!r}"))
        elif then is None:
            done(None)
        else:
            try:
                then()
            except TributaryError as error:  # a send on a closed connection
                done(error)
    return callback


def create_one(connection: WireConnection, index: int, done: Callable[[BaseException | None], None]) -> None:
    request = c.CreateSegment(next_request_id(), segment_name(index), 0, 0, "")
    connection.expect(request.request_id).add_done_callback(reply_check(c.SegmentCreated, None, done))
    connection.send(request)


def append_one(connection: WireConnection, index: int, done: Callable[[BaseException | None], None]) -> None:
    append_event(connection, segment_name(index), done)


def append_event(connection: WireConnection, name: str, done: Callable[[BaseException | None], None]) -> None:
    """SetupAppend with a fresh writer id, then one event (as a short-lived writer does)."""
    writer = uuid.uuid4()

    def append() -> None:
        request_id = next_request_id()
        connection.expect(request_id).add_done_callback(reply_check(c.DataAppended, None, done))
        connection.send(c.AppendBlockEnd(writer, len(EVENT), EVENT, 1, 1, request_id))

    setup = c.SetupAppend(next_request_id(), writer, name, "")
    connection.expect(setup.request_id).add_done_callback(reply_check(c.AppendSetup, append, done))
    connection.send(setup)


def stride(fraction: float) -> int:
    """Every how many segments one is written (fraction 0.01: every 100th)."""
    return max(1, round(1 / fraction)) if fraction > 0 else 0


def run_async(coroutine: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
    """Runs a stage on a fresh event loop (uvloop where installed) within ``timeout`` seconds."""
    async def bounded() -> T:
        try:
            async with asyncio.timeout(timeout):
                return await coroutine
        except TimeoutError:
            raise TimeoutError(f"{what} did not finish within {timeout:g} s (--stage-timeout)") from None
    try:
        import uvloop
        return uvloop.run(bounded())
    except ImportError:
        return asyncio.run(bounded())


async def create_streams(store: Store, count: int, concurrency: int = 16) -> None:
    import tributary

    async with tributary.connect(f"tcp://127.0.0.1:{store.controller_port}") as client:
        await client.create_scope("benchscale")
        config = tributary.StreamConfiguration(tributary.ScalingPolicy.fixed(1))
        slots, progress = asyncio.Semaphore(concurrency), Progress("streams", count, store)

        async def one(index: int) -> None:
            async with slots:
                assert await client.create_stream("benchscale", f"stream{index}", config)
                progress.done += 1

        reporter = asyncio.create_task(progress.report())
        try:
            pending: set[asyncio.Task[None]] = set()
            for index in range(count):
                await slots.acquire()  # at most ``concurrency`` tasks exist at once
                slots.release()
                task = asyncio.create_task(one(index))
                pending.add(task)
                task.add_done_callback(pending.discard)
                if len(pending) >= concurrency:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.gather(*pending)
        finally:
            reporter.cancel()


def store_metrics(store: Store, names: tuple[str, ...]) -> dict[str, float]:
    """Sums of the named unlabelled-or-labelled samples of the store's /metrics (absent ones left out)."""
    found: dict[str, float] = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{store.metrics_port}/metrics", timeout=5) as reply:
            for line in reply.read().decode().splitlines():
                name = line.split("{", 1)[0].split(" ", 1)[0].removesuffix("_total")  # counters end in _total
                if name in names:
                    found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    except (OSError, ValueError):
        pass
    return found


async def flush(store: Store, data: pathlib.Path) -> None:
    """FlushToStorage for every container, with a progress line (Tier-2 chunks created, flush lag)."""
    async def report() -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(PROGRESS_SECONDS)
            seen = await asyncio.to_thread(store_metrics, store, ("tributary_tier2_chunks_created",
                                                                  "tributary_tier2_flush_lag_bytes"))
            say(f"flush: {time.monotonic() - started:,.0f} s, Tier-2 chunks created "
                f"{seen.get('tributary_tier2_chunks_created', 0):,.0f}, flush lag "
                f"{seen.get('tributary_tier2_flush_lag_bytes', 0) / MiB:,.1f} MiB, Tier-1 "
                f"{tier1_bytes(data) / MiB:,.0f} MiB, store RSS {store.memory()[0] / MiB:,.0f} MiB")

    reporter = asyncio.create_task(report())
    connection = await WireConnection.connect("127.0.0.1", store.port)
    try:
        reply = await connection.request(c.FlushToStorage(-1, "", next_request_id()), timeout=None)
        assert isinstance(reply, c.StorageFlushed), reply
    finally:
        reporter.cancel()
        await connection.close()


async def first_reads(store: Store, probes: dict[int, str], timeout: float) -> dict[int, float]:
    """Seconds from the store's process start until a ReadSegment of each probe segment (one per container)
    returns its event; retried (new connection) while the store is not listening or a container recovers."""
    answered: dict[int, float] = {}

    async def probe(container: int, name: str) -> None:
        while True:
            store.alive()
            try:
                connection = await WireConnection.connect("127.0.0.1", store.port, timeout=2)
            except TributaryError:  # not listening yet
                await asyncio.sleep(0.02)
                continue
            try:
                while True:
                    reply = await connection.request(c.ReadSegment(name, 0, 4096, "", next_request_id()), timeout=60)
                    if isinstance(reply, c.SegmentRead) and bytes(reply.data[:len(EVENT)]) == EVENT:
                        answered[container] = time.monotonic() - store.started
                        return
                    await asyncio.sleep(0.02)  # an error reply: not served yet
            except TributaryError:
                await asyncio.sleep(0.02)  # the connection closed (container unavailable): again
            finally:
                await connection.close()

    async with asyncio.timeout(timeout):
        await asyncio.gather(*(probe(container, name) for container, name in probes.items()))
    return answered


# --------------------------------------------------------------------------- one size


def measure(scratch: pathlib.Path, size: int, args: argparse.Namespace) -> Found:
    """Everything for one N; the store is stopped by PID whatever happens."""
    home = scratch / f"n{size}"
    home.mkdir()
    data = home / "data"
    found: Found = {"size": size}
    store = Store(data, args.containers, args.checkpoint_interval, args.store_arg)
    timeout = args.stage_timeout
    profiler: subprocess.Popen[bytes] | None = None
    try:
        store.start(home / "store-1.log")
        store.wait_ready(timeout)
        found["tier1 floor"] = tier1_bytes(data)
        if args.streams:
            started = time.monotonic()
            run_async(create_streams(store, args.streams), timeout, "stream creation")
            found["streams/s"] = args.streams / (time.monotonic() - started)

        connections, window = args.connections, args.window
        progress = Progress(f"N={size:,} create", size, store)
        run_async(pipelined(store, progress, lambda k, n: range(k, size, n), create_one, connections, window),
                  timeout, f"creating {size:,} segments")
        found["create/s"] = size / (time.monotonic() - progress.started)
        store.alive()

        active, written = stride(args.active), stride(args.written)
        appended, appending = 0, 0.0
        if active:
            progress = Progress(f"N={size:,} append (active)", len(range(0, size, active)), store)
            run_async(pipelined(store, progress, lambda k, n: range(k * active, size, n * active), append_one,
                                connections, window), timeout, "appending to the active segments")
            appended, appending = progress.total, time.monotonic() - progress.started
        time.sleep(2)  # what the appends left settles (a writer pass, an age checkpoint)
        found["rss active"] = store.memory()[0]
        if written and written != active:
            def rest(k: int, n: int) -> Iterable[int]:
                return (index for index in range(k * written, size, n * written) if not active or index % active)
            total = sum(1 for index in range(0, size, written) if not active or index % active)
            progress = Progress(f"N={size:,} append (the rest written)", total, store)
            run_async(pipelined(store, progress, rest, append_one, connections, window), timeout,
                      "appending to the rest")
            appended, appending = appended + total, appending + time.monotonic() - progress.started
        if appended:
            found["append/s"] = appended / appending
        found["rss written"] = store.memory()[0]
        probe_stride = active or written
        if not probe_stride:
            raise SystemExit("--active or --written must be > 0 (the restart reads an event back)")
        probes: dict[int, str] = {}
        for index in range(0, size, probe_stride):
            probes.setdefault(container_of(segment_name(index), args.containers), segment_name(index))
            if len(probes) == args.containers:
                break

        # flush, then wait until every container's log is truncated past what it held when the flush was done
        dirs = container_dirs(data)
        found["tier1 before"] = tier1_bytes(data)
        say(f"N={size:,}: flushing to Tier-2 (Tier-1 {found['tier1 before'] / MiB:,.0f} MiB)")
        started = time.monotonic()
        run_async(flush(store, data), timeout, "FlushToStorage")
        found["flush s"] = time.monotonic() - started
        tails = [LogScan(path).tail for path in dirs]
        say(f"N={size:,}: flushed in {found['flush s']:,.1f} s; waiting for the logs to be truncated past {tails}")
        started = time.monotonic()
        truncated = False
        while time.monotonic() - started < args.settle:
            store.alive()
            if all(LogScan.truncated_past(path, tail) for path, tail in zip(dirs, tails, strict=True)):
                truncated = True
                break
            time.sleep(1.0)
            waited = time.monotonic() - started
            if waited // PROGRESS_SECONDS != (waited - 1.0) // PROGRESS_SECONDS:
                say(f"N={size:,}: waiting for truncation, {waited:,.0f} of {args.settle:g} s; Tier-1 "
                    f"{tier1_bytes(data) / MiB:,.0f} MiB, truncation points "
                    f"{[log_metadata(path)['truncation_sequence'] for path in dirs]}")
        found["truncate s"] = time.monotonic() - started
        time.sleep(2)  # a freed file is deleted or kept as a spare after the truncation
        found["truncated"] = truncated
        found["tier1 after"] = tier1_bytes(data)
        found["rss live"], found["hwm live"] = store.memory()
        say(f"N={size:,}: {'truncated' if truncated else 'NOT truncated'} after {found['truncate s']:.1f} s; "
            f"Tier-1 {found['tier1 after'] / MiB:,.0f} MiB; SIGKILL")
        store.kill()

        scans = [LogScan(path) for path in dirs]
        newest = [scan.newest_checkpoint for scan in scans]
        found["checkpoint bytes"] = max((checkpoint[2] for checkpoint in newest if checkpoint), default=0)
        found["checkpoint parts"] = max((checkpoint[1] for checkpoint in newest if checkpoint), default=0)
        skipped = [record.get("bytes", 0) for record in log_records(home / "store-1.log",
                                                                    "checkpoint too large for one log record; skipped")]
        found["checkpoint skipped bytes"] = max(skipped, default=0)
        found["live log bytes"] = max(scan.live_bytes for scan in scans)
        found["live log records"] = sum(scan.records for scan in scans)
        found["floor ok"] = all(
            scan.live_bytes <= 2 * (checkpoint[2] if checkpoint else 0) + 16 * MiB
            for scan, checkpoint in zip(scans, newest, strict=True))

        # restart on the same data dir
        store.start(home / "store-2.log")
        say(f"N={size:,}: restarted (pid {store.pid}); reading one segment per container")
        profiler = start_profiler(args.profile, store.pid, home, size)
        reads = run_async(first_reads(store, probes, timeout), timeout + 5, "the first reads after the restart")
        found["first read s"] = min(reads.values())
        found["all read s"] = max(reads.values())
        found["ready s"] = store.wait_ready(timeout)
        stop_profiler(profiler)
        time.sleep(args.after_restart)
        found["rss restart"], found["hwm restart"] = store.memory()
        recovered = log_records(home / "store-2.log", "recovery done")
        found["replay s"] = max((record.get("seconds", 0) for record in recovered), default=0)
        found["replay records"] = sum(record.get("records", 0) for record in recovered)
        found["replay operations"] = sum(record.get("operations", 0) for record in recovered)
        say(f"N={size:,}: reads served after {found['first read s']:.2f} s (every container {found['all read s']:.2f}"
            f" s), ready {found['ready s']:.2f} s, replay {found['replay s']:.2f} s, "
            f"RSS {found['rss restart'] / MiB:,.0f} MiB")
        store.stop()
    except BaseException:
        say(f"N={size:,}: failed; the store's logs are in {home}")
        raise
    finally:
        stop_profiler(profiler)
        store.kill()
        if not args.keep:
            remove_tree(data)
    return found


def remove_tree(path: pathlib.Path) -> None:
    """``rm -rf`` in a child process: shutil.rmtree lists a directory whole in memory (a million chunk
    directories: hundreds of MiB in this process)."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def start_profiler(directory: pathlib.Path | None, pid: int, home: pathlib.Path,
                   size: int) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of the restarted store until it serves (--profile DIR)."""
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / f"restart-{size}.txt"
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
                             "--output", str(output), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=open(home / "py-spy.log", "ab"))


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is not None and profiler.poll() is None:
        profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            profiler.wait(30)
        except subprocess.TimeoutExpired:
            kill_process(profiler)


# --------------------------------------------------------------------------- report


def mib(value: float) -> str:
    return f"{value / MiB:,.0f} MiB"


def size_label(size: int) -> str:
    return f"{size // 1_000_000}M" if size % 1_000_000 == 0 else f"{size // 1000}k" if size % 1000 == 0 else f"{size:,}"


def table(results: dict[int, list[Found]], args: argparse.Namespace) -> str:
    """The issue's table (medians where several runs)."""
    import statistics

    sizes = sorted(results)

    def median(size: int, key: str) -> float:
        return float(statistics.median(run[key] for run in results[size]))

    def checkpoint(size: int) -> str:
        run = results[size][-1]
        if run["checkpoint skipped bytes"]:
            return f"no ({run['checkpoint skipped bytes'] / 1e6:.1f} MB, skipped)"
        if run["checkpoint parts"] > 1:
            return f"{run['checkpoint parts']} parts ({run['checkpoint bytes'] / 1e6:.1f} MB)"
        return f"yes ({run['checkpoint bytes'] / 1e6:.1f} MB)" if run["checkpoint parts"] else "none in the log"

    def truncated(size: int) -> str:
        runs = results[size]
        yes = sum(run["truncated"] for run in runs)
        return ("yes" if yes == len(runs) else "**no**" if not yes else f"{yes} of {len(runs)} runs") + (
            f" ({median(size, 'truncate s'):.1f} s)" if yes else "")

    rows = [
        ("checkpoint fits one log record / parts (largest container)", checkpoint),
        ("Tier-1 log truncates after the flush", truncated),
        ("Tier-1 on disk before the flush", lambda n: mib(median(n, "tier1 before"))),
        ("Tier-1 on disk after flush + truncation", lambda n: mib(median(n, "tier1 after"))),
        ("live log after truncation (largest container)", lambda n: mib(median(n, "live log bytes"))),
        ("restart until a read is served (first / every container)",
         lambda n: f"{median(n, 'first read s'):.1f} / {median(n, 'all read s'):.1f} s"),
        ("replay (slowest container; records replayed, all)",
         lambda n: f"{median(n, 'replay s'):.1f} s; {median(n, 'replay records'):,.0f}"),
        (f"store RSS, {args.active:.0%} active", lambda n: mib(median(n, "rss active"))),
        ("store RSS after flush (peak)", lambda n: f"{mib(median(n, 'rss live'))} ({mib(median(n, 'hwm live'))})"),
        ("store RSS after restart (peak)",
         lambda n: f"{mib(median(n, 'rss restart'))} ({mib(median(n, 'hwm restart'))})"),
        ("segments created/s", lambda n: f"{median(n, 'create/s'):,.0f}"),
        ("FlushToStorage", lambda n: f"{median(n, 'flush s'):.1f} s"),
    ]
    if args.streams:
        rows.append((f"streams created/s ({args.streams:,})", lambda n: f"{median(n, 'streams/s'):,.1f}"))
    lines = ["| segments | " + " | ".join(f"{size:,}" for size in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    lines += [f"| {name} | " + " | ".join(cell(size) for size in sizes) + " |" for name, cell in rows]
    return "\n".join(lines)


def judge(results: dict[int, list[Found]], figures: Figures, args: argparse.Namespace) -> Bars:
    verdict = Bars()
    if BAR_SIZE not in results:
        print(f"bars: judged only when N = {BAR_SIZE:,} is run (--sizes); not judged")
        return verdict
    if args.active > 0.01:
        print(f"bars: the RSS bar is for 1% of the segments active; --active {args.active} is not judged")
    name = f"{BAR_SIZE:,}"
    runs = results[BAR_SIZE]
    verdict.check(f"{name} segments: the log truncates after a flush, back to its floor (every run)",
                  all(run["truncated"] and run["floor ok"] for run in runs),
                  "; ".join(f"truncated {run['truncated']}, live log {mib(run['live log bytes'])}, checkpoint "
                            f"{mib(run['checkpoint bytes'])}, Tier-1 {mib(run['tier1 after'])}" for run in runs))
    if args.active <= 0.01:
        key = f"N={name}: store RSS, {args.active:.0%} active (MiB)"
        verdict.check(f"{name} segments: store RSS <= 2 GiB with {args.active:.0%} active (median)",
                      figures.median(key) <= 2 * 1024, figures.spread(key))
    if max(args.active, args.written) <= 0.01:  # the restarted store holds the same segments, 1% written
        key = f"N={name}: store RSS after restart (MiB)"
        verdict.check(f"{name} segments: store RSS <= 2 GiB with {args.written:.0%} written, after the restart "
                      f"(median; peak {figures.spread(f'N={name}: store peak RSS after restart (MiB)')} MiB)",
                      figures.median(key) <= 2 * 1024, figures.spread(key))
    key = f"N={name}: restart until a read is served, every container (s)"
    verdict.check(f"{name} segments: restart to first read <= 10 s (every container, median)",
                  figures.median(key) <= 10, figures.spread(key))
    return verdict


def add_figures(figures: Figures, found: Found) -> None:
    n = f"N={found['size']:,}"
    seconds, count, mebi = "{:,.2f}".format, "{:,.0f}".format, "{:,.0f}".format
    figures.add(f"{n}: segments created/s", found["create/s"], count)
    if "append/s" in found:
        figures.add(f"{n}: events appended/s (setup + append)", found["append/s"], count)
    if "streams/s" in found:
        figures.add(f"{n}: streams created/s", found["streams/s"], "{:,.1f}".format)
    figures.add(f"{n}: Tier-1 on disk at start (MiB)", found["tier1 floor"] / MiB, mebi)
    figures.add(f"{n}: Tier-1 on disk before the flush (MiB)", found["tier1 before"] / MiB, mebi)
    figures.add(f"{n}: Tier-1 on disk after flush + truncation (MiB)", found["tier1 after"] / MiB, mebi)
    figures.add(f"{n}: truncated after the flush (1 = yes)", float(found["truncated"]), "{:.0f}".format)
    figures.add(f"{n}: s from flush to truncation", found["truncate s"], seconds)
    figures.add(f"{n}: FlushToStorage (s)", found["flush s"], seconds)
    figures.add(f"{n}: newest checkpoint, largest container (MB)", found["checkpoint bytes"] / 1e6)
    figures.add(f"{n}: newest checkpoint, parts", found["checkpoint parts"], count)
    if found["checkpoint skipped bytes"]:
        figures.add(f"{n}: checkpoint skipped as too large (MB)", found["checkpoint skipped bytes"] / 1e6)
    figures.add(f"{n}: live log after truncation, largest container (MiB)", found["live log bytes"] / MiB)
    figures.add(f"{n}: store RSS, {found['active']:.0%} active (MiB)", found["rss active"] / MiB, mebi)
    figures.add(f"{n}: store RSS, {found['written']:.0%} written (MiB)", found["rss written"] / MiB, mebi)
    figures.add(f"{n}: store RSS after flush (MiB)", found["rss live"] / MiB, mebi)
    figures.add(f"{n}: store peak RSS before restart (MiB)", found["hwm live"] / MiB, mebi)
    figures.add(f"{n}: restart until a read is served, first (s)", found["first read s"], seconds)
    figures.add(f"{n}: restart until a read is served, every container (s)", found["all read s"], seconds)
    figures.add(f"{n}: restart until /health/ready (s)", found["ready s"], seconds)
    figures.add(f"{n}: replay, slowest container (s)", found["replay s"], seconds)
    figures.add(f"{n}: replay, records (all containers)", found["replay records"], count)
    figures.add(f"{n}: replay, operations (all containers)", found["replay operations"], count)
    figures.add(f"{n}: store RSS after restart (MiB)", found["rss restart"] / MiB, mebi)
    figures.add(f"{n}: store peak RSS after restart (MiB)", found["hwm restart"] / MiB, mebi)


def load_average() -> str:
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", help="segment counts, comma-separated (default 10000,100000,300000,1000000)")
    parser.add_argument("--quick", action="store_true", help="a small run: sizes 2,000 and 10,000")
    parser.add_argument("--containers", type=int, default=4)
    parser.add_argument("--active", type=float, default=0.01,
                        help="fraction of the segments given one event before the 'active' RSS is measured")
    parser.add_argument("--written", type=float, default=None,
                        help="fraction of the segments given one event in all (default: --active; the issue's "
                             "probe wrote every segment: 1)")
    parser.add_argument("--streams", type=int, default=0, help="streams created through the controller first")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--window", type=int, default=512, help="requests in flight per connection")
    parser.add_argument("--checkpoint-interval", type=float, default=1.0)
    parser.add_argument("--settle", type=float, default=120.0,
                        help="seconds to wait after the flush for the logs to be truncated")
    parser.add_argument("--after-restart", type=float, default=3.0,
                        help="seconds after the restarted store serves before its RSS is read")
    parser.add_argument("--stage-timeout", type=float, default=1800.0, help="seconds any one stage may take")
    parser.add_argument("--store-arg", action="append", default=[],
                        help="an extra argument of `tributary standalone` (repeat)")
    parser.add_argument("--profile", type=pathlib.Path, default=None,
                        help="py-spy record the restarts into this directory (raw, flamegraph.pl format)")
    parser.add_argument("--runs", type=int, default=1, help="repetitions (figures reported as min/median/max)")
    parser.add_argument("--dir", type=pathlib.Path, default=ROOT / ".bench", help="scratch directory")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    args = parser.parse_args()
    if args.written is None:
        args.written = args.active
    if args.profile is not None and shutil.which("py-spy") is None:
        parser.error("--profile needs py-spy on PATH (pip install py-spy)")
    sizes = QUICK_SIZES if args.quick and not args.sizes else tuple(
        int(size) for size in (args.sizes or ",".join(map(str, DEFAULT_SIZES))).split(","))
    args.dir.mkdir(parents=True, exist_ok=True)
    code = code_under_test()
    say(f"store code: {code}; sizes {', '.join(f'{size:,}' for size in sizes)}; load average {load_average()}")
    figures, results = Figures(), dict[int, list[Found]]()
    started = time.monotonic()
    for run in range(args.runs):
        scratch = pathlib.Path(tempfile.mkdtemp(dir=args.dir))
        for size in sizes:  # a failure leaves the scratch directory (the stores' logs; data dirs with --keep)
            found = measure(scratch, size, args)
            found["active"], found["written"] = args.active, args.written
            results.setdefault(size, []).append(found)
            add_figures(figures, found)
        if not args.keep:
            remove_tree(scratch)
        say(f"run {run + 1} of {args.runs} done")
    figures.print(f"bench_scale: {args.containers} containers, {args.active:.0%} active, {args.written:.0%} written"
                  f", checkpoint interval {args.checkpoint_interval:g} s")
    print(f"\nstore code: {code}; {time.monotonic() - started:,.0f} s; load average at the end {load_average()}; "
          f"benchmark RSS peak {process_memory(os.getpid())[1] / MiB:,.0f} MiB\n")
    print(table(results, args))
    print()
    sys.exit(judge(results, figures, args).exit_code())


if __name__ == "__main__":
    main()
