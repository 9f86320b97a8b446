"""An asyncio event loop on virtual time, for the simulated world.

Theory of operation
-------------------
``VirtualLoop`` is a ``BaseEventLoop`` whose one iteration (``_run_once``) never waits: when nothing
is ready it jumps the virtual clock straight to the earliest scheduled timer. Ready callbacks run in
FIFO order and timers in heap order, and nothing outside the loop (no selector, no thread, no real
clock) decides what runs next, so a run is a pure function of the code and the world's seed.

* ``time()`` is the virtual monotonic clock; it starts at 0 and only moves when nothing is ready.
* When nothing is ready and no timer is scheduled, yet the loop is asked to go on, the world is
  quiescent (a hang in real life): ``Quiescent`` is raised instead of sleeping forever. When callbacks
  keep running without the clock ever moving (``LIVELOCK_STEPS`` of them at one instant: a busy loop,
  which in real life would burn a core), ``Livelock`` is raised instead of spinning forever.
* Ownership: every handle carries the ``contextvars.Context`` it runs in (tasks run their steps in
  theirs, and every callback copies the context it was scheduled from). ``OWNER`` in that context
  names the process generation (an ``Owner``) the handle belongs to, or is None for the world and
  the test driving it. At run time a handle of a dead owner is dropped and a handle of a paused
  owner is held back until the pause ends. Nothing else changes in asyncio's behaviour.
* Real I/O is refused with ``NotSimulated``: raw socket calls, unix sockets, datagrams, pipes,
  subprocesses, TLS, readers/writers on file descriptors. The in-memory TCP network
  (``create_connection``/``create_server``) is the world's ``Network``; signal handlers are kept
  (never called). ``run_in_executor`` runs the function at once, synchronously, and returns a done
  future: there are no threads in the world, and a thread's timing would not be deterministic.

Not simulated: the CPU time callbacks take (a callback runs in zero virtual time), threads,
``call_soon_threadsafe`` from other threads (it works as ``call_soon``).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from tests.simulation.errors import Livelock, NotSimulated, Quiescent, SimulationTimeout

if TYPE_CHECKING:
    from tests.simulation.network import Network

T = TypeVar("T")

LIVELOCK_STEPS = 2_000_000  # callbacks at one virtual instant before the run is declared a busy loop


class Owner:
    """One generation of a simulated process, as the loop sees it: alive or dead, paused or not.

    ``held``: the handles that came due while paused, run in their order when the pause ends.
    ``tasks``: the tasks created while running as this owner (done ones pruned from time to time)."""

    def __init__(self, label: str, host: str | None = None) -> None:
        self.label = label
        self.host = host  # where its servers listen and its connections come from
        self.alive = True
        self.paused = False
        self.pause_end = 0.0  # the virtual time the current pause ends
        self.held: deque[asyncio.Handle] = deque()
        self.tasks: list[asyncio.Task[Any]] = []

    def adopt(self, task: asyncio.Task[Any]) -> None:
        if len(self.tasks) >= 64 and len(self.tasks) & (len(self.tasks) - 1) == 0:  # prune at powers of two
            self.tasks = [t for t in self.tasks if not t.done()]
        self.tasks.append(task)

    def __repr__(self) -> str:
        state = "dead" if not self.alive else "paused" if self.paused else "alive"
        return f"<Owner {self.label} {state}>"


OWNER: contextvars.ContextVar[Owner | None] = contextvars.ContextVar("simulation_owner", default=None)

_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


class VirtualLoop(asyncio.BaseEventLoop):
    """The world's event loop: virtual time, FIFO order, no blocking, owners (see the module docstring)."""

    # BaseEventLoop's own state, which _run_once works on (typeshed does not declare it)
    _ready: deque[Any]  # of asyncio.Handle
    _scheduled: list[Any]  # a heap of asyncio.TimerHandle
    _stopping: bool
    _timer_cancelled_count: int

    def __init__(self, describe: Callable[[], str] | None = None) -> None:
        super().__init__()
        self._now = 0.0
        self._clock_resolution = 1e-9
        self.until: float | None = None  # the virtual time limit of the current run (SimulationTimeout)
        self.network: Network | None = None  # set by the World
        self.steps = 0  # handles run so far
        self._describe = describe or (lambda: "")
        self._signal_handlers: dict[int, asyncio.Handle] = {}
        self._busy_at, self._busy_steps = -1.0, 0  # the virtual time callbacks last ran at, and the steps then

    # -- the clock and one iteration ------------------------------------------------------------------

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        scheduled = self._scheduled
        if len(scheduled) > 100 and self._timer_cancelled_count * 2 > len(scheduled):
            live = [h for h in scheduled if not h._cancelled]
            for h in scheduled:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(live)
            self._scheduled = scheduled = live
            self._timer_cancelled_count = 0
        while scheduled:  # drop the cancelled timers and those of dead owners from the head
            head = scheduled[0]
            if head._cancelled:
                self._timer_cancelled_count -= 1
            else:
                owner = head._context.get(OWNER)
                if owner is None or owner.alive:
                    break
            heapq.heappop(scheduled)
            head._scheduled = False

        ready = self._ready
        if not ready and not self._stopping:
            if not scheduled:
                raise Quiescent("the world is quiescent: nothing is ready, no timer is scheduled, and the run has "
                                "not finished (in real life, a hang)\n" + self._describe())
            when = scheduled[0]._when
            if self.until is not None and when > self.until:
                raise SimulationTimeout(f"virtual time limit {self.until} reached (next timer at {when})\n"
                                        + self._describe())
            if when > self._now:
                self._now = when
        now = self._now
        if now != self._busy_at:
            self._busy_at, self._busy_steps = now, self.steps
        elif self.steps - self._busy_steps > LIVELOCK_STEPS:
            raise Livelock(f"{LIVELOCK_STEPS:,} callbacks ran at virtual time {now:.6f} without the clock moving "
                           f"(in real life, a busy loop)\n" + self._describe())
        while scheduled and scheduled[0]._when <= now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            ready.append(handle)

        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            owner = handle._context.get(OWNER)
            if owner is not None:
                if not owner.alive:
                    continue
                if owner.paused:
                    owner.held.append(handle)
                    continue
            self.steps += 1
            handle._run()
        handle = None  # break a cycle if an exception escapes

    def requeue(self, handles: deque[asyncio.Handle]) -> None:
        """Makes held handles ready again (in their order), after those already ready."""
        self._ready.extend(handles)
        handles.clear()

    def _write_to_self(self) -> None:
        pass  # nothing ever blocks, so nothing needs waking

    def _process_events(self, event_list: Any) -> None:
        pass

    # -- tasks and executors ---------------------------------------------------------------------------

    def create_task(self, coro: Coroutine[Any, Any, T] | Awaitable[T], *, name: str | None = None,  # type: ignore[override]
                    context: contextvars.Context | None = None) -> asyncio.Task[T]:
        task: asyncio.Task[T] = super().create_task(coro, name=name, context=context)  # type: ignore[arg-type]
        owner = context.get(OWNER) if context is not None else OWNER.get()
        if owner is not None:
            owner.adopt(task)
        return task

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:  # type: ignore[override]
        """Runs ``func(*args)`` now, in the caller's context, whatever the executor: the world has no threads."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        future: asyncio.Future[T] = self.create_future()
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - handed on, as asyncio does
            future.set_exception(exc if not isinstance(exc, StopIteration) else RuntimeError(repr(exc)))
        else:
            future.set_result(result)
        return future

    def set_default_executor(self, executor: Any) -> None:
        pass  # never used: run_in_executor runs inline

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0, type: int = 0, proto: int = 0,
                          flags: int = 0) -> list[tuple[Any, ...]]:
        """Every name resolves to itself: the network decides later whether a host answers."""
        name = host.decode() if isinstance(host, bytes) else str(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (name, int(port or 0)))]

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int = 0) -> tuple[str, str]:
        return str(sockaddr[0]), str(sockaddr[1])

    # -- the network -----------------------------------------------------------------------------------

    def _network(self) -> Network:
        if self.network is None:
            raise NotSimulated("this loop has no network attached (create it through World)")
        return self.network

    async def create_connection(self, protocol_factory: Callable[[], asyncio.BaseProtocol],  # type: ignore[override]
                                host: str | None = None, port: int | None = None, **kwargs: Any
                                ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        return await self._network().create_connection(protocol_factory, host, port, **kwargs)

    async def create_server(self, protocol_factory: Callable[[], asyncio.BaseProtocol],  # type: ignore[override]
                            host: Any = None, port: int | None = None, **kwargs: Any) -> asyncio.AbstractServer:
        return await self._network().create_server(protocol_factory, host, port, **kwargs)

    # -- what is not simulated -------------------------------------------------------------------------

    def _refuse(self, what: str) -> NotSimulated:
        return NotSimulated(f"{what} is real I/O, which the simulated world does not do; use the world's network "
                            f"(create_connection / create_server / asyncio streams)")

    async def sock_connect(self, sock: Any, address: Any) -> None:
        raise self._refuse("loop.sock_connect")

    async def sock_accept(self, sock: Any) -> Any:
        raise self._refuse("loop.sock_accept")

    async def sock_recv(self, sock: Any, nbytes: int) -> bytes:
        raise self._refuse("loop.sock_recv")

    async def sock_recv_into(self, sock: Any, buf: Any) -> int:
        raise self._refuse("loop.sock_recv_into")

    async def sock_sendall(self, sock: Any, data: Any) -> None:
        raise self._refuse("loop.sock_sendall")

    async def sock_sendfile(self, sock: Any, file: Any, offset: int = 0, count: int | None = None, *,
                            fallback: bool | None = True) -> int:
        raise self._refuse("loop.sock_sendfile")

    async def create_unix_connection(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("loop.create_unix_connection")

    async def create_unix_server(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("loop.create_unix_server")

    async def create_datagram_endpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("loop.create_datagram_endpoint (UDP)")

    async def connect_accepted_socket(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("loop.connect_accepted_socket")

    async def connect_read_pipe(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("loop.connect_read_pipe")

    async def connect_write_pipe(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("loop.connect_write_pipe")

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("a subprocess (loop.subprocess_exec)")

    async def subprocess_shell(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("a subprocess (loop.subprocess_shell)")

    async def start_tls(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSimulated("TLS is not simulated yet (loop.start_tls)")

    def add_reader(self, fd: Any, callback: Callable[..., Any], *args: Any) -> None:  # type: ignore[override]
        raise self._refuse("loop.add_reader on a file descriptor")

    def add_writer(self, fd: Any, callback: Callable[..., Any], *args: Any) -> None:  # type: ignore[override]
        raise self._refuse("loop.add_writer on a file descriptor")

    def remove_reader(self, fd: Any) -> bool:
        return False

    def remove_writer(self, fd: Any) -> bool:
        return False

    def add_signal_handler(self, sig: int, callback: Callable[..., Any], *args: Any) -> None:  # type: ignore[override]
        """Kept, never called: no signal reaches the world (a later nemesis may deliver them)."""
        self._signal_handlers[int(sig)] = asyncio.Handle(callback, args, self)

    def remove_signal_handler(self, sig: int) -> bool:
        return self._signal_handlers.pop(int(sig), None) is not None


def is_local_name(host: str) -> bool:
    """Whether ``host`` names the caller's own host (loopback)."""
    return host in _LOCAL_NAMES
