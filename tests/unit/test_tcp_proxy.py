"""The fault-injecting TCP proxy of tests/support/tcp_proxy.py, against small upstream servers started in-process."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import random
import socket
import socketserver
import threading

import pytest
import uvloop

from tests.support.tcp_proxy import FaultyProxy, ThreadedFaultyProxy, chaos_schedule
from tests.support.waiting import eventually

HOST = "127.0.0.1"


# ------------------------------------------------------------------------------------------------------ helpers

@dataclasses.dataclass
class UpstreamConnection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    received: bytearray = dataclasses.field(default_factory=bytearray)
    ended: str | None = None  # "eof" or "reset" once the proxy side went away


class Upstream:
    """A loopback server: echoes (``echo=True``) or only records what it gets, leaving writes to the test."""

    def __init__(self, echo: bool = True):
        self.echo = echo
        self.connections: list[UpstreamConnection] = []
        self.new_connections: asyncio.Queue[UpstreamConnection] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        connection = UpstreamConnection(reader, writer)
        self.connections.append(connection)
        self.new_connections.put_nowait(connection)
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    connection.ended = "eof"
                    if self.echo and not writer.transport.is_closing():
                        writer.close()
                    return
                connection.received += data
                if self.echo:
                    writer.write(data)
                    await writer.drain()
        except ConnectionError:
            connection.ended = "reset"
            writer.transport.abort()
        finally:
            self._tasks.discard(task)

    async def stop(self) -> None:
        self._server.close()
        for connection in self.connections:
            connection.writer.transport.abort()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._server.wait_closed()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(HOST, port), 2)


async def echo_round_trip(port_or_stream, payload: bytes, timeout: float = 2.0) -> bytes:
    reader, writer = await connect(port_or_stream) if isinstance(port_or_stream, int) else port_or_stream
    writer.write(payload)
    await writer.drain()
    echoed = await asyncio.wait_for(reader.readexactly(len(payload)), timeout)
    if isinstance(port_or_stream, int):
        writer.transport.abort()
    return echoed


async def end_of(reader: asyncio.StreamReader, timeout: float = 2.0) -> str:
    """How the stream ends: "eof" or "reset" (fails on a timeout or on data)."""
    try:
        data = await asyncio.wait_for(reader.read(65536), timeout)
    except ConnectionResetError:
        return "reset"
    assert data == b"", f"expected the end of the stream, got {len(data)} bytes"
    return "eof"


async def nothing_arrives(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return True
    return False


@pytest.fixture
async def loop_errors():
    """Everything reported to the loop's exception handler (unretrieved task exceptions, tasks destroyed while
    pending, transport errors) during the test; the test fails if there is any."""
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    gc.collect()
    await asyncio.sleep(0)
    loop.set_exception_handler(previous)
    assert not errors, errors


@pytest.fixture
async def echo_upstream(loop_errors):
    upstream = Upstream(echo=True)
    await upstream.start()
    yield upstream
    await upstream.stop()


def tasks_left(before: set[asyncio.Task], upstream: Upstream) -> set[asyncio.Task]:
    """Unfinished tasks that are neither the test's own, nor older than ``before``, nor the upstream's."""
    return asyncio.all_tasks() - before - {asyncio.current_task()} - upstream._tasks


@pytest.fixture
async def proxy(echo_upstream):
    """A proxy in front of the echo upstream; after the test, stop() must leave no task at all behind."""
    before = asyncio.all_tasks()
    async with FaultyProxy(HOST, echo_upstream.port, seed=7) as proxy:
        yield proxy
    assert not proxy.tasks
    assert tasks_left(before, echo_upstream) == set()


# --------------------------------------------------------------------------------------------------- pass-through

async def test_bytes_pass_unchanged_both_ways(proxy, echo_upstream):
    """A few MiB of random bytes on parallel connections and thousands of tiny writes come back unchanged, the
    upstream receives exactly what was sent, and the byte counters match."""
    rng = random.Random(1)
    bulk = [rng.randbytes(1_500_000 + index) for index in range(3)]

    async def bulk_round_trip(payload: bytes) -> bytes:
        reader, writer = await connect(proxy.port)

        async def send() -> None:
            for offset in range(0, len(payload), 100_000):
                writer.write(payload[offset:offset + 100_000])
                await writer.drain()

        sender = asyncio.create_task(send())
        echoed = await asyncio.wait_for(reader.readexactly(len(payload)), 5)
        await sender
        writer.transport.abort()
        return echoed

    async def small_writes() -> tuple[bytes, bytes]:
        reader, writer = await connect(proxy.port)
        pieces = [rng.randbytes(rng.randrange(1, 40)) for _ in range(3000)]
        for index, piece in enumerate(pieces):
            writer.write(piece)
            if index % 50 == 0:
                await writer.drain()
        sent = b"".join(pieces)
        echoed = await asyncio.wait_for(reader.readexactly(len(sent)), 5)
        writer.transport.abort()
        return sent, echoed

    *echoed_bulk, (sent_small, echoed_small) = await asyncio.gather(*map(bulk_round_trip, bulk), small_writes())
    assert echoed_bulk == bulk
    assert echoed_small == sent_small
    total = sum(map(len, bulk)) + len(sent_small)
    assert sorted(bytes(connection.received) for connection in echo_upstream.connections) == sorted(
        [*bulk, sent_small])
    await eventually(lambda: proxy.stats.bytes_to_downstream == total, "all bytes counted")
    assert proxy.stats.bytes_to_upstream == total
    assert proxy.stats.accepted == 4 and proxy.stats.dropped == 0


async def test_half_close_is_passed_on(proxy, echo_upstream):
    """A client's write_eof reaches the upstream as EOF after its data; the upstream's close reaches the client
    as EOF after the echo."""
    reader, writer = await connect(proxy.port)
    writer.write(b"last words")
    writer.write_eof()
    assert await asyncio.wait_for(reader.read(), 2) == b"last words"  # read() returns at EOF
    await eventually(lambda: echo_upstream.connections[0].ended == "eof", "upstream EOF")
    await eventually(lambda: proxy.live_connections == 0, "the pair to end")
    assert proxy.stats.closed == 1
    writer.close()


async def test_unreachable_upstream_closes_the_client(loop_errors):
    """With nothing listening upstream, an accepted connection is closed at once and counted."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind((HOST, 0))
        dead_port = probe.getsockname()[1]
    async with FaultyProxy(HOST, dead_port) as proxy:
        reader, writer = await connect(proxy.port)
        assert await end_of(reader) in ("eof", "reset")
        assert proxy.stats.upstream_connect_failures == 1
        writer.close()


