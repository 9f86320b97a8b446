"""Simulated processes: a root coroutine on a host, and everything it starts, that can crash and be paused.

Theory of operation
-------------------
``start(main)`` makes a new *generation* (a ``loop.Owner``) and runs ``main()`` as a task in a fresh
``contextvars.Context`` whose ``OWNER`` is that generation. Tasks copy the context they are created
in and callbacks run in the context they were scheduled from, so every task, timer, future callback,
server and connection the process creates belongs to the generation, however deep.

* ``crash()`` is ``kill -9``: the generation is marked dead and the loop drops every handle of it from
  then on, so its tasks never take another step and no ``finally``/``except`` of theirs runs against
  the world. Its tasks are not cancelled: ``Task.cancel`` would cancel the futures they await, which
  may belong to live processes. The operating system's part follows: its listening servers close
  (connects are refused) and its connections reset (peers get ``ConnectionResetError``). The dead
  tasks are kept (never collected, never logged as destroyed) until ``World.close``.
* ``restart(main)`` starts the next generation on the same host (crashing the current one first).
* ``pause(seconds)`` is a GC pause or SIGSTOP: the generation's handles that come due are held and
  run, in their order, when the pause ends; the rest of the world (including the kernel's part of
  its connections) goes on. Called from inside the process, it is a blocking call (a log store's slow
  fsync on its loop, journal_sim.py): the rest of the calling callback runs at once, but what it writes
  to its connections leaves only when the pause ends (tcp.py), as it would once the call returned.

``Terminations`` is SIGTERM: a process's main, once it serves, waits for it, stops its service gracefully (the
production code's own stop) and returns; the process then exits (a crash of a generation with nothing left to
run). A stop that takes longer than ``STOP_GRACE_SECONDS`` is killed, and is a problem of the run.

Not simulated: memory or CPU of a process, disks (disk.py, journal_sim.py), other signals. Plain Python objects
shared between processes (not over the network) are not isolated: simulated processes share one interpreter.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tests.simulation.loop import OWNER, Owner

if TYPE_CHECKING:
    from tests.simulation.world import World

Main = Callable[[], Awaitable[Any]]


class Process:
    """A simulated process named ``name`` on ``host``: ``start``, ``crash``, ``restart``, ``pause``."""

    def __init__(self, world: World, name: str, host: str) -> None:
        if name in world.processes:
            raise ValueError(f"a process named {name!r} already exists")
        self.world = world
        self.name = name
        self.host = host
        self.generation = 0
        self.owner: Owner | None = None
        self.task: asyncio.Task[Any] | None = None
        world.processes[name] = self

    @property
    def alive(self) -> bool:
        return self.owner is not None and self.owner.alive

    @property
    def paused(self) -> bool:
        return self.owner is not None and self.owner.paused

    def start(self, main: Main) -> asyncio.Task[Any]:
        """Runs ``main()`` as the root task of a new generation; returns that task."""
        if self.alive:
            raise RuntimeError(f"process {self.name} is already running (generation {self.generation})")
        self.generation += 1
        owner = Owner(f"{self.name}#{self.generation}", self.host)
        self.owner = owner
        context = contextvars.Context()
        context.run(OWNER.set, owner)
        self.world.record("start", self.name, self.host, self.generation)

        async def root() -> Any:
            return await main()

        task = self.world.loop.create_task(root(), name=owner.label, context=context)
        task.add_done_callback(self._exited, context=self.world.context)
        self.task = task
        return task

    def _exited(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            outcome = "cancelled"
        elif task.exception() is not None:
            outcome = f"raised {type(task.exception()).__name__}"
        else:
            outcome = "returned"
        self.world.record("exit", task.get_name(), outcome)

    def crash(self) -> None:
        """Stops the process now and for good (see the module docstring); nothing if it is not running."""
        owner = self.owner
        if owner is None or not owner.alive:
            return
        owner.alive = False
        owner.paused = False
        owner.held.clear()
        self.world.record("crash", self.name, self.generation)
        self.world.network.crash(owner)
        self.world.bury(owner.tasks)
        owner.tasks = []

    def restart(self, main: Main) -> asyncio.Task[Any]:
        """Crashes the current generation if it runs, then starts the next one on the same host."""
        self.crash()
        self.world.record("restart", self.name, self.generation + 1)
        return self.start(main)

    def pause(self, seconds: float) -> None:
        """Holds the process's callbacks for ``seconds`` of virtual time (extends a pause under way)."""
        owner = self.owner
        if owner is None or not owner.alive:
            raise RuntimeError(f"process {self.name} is not running")
        if seconds < 0:
            raise ValueError("a pause lasts zero seconds or more")
        loop = self.world.loop
        end = loop.time() + seconds
        owner.paused = True
        owner.pause_end = max(owner.pause_end, end)
        self.world.record("pause", self.name, self.generation, seconds)
        loop.call_at(end, self._pause_over, owner, context=self.world.context)

    def _pause_over(self, owner: Owner) -> None:
        loop = self.world.loop
        if not owner.alive or not owner.paused or loop.time() < owner.pause_end:
            return
        owner.paused = False
        self.world.record("resume", self.name, self.generation)
        loop.requeue(owner.held)

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.alive else "stopped"
        return f"<Process {self.name}@{self.host} #{self.generation} {state}>"


