"""The CLI of cluster mode: bad combinations are usage errors (exit 2) with one clear line; an advertised
address is what clients are given; `tributary status` says in one line per process what runs, and its exit
status whether every container is served."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.cluster import Cluster
from tests.support.processes import free_port, kill_process
from tests.support.standalone import StandaloneProcess
from tests.support.waiting import eventually_blocking

pytestmark = pytest.mark.process


def run(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tributary", *args], capture_output=True, text=True, timeout=timeout)


def test_cluster_mode_needs_zookeeper_and_the_replicated_log(tmp_path):
    result = run("segmentstore", "--data-dir", str(tmp_path), "--cluster")
    assert result.returncode == 2 and "--cluster needs --zk" in result.stderr
    result = run("segmentstore", "--data-dir", str(tmp_path), "--cluster", "--zk", "127.0.0.1:1")
    assert result.returncode == 2 and "--tier1 replicated" in result.stderr
    result = run("standalone", "--data-dir", str(tmp_path), "--cluster", "--zk", "127.0.0.1:1")
    assert result.returncode == 2 and "--cluster is for `tributary segmentstore`" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_wildcard_listen_address_needs_an_advertised_one(tmp_path):
    for command in (["standalone", "--data-dir", str(tmp_path)], ["segmentstore", "--data-dir", str(tmp_path)],
                    ["controller"]):
        result = run(*command, "--host", "0.0.0.0")
        assert result.returncode == 2 and "advertise" in result.stderr, (command, result.stderr)


def test_clients_are_given_the_advertised_address(tmp_path):
    standalone = StandaloneProcess(tmp_path / "data", extra_args=["--advertise-address", "localhost"]).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{standalone.controller_port}") as channel:
            stub = pb_grpc.ControllerServiceStub(channel)
            servers = stub.getControllerServerList(pb.ServerRequest(), timeout=10)
            assert [(uri.endpoint, uri.port) for uri in servers.nodeURI] == [("localhost", standalone.controller_port)]
            uri = stub.getURI(pb.SegmentId(streamInfo=pb.StreamInfo(scope="s", stream="t"), segmentId=0), timeout=10)
            assert (uri.endpoint, uri.port) == ("localhost", standalone.store_port)
    finally:
        standalone.kill()


def test_status_without_zookeeper_or_without_a_cluster(zk_hosts):
    started = time.monotonic()
    result = run("status", "--zk", f"127.0.0.1:{free_port()}", timeout=90)
    assert result.returncode == 2 and time.monotonic() - started < 15
    # one line: the error, none of kazoo's ~55 "Connection dropped" lines before it (issue 24)
    assert result.stdout.startswith("error: cannot connect to ZooKeeper") and result.stdout.count("\n") == 1
    assert result.stderr == ""
    result = run("status", "--zk", zk_hosts)
    assert result.returncode == 1 and "no cluster here" in result.stdout


def test_servers_against_an_unreachable_zookeeper_say_so_without_a_flood(tmp_path):
    """Each process that needs ZooKeeper gives up on an unreachable one with its one error line, after at most
    one of kazoo's connection lines (not one per attempt, several a second)."""
    zk = f"127.0.0.1:{free_port()}"
    commands = {
        "logstore": ["logstore", "--data-dir", str(tmp_path / "ls"), "--port", "0", "--zk", zk],
        "segmentstore": ["segmentstore", "--data-dir", str(tmp_path / "ss"), "--port", "0", "--cluster",
                         "--tier1", "replicated", "--zk", zk],
        "controller": ["controller", "--port", "0", "--zk", zk],
    }
    started = time.monotonic()
    processes = {name: subprocess.Popen([sys.executable, "-m", "tributary", *arguments], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for name, arguments in commands.items()}
    try:
        outputs = {name: process.communicate(timeout=60) for name, process in processes.items()}
    finally:
        for process in processes.values():
            kill_process(process)
    assert time.monotonic() - started < 30  # the 15 s connect timeout, all three at once
    for name, (_, stderr) in outputs.items():
        lines = stderr.splitlines()
        assert processes[name].returncode == 1, (name, stderr)
        assert lines and lines[-1].startswith(f"error: cannot connect to ZooKeeper at {zk}"), (name, stderr)
        assert len(lines) <= 2 and "Traceback" not in stderr, (name, stderr)


def test_status_of_a_cluster_and_of_one_missing_a_store(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper, containers=2, segment_stores=1, controllers=1, log_stores=1,
                 log_quorum="1/1/1") as cluster:
        result = run("status", "--zk", cluster.zk_hosts)
        lines = result.stdout.splitlines()
        store = cluster.store_id(cluster.segment_stores[0])
        assert result.returncode == 0, result.stdout
        assert any(line.startswith(f"segment store {store}: serving containers 0,1 (last seen ") for line in lines)
        assert any(line.startswith("controller ") and line.endswith("serving (leader)") for line in lines)
        assert sum(line.startswith("log store ") for line in lines) == 1
        assert lines[-1] == "all 2 containers served"

        mismatch = run("controller", "--zk", cluster.zk_hosts, "--containers", "3", "--port", str(free_port()))
        assert mismatch.returncode == 1 and "the cluster has 2 containers" in mismatch.stderr

        cluster.segment_stores[0].kill()
        eventually_blocking(lambda: run("status", "--zk", cluster.zk_hosts).returncode != 0,
                            "status to say a container is not served", timeout=30, interval=0.2)
        result = run("status", "--zk", cluster.zk_hosts)
        assert result.returncode == 1 and result.stdout.splitlines()[-1] == "NOT SERVED: containers 0,1 of 2"