# ----------------------------------------------------------------------------------------------------------- drops

@pytest.mark.parametrize("reset", [True, False])
async def test_drop_all_ends_every_connection_on_both_sides(echo_upstream, loop_errors, reset):
    """drop_all aborts every live pair at once: clients see a reset (reset=True) or EOF (reset=False), the
    upstream sees its connections end, and new connections work afterwards."""
    async with FaultyProxy(HOST, echo_upstream.port, reset=reset) as proxy:
        clients = [await connect(proxy.port) for _ in range(3)]
        for index, client in enumerate(clients):
            assert await echo_round_trip(client, b"hello %d" % index) == b"hello %d" % index
        assert proxy.drop_all() == 3
        outcomes = [await end_of(reader) for reader, _ in clients]
        assert outcomes == ["reset" if reset else "eof"] * 3
        await eventually(lambda: all(connection.ended for connection in echo_upstream.connections),
                         what="upstream connections to end")
        await eventually(lambda: proxy.live_connections == 0, "pairs to go")
        assert proxy.stats.dropped == 3 and proxy.stats.drop_events == 1 and proxy.stats.closed == 0
        assert proxy.faults[-1].kind == "drop" and len(proxy.faults[-1].connections) == 3
        assert await echo_round_trip(proxy.port, b"again") == b"again"
        for _, writer in clients:
            writer.close()


