"""Tributary's cluster coordination (controller/cluster, server/cluster) against the simulated ZooKeeper: what
only a world can arrange, such as the reply to one particular write being lost. Every test runs in this process
on the world's loop, in milliseconds of wall time."""

from __future__ import annotations

import asyncio

import pytest

import controller.cluster.zk as controller_zk
from coordination.cluster import ClusterPaths
from tests.simulation import World
from tests.support.zookeeper_contract import eventually

ZK = "10.0.9.1"
HOSTS = f"{ZK}:2181/tributary-test"
CONTROLLER = "10.0.1.1"


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
