"""A whole cluster of real processes on loopback for tests (docs/cluster.md): a ZooKeeper, log stores,
segment stores in cluster mode sharing one Tier-2 directory, and controllers, each started and
stopped by PID. ``status()`` reads the cluster from ZooKeeper as ``tributary status`` does.

Timings suit tests: ZooKeeper sessions of ``session_timeout`` seconds (a killed process's nodes go
that long after it died), a rebalance grace of ``grace`` seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from .processes import ServerProcess, free_port, kill_process, listening, terminate_process, wait_until_ready
from .replicated_processes import LogStores
from .zookeeper import ZooKeeperServer, fresh_chroot


class ControllerProcess:
    """A `tributary controller --zk` child process on a free loopback port."""

    def __init__(self, zk_hosts: str, containers: int, log_path: Path, session_timeout: float, grace: float,
                 env: dict[str, str] | None = None):
        self.zk_hosts = zk_hosts
        self.containers = containers
        self.port = free_port()
        self.log_path = log_path
        self.session_timeout = session_timeout
        self.grace = grace
        self.env = env or {}
        self.extra_args: list[str] = []
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0, wait_for_port: bool = True) -> ControllerProcess:
        """Starts it; waits until its gRPC port listens (unless told not to: it listens only once the
        containers holding its metadata run)."""
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tributary", "controller", "--port", str(self.port), "--zk", self.zk_hosts,
             "--containers", str(self.containers), "--zk-session-timeout", str(self.session_timeout),
             "--rebalance-grace", str(self.grace), "--log-level", "info", *self.extra_args],
            stdout=log, stderr=log, env={**os.environ, **self.env})
        if wait_for_port:
            wait_until_ready(self.process, listening(self.port), f"controller on port {self.port}", timeout)
        return self

    def kill(self) -> None:
        kill_process(self.process)

    def terminate(self) -> int:
        return terminate_process(self.process)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ClusterView:
    """What ZooKeeper says of a cluster, read as ``tributary status`` reads it (from ``self.zk_hosts``): shared by
    the loopback cluster below and the one in network namespaces (netns_cluster.py)."""

    zk_hosts: str

    def status(self) -> tuple[int, dict]:
        """(exit status, the cluster) of `tributary status --json`."""
        result = subprocess.run([sys.executable, "-m", "tributary", "status", "--zk", self.zk_hosts, "--json"],
                                capture_output=True, text=True, timeout=60)
        document = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
        return result.returncode, document

    def owners(self) -> dict[int, str]:
        """container -> the segment store serving it (from the stores' registrations)."""
        _, cluster = self.status()
        return {container: store for store, state in cluster.get("segment_stores", {}).items()
                for container in state["serving"]}

    def wait_until_served(self, timeout: float = 60.0, without: str | None = None) -> float:
        """Waits until every container is served (by stores other than ``without``); returns the seconds."""
        start = time.monotonic()
        while True:
            code, cluster = self.status()
            stores = cluster.get("segment_stores", {})
            if code == 0 and (without is None or not stores.get(without, {}).get("serving")):
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise AssertionError(f"containers not served within {timeout}s: {cluster}")
            time.sleep(0.1)


class Cluster(ClusterView):
    def __init__(self, home: Path, containers: int = 4, segment_stores: int = 2, controllers: int = 2,
                 log_stores: int = 3, session_timeout: float = 2.0, grace: float = 0.5, log_quorum: str = "3/3/2",
                 zookeeper: ZooKeeperServer | None = None, controller_env: dict[str, str] | None = None):
        self.home = Path(home)
        self.containers = containers
        self.session_timeout = session_timeout
        self.grace = grace
        self.log_quorum = log_quorum
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper
        self.zk_hosts = ""
        self.tier2_dir = self.home / "tier2"
        self.log_stores: LogStores | None = None
        self._log_store_count = log_stores
        self.segment_stores: list[ServerProcess] = []
        self._segment_store_count = segment_stores
        self.controllers: list[ControllerProcess] = []
        self._controller_count = controllers
        self._controller_env = controller_env or {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Cluster:
        self.home.mkdir(parents=True, exist_ok=True)
        if self.zookeeper is None:
            self.zookeeper = ZooKeeperServer(self.home / "zookeeper").start()
        self.zk_hosts = fresh_chroot(self.zookeeper)
        self.log_stores = LogStores(self.home, self.zk_hosts, count=self._log_store_count).start()
        for _ in range(self._segment_store_count):
            self.add_segment_store()
        for _ in range(self._controller_count):
            self.add_controller()
        self.wait_until_served()
        return self

    def stop(self) -> None:
        for controller in self.controllers:
            controller.kill()
        for store in self.segment_stores:
            store.kill()
        if self.log_stores is not None:
            self.log_stores.stop_all()
        if self._own_zookeeper and self.zookeeper is not None:
            self.zookeeper.stop()

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def add_segment_store(self) -> ServerProcess:
        index = len(self.segment_stores)
        store = ServerProcess("segmentstore", self.home / f"segmentstore-{index}",
                              log_path=self.home / f"segmentstore-{index}.log",
                              extra_args=self.segment_store_args())
        self.segment_stores.append(store)
        return store.start(timeout=60)

    def segment_store_args(self) -> list[str]:
        return ["--cluster", "--tier1", "replicated", "--zk", self.zk_hosts, "--zk-session-timeout",
                str(self.session_timeout), "--log-quorum", self.log_quorum, "--containers", str(self.containers),
                "--tier2-dir", str(self.tier2_dir), "--log-file-size", "16", "--cache-size", "64",
                "--log-level", "info"]

    def add_controller(self, env: dict[str, str] | None = None) -> ControllerProcess:
        index = len(self.controllers)
        controller = ControllerProcess(self.zk_hosts, self.containers, self.home / f"controller-{index}.log",
                                       self.session_timeout, self.grace, {**self._controller_env, **(env or {})})
        self.controllers.append(controller)
        return controller.start()

    # ------------------------------------------------------------------ faults

    @staticmethod
    def pause(process: subprocess.Popen) -> None:
        os.kill(process.pid, signal.SIGSTOP)

    @staticmethod
    def resume(process: subprocess.Popen) -> None:
        os.kill(process.pid, signal.SIGCONT)

    @staticmethod
    def wait_stopped(process: subprocess.Popen, timeout: float = 60.0) -> None:
        """Waits until the process is stopped (it stopped itself at an armed fault point)."""
        deadline = time.monotonic() + timeout
        while psutil.Process(process.pid).status() != psutil.STATUS_STOPPED:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"process {process.pid} did not stop (exit status {process.poll()})")
            time.sleep(0.05)

    @staticmethod
    def store_id(store: ServerProcess) -> str:
        return f"127.0.0.1:{store.port}"


class ClusterTarget:
    """A cluster standing in for `tributary standalone` in the interop tests: what they use of a server
    (``controller_uri``, ``controller_port``: the first controller's; ``remove_data``)."""

    def __init__(self, home: Path, zookeeper: ZooKeeperServer | None = None):
        self.cluster = Cluster(home, zookeeper=zookeeper)

    def start(self) -> ClusterTarget:
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.stop()
            raise
        return self

    @property
    def controller_port(self) -> int:
        return self.cluster.controllers[0].port

    @property
    def controller_uri(self) -> str:
        return self.cluster.controllers[0].uri

    def remove_data(self) -> None:
        self.cluster.stop()
