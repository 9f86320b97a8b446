"""Controllers and segment stores coordinating through a real ZooKeeper, in one process: leases are exclusive
across controllers and go with a closed session, every stream's bucket has exactly one owner, a controller
that leaves is noticed, and the leader's map drives which containers each segment store member runs."""

from __future__ import annotations

import asyncio

import pytest

from controller.cluster import LeaseBusy
from controller.cluster.zk import ControllerCluster
from server.cluster import ClusterMember
from coordination.cluster import ClusterMismatch, ClusterPaths
from coordination.zookeeper import ZooKeeper
from tests.support.waiting import eventually

COUNT = 4


def controller(zk_hosts: str) -> ControllerCluster:
    return ControllerCluster(zk_hosts, COUNT, session_timeout=2.0, grace_seconds=0.2, poll_interval=0.2)


async def test_leases_are_exclusive_and_go_with_the_session(zk_hosts):
    first, second = controller(zk_hosts), controller(zk_hosts)
    await first.start()
    await second.start()
    try:
        async with first.lease("workflow", "scope/stream"):
            with pytest.raises(LeaseBusy):
                async with second.lease("workflow", "scope/stream"):
                    pass
            async with first.lease("workflow", "scope/stream"):  # held again in the same process: shared
                pass
            async with second.lease("workflow", "scope/other"):  # another stream's is free
                pass
        async with second.lease("workflow", "scope/stream"):  # released by the first
            pass
        async with first.lease("commits", "scope/stream"):
            await first.stop()  # the session ends: its leases go with it
            async with second.lease("commits", "scope/stream"):
                pass
    finally:
        await first.stop()
        await second.stop()


async def test_each_stream_has_one_owner_and_a_leaving_controller_is_noticed(zk_hosts):
    first, second = controller(zk_hosts), controller(zk_hosts)
    lost = asyncio.Event()
    await first.start()
    await second.start()
    first.on_controllers_lost(lost.set)
    await first.register("127.0.0.1", 9001)
    await second.register("127.0.0.1", 9002)
    try:
        await eventually(lambda: len(first.controllers) == len(second.controllers) == 2, "membership")
        streams = [("scope", f"stream-{index}") for index in range(100)]
        owners = [(first.owns(*stream), second.owns(*stream)) for stream in streams]
        assert all(mine != theirs for mine, theirs in owners), "a stream with no owner or two"
        assert 20 < sum(mine for mine, _ in owners) < 80
        assert sorted(first.controller_endpoints()) == [("127.0.0.1", 9001), ("127.0.0.1", 9002)]
        assert sum(len(buckets) for buckets in first.bucket_mapping().values()) == first.bucket_count
        assert first.is_leader != second.is_leader
        await second.stop()
        await asyncio.wait_for(lost.wait(), 15)
        assert all(first.owns(*stream) for stream in streams)
        await eventually(lambda: first.is_leader, "the survivor leading")
    finally:
        await first.stop()
        await second.stop()


class Member:
    """A segment store's membership with the containers it runs recorded instead of recovered."""

    def __init__(self, zk: ZooKeeper, port: int):
        self.running: set[int] = set()
        self.member = ClusterMember(zk, ClusterPaths(), "127.0.0.1", port, self._start, self._stop, poll_interval=0.2)

    async def _start(self, container: int) -> None:
        self.running.add(container)

    async def _stop(self, container: int) -> None:
        self.running.discard(container)


async def test_the_leaders_map_drives_the_members(zk_hosts):
    leader = controller(zk_hosts)
    sessions = [ZooKeeper(zk_hosts, session_timeout=2.0) for _ in range(2)]
    await leader.start()
    for session in sessions:
        await session.start()
    first, second = Member(sessions[0], 7001), Member(sessions[1], 7002)
    try:
        await first.member.start()
        await eventually(lambda: first.running == set(range(COUNT)), "the first store running everything")
        await second.member.start()
        await eventually(lambda: len(first.running) == len(second.running) == COUNT // 2, "a balanced map")
        assert first.running.isdisjoint(second.running)
        # the members follow the map from ZooKeeper's watches; the leader's own copy may be updated a moment later
        await eventually(lambda: leader.endpoint_of_container(min(second.running)) == ("127.0.0.1", 7002),
                         "the leader's map naming the second store")
        await first.member.stop()
        await sessions[0].stop()  # the store is gone: after the grace, the second runs everything
        await eventually(lambda: second.running == set(range(COUNT)), "the survivor running everything")
    finally:
        await first.member.stop()
        await second.member.stop()
        for session in sessions:
            await session.stop()
        await leader.stop()


async def test_a_process_with_another_container_count_is_refused(zk_hosts):
    first = controller(zk_hosts)
    await first.start()
    other = ControllerCluster(zk_hosts, COUNT + 1)
    try:
        with pytest.raises(ClusterMismatch, match=f"the cluster has {COUNT} containers"):
            await other.start()
    finally:
        await first.stop()
