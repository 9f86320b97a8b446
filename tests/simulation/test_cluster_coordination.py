"""Tributary's cluster coordination (controller/cluster, server/cluster, the replicated log's owner lock) against the
simulated ZooKeeper: what only a world can arrange, such as the reply to one particular write being lost. Every
test runs in this process on the world's loop, in milliseconds of wall time."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable

import pytest

import controller.cluster.zk as controller_zk
import coordination.zookeeper as zookeeper_module
from coordination.cluster import ClusterPaths, agree_on_settings
from server.cluster import ClusterMember
from server.tier1 import replicated
from server.tier1.logstore.registry import Paths
from server.tier1.replicated import ReplicaPool, ReplicatedDurableDataLog, ReplicationSettings
from tests.simulation import OWNER, Process, World
from tests.simulation.zookeeper_sim import SimZooKeeperServer
from tests.support.zookeeper_contract import eventually

ZK = "10.0.9.1"
HOSTS = f"{ZK}:2181/tributary-test"
CONTROLLER = "10.0.1.1"
OWNER_PATH = Paths("/tributary").owner("container-0")  # the owner lock of _two_log_owners' log


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_controller_whose_candidacy_reply_was_lost_still_leads(seed, monkeypatch):
    """The reply to the create of a controller's leader candidate node is lost, and kazoo's retry makes a second
    node. The controller must still lead: the first node, lower, would otherwise stand in its place while it
    waits for its own to come first, and no controller would ever lead (no container map, no balancing)."""
    with World(seed) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)
        zookeeper.ensure_path("/tributary-test")
        leader_dir = "/tributary-test" + ClusterPaths("/tributary").leader  # the controller's, under the chroot
        agree = controller_zk.agree_on_settings

        async def agree_then_lose_the_next_reply(*args, **kwargs):
            await agree(*args, **kwargs)
            zookeeper.reply_loss = 1.0  # the candidacy's create is applied, its reply lost

            async def restore() -> None:
                await eventually(lambda: len(zookeeper.children(leader_dir)) >= 1)
                zookeeper.reply_loss = 0.0  # the retry makes a second node and is answered

            asyncio.ensure_future(restore())

        monkeypatch.setattr(controller_zk, "agree_on_settings", agree_then_lose_the_next_reply)
        cluster: list[controller_zk.ControllerCluster] = []

        async def controller_main() -> None:
            member = controller_zk.ControllerCluster(HOSTS, 4, session_timeout=4.0, poll_interval=0.5)
            await member.start()
            cluster.append(member)
            await asyncio.get_running_loop().create_future()

        async def scenario() -> None:
            world.process("controller", CONTROLLER).start(controller_main)
            await eventually(lambda: bool(cluster), 30)
            await asyncio.sleep(10.0)
            assert len(_lines(world, "zk_reply_lost")) >= 1, "no reply was lost: the test did not test"
            assert zookeeper.children(leader_dir) == [cluster[0]._candidate]
            assert cluster[0].is_leader

        world.run(scenario(), until=600)


def _lines(world: World, kind: str) -> list[str]:
    return [line for line in world.trace_tail() if line.split()[1:2] == [kind]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_released_owner_lock_whose_delete_is_retried_leaves_the_next_owner_s_lock(seed):
    """A store releases a container log's owner lock (it stops the container); the reply to its delete is lost and
    the delete is retried, after the next owner created its own lock at the same path. The retry must not delete
    that lock (a re-created znode starts at version 0 again, as the released one was): the next owner would run
    the log with no lock, and a third store could open it beside it."""
    with World(seed) as world:
        zookeeper, logs, stores = _two_log_owners(world)
        path = OWNER_PATH

        async def scenario() -> None:
            await _lock_taken_by_a(world, logs, stores)

            async def release() -> None:
                zookeeper.reply_loss = 1.0  # its delete is applied, its answer lost: it is retried
                await logs["a"]._release_owner_lock()

            released = _run_in(world, stores["a"], release())
            await eventually(lambda: not zookeeper.exists(path), 10)
            zookeeper.reply_loss = 0.0
            await _run_in(world, stores["b"], logs["b"]._take_owner_lock())  # the next owner, before a's retry
            await released
            assert len(_lines(world, "zk_reply_lost")) >= 1, "no reply was lost: the test did not test"
            assert zookeeper.data(path) == logs["b"]._token

        world.run(scenario(), until=120)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_open_cancelled_while_its_lock_create_is_retried_leaves_no_lock_behind(seed):
    """A store opens a container log; the reply to the create of the log's owner lock is lost (the create was
    applied) and the open is cancelled while the create waits to be retried (the container map gave the container to
    another store meanwhile). The lock must not stay behind: it goes only with the store's session, which lives on,
    and no store could ever open the log again."""
    with World(seed) as world:
        zookeeper, logs, stores = _two_log_owners(world)
        path = OWNER_PATH

        async def scenario() -> None:
            await eventually(lambda: len(logs) == 2, 30)
            zookeeper.reply_loss = 1.0  # the lock's create is applied, its answer lost
            opening = _run_in(world, stores["a"], logs["a"].open())
            await eventually(lambda: zookeeper.exists(path), 10)
            zookeeper.reply_loss = 0.0
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
            assert len(_lines(world, "zk_reply_lost")) >= 1, "no reply was lost: the test did not test"
            await eventually(lambda: not zookeeper.exists(path), 10)
            await _run_in(world, stores["b"], logs["b"]._take_owner_lock())  # the next owner takes it
            assert zookeeper.data(path) == logs["b"]._token

        world.run(scenario(), until=120)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lock_released_while_zookeeper_is_down_by_a_cancelled_caller_is_released_once_it_is_back(seed):
    """A store releases a container log's owner lock (it stops the container) while ZooKeeper is down, and the stop
    is cancelled meanwhile (the store presumed its session lost). ZooKeeper comes back and the store's session lives
    on, as sessions do across an ensemble's outage: the lock must still be released, or it stays for as long as the
    store lives and no store can open the log again (found by the simulation, cluster seed 90)."""
    with World(seed) as world:
        zookeeper, logs, stores = _two_log_owners(world)
        path = OWNER_PATH

        async def scenario() -> None:
            await _lock_taken_by_a(world, logs, stores)
            session = zookeeper.ephemeral_owner(path)
            zookeeper.down(8.0)
            releasing = _run_in(world, stores["a"], logs["a"]._release_owner_lock())
            await asyncio.sleep(3.0)
            releasing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await releasing
            assert zookeeper.ephemeral_owner(path) == session  # still held: ZooKeeper is down
            await eventually(lambda: not zookeeper.exists(path), 30)
            assert logs["a"]._zk.session_id == session, "the session expired: the test did not test"
            await _run_in(world, stores["b"], logs["b"]._take_owner_lock())  # the next owner takes it
            assert zookeeper.data(path) == logs["b"]._token

        world.run(scenario(), until=120)


async def _lock_taken_by_a(world: World, logs: dict[str, ReplicatedDurableDataLog], stores: dict[str, Process]
                           ) -> None:
    """Once both stores of ``_log_owners`` are up, store ``a`` takes the log's owner lock."""
    await eventually(lambda: len(logs) == 2, 30)
    await _run_in(world, stores["a"], logs["a"]._take_owner_lock())


