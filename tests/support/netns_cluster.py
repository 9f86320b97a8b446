"""The cluster of tests/support/cluster.py with every process in a network namespace of its own (a node of a
tests/support/netns.py Network): ZooKeeper, three log stores, segment stores in cluster mode on the replicated
Tier-1 sharing one Tier-2 directory, and controllers, each listening on its node's address. A partition
between two of them is then a real one: packets dropped between their namespaces.

Nodes are named ``zk``, ``ls0``.., ``ss0``.., ``ctl0``.. and ``client`` (for the workload). The test process
reaches every node (the bridge is its own), so it starts and probes them, and reads the cluster's state with
``tributary status`` as an operator would. Every process is stopped by its PID (Network.close()).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from .cluster import ClusterView
from .netns import Network, Node
from .processes import wait_until_ready
from .zookeeper import ZooKeeperServer

ZK_PORT, LOG_STORE_PORT, SEGMENT_STORE_PORT, CONTROLLER_PORT = 2181, 12400, 12345, 9090


def reachable(address: str, port: int):
    """A probe for wait_until_ready: something accepts connections at ``address:port``."""
    return lambda: socket.create_connection((address, port), timeout=0.5).close()


class NetnsProcess:
    """A `tributary <command>` process in a node, listening on the node's address at ``port``."""

    def __init__(self, node: Node, command: str, port: int, args: list[str], log_path: Path):
        self.node, self.command, self.port, self.args, self.log_path = node, command, port, args, log_path
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.node.address}:{self.port}"

    def start(self, timeout: float = 60.0) -> NetnsProcess:
        log = open(self.log_path, "ab")
        self.process = self.node.popen([sys.executable, "-m", "tributary", self.command, "--host", self.node.address,
                                        "--port", str(self.port), *self.args], stdout=log, stderr=log)
        wait_until_ready(self.process, reachable(self.node.address, self.port), f"{self.command} on {self.endpoint}",
                         timeout)
        return self


class NetnsCluster(ClusterView):
    """The cluster (see the module docstring); its status is read from the test's own namespace, which reaches
    every node."""

    def __init__(self, home: Path, network: Network, containers: int = 4, segment_stores: int = 2,
                 controllers: int = 2, log_stores: int = 3, session_timeout: float = 2.0, grace: float = 0.5):
        self.home, self.network = Path(home), network
        self.containers, self.session_timeout, self.grace = containers, session_timeout, grace
        self._counts = (log_stores, segment_stores, controllers)
        self.zookeeper: ZooKeeperServer | None = None
        self.log_stores: list[NetnsProcess] = []
        self.segment_stores: list[NetnsProcess] = []
        self.controllers: list[NetnsProcess] = []
        self.client = network.node("client")

    @property
    def zk_hosts(self) -> str:
        assert self.zookeeper is not None
        return self.zookeeper.connect_string

    @property
    def controller_uri(self) -> str:
        """Every controller, as a client is given them."""
        return ",".join(f"tcp://{controller.endpoint}" for controller in self.controllers)

    def start(self) -> NetnsCluster:
        self.home.mkdir(parents=True, exist_ok=True)
        zk = self.network.node("zk")
        self.zookeeper = ZooKeeperServer(self.home / "zookeeper", port=ZK_PORT, host=zk.address,
                                         popen=zk.popen).start()
        log_stores, segment_stores, controllers = self._counts
        for index in range(log_stores):
            self.log_stores.append(NetnsProcess(
                self.network.node(f"ls{index}"), "logstore", LOG_STORE_PORT,
                ["--data-dir", str(self.home / f"logstore-{index}"), "--zk", self.zk_hosts, "--gc-interval", "2",
                 "--journal-file-size", "8"], self.home / f"logstore-{index}.log").start())
        for index in range(segment_stores):
            self.segment_stores.append(NetnsProcess(
                self.network.node(f"ss{index}"), "segmentstore", SEGMENT_STORE_PORT,
                ["--data-dir", str(self.home / f"segmentstore-{index}"), "--cluster", "--tier1", "replicated",
                 "--zk", self.zk_hosts, "--zk-session-timeout", str(self.session_timeout), "--log-quorum", "3/3/2",
                 "--containers", str(self.containers), "--tier2-dir", str(self.home / "tier2"),
                 "--log-file-size", "16", "--cache-size", "64", "--log-level", "info"],
                self.home / f"segmentstore-{index}.log").start())
        for index in range(controllers):
            self.controllers.append(NetnsProcess(
                self.network.node(f"ctl{index}"), "controller", CONTROLLER_PORT,
                ["--zk", self.zk_hosts, "--containers", str(self.containers), "--zk-session-timeout",
                 str(self.session_timeout), "--rebalance-grace", str(self.grace), "--log-level", "info"],
                self.home / f"controller-{index}.log").start())
        self.wait_until_served()
        return self
