"""One simulated run: a seed, a cluster, the workload, a nemesis, and the verdict.

Theory of operation
-------------------
``run_seed(seed)`` builds a ``World(seed)``, starts ``SimStandalone`` and the ``Workload`` in it, lets the
nemesis inject faults for ``fault_seconds`` of virtual time, heals everything, lets the workload run on
and drain, then checks the oracle (``workload.check``). The faults (which, when, for how long) are drawn up
front from the seed (``fault_schedule``, a random source of the nemesis's own); every other choice comes from
the world's random source. So the same seed replays the same run (``RunResult.trace_hash`` proves it), and a
run may leave some of its seed's faults out (``keep``) while the others stay as they were: shrinking a failing
seed to the faults it needs (``shrink.py``). A run that breaks an invariant, hangs (the world goes quiescent)
or raises is a failure whose seed replays it.

The faults (``Nemesis``): the store killed and restarted (its disk losing what was not durable), the
controller killed and restarted, a writer or the transactional writer killed and restarted, the reader killed
and restarted from the last checkpoint, the store paused (a GC pause / SIGSTOP), a writer's host cut off from
the store for a while. ``plant`` switches on a
deliberate bug (``plants.py``) to prove the simulation finds it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from random import Random

from tests.simulation.cluster import SimStandalone, StandaloneTopology
from tests.simulation.errors import SimulationError
from tests.simulation.plants import check as check_plants
from tests.simulation.plants import planted
from tests.simulation.workload import Violation, Workload, check
from tests.simulation.world import World


@dataclass
class RunResult:
    seed: int
    ok: bool
    failure: str = ""
    trace_hash: str = ""
    virtual_seconds: float = 0.0
    wall_seconds: float = 0.0
    faults: list[str] = field(default_factory=list)  # the faults applied, as "<virtual time> #<index> <what>"
    schedule: int = 0  # faults in the seed's whole schedule
    acknowledged: int = 0
    committed: int = 0
    read: int = 0
    checkpoints: int = 0  # completed checkpoints the workload kept
    scales: int = 0
    truncations: int = 0  # that returned
    resets: int = 0  # of the reader group to a checkpoint, after a reader crash

    def line(self) -> str:
        failure = self.failure if len(self.failure) <= 400 else self.failure[:400] + " ..."
        verdict = "ok" if self.ok else f"FAILED: {failure}"
        return (f"seed {self.seed}: {verdict} ({self.acknowledged} events acknowledged, {self.committed} "
                f"transactions committed, {self.read} events read, {self.checkpoints} checkpoints, {self.scales} "
                f"scales, {self.truncations} truncations, {self.resets} resets, "
                f"{len(self.faults)} faults, {self.virtual_seconds:.0f} s simulated in {self.wall_seconds:.2f} s; "
                f"trace {self.trace_hash})")


FAULT_KINDS = ("store", "power", "controller", "writer", "transactional", "reader", "pause", "partition")


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule: ``at`` virtual seconds after the faults begin, lasting ``seconds`` (the time a
    process stays down, is paused or cut off; 0 for an instant one), hitting writer ``target`` where it applies."""

    index: int
    at: float
    kind: str
    seconds: float = 0.0
    target: int = 0

    def describe(self) -> str:
        if self.kind in ("store", "power"):
            what = "lost power" if self.kind == "power" else "killed"
            return f"store {what}, restarted after {self.seconds:.2f} s"
        if self.kind == "controller":
            return f"controller killed, restarted after {self.seconds:.2f} s"
        if self.kind == "writer":
            return f"writer {self.target} killed and restarted"
        if self.kind == "transactional":
            return "transactional writer killed and restarted"
        if self.kind == "reader":
            return "reader killed, restarted from the last checkpoint"
        if self.kind == "pause":
            return f"store paused {self.seconds:.2f} s"
        return f"writer {self.target} cut off from the store for {self.seconds:.2f} s"


def fault_schedule(seed: int, seconds: float, writers: int) -> list[Fault]:
    """The seed's faults, drawn up front from a random source of the nemesis's own: what the system does (which
    draws on the world's source) never changes the schedule, so a run with some faults left out (shrinking)
    keeps the others as they were. Faults that hold the nemesis (a process down, a host cut off) never overlap."""
    random = Random(f"nemesis-{seed}")
    faults: list[Fault] = []
    now = 0.0
    while now < seconds:
        now += random.uniform(1.0, 6.0)
        kind = random.choice(FAULT_KINDS)
        if kind in ("store", "power", "controller"):
            fault = Fault(len(faults), now, kind, random.uniform(0.0, 3.0))
        elif kind == "writer":
            fault = Fault(len(faults), now, kind, target=random.randrange(writers))
        elif kind == "pause":
            fault = Fault(len(faults), now, kind, random.uniform(0.1, 4.0))
        elif kind == "partition":
            target = random.randrange(writers)
            fault = Fault(len(faults), now, kind, random.uniform(0.5, 8.0), target)
        else:
            fault = Fault(len(faults), now, kind)
        faults.append(fault)
        if kind not in ("writer", "transactional", "reader", "pause"):
            now += fault.seconds  # the nemesis waits for the process to come back or the cut to heal
    return faults


