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
the store for a while. Tier-2, which both topologies share, has faults of its own, drawn from a source of their
own and overlapping the others (``TIER2_FAULT_KINDS``): an outage (every call fails at once), a hang (every call
waits, then times out), replies lost after the object store did the work, and a torn write (a prefix written, then
an error). Graceful stops (SIGTERM: the process stops its service, exits, and is started again a few seconds later;
``STOP_FAULT_KINDS``) also come from a source of their own, overlapping the others, as an operator's rolling restart
does: the store or the controller, and in a cluster any segment store, controller or log store. Slowness comes from
a source of its own too (``SLOW_FAULT_KINDS``): the standalone store's disk stalls; a cluster's log store turns slow
(each group commit's fsync, which the real store waits for on its loop, takes up to a few seconds) or is paused.
Full disks come from a source of their own as well (``FULL_FAULT_KINDS``): the standalone store's disk fills (every
write fails with ENOSPC: its Tier-1 log fails, and the store restarts the container until it can), and is freed a
while later with nobody's help; a cluster's log store's disk fills (its journal answers UNAVAILABLE from then on, as
the real one does until it is restarted), and an operator frees it and restarts the store (SIGTERM, then a start).
``plant`` switches on a deliberate bug (``plants.py``) to prove the simulation finds it.

``topology="cluster"`` runs the same workload against a whole cluster instead (``cluster_topology.SimCluster``:
ZooKeeper, three log stores, two segment stores in cluster mode on the replicated Tier-1, two controllers), with
a nemesis of its own (``CLUSTER_FAULT_KINDS``): a segment store killed, or paused (possibly past its session
timeout), or cut off from ZooKeeper only, or from the log stores only, or made a zombie (cut off from ZooKeeper and
paused until its containers were given to the other store, it resumes still cut off: it serves on until it
presumes its session expired, half a second later, and only fencing keeps its appends out); a controller killed;
a log store killed, or its disk lost (at most once a run: a replica lost for good, which three copies tolerate
once); ZooKeeper down for a while; and the writer, transactional writer, reader and writer-partition faults
above. Its verdict adds the cluster's own invariants (``SimCluster.problems``: every container runs on exactly
one store, the one the map names, which holds its log's owner lock, and the log's chain in ZooKeeper is
consistent and is the running log's), once the cluster has settled after the run.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from random import Random

from tests.simulation.cluster import SimStandalone, StandaloneTopology
from tests.simulation.cluster_topology import ClusterTopology, SimCluster
from tests.simulation.errors import SimulationError
from tests.simulation.plants import check as check_plants
from tests.simulation.plants import planted
from tests.simulation.processes import Process
from tests.simulation.workload import Violation, Workload, check
from tests.simulation.world import World

TOPOLOGIES = ("standalone", "cluster")
CLUSTER_SETTLE_SECONDS = 60.0  # after the run: how long the cluster may take to meet its own invariants


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
    stops: list[str] = field(default_factory=list)  # each graceful stop's outcome: "#<index> <outcome>"
    topology: str = "standalone"

    def line(self) -> str:
        failure = self.failure if len(self.failure) <= 400 else self.failure[:400] + " ..."
        verdict = "ok" if self.ok else f"FAILED: {failure}"
        cluster = " (cluster)" if self.topology == "cluster" else ""
        return (f"seed {self.seed}{cluster}: {verdict} ({self.acknowledged} events acknowledged, {self.committed} "
                f"transactions committed, {self.read} events read, {self.checkpoints} checkpoints, {self.scales} "
                f"scales, {self.truncations} truncations, {self.resets} resets, "
                f"{len(self.faults)} faults, {self.virtual_seconds:.0f} s simulated in {self.wall_seconds:.2f} s; "
                f"trace {self.trace_hash})")


FAULT_KINDS = ("store", "power", "controller", "writer", "transactional", "reader", "pause", "partition")
CLUSTER_FAULT_KINDS = ("store", "controller", "logstore", "logstore_disk", "zookeeper", "pause", "zombie",
                       "zk_partition", "logstore_partition", "writer", "transactional", "reader", "partition")