async def test_drop_random_drops_exactly_the_chosen_connections(proxy):
    """drop_random(0.5) on 20 connections drops some but not all (seeded), exactly the ones it reports; the others
    keep echoing; drop_random(0) drops none."""
    clients = [await connect(proxy.port) for _ in range(20)]
    for client in clients:
        assert await echo_round_trip(client, b"x") == b"x"
    assert proxy.drop_random(0.0) == 0
    dropped = proxy.drop_random(0.5)
    assert 0 < dropped < 20
    dropped_ids = set(proxy.faults[-1].connections)
    assert len(dropped_ids) == dropped
    alive = 0
    for connection_id, (reader, writer) in enumerate(clients, start=1):
        if connection_id in dropped_ids:
            assert await end_of(reader) == "reset"
        else:
            assert await echo_round_trip((reader, writer), b"still here") == b"still here"
            alive += 1
        writer.transport.abort()
    assert alive == 20 - dropped and proxy.stats.dropped == dropped


# ---------------------------------------------------------------------------------------------------------- stalls

async def test_stall_holds_both_directions_then_delivers_in_order(loop_errors):
    """During stall(0.5) neither peer sees a byte of what the other sends; afterwards everything arrives, in
    order, about 0.5 s after the stall began. A connection opened during the stall is not stalled."""
    upstream = Upstream(echo=False)
    await upstream.start()
    async with FaultyProxy(HOST, upstream.port) as proxy:
        loop = asyncio.get_running_loop()
        reader, writer = await connect(proxy.port)
        writer.write(b"before")
        server = await asyncio.wait_for(upstream.new_connections.get(), 2)
        await eventually(lambda: server.received == b"before", "pre-stall bytes")

        stalled_at = loop.time()
        assert proxy.stall(0.5) == 1
        to_server = [b"c%02d-" % index for index in range(10)]
        to_client = [b"s%02d-" % index for index in range(10)]
        for client_piece, server_piece in zip(to_server, to_client):
            writer.write(client_piece)
            server.writer.write(server_piece)
            await asyncio.sleep(0.02)
        assert await nothing_arrives(reader, 0.1)
        assert server.received == b"before"

        other_reader, other_writer = await connect(proxy.port)  # a fresh connection flows normally
        other_server = await asyncio.wait_for(upstream.new_connections.get(), 2)
        other_server.writer.write(b"fresh")
        assert await asyncio.wait_for(other_reader.readexactly(5), 0.3) == b"fresh"
        assert loop.time() - stalled_at < 0.45, "the test itself was too slow to observe the stall"

        expected = b"".join(to_client)
        received = await asyncio.wait_for(reader.readexactly(len(expected)), 2)
        delay = loop.time() - stalled_at
        assert received == expected
        await eventually(lambda: server.received == b"before" + b"".join(to_server), "held bytes upstream")
        assert 0.45 <= delay <= 1.0, delay
        assert proxy.stats.stalled == 1 and proxy.stats.stall_events == 1
        writer.transport.abort()
        other_writer.transport.abort()
    await upstream.stop()


