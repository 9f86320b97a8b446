"""A Spark standalone cluster for tests: one master and one worker on loopback, started with PySpark's own
``spark-class`` (no Spark download), stopped by process group (bounded), logs in files.

The worker launches each application's executors as child JVMs (``CoarseGrainedExecutorBackend``), and
each executor its Python workers (``pyspark.daemon``); :meth:`SparkCluster.executors` finds them through
``/proc``, so a test can kill one by PID. Every process runs in a session of its own (master, worker),
so whatever is left at the end (executors, Python workers, which put themselves in process groups of
their own) is SIGKILLed by session. Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from spark_io.faults import kill_session
from tests.support.processes import free_port

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def spark_home() -> str:
    """PySpark's installation, which has ``bin/spark-class`` and the jars."""
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


def _processes() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, command line) of every process readable in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (name) state"
        table[int(entry)] = (parent, [part.decode(errors="replace") for part in command if part])
    return table


def descendants(pid: int, table: dict[int, tuple[int, list[str]]] | None = None) -> list[int]:
    """Every process under ``pid`` (children, their children, ...)."""
    table = _processes() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, pending = [], list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@dataclasses.dataclass(frozen=True)
class Executor:
    """An executor JVM the worker launched, and the Python processes under it."""

    pid: int
    app_id: str
    executor_id: str
    python: tuple[int, ...]  # pyspark.daemon and the workers it forked

    def log(self, work_dir: Path) -> Path:
        """The executor's stderr (its log, INFO by default)."""
        return work_dir / self.app_id / self.executor_id / "stderr"


def _argument(command: list[str], name: str) -> str:
    return command[command.index(name) + 1] if name in command else ""


class SparkCluster:
    """A master and one worker (``cores`` cores, ``memory``), on free loopback ports, under ``home``."""

    def __init__(self, home: Path, cores: int = 2, memory: str = "2g"):
        self.home = Path(home)
        self.cores, self.memory = cores, memory
        self.port, self.webui_port, self.worker_webui_port = free_port(), free_port(), free_port()
        self.work_dir = self.home / "work"
        self.master_log, self.worker_log = self.home / "master.log", self.home / "worker.log"
        self.master: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The master URL a driver connects to."""
        return f"spark://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        environment = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                       "PYSPARK_PYTHON": sys.executable,
                       # no REST submission server: it takes a fixed port (6066)
                       "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
        for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_CONF_DIR"):
            environment.pop(name, None)
        return environment

    def _spark_class(self, log: Path, *arguments: str) -> subprocess.Popen:
        command = [str(Path(spark_home()) / "bin" / "spark-class"), *arguments]
        with log.open("ab") as output:
            return subprocess.Popen(command, cwd=self.home, env=self._environment(), stdin=subprocess.DEVNULL,
                                    stdout=output, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout: float = 120.0) -> SparkCluster:
        """Starts the master, then the worker; returns once the master lists the worker ALIVE."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            self.master = self._spark_class(self.master_log, "org.apache.spark.deploy.master.Master",
                                            "--host", "127.0.0.1", "--port", str(self.port),
                                            "--webui-port", str(self.webui_port))
            self._wait(lambda: self.state() is not None, "the master's web UI", deadline)
            self.worker = self._spark_class(self.worker_log, "org.apache.spark.deploy.worker.Worker", self.url,
                                            "--host", "127.0.0.1", "--cores", str(self.cores),
                                            "--memory", self.memory, "--webui-port", str(self.worker_webui_port),
                                            "--work-dir", str(self.work_dir))
            self._wait(lambda: self.alive_workers() == 1, "the worker's registration", deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, condition, what: str, deadline: float) -> None:
        while not condition():
            for name, process in (("master", self.master), ("worker", self.worker)):
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"the Spark {name} exited ({process.returncode}) while waiting for "
                                       f"{what}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} in time\n{self.logs()}")
            time.sleep(0.2)

    def state(self) -> dict | None:
        """The master's state (its web UI's ``/json/``), or None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as response:
                return json.load(response)
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.state() or {}
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def executors(self) -> list[Executor]:
        """The executor JVMs now running under the worker, with their Python processes."""
        if self.worker is None:
            return []
        table = _processes()
        found = []
        for pid in descendants(self.worker.pid, table):
            command = table[pid][1]
            if EXECUTOR_CLASS in command and alive(pid):
                python = tuple(child for child in descendants(pid, table)
                               if any("pyspark" in part for part in table[child][1]))
                found.append(Executor(pid, _argument(command, "--app-id"), _argument(command, "--executor-id"),
                                      python))
        return found

    def executor_dirs(self, app_id: str) -> list[str]:
        """The ids of the executors the worker launched for an application (its work directories)."""
        folder = self.work_dir / app_id
        return sorted(path.name for path in folder.iterdir()) if folder.exists() else []

    def logs(self, lines: int = 40) -> str:
        """The last lines of the master's and the worker's logs."""
        parts = []
        for path in (self.master_log, self.worker_log):
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(none)"]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the worker's and the master's process groups (the worker stops its executors); SIGKILL to
        whatever of their sessions is left after ``timeout`` seconds."""
        processes = [process for process in (self.worker, self.master) if process is not None]
        for process in processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in processes:
            kill_session(process.pid)  # start_new_session: the session's id is the process's pid
            process.wait(10)


def serve(tmp_path_factory, name: str = "spark-cluster", **options):
    """A started cluster for a fixture (``yield from serve(...)``), stopped afterwards."""
    cluster = SparkCluster(tmp_path_factory.mktemp(name), **options).start()
    try:
        yield cluster
    finally:
        cluster.stop()


__all__ = ["EXECUTOR_CLASS", "Executor", "SparkCluster", "alive", "descendants", "serve", "spark_home"]