TIER2_FAULT_KINDS = ("tier2_outage", "tier2_hang", "tier2_lost_replies", "tier2_torn_write")
STOP_FAULT_KINDS = ("store_stop", "controller_stop", "logstore_stop")  # graceful stops (SIGTERM); log stores: cluster
SLOW_FAULT_KINDS = ("disk_stall", "journal_slow", "logstore_pause")  # slowness: the first standalone, others cluster
FULL_FAULT_KINDS = ("disk_full", "journal_full")  # a full disk: the first standalone, the second cluster
SOURCE_KINDS = (TIER2_FAULT_KINDS, STOP_FAULT_KINDS, SLOW_FAULT_KINDS, FULL_FAULT_KINDS)  # each source after the first
TIER2_LOSABLE = ("write", "create_with_content", "concat", "delete", "set_read_only")  # replies a fault may lose
ZOMBIE_CUT_AFTER = 1.0  # a zombie resumes cut off from ZooKeeper, for this long (its probe gives up after 0.5 s)
_INSTANT = ("writer", "transactional", "reader", "pause")  # faults that do not hold the nemesis


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule: ``at`` virtual seconds after the faults begin, lasting ``seconds`` (the time a
    process stays down, is paused or cut off; 0 for an instant one), hitting writer ``target`` where it applies."""

    index: int
    at: float
    kind: str
    seconds: float = 0.0
    target: int = 0  # (Tier-2 faults: how many calls, or bytes, the fault takes)
    operation: str = ""  # (lost replies: the Tier-2 operation whose replies are lost)
    latency: float = 0.0  # (a slow journal: the most an fsync takes, in seconds)

    def describe(self, topology: str = "standalone") -> str:
        if self.kind in TIER2_FAULT_KINDS:
            return self._describe_tier2()
        if self.kind in SLOW_FAULT_KINDS:
            return self._describe_slow()
        if self.kind == "disk_full":
            return f"store's disk full for {self.seconds:.2f} s (every write fails with ENOSPC), then freed"
        if self.kind == "journal_full":
            return (f"log store {self.target}'s disk full for {self.seconds:.2f} s (its journal answers UNAVAILABLE), "
                    f"then freed and the store restarted (SIGTERM)")
        if self.kind in STOP_FAULT_KINDS:
            what = {"store_stop": "segment store", "controller_stop": "controller", "logstore_stop": "log store"}
            which = f"{what[self.kind]} {self.target}" if topology == "cluster" else self.kind.split("_")[0]
            return f"{which} stopped gracefully (SIGTERM), started again after {self.seconds:.2f} s"
        if topology == "cluster":
            described = self._describe_cluster()
            if described:
                return described
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

    def _describe_tier2(self) -> str:
        if self.kind == "tier2_outage":
            return f"Tier-2 unavailable for {self.seconds:.2f} s"
        if self.kind == "tier2_hang":
            return f"Tier-2 calls hang {self.target / 1000:.2f} s and time out, for {self.seconds:.2f} s"
        if self.kind == "tier2_lost_replies":
            calls = f"{self.operation} call" if self.target == 1 else f"{self.target} {self.operation} calls"
            return f"Tier-2 loses the replies of its next {calls} (done, not told)"
        return f"Tier-2's next write is torn: {self.target} bytes written, then an error"

    def _describe_slow(self) -> str:
        if self.kind == "disk_stall":
            return f"store's disk stalls for {self.seconds:.2f} s (no write, read or fsync completes)"
        if self.kind == "journal_slow":
            return (f"log store {self.target}'s fsyncs take up to {self.latency:.2f} s each for {self.seconds:.2f} s "
                    f"(its loop waits on each)")
        return f"log store {self.target} paused {self.seconds:.2f} s"

    def _describe_cluster(self) -> str:
        """The cluster topology's own faults (empty for those described as in the standalone one)."""
        seconds = f"{self.seconds:.2f} s"
        return {
            "store": f"segment store {self.target} killed, restarted after {seconds}",
            "controller": f"controller {self.target} killed, restarted after {seconds}",
            "logstore": f"log store {self.target} killed, restarted after {seconds}",
            "logstore_disk": f"log store {self.target} lost its disk, restarted empty after {seconds}",
            "zookeeper": f"ZooKeeper down for {seconds}",
            "pause": f"segment store {self.target} paused {seconds}",
            "zombie": f"segment store {self.target} cut off from ZooKeeper and paused {seconds}, resumed still cut "
                      f"off (a zombie)",
            "zk_partition": f"segment store {self.target} cut off from ZooKeeper for {seconds}",
            "logstore_partition": f"segment store {self.target} cut off from the log stores for {seconds}",
            "partition": f"writer {self.target} cut off from the segment stores for {seconds}",
        }.get(self.kind, "")