async def test_stall_pushes_back_on_the_sender_instead_of_buffering(proxy):
    """While stalled the proxy reads at most a bounded amount: the client's drain() blocks well before 64 MiB,
    and after the stall every byte is echoed back in order."""
    reader, writer = await connect(proxy.port)
    assert await echo_round_trip((reader, writer), b"warm") == b"warm"
    proxy.stall(1.0)
    block = random.Random(2).randbytes(256 * 1024)
    written = 0
    while written < 64 * 1024 * 1024:
        writer.write(block)
        written += len(block)
        try:
            await asyncio.wait_for(writer.drain(), 0.1)
        except TimeoutError:
            break
    assert written < 64 * 1024 * 1024, "the proxy kept accepting bytes during a stall"
    assert proxy.stats.bytes_to_upstream == 4  # only the warm-up went through
    echoed = await asyncio.wait_for(reader.readexactly(written), 5)
    assert echoed == block * (written // len(block))
    writer.transport.abort()


# ---------------------------------------------------------------------------------------------------------- refuse

async def test_refuse_closes_new_connections_during_the_window_only(proxy, echo_upstream):
    """Within refuse(0.4) new connections end at once without reaching the upstream, while an established one keeps
    working; after the window new connections work again."""
    established = await connect(proxy.port)
    assert await echo_round_trip(established, b"one") == b"one"
    loop = asyncio.get_running_loop()
    refused_at = loop.time()
    proxy.refuse(0.4)
    reader, writer = await connect(proxy.port)
    assert await end_of(reader, 0.3) in ("eof", "reset")
    writer.close()
    assert await echo_round_trip(established, b"two") == b"two"
    assert len(echo_upstream.connections) == 1
    assert proxy.stats.refused == 1 and proxy.stats.accepted == 2
    assert loop.time() - refused_at < 0.4, "the test itself was too slow to observe the window"
    await asyncio.sleep(0.45 - (loop.time() - refused_at))
    assert await echo_round_trip(proxy.port, b"three") == b"three"
    assert len(echo_upstream.connections) == 2 and proxy.stats.refused == 1
    established[1].transport.abort()


# ----------------------------------------------------------------------------------------------------------- chaos

def test_chaos_schedule_depends_on_the_seed_only():
    """The same seed and rates give the same fault plan; another seed gives another; all faults lie inside the
    duration with lengths inside their bounds."""
    arguments = dict(drop_probability_per_second=3, stall_probability_per_second=3, stall_seconds_max=0.3,
                     stall_seconds_min=0.1, refuse_probability_per_second=1, refuse_seconds_max=0.2)
    plan = chaos_schedule(10, seed=42, **arguments)
    assert plan == chaos_schedule(10, seed=42, **arguments)
    assert plan != chaos_schedule(10, seed=43, **arguments)
    assert {event.kind for event in plan} == {"drop", "stall", "refuse"}
    assert all(0 < event.offset < 10 for event in plan)
    assert [event.offset for event in plan] == sorted(event.offset for event in plan)
    assert all(0.1 <= event.seconds <= 0.3 for event in plan if event.kind == "stall")
    assert all(0 <= event.seconds <= 0.2 for event in plan if event.kind == "refuse")
    assert chaos_schedule(10, seed=42) == []


async def echo_worker(port: int, worker: int, stop: asyncio.Event, counts: dict) -> None:
    """Sends numbered random messages one at a time and checks each echo is exact; reconnects after any fault."""
    rng = random.Random(worker)
    sequence = 0
    while not stop.is_set():
        try:
            reader, writer = await connect(port)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.01)
            continue
        try:
            while not stop.is_set():
                message = b"%d:%d:" % (worker, sequence) + rng.randbytes(rng.randrange(1, 3000))
                writer.write(message)
                await asyncio.wait_for(writer.drain(), 1)
                echoed = await asyncio.wait_for(reader.readexactly(len(message)), 1)
                assert echoed == message, "corrupted, reordered or foreign bytes"
                sequence += 1
                counts["ok"] += 1
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            counts["faults seen"] += 1
        finally:
            writer.transport.abort()


async def test_chaos_with_a_seed_injects_the_planned_faults_and_stop_leaves_no_tasks(echo_upstream, loop_errors,
                                                                                       caplog):
    """run_chaos(seed=...) injects exactly the faults chaos_schedule plans for that seed (logged with the seed and
    counted); echo clients see faults but never corrupted data and recover after it; stop() leaves no task."""
    caplog.set_level(logging.INFO, logger="tributary.test.proxy")
    tasks_before = asyncio.all_tasks()
    arguments = dict(seed=1234, drop_probability_per_second=4, stall_probability_per_second=4,
                     stall_seconds_max=0.2)
    plan = chaos_schedule(1.5, **arguments)
    assert any(event.kind == "drop" for event in plan) and any(event.kind == "stall" for event in plan)

    proxy = FaultyProxy(HOST, echo_upstream.port)
    await proxy.start()
    stop = asyncio.Event()
    counts = {"ok": 0, "faults seen": 0}
    workers = [asyncio.create_task(echo_worker(proxy.port, worker, stop, counts)) for worker in range(4)]
    await eventually(lambda: counts["ok"] > 20, "traffic before chaos")

    assert await proxy.run_chaos(1.5, **arguments) == len(plan)
    injected = [(fault.kind, fault.seconds) for fault in proxy.faults if fault.source == "chaos"]
    assert injected == [(event.kind, event.seconds) for event in plan]
    assert proxy.stats.drop_events == sum(event.kind == "drop" for event in plan)
    assert proxy.stats.dropped > 0 and proxy.stats.stalled > 0 and counts["faults seen"] > 0
    assert "seed=1234" in caplog.text and "chaos drop" in caplog.text and "chaos stall" in caplog.text

    ok_after_chaos = counts["ok"]
    await eventually(lambda: counts["ok"] > ok_after_chaos + 20, "traffic after chaos")
    stop.set()
    await asyncio.gather(*workers)  # re-raises a worker's AssertionError about corrupted data
    await proxy.stop()
    assert not proxy.tasks
    assert tasks_left(tasks_before, echo_upstream) == set()


