"""A whole Tributary cluster in the simulated world: ZooKeeper, log stores, segment stores and controllers, each a
process on a host of its own, composed as ``tributary logstore``, ``tributary segmentstore --cluster --tier1
replicated`` and ``tributary controller --zk`` compose them (docs/cluster.md).

Theory of operation
-------------------
``SimCluster(world, topology)`` makes, in ``world``:

* one ZooKeeper ensemble (``world.zookeeper``: zookeeper_sim.py; one highly available service) on
  ``topology.zookeeper_host``, which every other process reaches as ``zk_hosts``;
* ``topology.logstores`` log stores (``SimLogStoreHost`` with ``zk_hosts``: the production ``LogStoreService``,
  registered in ZooKeeper and collecting garbage, on a simulated journal per host: journal_sim.py);
* ``topology.stores`` segment stores, each the production ``SegmentStoreService`` in cluster mode
  (``cluster=True``, ``tier1="replicated"``: registration, the container map, a ``ReplicatedDurableDataLog`` per
  container over the log stores) in a process of its own. Tier-2 is one ``InMemoryChunkStorage`` that every store
  shares and that outlives every process, as an object store (or a shared filesystem) does, behind a
  ``FaultyChunkStorage`` giving each call an object store's latency (cluster.py's ``TIER2_LATENCY``);
* ``topology.controllers`` controllers, each ``tributary.assembly.ClusteredController`` (``ControllerApp`` over a
  ``ControllerCluster``: leader election, the container map, buckets, leases) in a process of its own.

Every part runs unchanged: ZooKeeper clients are the world's model of kazoo behind the real wrapper (the
world patches ``coordination.zookeeper.ZooKeeper`` wherever production code makes one), gRPC and the wire
protocol travel over the world's network, the log stores' journals are the only seam of the log stores
(``LogStore``'s ``journal`` and ``replica_id`` keywords, as journal_sim.py says). A segment store or controller
whose start fails (``StartupError``, ``StartupFailed``: ZooKeeper down, too few log stores, no segment store yet
past ``--wait``) is started again a second later, as a supervisor restarts a process that exited; one that fails
otherwise (a bug) is left dead and named in ``crashes`` (and so in ``problems()`` and a run's failure). ``start()``
starts everything at once; ``start_zookeeper``, ``start_logstores``, ``start_stores`` and ``start_controllers``
start the parts in another order. Clients use ``controller_uri``, which names every controller (the SDK moves
between them).

The nemesis's handles: ``crash_store``/``restart_store`` (kill -9), ``pause_store`` (a GC pause or SIGSTOP, possibly
past the session timeout: a zombie), ``crash_controller``/``restart_controller``,
``crash_logstore``/``restart_logstore``, ``lose_logstore_disk`` (the replica is replaced by an empty one with a new
identity), ``pause_logstore``, ``slow_logstore_disk`` (each fsync takes up to a latency, for a while),
``zookeeper_down``, ``cut_store_from_zookeeper`` and ``cut_store_from_logstores`` (partitions of one store's links
only; ``world.network.heal()`` ends them), ``stop_store``, ``stop_controller`` and ``stop_logstore`` (SIGTERM: a
graceful stop, then the process exits; ``processes.Terminations``).

``problems()`` states the cluster's own end-of-run invariants (read from the processes and ZooKeeper's state
after the run, once healed): no process failed (``crashes``); every container runs on exactly one segment store,
the one the map names, whose session holds the log's owner lock; the log's chain in ZooKeeper is consistent
(sequences contiguous, every ledger but the last closed) and its epoch and last ledger are those of the running
log.

The stores' data dirs are real directories (each holds a layout file written at start) named after the seed
under the system's temporary directory, removed by ``close()``.

Not simulated: ZooKeeper as a quorum of servers (one highly available service: zookeeper_sim.py), TLS, the
operations endpoints (metrics, health), the REST API, ``tributary status``, the log stores' fsync latency outside
a slow-disk fault (journal_sim.py), adding or removing stores for good.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordination.cluster import ClusterPaths, ContainerMap
from server.config import SegmentStoreConfig
from server.containers import ContainerStatus
from server.service import SegmentStoreService, StartupError
from server.tier1.logstore.chain import CLOSED, LogChain
from server.tier1.logstore.registry import Paths
from server.tier1.replicated import ReplicatedDurableDataLog
from tests.simulation.cluster import TIER2_LATENCY, claim_data_dir
from tests.simulation.journal_sim import LOGSTORE_PORT, SimLogStoreHost
from tests.simulation.processes import Process, Terminations, start_supervised
from tests.simulation.world import World
from tests.simulation.zookeeper_sim import DEFAULT_PORT as ZOOKEEPER_PORT
from tests.simulation.zookeeper_sim import SimZooKeeperServer
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.faults.tier2 import FaultyChunkStorage
from tributary.assembly import ClusteredController, StartupFailed

STORE_PORT = 12345
CONTROLLER_PORT = 9090


@dataclass
class ClusterTopology:
    """How many of each part run where, and how they are configured for a simulation: small, so that checkpoints,
    Tier-2 flushes, log truncation, ledger rolls and ZooKeeper session expiries happen within seconds."""

    zookeeper_host: str = "10.0.9.1"
    logstores: int = 3
    stores: int = 2
    controllers: int = 2
    container_count: int = 4
    zk_root: str = "/tributary"
    session_timeout: float = 4.0  # every process's ZooKeeper session (segment stores, controllers, log stores)
    rebalance_grace: float = 2.0  # the leader moves a gone store's containers after this long
    log_quorum: tuple[int, int, int] = (3, 3, 2)  # ensemble, write quorum, ack quorum
    ledger_size_max: int = 256 * 1024  # the replicated log rolls to a new ledger after this many bytes
    store_options: dict[str, Any] = field(default_factory=lambda: {
        "checkpoint_every_operations": 200, "checkpoint_every_bytes": 256 * 1024, "flush_interval": 1.0,
        "flush_size": 64 * 1024, "log_open_wait": 120.0})
    logstore_options: dict[str, Any] = field(default_factory=lambda: {"gc_interval": 5.0, "gc_grace": 30.0})
    zookeeper_options: dict[str, Any] = field(default_factory=dict)  # SimZooKeeperServer's (tick, reply_loss)

    @property
    def logstore_hosts(self) -> list[str]:
        return [f"10.0.5.{index + 1}" for index in range(self.logstores)]

    @property
    def store_hosts(self) -> list[str]:
        return [f"10.0.0.{index + 1}" for index in range(self.stores)]

    @property
    def controller_hosts(self) -> list[str]:
        return [f"10.0.1.{index + 1}" for index in range(self.controllers)]

    @property
    def zk_hosts(self) -> str:
        return f"{self.zookeeper_host}:{ZOOKEEPER_PORT}"


class SimCluster:
    """A whole cluster in ``world`` (see the module docstring)."""

    def __init__(self, world: World, topology: ClusterTopology | None = None):
        self.world = world
        self.topology = topology = topology or ClusterTopology()
        # a name that is the same in every run of a seed (see cluster.py: the path is in the stores' configs)
        self.data_dir, self._release_data_dir = claim_data_dir(f"cluster-{world.seed:012d}")
        self.zookeeper: SimZooKeeperServer | None = None  # made by start(): it serves from when it is made
        self.terminations = Terminations(world)  # graceful stops (SIGTERM) of stores, controllers and log stores
        self.logstores = [SimLogStoreHost(world, host, zk_hosts=topology.zk_hosts, service_options={
            "root": topology.zk_root, "session_timeout": topology.session_timeout, **topology.logstore_options},
            terminations=self.terminations) for host in topology.logstore_hosts]
        self.tier2 = FaultyChunkStorage(InMemoryChunkStorage())  # an object store's latency, as in cluster.py
        self.tier2.latency = lambda: world.random.uniform(*TIER2_LATENCY)
        self.stores: list[Process] = [world.process(f"segment-store-{index}", host)
                                      for index, host in enumerate(topology.store_hosts)]
        self.services: list[SegmentStoreService | None] = [None] * topology.stores  # each store's, once started
        self.controllers: list[Process] = [world.process(f"controller-{index}", host)
                                           for index, host in enumerate(topology.controller_hosts)]
        self.disks_lost = 0
        self.crashes: list[str] = []  # processes that ended by an error their supervisor would not restart

    @property
    def controller_uri(self) -> str:
        """Every controller, as clients are given them (``tcp://a:9090,b:9090``)."""
        return "tcp://" + ",".join(f"{host}:{CONTROLLER_PORT}" for host in self.topology.controller_hosts)

    def store_config(self, index: int) -> SegmentStoreConfig:
        topology = self.topology
        return SegmentStoreConfig(data_dir=self.data_dir / f"store-{index}", host=topology.store_hosts[index],
                                  port=STORE_PORT, container_count=topology.container_count, tier1="replicated",
                                  tier2="none", zk_hosts=topology.zk_hosts, zk_root=topology.zk_root,
                                  zk_session_timeout=topology.session_timeout, log_quorum=topology.log_quorum,
                                  ledger_size_max=topology.ledger_size_max, cluster=True, **topology.store_options)

    # ------------------------------------------------------------------ the processes' main coroutines

    def _store_main(self, index: int):
        async def main() -> None:
            config = self.store_config(index)

            async def start() -> SegmentStoreService:  # `tributary segmentstore --cluster` exits when this fails
                service = SegmentStoreService(config, chunk_storage=self.tier2)
                await service.start()
                return service

            service = self.services[index] = await start_supervised(  # any other error: a bug, in the verdict
                self.world, "store", start, (StartupError,), index,
                crashed=lambda error: self._crashed(f"segment store {index}", error))
            await self.terminations.requested(self.stores[index])  # serves until stopped (or it crashes)
            self.services[index] = None
            await service.stop()
        return main

    def _controller_main(self, index: int):
        async def main() -> None:
            topology = self.topology
            host = topology.controller_hosts[index]

            async def start() -> ClusteredController:  # as `tributary controller --zk` (waits 30 s for stores)
                controller = ClusteredController(host, host, CONTROLLER_PORT, topology.zk_hosts, topology.zk_root,
                                                 topology.session_timeout, topology.rebalance_grace,
                                                 topology.container_count, wait_seconds=30.0)
                await controller.start()
                return controller

            controller = await start_supervised(self.world, "controller", start, (StartupFailed,), index,
                                                crashed=lambda error: self._crashed(f"controller {index}", error))
            await self.terminations.requested(self.controllers[index])
            await controller.stop()
        return main

    def _crashed(self, process: str, error: Exception) -> None:
        self.crashes.append(f"{process} failed at {self.world.now:.3f} s: {type(error).__name__}: {error}")
        self.world.record("process_failed", process, type(error).__name__)

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        """ZooKeeper first, then the log stores, the segment stores and the controllers (which wait for each
        other as the real ones do)."""
        self.start_zookeeper()
        self.start_logstores()
        self.start_stores()
        self.start_controllers()

    def start_zookeeper(self) -> None:
        topology = self.topology
        self.zookeeper = self.world.zookeeper(topology.zookeeper_host, **topology.zookeeper_options)

    def start_logstores(self) -> None:
        for logstore in self.logstores:
            logstore.start()

    def start_stores(self) -> None:
        for index, process in enumerate(self.stores):
            process.start(self._store_main(index))

    def start_controllers(self) -> None:
        for index, process in enumerate(self.controllers):
            process.start(self._controller_main(index))

    def close(self) -> None:
        self._release_data_dir()

    # ------------------------------------------------------------------ faults

    def crash_store(self, index: int) -> None:
        """kill -9 of a segment store (its session expires a session timeout later; its containers move)."""
        self.stores[index].crash()
        self.services[index] = None

    def restart_store(self, index: int) -> None:
        if self.stores[index].alive:
            self.crash_store(index)
        self.stores[index].start(self._store_main(index))

    def pause_store(self, index: int, seconds: float) -> None:
        """A GC pause or SIGSTOP of a segment store; past its session timeout it resumes as a zombie."""
        self.stores[index].pause(seconds)

    def crash_controller(self, index: int) -> None:
        self.controllers[index].crash()

    def restart_controller(self, index: int) -> None:
        self.controllers[index].restart(self._controller_main(index))

    async def stop_store(self, index: int) -> str:
        """SIGTERM to a segment store: it stops gracefully (its containers close and its registration goes, so they
        move at once) and the process exits (``Terminations.stop`` says what is returned)."""
        return await self.terminations.stop(self.stores[index])

    async def stop_controller(self, index: int) -> str:
        """SIGTERM to a controller (as ``stop_store``)."""
        return await self.terminations.stop(self.controllers[index])

    async def stop_logstore(self, index: int) -> str:
        """SIGTERM to a log store (as ``stop_store``; its journal is kept)."""
        return await self.logstores[index].stop()

    def crash_logstore(self, index: int) -> None:
        """kill -9 of a log store (its journal is kept: journal_sim.py)."""
        self.logstores[index].crash()

    def restart_logstore(self, index: int) -> None:
        self.logstores[index].restart()

    def lose_logstore_disk(self, index: int) -> None:
        """The log store crashes and its disk is replaced by an empty one: restarted, it is a new replica (a new
        identity), and the ledgers on the old one have one replica fewer for good."""
        self.logstores[index].lose_disk()
        self.disks_lost += 1

    def pause_logstore(self, index: int, seconds: float) -> None:
        """A GC pause or SIGSTOP of a log store (past its session timeout, its registration goes until it is back)."""
        self.logstores[index].process.pause(seconds)

    def slow_logstore_disk(self, index: int, seconds: float, latency: float) -> None:
        """For ``seconds``, each group commit's fsync on the log store's disk takes up to ``latency`` seconds, and the
        store's loop waits for it (journal_sim.py)."""
        self.logstores[index].disk.slow(seconds, latency)

    def zookeeper_down(self, seconds: float) -> None:
        """The ensemble stops answering for ``seconds`` (its data and sessions stay; sessions get a fresh timeout
        when it is back)."""
        assert self.zookeeper is not None
        self.zookeeper.down(seconds)

    def cut_store_from_zookeeper(self, index: int) -> None:
        """A partition between a segment store and ZooKeeper only: its clients, the controllers and the log stores
        still reach it."""
        self.world.network.partition([self.topology.store_hosts[index]], [self.topology.zookeeper_host])

    def cut_store_from_logstores(self, index: int) -> None:
        """A partition between a segment store and every log store only."""
        self.world.network.partition([self.topology.store_hosts[index]], self.topology.logstore_hosts)

    # ------------------------------------------------------------------ the cluster's invariants

    def problems(self) -> list[str]:
        """What breaks the cluster's own invariants at the end of a run (module docstring); empty if none."""
        topology, zookeeper = self.topology, self.zookeeper
        assert zookeeper is not None
        problems: list[str] = [*self.crashes, *self.terminations.problems]
        cluster_paths, log_paths = ClusterPaths(topology.zk_root), Paths(topology.zk_root)
        data = zookeeper.data(cluster_paths.container_map)
        owners = ContainerMap.from_json(data).owners if data is not None else {}
        running: dict[int, list[int]] = {}  # container -> the stores running it
        for index, service in enumerate(self.services):
            if service is None or not self.stores[index].alive:
                continue
            for container_id, container in service.containers.items():
                if container.status == ContainerStatus.RUNNING:
                    running.setdefault(container_id, []).append(index)
        for container_id in range(topology.container_count):
            where = running.get(container_id, [])
            if len(where) != 1:
                problems.append(f"container {container_id} runs on {len(where)} segment stores {where}")
                continue
            service = self.services[where[0]]
            assert service is not None and service.member is not None
            if owners.get(container_id) != service.member.store_id:
                problems.append(f"container {container_id} runs on {service.member.store_id}, the map gives it to "
                                f"{owners.get(container_id)}")
            durable_log = service.containers[container_id]._log
            name = f"container-{container_id}"
            session = zookeeper.ephemeral_owner(log_paths.owner(name)) if zookeeper.exists(
                log_paths.owner(name)) else None
            if session != service._zk.session_id:  # type: ignore[union-attr]
                problems.append(f"container {container_id}: its log's owner lock is held by session {session}, not "
                                f"by its store's")
            chain_data = zookeeper.data(log_paths.log(name))
            if chain_data is None or not isinstance(durable_log, ReplicatedDurableDataLog):
                problems.append(f"container {container_id}: no chain in ZooKeeper, or not a replicated log")
                continue
            problems.extend(_chain_problems(name, LogChain.from_json(chain_data), durable_log))
        return problems


def _chain_problems(name: str, chain: LogChain, running: ReplicatedDurableDataLog) -> list[str]:
    """The chain in ZooKeeper against itself and against the log that runs it."""
    problems: list[str] = []
    if chain.epoch != running.epoch:
        problems.append(f"{name}: the chain's epoch {chain.epoch} is not the running log's {running.epoch}")
    ledgers = chain.ledgers
    for before, after in zip(ledgers, ledgers[1:]):
        if before.state != CLOSED:
            problems.append(f"{name}: ledger {before.id} is open but not the last")
        elif after.first_sequence != before.first_sequence + before.last_entry + 1:
            problems.append(f"{name}: ledger {after.id} starts at {after.first_sequence}, ledger {before.id} ends at "
                            f"{before.first_sequence + before.last_entry}")
    current = running._ledger
    if not ledgers or current is None or ledgers[-1].id != current.id or ledgers[-1].state == CLOSED:
        problems.append(f"{name}: the chain's last ledger {ledgers[-1].id if ledgers else None} is not the running "
                        f"log's open ledger {current.id if current is not None else None}")
    return problems


__all__ = ["CONTROLLER_PORT", "LOGSTORE_PORT", "STORE_PORT", "ClusterTopology", "SimCluster"]
