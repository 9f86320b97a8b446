"""The cluster of tests/support/cluster.py with every process in a network namespace of its own (a node of a
tests/support/netns.py Network): ZooKeeper, three log stores, segment stores in cluster mode on the replicated
Tier-1 sharing one Tier-2 directory, and controllers, each listening on (and so advertising) its node's
address. A partition between two of them is then a real one: packets dropped between their namespaces.

Nodes are named ``zk``, ``ls0``.., ``ss0``.., ``ctl0``.. and ``client`` (for an SDK workload: ``client_program``
starts a Python program there). Every server listens on its node's address at a fixed port (the nodes do not
share ports). The test process reaches every node (the network's host interface), so it starts and probes
them and reads the cluster's state with ``tributary status`` as an operator would; ``status(launcher=...)``
reads it from a node instead. What it shares with tests/support/cluster.py (the options, ``status``,
``owners``, ``wait_until_served``, pausing) it inherits from ``Cluster``. Every process is stopped by its PID
(``stop()``, and ``Network.close()`` for whatever is left).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .cluster import Cluster, controller_args
from .netns import Network, Node
from .processes import kill_process, terminate_process, wait_until_ready
from .zookeeper import ZooKeeperServer

ZK_PORT, LOG_STORE_PORT, SEGMENT_STORE_PORT, CONTROLLER_PORT = 2181, 12400, 12345, 9090
REPOSITORY = Path(__file__).resolve().parents[2]  # the programs run in a node import tests.support from here


def reachable(address: str, port: int):
    """A probe for wait_until_ready: something accepts connections at ``address:port``."""
    return lambda: socket.create_connection((address, port), timeout=0.5).close()


class NetnsProcess:
    """A `tributary <command>` process in a node, listening on the node's address at ``port``."""

    def __init__(self, node: Node, command: str, port: int, args: Sequence[str], log_path: Path):
        self.node, self.command, self.port, self.args, self.log_path = node, command, port, list(args), log_path
        self.process: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return f"<{self.command} on {self.endpoint} in {self.node.name}>"

    @property
    def endpoint(self) -> str:
        return f"{self.node.address}:{self.port}"

    @property
    def uri(self) -> str:
        return f"tcp://{self.endpoint}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60.0) -> NetnsProcess:
        with open(self.log_path, "ab") as log:
            self.process = self.node.popen([sys.executable, "-m", "tributary", self.command, "--host",
                                            self.node.address, "--port", str(self.port), *self.args],
                                           stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        wait_until_ready(self.process, reachable(self.node.address, self.port), f"{self.command} on {self.endpoint}",
                         timeout)
        return self

    def kill(self) -> None:
        kill_process(self.process)

    def terminate(self, timeout: float = 20.0) -> int:
        return terminate_process(self.process, timeout)


class NetnsCluster(Cluster):
    """``NetnsCluster(home, network, ...).start()``; the counts and timings are Cluster's."""

    def __init__(self, home: Path, network: Network, containers: int = 4, segment_stores: int = 2,
                 controllers: int = 2, log_stores: int = 3, session_timeout: float = 2.0, grace: float = 0.5,
                 log_quorum: str = "3/3/2"):
        super().__init__(home, containers=containers, segment_stores=segment_stores, controllers=controllers,
                         log_stores=log_stores, session_timeout=session_timeout, grace=grace, log_quorum=log_quorum)
        self.network = network
        self.log_stores: list[NetnsProcess] = []  # Cluster has a LogStores here
        self.segment_stores: list[NetnsProcess] = []
        self.controllers: list[NetnsProcess] = []
        self.client = network.node("client")

    @property
    def controller_uri(self) -> str:
        """Every controller, as a client is given them."""
        return ",".join(controller.uri for controller in self.controllers)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> NetnsCluster:
        self.home.mkdir(parents=True, exist_ok=True)
        zk = self.network.node("zk")
        self.zookeeper = ZooKeeperServer(self.home / "zookeeper", port=ZK_PORT, host=zk.address,
                                         popen=zk.popen).start()
        self.zk_hosts = self.zookeeper.connect_string
        for index in range(self._log_store_count):
            self.log_stores.append(NetnsProcess(
                self.network.node(f"ls{index}"), "logstore", LOG_STORE_PORT,
                ["--data-dir", str(self.home / f"logstore-{index}"), "--zk", self.zk_hosts, "--gc-interval", "2",
                 "--journal-file-size", "8"], self.home / f"logstore-{index}.log").start())
        for _ in range(self._segment_store_count):
            self.add_segment_store()
        for _ in range(self._controller_count):
            self.add_controller()
        self.wait_until_served()
        return self

    def add_segment_store(self) -> NetnsProcess:
        index = len(self.segment_stores)
        store = NetnsProcess(self.network.node(f"ss{index}"), "segmentstore", SEGMENT_STORE_PORT,
                             ["--data-dir", str(self.home / f"segmentstore-{index}"), *self.segment_store_args()],
                             self.home / f"segmentstore-{index}.log")
        self.segment_stores.append(store)
        return store.start()

    def add_controller(self, env: dict[str, str] | None = None) -> NetnsProcess:
        if env:
            raise ValueError("a NetnsCluster's controllers take no environment")
        index = len(self.controllers)
        controller = NetnsProcess(self.network.node(f"ctl{index}"), "controller", CONTROLLER_PORT,
                                  controller_args(self.zk_hosts, self.containers, self.session_timeout, self.grace),
                                  self.home / f"controller-{index}.log")
        self.controllers.append(controller)
        return controller.start()

    def stop(self) -> None:
        for process in [*self.controllers, *self.segment_stores, *self.log_stores]:
            process.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()

    @staticmethod
    def store_id(store: NetnsProcess) -> str:
        return store.endpoint

    # ------------------------------------------------------------------ programs in the client node

    def client_program(self, args: Sequence[str], log_path: Path, **options) -> subprocess.Popen:
        """Starts ``python ARGS`` in the client node (from the repository root, so ``-m tests.support.X`` works),
        its output to ``log_path``; stopped by ``Network.close()`` if it still runs."""
        with open(log_path, "ab") as log:
            return self.client.popen([sys.executable, *args], cwd=REPOSITORY, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, **options)

    def run_client_program(self, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
        """Runs ``python ARGS`` in the client node to its end, killed after ``timeout`` seconds
        (subprocess.TimeoutExpired); returns it with its output (stdout and stderr, text)."""
        return self.client.run([sys.executable, *args], timeout=timeout, cwd=REPOSITORY, capture_output=True,
                               text=True, stdin=subprocess.DEVNULL)
