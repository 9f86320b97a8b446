"""One simulated run: a seed, a cluster, the workload, a nemesis, and the verdict.

Theory of operation
-------------------
``run_seed(seed)`` builds a ``World(seed)``, starts ``SimStandalone`` and the ``Workload`` in it, lets the
nemesis inject faults for ``fault_seconds`` of virtual time, heals everything, lets the workload run on
and drain, then checks the oracle (``workload.check``). Every choice (which fault, when, for how long)
comes from the world's random source, so the same seed replays the same run; ``RunResult.trace_hash``
proves it. A run that breaks an invariant, hangs (the world goes quiescent) or raises is a failure whose
seed replays it.

The faults (``Nemesis``): the store killed and restarted (its disk losing what was not durable), the
controller killed and restarted, a writer or the transactional writer killed and restarted, the store
paused (a GC pause / SIGSTOP), a writer's host cut off from the store for a while. ``plant`` switches on a
deliberate bug (test-only switches of the simulated parts) to prove the simulation finds it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.simulation.cluster import SimStandalone, StandaloneTopology
from tests.simulation.errors import SimulationError
from tests.simulation.workload import Violation, Workload, check
from tests.simulation.world import World

PLANTS = {"ack_before_durable"}  # bugs a run can plant (see the simulated parts' switches)


@dataclass
class RunResult:
    seed: int
    ok: bool
    failure: str = ""
    trace_hash: str = ""
    virtual_seconds: float = 0.0
    wall_seconds: float = 0.0
    faults: list[str] = field(default_factory=list)
    acknowledged: int = 0
    committed: int = 0
    read: int = 0

    def line(self) -> str:
        verdict = "ok" if self.ok else f"FAILED: {self.failure}"
        return (f"seed {self.seed}: {verdict} ({self.acknowledged} events acknowledged, {self.committed} "
                f"transactions committed, {self.read} events read, "
                f"{len(self.faults)} faults, {self.virtual_seconds:.0f} s simulated in {self.wall_seconds:.2f} s; "
                f"trace {self.trace_hash})")


class Nemesis:
    """Injects faults into ``cluster`` and ``workload`` for a while (see the module docstring)."""

    def __init__(self, world: World, cluster: SimStandalone, workload: Workload):
        self.world = world
        self.cluster = cluster
        self.workload = workload
        self.faults: list[str] = []

    def _note(self, text: str) -> None:
        self.faults.append(f"{self.world.loop.time():.3f} {text}")
        self.world.record("fault", text)

    async def run(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        random = self.world.random
        end = loop.time() + seconds
        while loop.time() < end:
            await asyncio.sleep(random.uniform(1.0, 6.0))
            fault = random.choice(("store", "power", "controller", "writer", "transactional", "pause",
                                   "partition"))
            if fault in ("store", "power"):
                down = random.uniform(0.0, 3.0)
                what = "lost power" if fault == "power" else "killed"
                self._note(f"store {what}, restarted after {down:.2f} s")
                self.cluster.crash_store(power_loss=fault == "power")
                await asyncio.sleep(down)
                self.cluster.restart_store()
            elif fault == "controller":
                down = random.uniform(0.0, 3.0)
                self._note(f"controller killed, restarted after {down:.2f} s")
                self.cluster.crash_controller()
                await asyncio.sleep(down)
                self.cluster.restart_controller()
            elif fault == "writer":
                index = random.randrange(len(self.workload.writers))
                self._note(f"writer {index} killed and restarted")
                self.workload.restart_writer(index)
            elif fault == "transactional":
                self._note("transactional writer killed and restarted")
                self.workload.restart_transactional_writer()
            elif fault == "pause":
                seconds_paused = random.uniform(0.1, 4.0)
                self._note(f"store paused {seconds_paused:.2f} s")
                self.cluster.store.pause(seconds_paused)
            else:
                index = random.randrange(len(self.workload.writers))
                cut = random.uniform(0.5, 8.0)
                host = self.workload.writers[index].host
                self._note(f"writer {index} cut off from the store for {cut:.2f} s")
                self.world.network.partition([host], [self.cluster.topology.store_host])
                await asyncio.sleep(cut)
                self.world.network.heal()


def run_seed(seed: int, *, plant: Iterable[str] = (), fault_seconds: float = 30.0, writers: int = 2,
             until: float = 3600.0) -> RunResult:
    """Runs one seed to its verdict (see the module docstring)."""
    plants = set(plant)
    unknown = plants - PLANTS
    if unknown:
        raise ValueError(f"unknown planted bugs {sorted(unknown)}; known: {sorted(PLANTS)}")
    started = time.perf_counter()
    result = RunResult(seed, ok=False)
    world = World(seed)
    topology = StandaloneTopology(disk_options={"ack_before_durable": "ack_before_durable" in plants})
    cluster = SimStandalone(world, topology)
    workload = Workload(world, cluster.controller_uri, writers=writers)
    nemesis = Nemesis(world, cluster, workload)

    async def scenario() -> None:
        cluster.start()
        await workload.start()
        await asyncio.sleep(2.0)
        await nemesis.run(fault_seconds)
        world.network.heal()
        await asyncio.sleep(5.0)  # the workload runs on without faults: progress is required
        await workload.finish()

    try:
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
    return result
