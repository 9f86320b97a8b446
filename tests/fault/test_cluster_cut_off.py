"""A segment store cut off from ZooKeeper, and one paused, against real processes (tests/support/cluster.py: a
ZooKeeper, three log stores, segment stores in cluster mode, controllers), each stopped by PID.

* Cut off (issue 28): one store reaches ZooKeeper through a TCP proxy (tests/support/tcp_proxy.py) that is
  blackholed (a partition: nothing moves, nothing is reset) while the SDK writes. A short partition changes
  nothing. A long one: the store stops serving once its session must be presumed expired, so its client
  connections are closed within the session timeout + 2 s of the cut; the writer carries on at the new owner
  (its longest stall is printed and bounded); after healing the store serves again, and every acknowledged
  event is read back exactly once.
* Paused: a SIGSTOPped store is reported unknown by ``tributary status`` within its threshold + 1 s (its
  heartbeat stops; its session has not expired yet), and serving again once SIGCONTed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from clients.connection import WireConnection, next_request_id
from clients.model import ScalingPolicy, StreamConfiguration
from coordination.zookeeper import ZooKeeper
from tests.support.cluster import Cluster
from tests.support.continuous_writer import ContinuousWriter, assert_all_acknowledged_read_once
from tests.support.processes import ServerProcess
from tests.support.sdk import read_all, sdk
from tests.support.tcp_proxy import ThreadedFaultyProxy
from tests.support.waiting import eventually
from tributary.cluster_status import describe, print_status, read_cluster, served
from wire import commands as c
from wire import naming

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSION = 2.0  # the stores' --zk-session-timeout (Cluster's default)
GRACE = 0.5  # the controllers' --rebalance-grace (Cluster's default)
RECOVERY = 3.0  # a container recovered by its new owner, with room for a loaded machine
STALL_LIMIT = SESSION + GRACE + RECOVERY + 3.0
SEGMENTS = 8


def zk_through(proxy_port: int, zk_hosts: str) -> str:
    """The connect string ``zk_hosts`` (one server and a chroot) with the proxy in place of the server."""
    _, slash, chroot = zk_hosts.partition("/")
    return f"127.0.0.1:{proxy_port}{slash}{chroot}"


def zk_port(zk_hosts: str) -> int:
    return int(zk_hosts.partition("/")[0].rpartition(":")[2])


def start_store_behind(cluster: Cluster, proxy: ThreadedFaultyProxy) -> ServerProcess:
    """A segment store of ``cluster`` whose ZooKeeper traffic (registration, map, log metadata) goes through the
    proxy; the cluster stops it by PID with the others."""
    arguments = cluster.segment_store_args()
    arguments[arguments.index("--zk") + 1] = zk_through(proxy.port, cluster.zk_hosts)
    index = len(cluster.segment_stores)
    store = ServerProcess("segmentstore", cluster.home / f"segmentstore-{index}",
                          log_path=cluster.home / f"segmentstore-{index}.log", extra_args=arguments)
    cluster.segment_stores.append(store)
    return store.start(timeout=60)


def client_peers(store: ServerProcess) -> set[tuple[str, int]]:
    """The remote addresses of the established connections to the store's listening port."""
    return {(connection.raddr.ip, connection.raddr.port)
            for connection in psutil.Process(store.process.pid).net_connections(kind="tcp")
            if connection.status == psutil.CONN_ESTABLISHED and connection.laddr.port == store.port and
            connection.raddr}