def fault_schedule(seed: int, seconds: float, writers: int, topology: str = "standalone",
                   cluster: ClusterTopology | None = None) -> list[Fault]:
    """The seed's faults, drawn up front from a random source of the nemesis's own: what the system does (which
    draws on the world's source) never changes the schedule, so a run with some faults left out (shrinking)
    keeps the others as they were. Faults that hold the nemesis (a process down, a host cut off) never overlap.
    ``topology="cluster"`` draws from ``CLUSTER_FAULT_KINDS`` (``cluster``: the topology the targets are in)."""
    if topology == "cluster":
        faults = _cluster_fault_schedule(seed, seconds, writers, cluster or ClusterTopology())
    else:
        faults = _standalone_fault_schedule(seed, seconds, writers)
    faults += _tier2_fault_schedule(seed, seconds, len(faults))
    faults += _stop_fault_schedule(seed, seconds, len(faults), topology, cluster or ClusterTopology())
    faults += _slow_fault_schedule(seed, seconds, len(faults), topology, cluster or ClusterTopology())
    return faults + _full_fault_schedule(seed, seconds, len(faults), topology, cluster or ClusterTopology())


def _standalone_fault_schedule(seed: int, seconds: float, writers: int) -> list[Fault]:
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


def _cluster_fault_schedule(seed: int, seconds: float, writers: int, topology: ClusterTopology) -> list[Fault]:
    """``fault_schedule`` for the cluster topology (see the module docstring)."""
    random = Random(f"nemesis-cluster-{seed}")
    faults: list[Fault] = []
    now = 0.0
    disk_lost = False
    while now < seconds:
        now += random.uniform(1.0, 6.0)
        kind = random.choice(CLUSTER_FAULT_KINDS)
        if kind == "logstore_disk" and disk_lost:
            kind = "logstore"  # one replica lost for good is what three copies tolerate (module docstring)
        index = len(faults)
        if kind in ("store", "controller"):
            count = topology.stores if kind == "store" else topology.controllers
            fault = Fault(index, now, kind, random.uniform(0.0, 3.0), random.randrange(count))
        elif kind in ("logstore", "logstore_disk"):
            fault = Fault(index, now, kind, random.uniform(0.0, 5.0), random.randrange(topology.logstores))
            disk_lost = disk_lost or kind == "logstore_disk"
        elif kind == "zookeeper":
            fault = Fault(index, now, kind, random.uniform(0.5, 8.0))
        elif kind == "pause":  # up to past the session timeout: the store then learns at once it lost its session
            fault = Fault(index, now, kind, random.uniform(0.1, 3.0 * topology.session_timeout),
                          random.randrange(topology.stores))
        elif kind == "zombie":  # resumed after its containers were (or are being) given to another store
            takeover = topology.session_timeout + topology.rebalance_grace
            fault = Fault(index, now, kind, random.uniform(takeover, takeover + 4.0), random.randrange(topology.stores))
        elif kind in ("zk_partition", "logstore_partition"):
            fault = Fault(index, now, kind, random.uniform(0.5, 3.0 * topology.session_timeout),
                          random.randrange(topology.stores))
        elif kind == "partition":
            fault = Fault(index, now, kind, random.uniform(0.5, 8.0), random.randrange(writers))
        elif kind == "writer":
            fault = Fault(index, now, kind, target=random.randrange(writers))
        else:
            fault = Fault(index, now, kind)
        faults.append(fault)
        if kind not in _INSTANT:  # the nemesis waits for the process to come back or the cut to heal
            now += fault.seconds + (ZOMBIE_CUT_AFTER if kind == "zombie" else 0.0)
    return faults


