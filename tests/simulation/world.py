"""The simulated world: one seed, one virtual clock, one network, processes, and a trace of what happened.

Theory of operation
-------------------
``World(seed)`` owns everything a run depends on, so that the same seed gives the same run, bit for
bit (FoundationDB's simulator and TigerBeetle's VOPR work this way):

* ``loop``: a ``VirtualLoop`` (tests/simulation/loop.py): virtual time, FIFO order, never blocks.
* ``random``: the one ``random.Random(seed)``; every choice the world makes (latencies, how bytes are
  cut into segments, fault schedules of a nemesis) is drawn from it, in the order the run asks.
* ``network``: the in-memory TCP network (network.py, tcp.py), behind the loop's
  ``create_connection``/``create_server`` and so behind asyncio's streams.
* ``processes``: the simulated processes by name (tests/simulation/processes.py).
* ``patched()``: while the world runs, ``time.time``/``time_ns``/``monotonic``/``monotonic_ns``/
  ``perf_counter``/``perf_counter_ns`` read the virtual clock (wall-clock time starts at
  ``WALL_EPOCH``, monotonic at 0), ``time.sleep`` raises (a blocking sleep would stop every process at
  once), the global ``random`` continues a sequence seeded from the seed, ``os.urandom``,
  ``uuid.uuid4`` and ``random.SystemRandom`` (so ``secrets``) draw from ``World.random``, and
  ``threading.Thread.start`` raises (no threads in the world), ``grpc.aio``'s server and channels
  are the world's (grpc_sim.py), and so is ``coordination.zookeeper.ZooKeeper`` wherever production
  code makes one (zookeeper_sim.py). Everything is restored on exit.
* ``zookeeper(host)``: a ZooKeeper ensemble serving on ``host`` (zookeeper_sim.py), kept in ``zookeepers``.
* The trace: ``record(kind, *fields)`` feeds one line per event (virtual time, kind, fields) to a
  running xxh3 hash and keeps the last ``keep`` lines for failure reports. Fields must be plain
  values (str, int, float, bool, None, bytes, and tuples of them): an object's repr may hold its
  ``id()``, which differs between runs. The network and the processes record what they do.

What breaks determinism (and the trace hash shows it): real clocks read through names imported
before patching (``from time import monotonic``) or from C (``datetime.now()``), iterating sets of
objects hashed by ``id()`` (``asyncio.wait``'s result sets), string hashes between interpreter runs
(PYTHONHASHSEED), garbage-collection timing (``run`` turns the collector off), threads, and state that
one run leaves in the interpreter for the next (module-level counters and caches: replay a seed in a
fresh interpreter, as ``python -m tests.simulation`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import os
import random
import sys
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Awaitable, Coroutine, Iterator
from typing import Any, TypeVar

import xxhash

from tests.simulation import grpc_sim, zookeeper_sim
from tests.simulation.errors import NotSimulated, SimulationError
from tests.simulation.loop import OWNER, VirtualLoop
from tests.simulation.network import Network
from tests.simulation.processes import Process

T = TypeVar("T")

WALL_EPOCH = 1_700_000_000.0  # what time.time() says at virtual time 0
_PLAIN = (str, int, float, bool, type(None), bytes)


def _field(value: Any) -> str:
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ",".join(map(_field, value)) + ")"
    raise TypeError(f"a trace field must be a plain value, not {type(value).__name__} (its repr may hold an id)")


class Trace:
    """A running hash over every event, and the last ``keep`` events as text."""

    def __init__(self, keep: int = 1000) -> None:
        self._hash = xxhash.xxh3_64()
        self.count = 0
        self.tail: deque[str] = deque(maxlen=keep)

    def add(self, now: float, kind: str, fields: tuple[Any, ...]) -> None:
        line = f"{now!r} {kind} {' '.join(map(_field, fields))}".rstrip()
        self._hash.update(line.encode() + b"\n")
        self.count += 1
        self.tail.append(line)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class World:
    """One deterministic world (see the module docstring)."""

    def __init__(self, seed: int, *, keep: int = 1000, **network_options: Any) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.trace = Trace(keep)
        self.context = contextvars.Context()  # the world's own callbacks (pause ends, exits) belong to no process
        self.loop = VirtualLoop(describe=self._describe)
        self.loop.set_exception_handler(self._on_exception)
        self.network = Network(self, **network_options)
        self.loop.network = self.network
        self.processes: dict[str, Process] = {}
        self.zookeepers: dict[str, zookeeper_sim.SimZooKeeperServer] = {}  # ZooKeeper ensembles by host
        self.unhandled: list[dict[str, Any]] = []  # what reached the loop's exception handler
        self._graveyard: list[asyncio.Task[Any]] = []
        self._patch_depth = 0
        self._global_random_state: Any = None
        self._closing = False

    # -- time and the trace --------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Virtual monotonic time (seconds since the world began)."""
        return self.loop.time()

    def wall_time(self) -> float:
        return WALL_EPOCH + self.loop.time()

    def record(self, kind: str, *fields: Any) -> None:
        """Adds an event (at the current virtual time) to the trace (nothing once the world is closing)."""
        if self._closing:
            return
        self.trace.add(self.loop.time(), kind, fields)

    def trace_hash(self) -> str:
        return self.trace.hexdigest()

    def trace_tail(self, count: int | None = None) -> list[str]:
        lines = list(self.trace.tail)
        return lines if count is None else lines[-count:]

    # -- processes -----------------------------------------------------------------------------------

    def process(self, name: str, host: str) -> Process:
        """A new (not yet started) process named ``name`` on ``host``."""
        return Process(self, name, host)

    def zookeeper(self, host: str = "10.0.9.1", port: int = zookeeper_sim.DEFAULT_PORT,
                  **options: Any) -> zookeeper_sim.SimZooKeeperServer:
        """A ZooKeeper ensemble serving on ``host:port`` from now on (options: ``SimZooKeeperServer``'s)."""
        if host in self.zookeepers:
            raise ValueError(f"a ZooKeeper already serves on {host}")
        server = zookeeper_sim.SimZooKeeperServer(self, host, port, **options)
        self.zookeepers[host] = server
        return server

    def bury(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Keeps a dead generation's tasks: never run again, never collected (so no finalizer runs) until close."""
        for task in tasks:
            if not task.done():
                task._log_destroy_pending = False  # type: ignore[attr-defined]
                self._graveyard.append(task)

    # -- running -------------------------------------------------------------------------------------

    def run(self, main: Coroutine[Any, Any, T] | Awaitable[T], until: float | None = None) -> T:
        """Runs ``main`` on the world's loop (inside ``patched()``) and returns its result.

        ``until``: a virtual (monotonic) time past which the run stops with ``SimulationTimeout``.
        ``Quiescent`` is raised when nothing can happen any more and ``main`` has not finished.

        The garbage collector is off meanwhile (collected before): when it runs depends on every allocation
        the interpreter ever made (even the length of ``sys.argv``), and what it frees (weak caches,
        finalizers) changes what the code does next. Reference counting still frees what it can."""
        if OWNER.get() is not None:
            raise SimulationError("World.run is for the test driving the world, not for a simulated process")
        collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        with self.patched():
            self.loop.until = until
            try:
                return self.loop.run_until_complete(main)
            finally:
                self.loop.until = None
                if collecting:
                    gc.enable()

    @contextlib.contextmanager
    def patched(self) -> Iterator[World]:
        """Time, randomness and threads follow the world (see the module docstring); nests."""
        if self._patch_depth:
            self._patch_depth += 1
            try:
                yield self
            finally:
                self._patch_depth -= 1
            return
        loop, rng = self.loop, self.random
        wall_ns = int(WALL_EPOCH) * 1_000_000_000

        def no_sleep(seconds: float) -> None:
            if seconds > 0:
                raise SimulationError("time.sleep() inside the world would stop every process at once: "
                                      "use await asyncio.sleep()")

        def no_threads(thread: threading.Thread) -> None:
            raise NotSimulated(f"threads are not simulated (thread {thread.name!r}): the world runs on one loop")

        def urandom(size: int) -> bytes:
            return rng.randbytes(size)

        def uuid4() -> uuid.UUID:
            return uuid.UUID(bytes=rng.randbytes(16), version=4)

        patches: list[tuple[Any, str, Any]] = [
            (time, "time", lambda: WALL_EPOCH + loop.time()),
            (time, "time_ns", lambda: wall_ns + round(loop.time() * 1e9)),
            (time, "monotonic", loop.time),
            (time, "monotonic_ns", lambda: round(loop.time() * 1e9)),
            (time, "perf_counter", loop.time),
            (time, "perf_counter_ns", lambda: round(loop.time() * 1e9)),
            (time, "sleep", no_sleep),
            (os, "urandom", urandom),
            (random, "_urandom", urandom),
            (uuid, "uuid4", uuid4),
            (threading.Thread, "start", no_threads),
            *grpc_sim.patches(self),  # grpc.aio's server and channels: the world's, over its network
            *zookeeper_sim.patches(self),  # coordination.zookeeper.ZooKeeper: the world's model of ZooKeeper
        ]
        saved = [(target, name, getattr(target, name)) for target, name, _ in patches]
        outer_random = random.getstate()
        if self._global_random_state is None:
            random.seed(self.seed)
        else:
            random.setstate(self._global_random_state)
        for target, name, value in patches:
            setattr(target, name, value)
        self._patch_depth = 1
        try:
            yield self
        finally:
            self._patch_depth = 0
            for target, name, value in saved:
                setattr(target, name, value)
            self._global_random_state = random.getstate()
            random.setstate(outer_random)

    def close(self) -> None:
        """Ends the world: every process dies, suspended coroutines are closed, the loop is closed."""
        if self.loop.is_closed():
            return
        self._closing = True
        for process in self.processes.values():
            if process.owner is not None:
                process.owner.alive = False
        pending = sorted((t for t in asyncio.all_tasks(self.loop) if not t.done()), key=lambda t: t.get_name())
        # A dead coroutine's cleanup (``finally``, ``async with``) has no loop to run on any more: what it raises
        # (``RuntimeError: no running event loop``, "coroutine ignored GeneratorExit") is nobody's concern.
        hook, sys.unraisablehook = sys.unraisablehook, lambda _unraisable: None
        try:
            with self.patched():
                for task in dict.fromkeys([*self._graveyard, *pending]):
                    task._log_destroy_pending = False  # type: ignore[attr-defined]
                    coro = task.get_coro()
                    try:
                        coro.close()
                    except BaseException:  # noqa: BLE001 - its cleanup runs after the world ended
                        pass
            self._graveyard.clear()
            self.loop.close()
            with warnings.catch_warnings():  # a coroutine a dead process made and never awaited: its own business
                warnings.simplefilter("ignore", RuntimeWarning)
                gc.collect()  # the closed coroutines' frames, while their complaints are still ignored
        finally:
            sys.unraisablehook = hook

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- reports -------------------------------------------------------------------------------------

    def _on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.unhandled.append(context)
        loop.default_exception_handler(context)

    def _describe(self) -> str:
        tasks = sorted((t for t in asyncio.all_tasks(self.loop) if not t.done()), key=lambda t: t.get_name())
        owners = {task: process.owner.label for process in self.processes.values() if process.owner is not None
                  for task in process.owner.tasks}
        lines = [f"virtual time {self.loop.time():.6f} s, seed {self.seed}, pending tasks:"]
        for task in tasks[:30]:
            coro = task.get_coro()
            where = getattr(coro, "__qualname__", repr(coro))
            owner = owners.get(task)
            lines.append(f"  {task.get_name()} ({where}){f' of {owner}' if owner else ''}")
        lines.append("last events:")
        lines.extend(f"  {line}" for line in self.trace_tail(20))
        return "\n".join(lines)