RESTART_SECONDS = 1.0  # a process whose start failed is started again after this long (its supervisor)


async def start_supervised(world: World, kind: str, start: Callable[[], Awaitable[Any]],
                           failures: tuple[type[BaseException], ...], *fields: Any,
                           crashed: Callable[[Exception], None] | None = None) -> Any:
    """Returns what ``start()`` returns once it succeeds: a start that fails with one of ``failures`` (the process
    exits) is tried again ``RESTART_SECONDS`` later, as a supervisor (systemd, Kubernetes) restarts the process, and
    recorded as ``<kind>_start_failed``; any other error is a bug, given to ``crashed`` and raised."""
    while True:
        try:
            return await start()
        except failures as error:
            world.record(f"{kind}_start_failed", *fields, str(error)[:80])
            await asyncio.sleep(RESTART_SECONDS)
        except Exception as error:
            if crashed is not None:
                crashed(error)
            raise


STOP_GRACE_SECONDS = 30.0  # a graceful stop that takes longer is killed (Kubernetes' default grace) and reported
STOP_POLL_SECONDS = 0.1  # how often a stop looks whether another fault ended the process meanwhile


class Terminations:
    """SIGTERM for simulated processes. A process's main coroutine, once it serves, awaits ``requested(process)``,
    then stops its service gracefully and returns (the CLI installs its handler once it serves, and exits after the
    stop). ``stop(process)`` sends the signal and waits for the process to end. ``problems``: graceful stops that
    raised or took longer than ``STOP_GRACE_SECONDS`` (such a process is killed), for the run's verdict."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.problems: list[str] = []
        self._requests: dict[tuple[str, int], asyncio.Future[None]] = {}  # (process, generation) -> its signal

    async def requested(self, process: Process) -> None:
        """Returns when the process's current generation is told to stop (``stop``)."""
        key = (process.name, process.generation)
        request = self._requests[key] = self.world.loop.create_future()
        try:
            await request
        finally:
            self._requests.pop(key, None)

    async def stop(self, process: Process) -> str:
        """Sends SIGTERM; returns "stopped" once the process has stopped and exited; "killed" when it was still
        starting (no handler yet: the signal's default ends it at once); "not running"; or "overran" (killed after
        ``STOP_GRACE_SECONDS``, and a problem); or "ended by another fault" (a crash or restart meanwhile: then the
        process is left to that one)."""
        if not process.alive or process.task is None:
            return "not running"
        generation, task = process.generation, process.task
        request = self._requests.get((process.name, generation))
        if request is None:
            process.crash()
            return "killed"
        request.set_result(None)
        loop = self.world.loop
        deadline = loop.time() + STOP_GRACE_SECONDS
        while not task.done():
            if process.generation != generation or not process.alive:
                return "ended by another fault"  # (a crash meanwhile: its tasks never finish)
            if loop.time() >= deadline:
                self.problems.append(f"{process.name}'s graceful stop at {loop.time() - STOP_GRACE_SECONDS:.3f} s "
                                     f"took longer than {STOP_GRACE_SECONDS:g} s; killed")
                self.world.record("stop_overran", process.name)
                process.crash()
                return "overran"
            await asyncio.wait({task}, timeout=STOP_POLL_SECONDS)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            self.problems.append(f"{process.name}'s graceful stop failed: {type(error).__name__}: {error}")
        if process.generation == generation:
            process.crash()  # the process exits once its main returned
        return "stopped"