def _tier2_fault_schedule(seed: int, seconds: float, first_index: int) -> list[Fault]:
    """Tier-2's faults, from a source of their own (so they add to a seed's schedule without moving its other
    faults, and a schedule shrunk before they existed means the same), numbered after the others. They never
    overlap one another; they do overlap the others, as an object store's trouble comes when it comes."""
    random = Random(f"nemesis-tier2-{seed}")
    faults: list[Fault] = []
    now = random.uniform(0.0, 10.0)
    while now < seconds:
        index, kind = first_index + len(faults), random.choice(TIER2_FAULT_KINDS)
        if kind == "tier2_outage":
            fault = Fault(index, now, kind, random.uniform(1.0, 15.0))
        elif kind == "tier2_hang":  # target: each call's hang, in milliseconds
            fault = Fault(index, now, kind, random.uniform(1.0, 10.0), random.randrange(200, 5000))
        elif kind == "tier2_lost_replies":
            fault = Fault(index, now, kind, target=random.randint(1, 3), operation=random.choice(TIER2_LOSABLE))
        else:  # target: the bytes the torn write leaves
            fault = Fault(index, now, kind, target=random.randrange(0, 8192))
        faults.append(fault)
        now += fault.seconds + random.uniform(5.0, 20.0)
    return faults


def _stop_fault_schedule(seed: int, seconds: float, first_index: int, topology: str,
                         cluster: ClusterTopology) -> list[Fault]:
    """Graceful stops (``STOP_FAULT_KINDS``: SIGTERM to a segment store, controller or, in a cluster, log store, which
    is started again a while later), from a source of their own, numbered after the others, as Tier-2's are (so
    schedules and shrunk lists made before they existed mean what they meant). They never overlap one another; they
    do overlap the other faults, as an operator's rolling restart does not wait for the cluster to be healthy."""
    random = Random(f"nemesis-stop-{topology}-{seed}")
    faults: list[Fault] = []
    now = random.uniform(0.0, 15.0)
    if topology == "cluster":
        counts = {"store_stop": cluster.stores, "controller_stop": cluster.controllers,
                  "logstore_stop": cluster.logstores}
    else:
        counts = {"store_stop": 1, "controller_stop": 1}
    kinds = [kind for kind in STOP_FAULT_KINDS if kind in counts]
    while now < seconds:
        kind = random.choice(kinds)
        fault = Fault(first_index + len(faults), now, kind, random.uniform(0.0, 5.0), random.randrange(counts[kind]))
        faults.append(fault)
        now += fault.seconds + random.uniform(5.0, 25.0)
    return faults


def _slow_fault_schedule(seed: int, seconds: float, first_index: int, topology: str,
                         cluster: ClusterTopology) -> list[Fault]:
    """Slowness (``SLOW_FAULT_KINDS``), from a source of its own, numbered after the stops (as those are after
    Tier-2's). The standalone's store disk stalls: no I/O completes for a while (the Tier-1 log's appends wait,
    unacknowledged). In a cluster a log store's disk turns slow for a while, each group commit's fsync taking up to
    ``latency`` (past the replicated log's 2 s add timeout at the high end): the real store waits for it on its loop,
    so nothing else it does (reads, other ledgers, ZooKeeper) happens meanwhile either; or a log store is paused (a GC
    pause or SIGSTOP, possibly past its session timeout). They never overlap one another; they do overlap the
    others."""
    random = Random(f"nemesis-slow-{topology}-{seed}")
    faults: list[Fault] = []
    now = random.uniform(0.0, 10.0)
    kinds = ["journal_slow", "logstore_pause"] if topology == "cluster" else ["disk_stall"]
    while now < seconds:
        index, kind = first_index + len(faults), random.choice(kinds)
        if kind == "disk_stall":
            fault = Fault(index, now, kind, random.uniform(0.2, 8.0))
        elif kind == "journal_slow":
            fault = Fault(index, now, kind, random.uniform(1.0, 15.0), random.randrange(cluster.logstores),
                          latency=random.uniform(0.02, 4.0))
        else:
            fault = Fault(index, now, kind, random.uniform(0.1, 3.0 * cluster.session_timeout),
                          random.randrange(cluster.logstores))
        faults.append(fault)
        now += fault.seconds + random.uniform(5.0, 20.0)
    return faults


def _full_fault_schedule(seed: int, seconds: float, first_index: int, topology: str,
                         cluster: ClusterTopology) -> list[Fault]:
    """Full disks (``FULL_FAULT_KINDS``), from a source of their own, numbered after the slowness: rarer than the
    other faults (a run has one or two), never overlapping one another, overlapping the others."""
    random = Random(f"nemesis-full-{topology}-{seed}")
    faults: list[Fault] = []
    now = random.uniform(0.0, 15.0)
    while now < seconds:
        index = first_index + len(faults)
        if topology == "cluster":
            fault = Fault(index, now, "journal_full", random.uniform(0.5, 10.0), random.randrange(cluster.logstores))
        else:
            fault = Fault(index, now, "disk_full", random.uniform(0.5, 10.0))
        faults.append(fault)
        now += fault.seconds + random.uniform(10.0, 30.0)
    return faults