def log_lines(store: ServerProcess, message: str) -> list[dict]:
    lines = store.log_path.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{") and f'"{message}' in line]


async def set_up_append(store: ServerProcess, segment: str) -> WireConnection:
    """A raw client connection that used the store for one of its containers (SetupAppend on ``segment``)."""
    connection = await WireConnection.connect("127.0.0.1", store.port)
    setup = await connection.request(c.SetupAppend(next_request_id(), uuid.uuid4(), segment, ""))
    assert isinstance(setup, c.AppendSetup), setup
    return connection


async def time_until_closed(connection: WireConnection, since: float, timeout: float) -> float:
    deadline = since + timeout
    while not connection.closed and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return time.monotonic() - since


async def test_a_store_cut_off_from_zookeeper_stops_serving_and_the_writer_moves_on(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper, segment_stores=1, controllers=2) as cluster, \
            ThreadedFaultyProxy("127.0.0.1", zk_port(cluster.zk_hosts)) as proxy:
        cut = await asyncio.to_thread(start_store_behind, cluster, proxy)
        cut_id, other_id = cluster.store_id(cut), cluster.store_id(cluster.segment_stores[0])
        await eventually(lambda: set(cluster.owners().values()) == {cut_id, other_id},
                         "the store behind the proxy to take containers", timeout=60, interval=0.2)
        theirs = {container for container, owner in cluster.owners().items() if owner == cut_id}
        segment = next(name for name in (naming.stream_segment_name("cut", "s", n) for n in range(SEGMENTS))
                       if naming.container_of(name, cluster.containers) in theirs)
        async with sdk.connect(cluster.controllers[0].uri) as client:
            await client.create_scope("cut")
            await client.create_stream("cut", "s", StreamConfiguration(ScalingPolicy.fixed(SEGMENTS)))
            writer = ContinuousWriter(client, "cut", "s")
            task = asyncio.ensure_future(writer.run())
            raw: WireConnection | None = None
            try:
                await eventually(lambda: writer.acknowledged or task.done(), "the first acknowledgement", timeout=30)
                raw = await set_up_append(cut, segment)

                # A partition shorter than the session: nothing changes.
                proxy.blackhole()
                await asyncio.sleep(0.8)
                proxy.heal()
                await asyncio.sleep(SESSION + 0.5)
                assert not raw.closed and not log_lines(cut, "segment store stops serving")

                # One longer than the session: the store stops serving, its clients go elsewhere.
                peers = await asyncio.to_thread(client_peers, cut)
                assert peers, "no client is connected to the store behind the proxy"
                cut_at = time.monotonic()
                proxy.blackhole()
                closed_after = await time_until_closed(raw, cut_at, SESSION + 5.0)
                print(f"the cut-off store closed its client connections {closed_after:.2f} s after the cut")
                assert closed_after <= SESSION + 2.0
                await eventually(lambda: not (client_peers(cut) & peers),
                                 "every client connection of before the cut to be closed", timeout=1.0, interval=0.05)
                (stopped,) = log_lines(cut, "segment store stops serving")
                assert stopped["containers"] == sorted(theirs) and stopped["connections_closed"] >= 2

                await asyncio.to_thread(cluster.wait_until_served, 60.0, cut_id)
                moved_at = time.monotonic()
                print(f"its containers were served again {moved_at - cut_at:.2f} s after the cut")
                assert set(cluster.owners().values()) == {other_id}
                await eventually(lambda: writer.ack_times[-1] > moved_at, "an acknowledgement from the new owner",
                                 timeout=STALL_LIMIT)

                proxy.heal()
                await eventually(lambda: log_lines(cut, "segment store serves again"),
                                 "the store to serve again once ZooKeeper answers", timeout=60, interval=0.2)
                await eventually(lambda: set(cluster.owners().values()) == {cut_id, other_id},
                                 "the healed store to take containers again", timeout=60, interval=0.2)
                healed_at = time.monotonic()
                await eventually(lambda: writer.ack_times[-1] > healed_at + 1.0, "writing on after the heal",
                                 timeout=STALL_LIMIT + 1.0)
            finally:
                writer.stop.set()
                await asyncio.wait_for(task, 120)
                if raw is not None:
                    await raw.close()
            stall = writer.longest_stall(cut_at - 1.0)
            print(f"the writer's longest stall: {stall:.2f} s (limit {STALL_LIMIT:.1f} s); "
                  f"{len(writer.acknowledged)} events acknowledged")
            assert stall <= STALL_LIMIT
            (events,) = await read_all(client, "cut", "s", "check")
            assert_all_acknowledged_read_once(writer.acknowledged, events)


STALE = 1.5  # the status threshold here: above the heartbeat (1 s with a 4 s session), below the session


def run_status(zk_hosts: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tributary", "status", "--zk", zk_hosts, *arguments],
                          capture_output=True, text=True, timeout=60)


async def test_status_reports_a_paused_store_unknown_then_serving_again(tmp_path, zookeeper):
    # The test ZooKeeper allows sessions of at most 4 s: the paused store's registration stays that long.
    with Cluster(tmp_path, zookeeper=zookeeper, session_timeout=4.0, controllers=1) as cluster:
        paused = cluster.segment_stores[0]
        paused_id = cluster.store_id(paused)
        result = await asyncio.to_thread(run_status, cluster.zk_hosts, "--stale-after", "3")
        assert result.returncode == 0, result.stdout
        assert all(" s ago)" in line for line in result.stdout.splitlines() if line.startswith("segment store "))

        zk = ZooKeeper(cluster.zk_hosts, session_timeout=4.0)
        await zk.start()
        try:
            async def state() -> dict:
                return (await read_cluster(zk, "/tributary", STALE))["segment_stores"][paused_id]

            await eventually(lambda: state_is(state, "serving"), "the store to be seen", timeout=10, interval=0.1)
            theirs = (await state())["serving"]
            cluster.pause(paused.process)
            paused_at = time.monotonic()
            try:
                await eventually(lambda: state_is(state, "unknown"), "status to say unknown", timeout=STALE + 2.0,
                                 interval=0.05)
                unknown_after = time.monotonic() - paused_at
                lines: list[str] = []
                code = await print_status(cluster.zk_hosts, "/tributary", False, lines.append, stale_after=STALE)
            finally:
                cluster.resume(paused.process)
            print(f"status said unknown {unknown_after:.2f} s after the SIGSTOP (threshold {STALE} s); {lines}")
            assert unknown_after <= STALE + 1.0
            assert code == 1 and any(line.startswith(f"segment store {paused_id}: unknown, not seen for ")
                                     for line in lines), lines
            assert any(line.startswith("NOT SERVED: containers ") for line in lines), lines

            await eventually(lambda: state_is(state, "serving"), "the resumed store to be serving", timeout=10,
                             interval=0.1)
            cluster_now = await read_cluster(zk, "/tributary", STALE)
            assert served(cluster_now) and cluster_now["segment_stores"][paused_id]["serving"] == theirs
            assert describe(cluster_now)[-1] == f"all {cluster.containers} containers served"
            assert not log_lines(paused, "segment store stops serving"), "a pause shorter than the session cut it off"
        finally:
            await zk.stop()


async def state_is(state, expected: str) -> bool:
    return (await state())["state"] == expected


@pytest.mark.zk  # its own ZooKeeper, to restart
async def test_a_zookeeper_outage_longer_than_the_session_stops_every_store_until_it_is_back(tmp_path):
    """ZooKeeper itself down longer than the session timeout (its own server here, restarted): every store stops
    serving (it cannot tell the outage from its own partition); the restarted server restores the sessions, so
    each store finds its registration, reads the unchanged map and recovers the same containers again."""
    with Cluster(tmp_path, controllers=1) as cluster:
        owners = cluster.owners()
        async with sdk.connect(cluster.controllers[0].uri) as client:
            await client.create_scope("outage")
            await client.create_stream("outage", "s", StreamConfiguration(ScalingPolicy.fixed(4)))
            writer = ContinuousWriter(client, "outage", "s")
            task = asyncio.ensure_future(writer.run())
            try:
                await eventually(lambda: writer.acknowledged or task.done(), "the first acknowledgement", timeout=30)
                down_at = time.monotonic()
                await asyncio.to_thread(cluster.zookeeper.restart, SESSION + 1.0)
                back_at = time.monotonic()
                for store in cluster.segment_stores:
                    await eventually(lambda: log_lines(store, "segment store serves again"),
                                     f"{store.log_path.name} to serve again", timeout=30, interval=0.2)
                    assert len(log_lines(store, "segment store stops serving")) == 1
                await asyncio.to_thread(cluster.wait_until_served, 60.0)
                assert cluster.owners() == owners, "the sessions survived: nothing moved"
                await eventually(lambda: writer.ack_times[-1] > back_at, "writing on once ZooKeeper is back",
                                 timeout=30)
            finally:
                writer.stop.set()
                await asyncio.wait_for(task, 120)
            stall = writer.longest_stall(down_at - 1.0)
            print(f"ZooKeeper down {back_at - down_at:.1f} s: the writer's longest stall {stall:.2f} s")
            assert stall <= back_at - down_at + RECOVERY + 3.0
            (events,) = await read_all(client, "outage", "s", "check")
            assert_all_acknowledged_read_once(writer.acknowledged, events)