async def test_background_chaos_is_cancelled_by_stop(proxy):
    """start_chaos runs until stopped; stop_chaos returns the faults injected; a second run ended by proxy.stop()
    leaves no task behind either."""
    clients = [await connect(proxy.port) for _ in range(2)]
    await eventually(lambda: proxy.live_connections == 2, "both clients to be accepted")
    proxy.start_chaos(None, seed=9, drop_probability_per_second=30)
    await eventually(lambda: proxy.stats.drop_events > 0, "a chaos drop")
    injected = await proxy.stop_chaos()
    assert injected > 0 and proxy.stats.drop_events == injected
    assert [await end_of(reader) for reader, _ in clients] == ["reset", "reset"]
    task = proxy.start_chaos(None, seed=10, stall_probability_per_second=5, stall_seconds_max=0.1)
    await asyncio.sleep(0.05)
    await proxy.stop()
    assert task.cancelled() and not proxy.tasks
    for _, writer in clients:
        writer.close()


# ----------------------------------------------------------------------------------------------- uvloop, threads

def test_runs_on_uvloop():
    """On uvloop: pass-through of 1 MiB, drop_all (reset), a stall, a refused connection and a short chaos run,
    with no loop errors and no task left after stop()."""

    async def scenario() -> None:
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        upstream = Upstream()
        await upstream.start()
        async with FaultyProxy(HOST, upstream.port) as proxy:
            payload = random.Random(3).randbytes(1 << 20)
            assert await echo_round_trip(proxy.port, payload) == payload
            reader, writer = await connect(proxy.port)
            assert await echo_round_trip((reader, writer), b"a") == b"a"
            proxy.drop_all()
            assert await end_of(reader) == "reset"
            writer.close()
            reader, writer = await connect(proxy.port)
            assert await echo_round_trip((reader, writer), b"b") == b"b"
            proxy.stall(0.2)
            writer.write(b"c")
            assert await nothing_arrives(reader, 0.1)
            assert await asyncio.wait_for(reader.readexactly(1), 1) == b"c"
            proxy.refuse(0.2)
            refused_reader, refused_writer = await connect(proxy.port)
            assert await end_of(refused_reader) == "reset"
            refused_writer.close()
            await proxy.run_chaos(0.3, seed=5, drop_probability_per_second=20, stall_probability_per_second=20,
                                  stall_seconds_max=0.05)
            assert await end_of(reader) == "reset"
            writer.close()
        assert not proxy.tasks and proxy.stats.dropped >= 2 and proxy.stats.refused == 1
        await upstream.stop()
        gc.collect()
        await asyncio.sleep(0)
        assert not errors, errors

    uvloop.run(scenario())


class _BlockingEcho(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            pass


def test_threaded_proxy_serves_blocking_clients():
    """ThreadedFaultyProxy forwards for a blocking client, drops it on request from the test thread, counts it,
    and stops its thread."""
    with socketserver.ThreadingTCPServer((HOST, 0), _BlockingEcho) as server:
        server.daemon_threads = True
        server_thread = threading.Thread(target=server.serve_forever, daemon=True)
        server_thread.start()
        try:
            with ThreadedFaultyProxy(HOST, server.server_address[1]) as proxy:
                with socket.create_connection((HOST, proxy.port), timeout=2) as client:
                    client.sendall(b"ping")
                    assert client.recv(4) == b"ping"
                    assert proxy.drop_all() == 1
                    with pytest.raises(ConnectionResetError):
                        client.recv(4)
                assert proxy.stats.dropped == 1 and proxy.stats.bytes_to_downstream == 4
                thread = proxy._thread
            assert not thread.is_alive()
        finally:
            server.shutdown()
            server_thread.join(5)