class Nemesis:
    """Injects the faults of a schedule into ``cluster`` and ``workload`` (see the module docstring)."""

    topology = "standalone"

    def __init__(self, world: World, cluster: SimStandalone, workload: Workload):
        self.world = world
        self.cluster = cluster
        self.workload = workload
        self.faults: list[str] = []
        self.stops: list[str] = []  # graceful stops' outcomes (Terminations.stop), "#<index> <outcome>"

    def _note(self, fault: Fault) -> None:
        text = f"#{fault.index} {fault.describe(self.topology)}"
        self.faults.append(f"{self.world.loop.time():.3f} {text}")
        self.world.record("fault", text)

    async def run(self, schedule: Iterable[Fault], seconds: float) -> None:
        """Applies ``schedule`` (times counted from now), then waits out ``seconds`` of faults if time is left."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        faults = list(schedule)
        others = [loop.create_task(self._inject([fault for fault in faults if fault.kind in kinds], began))
                  for kinds in SOURCE_KINDS]  # each source's faults in turn, overlapping the other sources'
        sourced = {kind for kinds in SOURCE_KINDS for kind in kinds}
        await self._inject([fault for fault in faults if fault.kind not in sourced], began)
        for task in others:
            await task
        await asyncio.sleep(max(0.0, began + seconds - loop.time()))
        self.cluster.tier2.clear()  # the faults stop: a lost reply or a torn write armed and not yet met, too

    async def _inject(self, faults: list[Fault], began: float) -> None:
        """Applies ``faults`` one after the other, each at its time (counted from ``began``)."""
        loop = asyncio.get_running_loop()
        for fault in faults:
            await asyncio.sleep(max(0.0, began + fault.at - loop.time()))
            self._note(fault)
            if fault.kind in TIER2_FAULT_KINDS:
                await self._apply_tier2(fault)
            elif fault.kind in STOP_FAULT_KINDS:
                await self._apply_stop(fault)
            elif fault.kind in SLOW_FAULT_KINDS:
                await self._apply_slow(fault)
            elif fault.kind in FULL_FAULT_KINDS:
                await self._apply_full(fault)
            else:
                await self._apply(fault)

    async def _apply_stop(self, fault: Fault) -> None:
        """A graceful stop, then a start a while later unless another fault restarted the process meanwhile."""
        process, stop, restart = self._stoppable(fault)
        if not await self._stopped(fault, stop):
            return  # (the fault that ended it starts it again)
        await asyncio.sleep(fault.seconds)
        if not process.alive:  # (else another fault's restart came first)
            restart()

    async def _stopped(self, fault: Fault, stop: Callable[[], Awaitable[str]]) -> bool:
        """Stops a process gracefully for ``fault`` and notes the outcome; whether this stop ended it (False: it was
        not running, or another fault ended it meanwhile)."""
        outcome = await stop()
        self.world.record("stop_outcome", fault.index, outcome)
        self.stops.append(f"#{fault.index} {outcome}")
        return outcome not in ("not running", "ended by another fault")

    def _stoppable(self, fault: Fault) -> tuple[Process, Callable[[], Awaitable[str]], Callable[[], None]]:
        """The process a stop fault hits, how to stop it gracefully, and how to start it again."""
        cluster = self.cluster
        if fault.kind == "store_stop":
            return cluster.store, cluster.stop_store, cluster.restart_store
        return cluster.controller, cluster.stop_controller, cluster.restart_controller

    async def _apply_slow(self, fault: Fault) -> None:
        """The standalone's slowness: its store's disk stalls (the disk outlives the store's process)."""
        self.cluster.disk.stall(fault.seconds)
        await asyncio.sleep(fault.seconds)

    async def _apply_full(self, fault: Fault) -> None:
        """The standalone store's disk fills, and is freed (the disk outlives the store's process)."""
        disk = self.cluster.disk
        disk.fill()
        await asyncio.sleep(fault.seconds)
        disk.free()

    async def _apply_tier2(self, fault: Fault) -> None:
        tier2 = self.cluster.tier2
        if fault.kind == "tier2_outage":
            tier2.set_unavailable(True)
            await asyncio.sleep(fault.seconds)
            tier2.set_unavailable(False)
        elif fault.kind == "tier2_hang":
            tier2.hang(fault.target / 1000)
            await asyncio.sleep(fault.seconds)
            tier2.hang(None)
        elif fault.kind == "tier2_lost_replies":
            tier2.fail_next(fault.target, fault.operation, after_inner=True)
        else:
            tier2.tear_next_write(fault.target)

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
            if cluster.store.alive:
                cluster.store.pause(fault.seconds)
            else:
                self.world.record("fault_skipped", fault.index, "not running")  # a graceful stop's downtime
        else:
            host = workload.writers[fault.target].host
            self.world.network.partition([host], [cluster.topology.store_host])
            await asyncio.sleep(fault.seconds)
            self.world.network.heal()


class ClusterNemesis(Nemesis):
    """Injects the faults of a cluster schedule (``CLUSTER_FAULT_KINDS``) into a ``SimCluster`` and the workload."""

    topology = "cluster"

    def __init__(self, world: World, cluster: SimCluster, workload: Workload):  # type: ignore[override]
        super().__init__(world, cluster, workload)  # type: ignore[arg-type]
        self.sim_cluster = cluster

    async def _apply(self, fault: Fault) -> None:
        cluster, network, target = self.sim_cluster, self.world.network, fault.target
        if fault.kind == "store":
            cluster.crash_store(target)
            await asyncio.sleep(fault.seconds)
            cluster.restart_store(target)
        elif fault.kind == "controller":
            cluster.crash_controller(target)
            await asyncio.sleep(fault.seconds)
            cluster.restart_controller(target)
        elif fault.kind in ("logstore", "logstore_disk"):
            if fault.kind == "logstore":
                cluster.crash_logstore(target)
            else:
                cluster.lose_logstore_disk(target)
            await asyncio.sleep(fault.seconds)
            cluster.restart_logstore(target)
        elif fault.kind == "zookeeper":
            cluster.zookeeper_down(fault.seconds)
            await asyncio.sleep(fault.seconds)
        elif fault.kind in ("pause", "zombie") and not cluster.stores[target].alive:
            self.world.record("fault_skipped", fault.index, "not running")  # a graceful stop's downtime
        elif fault.kind == "pause":
            cluster.pause_store(target, fault.seconds)
        elif fault.kind == "zombie":
            cluster.cut_store_from_zookeeper(target)
            cluster.pause_store(target, fault.seconds)
            await asyncio.sleep(fault.seconds + ZOMBIE_CUT_AFTER)
            network.heal()
        elif fault.kind in ("zk_partition", "logstore_partition", "partition"):
            if fault.kind == "zk_partition":
                cluster.cut_store_from_zookeeper(target)
            elif fault.kind == "logstore_partition":
                cluster.cut_store_from_logstores(target)
            else:
                network.partition([self.workload.writers[target].host], cluster.topology.store_hosts)
            await asyncio.sleep(fault.seconds)
            network.heal()
        else:
            await super()._apply(fault)

    async def _apply_slow(self, fault: Fault) -> None:
        cluster, target = self.sim_cluster, fault.target
        if fault.kind == "journal_slow":  # the disk outlives the log store's process: a restart does not end it
            cluster.slow_logstore_disk(target, fault.seconds, fault.latency)
        elif cluster.logstores[target].process.alive:
            cluster.pause_logstore(target, fault.seconds)
        else:
            self.world.record("fault_skipped", fault.index, "not running")
        await asyncio.sleep(fault.seconds)

    async def _apply_full(self, fault: Fault) -> None:
        """A log store's disk fills; once it is freed, a store that answers UNAVAILABLE since is restarted: stopped
        gracefully and started at once (one that is down meanwhile is started by the fault that stopped it)."""
        cluster, target = self.sim_cluster, fault.target
        disk = cluster.logstores[target].disk
        disk.fill()
        await asyncio.sleep(fault.seconds)
        disk.free()
        if await self._stopped(fault, functools.partial(cluster.stop_logstore, target)):
            cluster.restart_logstore(target)

    def _stoppable(self, fault: Fault) -> tuple[Process, Callable[[], Awaitable[str]], Callable[[], None]]:
        cluster, target = self.sim_cluster, fault.target
        if fault.kind == "store_stop":
            return (cluster.stores[target], functools.partial(cluster.stop_store, target),
                    functools.partial(cluster.restart_store, target))
        if fault.kind == "controller_stop":
            return (cluster.controllers[target], functools.partial(cluster.stop_controller, target),
                    functools.partial(cluster.restart_controller, target))
        return (cluster.logstores[target].process, functools.partial(cluster.stop_logstore, target),
                functools.partial(cluster.restart_logstore, target))


def run_seed(seed: int, *, plant: Iterable[str] = (), fault_seconds: float = 30.0, writers: int = 2,
             until: float = 3600.0, keep: Iterable[int] | None = None, topology: str = "standalone") -> RunResult:
    """Runs one seed to its verdict (see the module docstring); ``keep``: the indexes of the seed's faults to
    apply (all when None), as shrinking leaves them; ``topology``: ``"standalone"`` or ``"cluster"``."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
    plants = check_plants(plant, topology)
    started = time.perf_counter()
    result = RunResult(seed, ok=False, topology=topology)
    world = World(seed)
    cluster: SimStandalone | SimCluster
    if topology == "cluster":
        cluster_topology = ClusterTopology()
        cluster = SimCluster(world, cluster_topology)
        workload = Workload(world, cluster.controller_uri, writers=writers)
        nemesis: Nemesis = ClusterNemesis(world, cluster, workload)
    else:
        cluster_topology = None
        cluster = SimStandalone(world, StandaloneTopology(
            disk_options={"ack_before_durable": "ack_before_durable" in plants}))
        workload = Workload(world, cluster.controller_uri, writers=writers)
        nemesis = Nemesis(world, cluster, workload)
    schedule = fault_schedule(seed, fault_seconds, writers, topology, cluster_topology)
    kept = set(range(len(schedule)) if keep is None else keep)
    result.schedule = len(schedule)
    cluster_problems: list[str] = []

    async def scenario() -> None:
        cluster.start()
        await workload.start()
        await asyncio.sleep(2.0)
        await nemesis.run([fault for fault in schedule if fault.index in kept], fault_seconds)
        world.network.heal()
        await asyncio.sleep(5.0)  # the workload runs on without faults: progress is required
        await workload.finish()
        if isinstance(cluster, SimCluster):
            cluster_problems.extend(await _settled(cluster))
        else:
            cluster_problems.extend(cluster.terminations.problems)

    try:
        with planted(plants):
            world.run(scenario(), until=until)
        _check(workload, cluster_problems)
        result.ok = True
    except Violation as violation:
        result.failure = f"invariant broken: {violation}"
    except SimulationError as error:
        result.failure = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        if isinstance(cluster, SimCluster) and cluster.crashes:
            result.failure += f" ({'; '.join(cluster.crashes)})"
    finally:
        result.trace_hash = world.trace_hash()
        result.virtual_seconds = world.loop.time() if not world.loop.is_closed() else 0.0
        world.close()
        cluster.close()
    result.wall_seconds = time.perf_counter() - started
    result.faults = nemesis.faults
    result.stops = nemesis.stops
    result.acknowledged = len(workload.oracle.acknowledged)
    result.committed = len(workload.oracle.committed)
    result.read = len(workload.oracle.read)
    result.checkpoints = len(workload.oracle.checkpoints)
    result.scales = workload.oracle.scales
    result.truncations = sum(returned for _, returned in workload.oracle.truncations)
    result.resets = workload.oracle.resets
    return result


def _check(workload: Workload, cluster_problems: list[str]) -> None:
    """The workload's invariants (``workload.check``) and the cluster's: Violation with every one broken."""
    problems: list[str] = []
    try:
        check(workload.oracle)
    except Violation as violation:
        problems.append(str(violation))
    if cluster_problems:
        problems.append("the cluster: " + "; ".join(cluster_problems))
    if problems:
        raise Violation("; ".join(problems))


async def _settled(cluster: SimCluster, seconds: float = CLUSTER_SETTLE_SECONDS) -> list[str]:
    """The cluster's own invariants (``SimCluster.problems``) once they hold, or what still breaks them after
    ``seconds``: a store that resumed after the faults may still be taking its share of the containers."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        problems = cluster.problems()
        if not problems or loop.time() >= deadline:
            return problems
        cluster.world.record("cluster_unsettled", len(problems))
        await asyncio.sleep(1.0)
