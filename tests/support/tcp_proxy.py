"""A fault-injecting TCP proxy for tests (pure asyncio, works on uvloop, loopback only).

``FaultyProxy`` listens on 127.0.0.1 and forwards every accepted connection to one upstream address over a new
upstream connection of its own. Between the two sockets sit two pumps (one per direction) that read a bounded chunk,
pass a per-connection gate and write it with ``drain()``; stream reader limits and transport write-buffer limits
keep memory per connection bounded, and TCP flow control pushes back on the sender when a pump waits.

Faults, callable directly from a test running on the proxy's event loop:

* ``drop_all()`` / ``drop_random(fraction)``: abort both sockets of a live connection at once, with an RST
  (``SO_LINGER`` 0) unless the proxy was made with ``reset=False`` (then a plain close, the peers see EOF).
* ``stall(seconds)`` / ``stall_random(fraction, seconds)``: close the gate of live connections; no byte moves in
  either direction (nor a FIN) until it reopens, then everything held back is delivered in order. To the peers this
  is what a half-open connection looks like. Connections accepted later are not stalled (a reconnect works).
* ``refuse(seconds)``: connections accepted in the window are closed at once (no upstream connection is made).
* ``blackhole()``: a network partition until ``heal()``: like a stall of every live connection with no end, and
  connections accepted meanwhile are held open without reaching the upstream (as a SYN that gets no answer),
  then connected when it heals. Nothing is closed or reset: the peers find out only by their own timeouts.
* ``run_chaos(duration, seed=...)`` (or ``start_chaos(...)``/``stop_chaos()`` for a background task): faults at
  random times drawn from ``random.Random(seed)``; the schedule (when, what, how long) depends on the seed only
  (``chaos_schedule`` computes it), which connections a fault hits depends also on what is live at that moment.

The seed and every fault are logged on the ``tributary.test.proxy`` logger and counted in ``stats``
(``ProxyStats``); ``faults`` keeps the most recent fault records. Every task the proxy starts is tracked and
cancelled and awaited by ``stop()``.

``ThreadedFaultyProxy`` runs a ``FaultyProxy`` on an event loop of its own in a daemon thread, for tests whose
clients block (sync clients, other processes talking through the proxy while the test thread waits).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import math
import random
import socket
import struct
import threading
from typing import Any, Callable, Coroutine, Iterable

log = logging.getLogger("tributary.test.proxy")

DEFAULT_BUFFER_SIZE = 64 * 1024


@dataclasses.dataclass
class ProxyStats:
    """Counters. ``accepted`` counts every accepted downstream connection, ``refused`` ones among them included."""

    accepted: int = 0
    refused: int = 0
    upstream_connect_failures: int = 0
    closed: int = 0  # connection pairs that ended on their own (EOF both ways, or a peer's error)
    dropped: int = 0  # connection pairs aborted by a drop fault
    stalled: int = 0  # connection stalls (one stall of one connection counts one)
    drop_events: int = 0
    stall_events: int = 0
    refuse_events: int = 0
    blackhole_events: int = 0
    held: int = 0  # connections accepted during a blackhole (held until it heals)
    bytes_to_upstream: int = 0  # client -> server bytes handed to the upstream socket
    bytes_to_downstream: int = 0  # server -> client bytes handed to the downstream socket

    def snapshot(self) -> "ProxyStats":
        return dataclasses.replace(self)


@dataclasses.dataclass(frozen=True)
class FaultRecord:
    """One injected fault: ``at`` is the loop time, ``connections`` the ids of the connection pairs it hit."""

    at: float
    kind: str  # "drop", "stall", "refuse" or "blackhole"
    connections: tuple[int, ...]
    seconds: float = 0.0
    source: str = "manual"  # "manual" or "chaos"


@dataclasses.dataclass(frozen=True)
class ChaosEvent:
    """One planned chaos fault: ``offset`` seconds after the chaos run starts."""

    offset: float
    kind: str  # "drop", "stall" or "refuse"
    seconds: float = 0.0


def chaos_schedule(duration: float, *, seed: int, drop_probability_per_second: float = 0.0,
                   stall_probability_per_second: float = 0.0, stall_seconds_max: float = 1.0,
                   stall_seconds_min: float = 0.0, refuse_probability_per_second: float = 0.0,
                   refuse_seconds_max: float = 1.0) -> list[ChaosEvent]:
    """The faults ``run_chaos`` injects for these arguments, in time order: a Poisson process per kind (the rates
    are the expected number of faults per second), drawn from ``random.Random(seed)`` only."""
    return list(itertools.takewhile(lambda event: event.offset < duration, _chaos_events(
        random.Random(seed), drop_probability_per_second, stall_probability_per_second, stall_seconds_min,
        stall_seconds_max, refuse_probability_per_second, refuse_seconds_max)))


def _chaos_events(rng: random.Random, drop_rate: float, stall_rate: float, stall_min: float, stall_max: float,
                  refuse_rate: float, refuse_max: float) -> Iterable[ChaosEvent]:
    """Endless time-ordered fault plan (empty if every rate is 0). One draw for the gap to the next fault of any
    kind, one for its kind, one for its length: the sequence depends on the seed and the rates only."""
    total = drop_rate + stall_rate + refuse_rate
    if total <= 0:
        return
    offset = 0.0
    while True:
        offset += rng.expovariate(total)
        pick = rng.random() * total
        length = rng.random()
        if pick < drop_rate:
            yield ChaosEvent(offset, "drop")
        elif pick < drop_rate + stall_rate:
            yield ChaosEvent(offset, "stall", stall_min + (stall_max - stall_min) * length)
        else:
            yield ChaosEvent(offset, "refuse", refuse_max * length)


class _Pair:
    """One downstream connection and (once connected) its upstream connection."""

    __slots__ = ("id", "down_reader", "down_writer", "up_reader", "up_writer", "flowing", "stalled_until",
                 "resume_handle", "task", "pumps", "aborted", "dropped")

    def __init__(self, pair_id: int, down_reader: asyncio.StreamReader, down_writer: asyncio.StreamWriter):
        self.id = pair_id
        self.down_reader = down_reader
        self.down_writer = down_writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None
        self.flowing = asyncio.Event()  # the gate: cleared while stalled
        self.flowing.set()
        self.stalled_until = 0.0
        self.resume_handle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task | None = None
        self.pumps: list[asyncio.Task] = []
        self.aborted = False  # both sockets killed (by a fault, stop(), or after one peer's error)
        self.dropped = False  # by a drop fault

    def writers(self) -> list[asyncio.StreamWriter]:
        return [writer for writer in (self.down_writer, self.up_writer) if writer is not None]


def _prepare_transport(writer: asyncio.StreamWriter, buffer_size: int) -> None:
    writer.transport.set_write_buffer_limits(high=buffer_size)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # pragma: no cover - the socket went away already
            pass


def _kill_transport(writer: asyncio.StreamWriter, reset: bool) -> None:
    """Closes at once, discarding buffered data; with ``reset`` the peer gets an RST rather than a FIN."""
    transport = writer.transport
    if reset:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        transport.abort()
    else:
        transport.close()


class FaultyProxy:
    """Forwards 127.0.0.1:<listen port> to ``upstream_host:upstream_port``, injecting faults on request.

    All methods must be called on the event loop the proxy was started on.
    """

    def __init__(self, upstream_host: str, upstream_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0, buffer_size: int = DEFAULT_BUFFER_SIZE, connect_timeout: float = 5.0,
                 reset: bool = True, seed: int | None = None, fault_log_size: int = 10_000):
        if listen_host not in ("127.0.0.1", "::1"):
            raise ValueError("the test proxy listens on loopback only")
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.buffer_size = buffer_size
        self.connect_timeout = connect_timeout
        self.reset = reset
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**32)
        self.rng = random.Random(self.seed)  # for drop_random / stall_random called directly
        self.stats = ProxyStats()
        self.faults: collections.deque[FaultRecord] = collections.deque(maxlen=fault_log_size)
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pairs: dict[int, _Pair] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._refuse_until = 0.0
        self._blackholed = False
        self._reachable = asyncio.Event()  # cleared during a blackhole: new connections wait for it
        self._reachable.set()
        self._chaos_task: asyncio.Task | None = None
        self.chaos_faults_injected = 0  # by the latest chaos run so far
        self._closing = False

    # ----------------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> int:
        """Starts listening; returns the listen port."""
        if self._server is not None:
            raise RuntimeError("proxy already started")
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._on_accept, self.listen_host, self.listen_port,
                                                  limit=self.buffer_size)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("proxy 127.0.0.1:%d -> %s:%d started (seed %d for drop_random/stall_random)", self.port,
                 self.upstream_host, self.upstream_port, self.seed)
        return self.port

    async def stop(self) -> None:
        """Stops listening, aborts every connection, cancels and awaits every task the proxy started."""
        if self._closing:
            return
        self._closing = True
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs.values()):
            self._abort(pair)
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        log.info("proxy on port %s stopped: %s", self.port, self.stats)

    async def __aenter__(self) -> "FaultyProxy":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()

    @property
    def live_connections(self) -> int:
        return len(self._pairs)

    @property
    def tasks(self) -> frozenset[asyncio.Task]:
        """The proxy's unfinished tasks (empty after ``stop()``)."""
        return frozenset(self._tasks)

    # -------------------------------------------------------------------------------------------------- faults

    def drop_all(self) -> int:
        """Aborts every live connection pair at once; returns how many."""
        return self._drop(self._live(), "manual")

    def drop_random(self, fraction: float, *, rng: random.Random | None = None) -> int:
        """Aborts each live connection pair with probability ``fraction``; returns how many."""
        return self._drop(self._pick(fraction, rng or self.rng), "manual")

    def stall(self, seconds: float) -> int:
        """Stops forwarding both ways on every live connection for ``seconds`` (extending a running stall, never
        shortening it); returns how many connections."""
        return self._stall(self._live(), seconds, "manual")

    def stall_random(self, fraction: float, seconds: float, *, rng: random.Random | None = None) -> int:
        """Stalls each live connection with probability ``fraction``; returns how many."""
        return self._stall(self._pick(fraction, rng or self.rng), seconds, "manual")

    def refuse(self, seconds: float) -> None:
        """For ``seconds`` from now, connections are accepted and closed at once (extends a running window)."""
        self._refuse(seconds, "manual")

    def blackhole(self) -> int:
        """Partitions the network until ``heal()`` (see the module docstring); returns how many live connections it
        holds."""
        pairs = self._live()
        self.stats.blackhole_events += 1
        self._record("blackhole", pairs, 0.0, "manual")
        self._blackholed = True
        self._reachable.clear()
        for pair in pairs:
            self.stats.stalled += 1
            pair.flowing.clear()
            if pair.resume_handle is not None:
                pair.resume_handle.cancel()
                pair.resume_handle = None
        return len(pairs)

    @property
    def blackholed(self) -> bool:
        return self._blackholed

    def heal(self) -> None:
        """Ends every stall, refuse window and blackhole now (what was held back is delivered, in order)."""
        self._refuse_until = 0.0
        self._blackholed = False
        self._reachable.set()
        for pair in list(self._pairs.values()):
            self._resume(pair)
        log.info("proxy on port %s healed", self.port)

    # --------------------------------------------------------------------------------------------------- chaos

    async def run_chaos(self, duration: float | None, *, seed: int, drop_probability_per_second: float = 0.0,
                        stall_probability_per_second: float = 0.0, stall_seconds_max: float = 1.0,
                        stall_seconds_min: float = 0.0, refuse_probability_per_second: float = 0.0,
                        refuse_seconds_max: float = 1.0, drop_fraction: float = 1.0, stall_fraction: float = 1.0,
                        heal_at_end: bool = True) -> int:
        """Injects faults for ``duration`` seconds (``None``: until cancelled), at the times of
        ``chaos_schedule(...)`` for the same arguments. A drop fault drops each live connection with probability
        ``drop_fraction`` (1: all of them); a stall fault likewise with ``stall_fraction``. Connections are picked
        with a second ``random.Random`` derived from ``seed``. With ``heal_at_end`` stalls and refusals end with the
        run (also when it is cancelled). Returns the number of faults injected."""
        loop = asyncio.get_running_loop()
        log.warning("chaos on port %s: seed=%d duration=%s drop/s=%s stall/s=%s stall=%s..%ss refuse/s=%s "
                 "refuse<=%ss drop_fraction=%s stall_fraction=%s", self.port, seed, duration,
                 drop_probability_per_second, stall_probability_per_second, stall_seconds_min, stall_seconds_max,
                 refuse_probability_per_second, refuse_seconds_max, drop_fraction, stall_fraction)
        targets = random.Random(f"{seed}/targets")
        events = _chaos_events(random.Random(seed), drop_probability_per_second, stall_probability_per_second,
                               stall_seconds_min, stall_seconds_max, refuse_probability_per_second,
                               refuse_seconds_max)
        start = loop.time()
        end = math.inf if duration is None else start + duration
        injected = self.chaos_faults_injected = 0
        try:
            for event in events:
                if start + event.offset >= end:
                    break
                await asyncio.sleep(max(0.0, start + event.offset - loop.time()))
                if event.kind == "drop":
                    self._drop(self._pick(drop_fraction, targets), "chaos")
                elif event.kind == "stall":
                    self._stall(self._pick(stall_fraction, targets), event.seconds, "chaos")
                else:
                    self._refuse(event.seconds, "chaos")
                injected = self.chaos_faults_injected = injected + 1
            if end == math.inf:
                await loop.create_future()  # every rate 0 and no duration: nothing to do until cancelled
            await asyncio.sleep(max(0.0, end - loop.time()))
        finally:
            log.warning("chaos on port %s (seed %d) ended after %.2fs: %d faults injected", self.port, seed,
                     loop.time() - start, injected)
            if heal_at_end and not self._closing:
                self.heal()
        return injected

    def start_chaos(self, duration: float | None = None, **kwargs: Any) -> asyncio.Task:
        """``run_chaos`` as a background task of the proxy (one at a time); ``stop_chaos()`` or ``stop()`` ends
        it."""
        if self._chaos_task is not None and not self._chaos_task.done():
            raise RuntimeError("chaos already running")
        self._chaos_task = self._spawn(self.run_chaos(duration, **kwargs), f"proxy-{self.port}-chaos")
        return self._chaos_task

    async def stop_chaos(self) -> int:
        """Cancels the background chaos task; returns the faults it injected (0 if there was none)."""
        task, self._chaos_task = self._chaos_task, None
        if task is None:
            return 0
        if not task.done():
            task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # we were cancelled ourselves
                raise
            return self.chaos_faults_injected

    # ------------------------------------------------------------------------------------------------ internals

    def _spawn(self, coroutine: Coroutine, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # retrieves it: no "never retrieved" warning
            log.error("proxy task %s failed", task.get_name(), exc_info=task.exception())

    def _live(self) -> list[_Pair]:
        return [self._pairs[pair_id] for pair_id in sorted(self._pairs) if not self._pairs[pair_id].aborted]

    def _pick(self, fraction: float, rng: random.Random) -> list[_Pair]:
        return [pair for pair in self._live() if rng.random() < fraction]

    def _record(self, kind: str, pairs: list[_Pair], seconds: float, source: str) -> None:
        ids = tuple(pair.id for pair in pairs)
        self.faults.append(FaultRecord(self._loop.time(), kind, ids, seconds, source))
        if kind == "refuse":
            log.warning("proxy %s: %s refuse %.3fs", self.port, source, seconds)
        elif kind == "stall":
            log.warning("proxy %s: %s stall %.3fs of %d connection(s) %s", self.port, source, seconds, len(ids),
                        list(ids))
        elif kind == "blackhole":
            log.warning("proxy %s: %s blackhole, holding %d connection(s) %s", self.port, source, len(ids), list(ids))
        else:
            log.warning("proxy %s: %s drop of %d connection(s) %s", self.port, source, len(ids), list(ids))

    def _drop(self, pairs: list[_Pair], source: str) -> int:
        self.stats.drop_events += 1
        self._record("drop", pairs, 0.0, source)
        for pair in pairs:
            self.stats.dropped += 1
            pair.dropped = True
            self._abort(pair)
        return len(pairs)

    def _stall(self, pairs: list[_Pair], seconds: float, source: str) -> int:
        self.stats.stall_events += 1
        self._record("stall", pairs, seconds, source)
        until = self._loop.time() + seconds
        for pair in pairs:
            self.stats.stalled += 1
            pair.flowing.clear()
            if until > pair.stalled_until:
                pair.stalled_until = until
                if pair.resume_handle is not None:
                    pair.resume_handle.cancel()
                pair.resume_handle = self._loop.call_at(until, self._resume, pair)
        return len(pairs)

    def _resume(self, pair: _Pair) -> None:
        if pair.resume_handle is not None:
            pair.resume_handle.cancel()
            pair.resume_handle = None
        pair.stalled_until = 0.0
        if not self._blackholed:  # a stall that ends within a blackhole leaves the connection held
            pair.flowing.set()

    def _refuse(self, seconds: float, source: str) -> None:
        self.stats.refuse_events += 1
        self._record("refuse", [], seconds, source)
        self._refuse_until = max(self._refuse_until, self._loop.time() + seconds)

    def _abort(self, pair: _Pair) -> None:
        """Kills both sockets now and cancels the pair's other tasks (pumps held at a closed gate included)."""
        if pair.aborted:
            return
        pair.aborted = True
        for writer in pair.writers():
            _kill_transport(writer, self.reset)
        if pair.resume_handle is not None:
            pair.resume_handle.cancel()
            pair.resume_handle = None
        current = asyncio.current_task()
        for task in (pair.task, *pair.pumps):
            if task is not None and task is not current:
                task.cancel()

    def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain function (not a coroutine), so asyncio starts no task of its own: ours are all tracked.
        self.stats.accepted += 1
        if self._closing:
            _kill_transport(writer, self.reset)
            return
        if self._loop.time() < self._refuse_until:
            self.stats.refused += 1
            log.info("proxy %s: refused a connection from %s", self.port, writer.get_extra_info("peername"))
            _kill_transport(writer, self.reset)
            return
        pair = _Pair(next(self._ids), reader, writer)
        _prepare_transport(writer, self.buffer_size)
        self._pairs[pair.id] = pair
        if self._blackholed:
            self.stats.held += 1
            pair.flowing.clear()
        pair.task = self._spawn(self._serve(pair), f"proxy-{self.port}-conn-{pair.id}")

    async def _serve(self, pair: _Pair) -> None:
        connected = False
        try:
            await self._reachable.wait()  # a connection accepted during a blackhole reaches nothing until it heals
            try:
                pair.up_reader, pair.up_writer = await asyncio.wait_for(
                    asyncio.open_connection(self.upstream_host, self.upstream_port, limit=self.buffer_size),
                    self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as error:
                self.stats.upstream_connect_failures += 1
                log.info("proxy %s: connection %d: upstream %s:%d unreachable: %r", self.port, pair.id,
                         self.upstream_host, self.upstream_port, error)
                self._abort(pair)
                return
            connected = True
            _prepare_transport(pair.up_writer, self.buffer_size)
            log.debug("proxy %s: connection %d from %s open", self.port, pair.id,
                      pair.down_writer.get_extra_info("peername"))
            pair.pumps = [
                self._spawn(self._pump(pair, pair.down_reader, pair.up_writer, "bytes_to_upstream"),
                            f"proxy-{self.port}-conn-{pair.id}-up"),
                self._spawn(self._pump(pair, pair.up_reader, pair.down_writer, "bytes_to_downstream"),
                            f"proxy-{self.port}-conn-{pair.id}-down"),
            ]
            await asyncio.wait(pair.pumps)
        finally:
            # Bookkeeping first: a second cancellation while awaiting the pumps below must not skip it.
            self._pairs.pop(pair.id, None)
            if pair.resume_handle is not None:
                pair.resume_handle.cancel()
                pair.resume_handle = None
            if connected and not pair.dropped and not self._closing:
                self.stats.closed += 1
                log.debug("proxy %s: connection %d closed", self.port, pair.id)
            if not pair.aborted:
                pair.aborted = True
                for writer in pair.writers():
                    writer.transport.close()  # flushes what is buffered, then FIN
            for pump in pair.pumps:
                pump.cancel()
            if pair.pumps:
                await asyncio.gather(*pair.pumps, return_exceptions=True)

    async def _pump(self, pair: _Pair, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    counter: str) -> None:
        """Copies one direction until EOF (passed on as a half-close) or an error (which aborts the pair)."""
        gate = pair.flowing
        try:
            while True:
                await gate.wait()  # stalled: stop reading too, so TCP flow control pushes back on the sender
                data = await reader.read(self.buffer_size)
                await gate.wait()  # a stall that began while we waited for data holds it back
                if not data:
                    if not writer.transport.is_closing() and writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                setattr(self.stats, counter, getattr(self.stats, counter) + len(data))
                await writer.drain()
        except (ConnectionError, OSError, RuntimeError) as error:
            # A peer reset (or a write after a close): the other side goes too, as with a real middlebox.
            log.debug("proxy %s: connection %d: %r", self.port, pair.id, error)
            self._abort(pair)


class ThreadedFaultyProxy:
    """A ``FaultyProxy`` on its own event loop in a daemon thread; the fault methods are thread-safe wrappers that
    wait for the result. ``loop_factory`` defaults to ``uvloop.new_event_loop`` when uvloop is installed."""

    def __init__(self, upstream_host: str, upstream_port: int, *,
                 loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None, **proxy_kwargs: Any):
        if loop_factory is None:
            try:
                import uvloop
                loop_factory = uvloop.new_event_loop
            except ImportError:  # pragma: no cover
                loop_factory = asyncio.new_event_loop
        self._loop_factory = loop_factory
        self.proxy = FaultyProxy(upstream_host, upstream_port, **proxy_kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        return self.proxy.port

    @property
    def stats(self) -> ProxyStats:
        return self.call(self.proxy.stats.snapshot)

    def start(self) -> int:
        ready = threading.Event()

        def run() -> None:
            self._loop = self._loop_factory()
            asyncio.set_event_loop(self._loop)
            ready.set()
            try:
                self._loop.run_forever()
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="tributary-test-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        return self._run(self.proxy.start())

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        try:
            self._run(self.proxy.stop(), timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> "ThreadedFaultyProxy":
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _run(self, coroutine: Coroutine, timeout: float | None = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def call(self, function: Callable, *args: Any, **kwargs: Any) -> Any:
        """Runs ``function(*args, **kwargs)`` on the proxy's loop and returns its result."""
        async def call() -> Any:
            return function(*args, **kwargs)
        return self._run(call())

    def drop_all(self) -> int:
        return self.call(self.proxy.drop_all)

    def drop_random(self, fraction: float) -> int:
        return self.call(self.proxy.drop_random, fraction)

    def stall(self, seconds: float) -> int:
        return self.call(self.proxy.stall, seconds)

    def stall_random(self, fraction: float, seconds: float) -> int:
        return self.call(self.proxy.stall_random, fraction, seconds)

    def refuse(self, seconds: float) -> None:
        self.call(self.proxy.refuse, seconds)

    def blackhole(self) -> int:
        return self.call(self.proxy.blackhole)

    def heal(self) -> None:
        self.call(self.proxy.heal)

    def start_chaos(self, duration: float | None = None, **kwargs: Any) -> None:
        self.call(self.proxy.start_chaos, duration, **kwargs)

    def stop_chaos(self) -> int:
        return self._run(self.proxy.stop_chaos())
