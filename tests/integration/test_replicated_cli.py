"""The CLI of the replicated Tier-1: `tributary logstore` registers in ZooKeeper and leaves on SIGTERM; bad
options are usage errors (exit 2) with one clear line; a segment store on the replicated log serves."""

from __future__ import annotations

import subprocess
import sys

from kazoo.client import KazooClient
import pytest

from clients.connection import WireConnection, next_request_id
from tests.support.processes import ServerProcess, free_port, terminate_process
from tests.support.waiting import eventually_blocking
from wire import commands as c

pytestmark = pytest.mark.process


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tributary", *args], capture_output=True, text=True, timeout=60)


def registered(zk_hosts: str) -> list[str]:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        return client.get_children("/tributary/logstores") if client.exists("/tributary/logstores") else []
    finally:
        client.stop()
        client.close()


def test_a_replicated_segment_store_needs_zookeeper(tmp_path):
    result = run("segmentstore", "--data-dir", str(tmp_path), "--port", str(free_port()), "--tier1", "replicated")
    assert result.returncode == 2 and "a replicated tier-1 needs ZooKeeper" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_log_quorum_is_a_usage_error(tmp_path):
    for quorum, message in (("3/2", "expected E/W/A"), ("3/2/2", "W == E"), ("3/3/4", "1 <= A <= W")):
        result = run("segmentstore", "--data-dir", str(tmp_path), "--tier1", "replicated", "--zk", "127.0.0.1:1",
                     "--log-quorum", quorum)
        assert result.returncode == 2 and message in result.stderr, (quorum, result.stderr)


def test_a_log_store_on_a_wildcard_address_needs_an_advertised_one(tmp_path):
    result = run("logstore", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--zk", "127.0.0.1:1")
    assert result.returncode == 2 and "--advertise-address" in result.stderr


def test_a_log_store_registers_and_leaves_on_sigterm(tmp_path, zk_hosts):
    store = ServerProcess("logstore", tmp_path / "store", extra_args=["--zk", zk_hosts, "--journal-file-size", "1"],
                          log_path=tmp_path / "store.log").start()
    try:
        eventually_blocking(lambda: registered(zk_hosts), "the log store to register", timeout=10, interval=0.1)
        (replica_id,) = registered(zk_hosts)
        assert (tmp_path / "store" / "IDENTITY").exists()
        assert terminate_process(store.process) == 0
        assert registered(zk_hosts) == []
        store.start()  # the same data dir is the same replica
        eventually_blocking(lambda: registered(zk_hosts) == [replica_id], f"{replica_id} to register again",
                            timeout=10, interval=0.1)
    finally:
        store.kill()


async def test_a_segment_store_on_one_log_store_serves_appends(tmp_path, zk_hosts):
    """1/1/1: one log store is enough when the quorum says so."""
    store = ServerProcess("logstore", tmp_path / "store", extra_args=["--zk", zk_hosts, "--journal-file-size", "1"],
                          log_path=tmp_path / "store.log").start()
    server = ServerProcess("segmentstore", tmp_path / "data", log_path=tmp_path / "server.log", extra_args=[
        "--tier1", "replicated", "--zk", zk_hosts, "--log-quorum", "1/1/1", "--containers", "1"])
    try:
        server.start(timeout=60)
        connection = await WireConnection.connect("127.0.0.1", server.port)
        reply = await connection.request(c.CreateSegment(next_request_id(), "cli/s/0.#epoch.0", 0, 0, ""))
        assert isinstance(reply, c.SegmentCreated)
        await connection.close()
        assert terminate_process(server.process) == 0
    finally:
        server.kill()
        store.kill()