class Nemesis:
    """Injects the faults of a schedule into ``cluster`` and ``workload`` (see the module docstring)."""

    def __init__(self, world: World, cluster: SimStandalone, workload: Workload):
        self.world = world
        self.cluster = cluster
        self.workload = workload
        self.faults: list[str] = []

    def _note(self, fault: Fault) -> None:
        text = f"#{fault.index} {fault.describe()}"
        self.faults.append(f"{self.world.loop.time():.3f} {text}")
        self.world.record("fault", text)

    async def run(self, schedule: Iterable[Fault], seconds: float) -> None:
        """Applies ``schedule`` (times counted from now), then waits out ``seconds`` of faults if time is left."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        for fault in schedule:
            await asyncio.sleep(max(0.0, began + fault.at - loop.time()))
            self._note(fault)
            await self._apply(fault)
        await asyncio.sleep(max(0.0, began + seconds - loop.time()))

    async def _apply(self, fault: Fault) -> None:
        cluster, workload = self.cluster, self.workload
        if fault.kind in ("store", "power"):
            cluster.crash_store(power_loss=fault.kind == "power")
            await asyncio.sleep(fault.seconds)
            cluster.restart_store()
        elif fault.kind == "controller":
            cluster.crash_controller()
            await asyncio.sleep(fault.seconds)
            cluster.restart_controller()
        elif fault.kind == "writer":
            workload.restart_writer(fault.target)
        elif fault.kind == "transactional":
            workload.restart_transactional_writer()
        elif fault.kind == "reader":
            workload.restart_reader()
        elif fault.kind == "pause":
            cluster.store.pause(fault.seconds)
        else:
            host = workload.writers[fault.target].host
            self.world.network.partition([host], [cluster.topology.store_host])
            await asyncio.sleep(fault.seconds)
            self.world.network.heal()


def run_seed(seed: int, *, plant: Iterable[str] = (), fault_seconds: float = 30.0, writers: int = 2,
             until: float = 3600.0, keep: Iterable[int] | None = None) -> RunResult:
    """Runs one seed to its verdict (see the module docstring); ``keep``: the indexes of the seed's faults to
    apply (all when None), as shrinking leaves them."""
    plants = check_plants(plant)
    started = time.perf_counter()
    result = RunResult(seed, ok=False)
    world = World(seed)
    topology = StandaloneTopology(disk_options={"ack_before_durable": "ack_before_durable" in plants})
    cluster = SimStandalone(world, topology)
    workload = Workload(world, cluster.controller_uri, writers=writers)
    nemesis = Nemesis(world, cluster, workload)
    schedule = fault_schedule(seed, fault_seconds, writers)
    kept = set(range(len(schedule)) if keep is None else keep)
    result.schedule = len(schedule)

    async def scenario() -> None:
        cluster.start()
        await workload.start()
        await asyncio.sleep(2.0)
        await nemesis.run([fault for fault in schedule if fault.index in kept], fault_seconds)
        world.network.heal()
        await asyncio.sleep(5.0)  # the workload runs on without faults: progress is required
        await workload.finish()

    try:
        with planted(plants):
            world.run(scenario(), until=until)
        check(workload.oracle)
        result.ok = True
    except Violation as violation:
        result.failure = f"invariant broken: {violation}"
    except SimulationError as error:
        result.failure = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    finally:
        result.trace_hash = world.trace_hash()
        result.virtual_seconds = world.loop.time() if not world.loop.is_closed() else 0.0
        world.close()
        cluster.close()
    result.wall_seconds = time.perf_counter() - started
    result.faults = nemesis.faults
    result.acknowledged = len(workload.oracle.acknowledged)
    result.committed = len(workload.oracle.committed)
    result.read = len(workload.oracle.read)
    result.checkpoints = len(workload.oracle.checkpoints)
    result.scales = workload.oracle.scales
    result.truncations = sum(returned for _, returned in workload.oracle.truncations)
    result.resets = workload.oracle.resets
    return result
