"""Tributary's own processes in the simulated world: a segment store and a controller, each a process on a
host of its own, as ``tributary standalone`` composes them (one store owning every container, one controller).

Theory of operation
-------------------
The production code runs unchanged: ``SegmentStoreService`` and ``ControllerApp`` are started in their
process's main coroutine, exactly as ``tributary.assembly`` starts them, and everything they do goes
through the seams the world replaces:

* the wire protocol and the REST-less controller's gRPC travel over the world's network (``loop.create_server``
  / ``create_connection``, and ``grpc.aio.server`` / ``insecure_channel`` while ``grpc_sim`` is installed);
* Tier-1 is a ``DurableDataLog`` per container on the store host's simulated disk (``tests/simulation/disk.py``):
  a crash of the store loses what was not yet durable;
* Tier-2 is an ``InMemoryChunkStorage`` (tests/support/doubles) that outlives every process, as an object store
  does, behind a ``FaultyChunkStorage`` (tests/support/faults/tier2.py) that gives every call an object store's
  latency (``TIER2_LATENCY``, drawn per call) and whose knobs the nemesis may turn (unavailable for a while);
* the controller's metadata lives in table segments on the store, as in production.

What is not simulated here (later slices): several stores and controllers on ZooKeeper, the replicated log.
The store's data dir is a real directory, named after the seed under the system's temporary directory (it holds
a layout file written at start); it is removed when the cluster is closed. Two runs of one seed at the same
time would share it.
"""

from __future__ import annotations

import asyncio
import fcntl
import pathlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.app import ControllerApp
from server.config import SegmentStoreConfig
from server.service import SegmentStoreService, StartupError
from tests.simulation.disk import SimDisk
from tests.simulation.processes import Process, Terminations, start_supervised
from tests.simulation.world import World
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.faults.tier2 import FaultyChunkStorage

STORE_PORT = 12345
TIER2_LATENCY = (0.002, 0.03)  # seconds per Tier-2 call, as an object store in the same region answers
CONTROLLER_PORT = 9090


def claim_data_dir(name: str) -> tuple[pathlib.Path, Callable[[], None]]:
    """A fresh, empty directory named ``name`` under the system's temporary directory, and the function that
    removes it. The name must be the same in every run of a seed (it is in the stores' configs, and other
    characters would hash, and so iterate, differently), so two runs of one seed at once (pytest workers, two
    checkouts) would share it: an exclusive lock on ``name.lock`` makes the second wait for the first."""
    root = pathlib.Path(tempfile.gettempdir()) / "tributary-simulation"
    root.mkdir(parents=True, exist_ok=True)
    lock = open(root / f"{name}.lock", "w")  # noqa: SIM115 - held until the release
    fcntl.flock(lock, fcntl.LOCK_EX)
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()

    def release() -> None:
        shutil.rmtree(path, ignore_errors=True)
        lock.close()  # (closing the file releases the lock)

    return path, release


@dataclass
class StandaloneTopology:
    """Where the parts run, and how the store is configured for a simulation (small, so that checkpoints,
    Tier-2 flushes and log truncation happen within seconds of virtual time)."""

    store_host: str = "10.0.0.1"
    controller_host: str = "10.0.1.1"
    container_count: int = 2
    store_options: dict[str, Any] = field(default_factory=lambda: {
        "checkpoint_every_operations": 200, "checkpoint_every_bytes": 256 * 1024, "flush_interval": 1.0,
        "flush_size": 64 * 1024, "log_open_wait": 120.0})
    disk_options: dict[str, Any] = field(default_factory=dict)


class SimStandalone:
    """A segment store process and a controller process in ``world`` (see the module docstring)."""

    def __init__(self, world: World, topology: StandaloneTopology | None = None):
        self.world = world
        self.topology = topology = topology or StandaloneTopology()
        # a name that is the same in every run of a seed: the path is in the store's config, and a string of
        # other characters would hash, and so iterate, differently (mkdtemp's names are random)
        self.data_dir, self._release_data_dir = claim_data_dir(f"seed-{world.seed:012d}")
        self.disk = SimDisk(world, topology.store_host, **topology.disk_options)
        self.tier2 = FaultyChunkStorage(InMemoryChunkStorage())
        self.tier2.latency = lambda: world.random.uniform(*TIER2_LATENCY)
        self.store: Process = world.process("segment-store", topology.store_host)
        self.controller: Process = world.process("controller", topology.controller_host)
        self.terminations = Terminations(world)  # graceful stops (SIGTERM)
        self.config = SegmentStoreConfig(data_dir=self.data_dir, host=topology.store_host, port=STORE_PORT,
                                         container_count=topology.container_count, tier1="memory", tier2="none",
                                         **topology.store_options)

    @property
    def controller_uri(self) -> str:
        return f"tcp://{self.topology.controller_host}:{CONTROLLER_PORT}"

    # ------------------------------------------------------------------ the processes' main coroutines

    async def _store_main(self) -> None:
        """A store whose start fails (``StartupError``: Tier-2 down longer than ``tier2_open_wait``) is started
        again a second later, as its supervisor (systemd, Kubernetes) restarts a process that exited."""
        async def start() -> SegmentStoreService:
            service = SegmentStoreService(self.config, log_factory=lambda _config, container: self.disk.log(
                f"container-{container}"), chunk_storage=self.tier2)
            await service.start()
            return service

        service = await start_supervised(self.world, "store", start, (StartupError,))
        await self.terminations.requested(self.store)  # serves until stopped (or the process crashes)
        await service.stop()

    async def _controller_main(self) -> None:
        topology = self.topology
        while True:  # as `tributary controller` does at start: wait for the store (it may be down or recovering)
            app = ControllerApp(host=topology.controller_host, port=CONTROLLER_PORT,
                                segment_store=(topology.store_host, STORE_PORT),
                                container_count=topology.container_count, verify_container_count=True,
                                advertised_host=topology.controller_host)
            try:
                await app.start()
                break
            except (OSError, TimeoutError, Exception) as error:  # noqa: BLE001 - retried like the assembly does
                self.world.record("controller_start_failed", type(error).__name__)
                await asyncio.sleep(1.0)
        await self.terminations.requested(self.controller)
        await app.stop()

    # ------------------------------------------------------------------ life and faults

    def start(self) -> None:
        self.store.start(self._store_main)
        self.controller.start(self._controller_main)

    def crash_store(self, *, power_loss: bool = False) -> None:
        """kill -9 of the store (its disk's page cache survives), or with ``power_loss`` its host losing power
        (what its disk had not made durable is lost, a record may be torn)."""
        self.store.crash()
        self.disk.crash(power_loss=power_loss)

    def restart_store(self) -> None:
        """Starts the store again (after ``crash_store``; a running store is killed first)."""
        if self.store.alive:
            self.crash_store()
        self.store.start(self._store_main)

    async def stop_store(self) -> str:
        """SIGTERM to the store: it stops gracefully and exits (``Terminations.stop`` says what is returned); its
        disk keeps what it was given (the page cache outlives the process)."""
        outcome = await self.terminations.stop(self.store)
        if outcome != "not running":
            self.disk.crash(power_loss=False)
        return outcome

    async def stop_controller(self) -> str:
        """SIGTERM to the controller (as ``stop_store``)."""
        return await self.terminations.stop(self.controller)

    def crash_controller(self) -> None:
        self.controller.crash()

    def restart_controller(self) -> None:
        self.controller.restart(self._controller_main)

    def close(self) -> None:
        self._release_data_dir()