def _two_log_owners(world: World) -> tuple[SimZooKeeperServer, dict[str, ReplicatedDurableDataLog],
                                           dict[str, Process]]:
    """A ZooKeeper that loses no reply (yet), and ``_log_owners``' two stores and logs."""
    zookeeper = world.zookeeper(ZK, reply_loss=0.0)
    logs: dict[str, ReplicatedDurableDataLog] = {}
    return zookeeper, logs, _log_owners(world, logs)


def _log_owners(world: World, logs: dict[str, ReplicatedDurableDataLog]) -> dict[str, Process]:
    """Two stores, ``a`` and ``b``, each with a ZooKeeper session and a (not yet opened) log ``container-0`` in
    ``logs`` once started."""
    def store_main(name: str):
        async def main() -> None:
            zk = replicated.ZooKeeper(f"{ZK}:2181", session_timeout=4.0)
            await zk.start()
            paths = Paths("/tributary")
            await paths.ensure(zk)
            logs[name] = ReplicatedDurableDataLog("container-0", ReplicaPool(zk, paths, ReplicationSettings()))
            await asyncio.get_running_loop().create_future()
        return main

    stores = {name: world.process(f"store-{name}", host) for name, host in (("a", "10.0.0.1"), ("b", "10.0.0.2"))}
    for name, process in stores.items():
        process.start(store_main(name))
    return stores


def _run_in(world: World, process: Process, coroutine) -> asyncio.Task:
    """``coroutine`` as a task of ``process`` (so that its connections are the process's)."""
    context = contextvars.Context()
    context.run(OWNER.set, process.owner)
    return world.loop.create_task(coroutine, context=context)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_restarted_store_whose_new_registration_s_reply_is_lost_starts(seed):
    """A segment store restarted while its previous process's session lives finds that process's registration,
    deletes it and registers again; the reply to that create is lost and the create retried, which finds the node
    it made. The store must start (its start raised NodeExistsError: `tributary segmentstore` exited)."""
    with World(seed) as world:
        zookeeper = world.zookeeper(ZK, reply_loss=0.0)
        paths = ClusterPaths("/tributary")
        registration = paths.segment_store("10.0.0.1:12345")
        members: list[ClusterMember] = []
        deleted = [False]

        def lose_the_reply_to_the_create_after_a_delete() -> None:
            create, delete = zookeeper._create, zookeeper._delete

            def deleting(path, version):
                deleted[0] = deleted[0] or path == registration
                return delete(path, version)

            def creating(connection, path, data, flags):
                created = create(connection, path, data, flags)
                if path == registration and deleted[0] and zookeeper.reply_loss == 0.0:
                    zookeeper.reply_loss = 1.0  # this create's answer is lost, then no other
                    world.loop.call_soon(setattr, zookeeper, "reply_loss", 0.0, context=world.context)
                    deleted[0] = False
                return created

            zookeeper._delete, zookeeper._create = deleting, creating  # type: ignore[method-assign]

        def store_main() -> Callable[[], Awaitable[None]]:
            async def main() -> None:
                zk = zookeeper_module.ZooKeeper(f"{ZK}:2181", session_timeout=4.0)
                await zk.start()
                await agree_on_settings(zk, paths, 4)

                async def nothing(_container: int) -> None:
                    pass

                member = ClusterMember(zk, paths, "10.0.0.1", 12345, nothing, nothing)
                await member.start()
                members.append(member)
                await asyncio.get_running_loop().create_future()
            return main

        async def scenario() -> None:
            old = world.process("store-old", "10.0.0.1")
            old.start(store_main())
            await eventually(lambda: len(members) == 1, 30)
            old.crash()  # kill -9: its registration stays until its session expires
            lose_the_reply_to_the_create_after_a_delete()
            new = world.process("store-new", "10.0.0.1")
            new.start(store_main())
            await eventually(lambda: len(members) == 2 or new.task is not None and new.task.done(), 30)
            assert len(_lines(world, "zk_reply_lost")) >= 1, "no reply was lost: the test did not test"
            assert len(members) == 2, new.task.exception() if new.task is not None and new.task.done() else None
            assert zookeeper.ephemeral_owner(registration) == members[1]._zk.session_id

        world.run(scenario(), until=120)
