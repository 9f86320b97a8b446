"""The SDK moves to another controller when the one it uses dies (issue 28): a client given one controller's
address learns the others (getControllerServerList), and when that controller is SIGKILLed while the client
writes, reads and commits transactions, no error reaches the application and no stream stalls for long.

Real processes (tests/support/cluster.py): ZooKeeper, three log stores, one segment store in cluster mode,
two controllers; the client runs in the test's own loop.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from clients.config import ClientConfig
from tests.support.cluster import Cluster
from tests.support.continuous_writer import longest_gap
from tests.support.sdk import sdk
from tests.support.sdk_workload import Workload, check_read_back
from tests.support.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

STALL_LIMIT = 5.0  # seconds: the bound for a killed controller


async def test_a_killed_controller_is_left_for_another_without_errors(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper, segment_stores=1, controllers=2) as cluster:
        first, second = cluster.controllers
        async with sdk.connect(first.uri, ClientConfig()) as client:
            workload = Workload(client)
            await workload.start()
            controller = client._controller
            await eventually(lambda: second.endpoint in controller.known_addresses,
                             "the client to learn of the other controller", timeout=10)
            assert controller.address == first.endpoint
            await asyncio.sleep(1.0)

            killed_at = time.monotonic()
            first.kill()
            await asyncio.sleep(10.0)
            settled = time.monotonic()
            await workload.finish()
            assert not workload.errors, f"errors reached the application: {workload.errors!r}"
            assert controller.address == second.endpoint

            stalls = {"write": longest_gap(workload.writer.ack_times, killed_at),
                      "read": longest_gap(workload.read_times, killed_at),
                      "commit": longest_gap(workload.commit_times, killed_at)}
            print(f"longest stalls after the controller was killed: "
                  f"{ {name: round(stall, 2) for name, stall in stalls.items()} }")
            assert all(stall <= STALL_LIMIT for stall in stalls.values()), stalls
            assert [moment for moment in workload.commit_times if moment > killed_at + 1.0 and moment < settled]

            await check_read_back(client, workload.record())


PAUSED_LIMIT = 12.0  # seconds: a silent controller is noticed by gRPC keep-alive (a ping after 5 s, 5 s to answer)


async def test_a_paused_controller_is_left_once_its_keepalives_go_unanswered(tmp_path, zookeeper):
    """SIGSTOP the controller in use: its connection stays up but nothing answers; the calls waiting on it fail
    over when their keep-alive pings go unanswered, and the application sees no error."""
    with Cluster(tmp_path, zookeeper=zookeeper, segment_stores=1, controllers=2) as cluster:
        first, second = cluster.controllers
        async with sdk.connect(f"{first.uri},{second.uri}") as client:
            workload = Workload(client)
            await workload.start()
            assert client._controller.address == first.endpoint
            paused_at = time.monotonic()
            cluster.pause(first.process)
            try:
                await asyncio.sleep(PAUSED_LIMIT + 3.0)
                await workload.finish()
            finally:
                cluster.resume(first.process)
            assert not workload.errors, f"errors reached the application: {workload.errors!r}"
            assert client._controller.address == second.endpoint
            stall = longest_gap(workload.commit_times, paused_at)
            print(f"longest transaction stall after the controller was paused: {stall:.1f} s")
            assert stall <= PAUSED_LIMIT
