"""A whole cluster in the world (cluster_topology.py): it comes up and shares out its containers, in whatever order
its processes start. Each test runs in this process on the world's loop, in about a second of wall time (seeds
of their own: a seed's data dir is named after it, and the CI seeds may run at the same time)."""

from __future__ import annotations

import asyncio

import clients
from tests.simulation import World
from tests.simulation.cluster_topology import SimCluster
from tests.support.zookeeper_contract import eventually


def test_a_cluster_comes_up_and_shares_out_its_containers():
    with World(101) as world:
        cluster = SimCluster(world)

        async def scenario() -> None:
            cluster.start()
            await eventually(lambda: not cluster.problems(), 60)
            running = [sorted(service.containers) for service in cluster.services if service is not None]
            assert sorted(map(len, running)) == [2, 2], running

        try:
            world.run(scenario(), until=120)
        finally:
            cluster.close()


def test_controllers_started_before_any_segment_store_wait_for_one():
    """`tributary controller --zk` started before any segment store registered (a cluster starting all at once)
    keeps trying for its --wait seconds, as it does while the stores cannot be reached, rather than exiting."""
    with World(102) as world:
        cluster = SimCluster(world)
        created: list[str] = []

        async def client_main() -> None:
            while True:
                try:
                    async with clients.connect(cluster.controller_uri) as client:
                        await client.create_scope("early")
                    created.append("early")
                    return
                except Exception:  # noqa: BLE001 - the cluster is starting
                    await asyncio.sleep(1.0)

        async def scenario() -> None:
            cluster.start_zookeeper()
            cluster.start_logstores()
            cluster.start_controllers()
            await asyncio.sleep(3.0)  # the controllers find no segment store meanwhile
            cluster.start_stores()
            world.process("client", "10.0.3.1").start(client_main)
            await eventually(lambda: bool(created), 60)
            assert not cluster.crashes, cluster.crashes

        try:
            world.run(scenario(), until=120)
        finally:
            cluster.close()
