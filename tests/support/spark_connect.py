"""A Spark Connect server for tests, started from PySpark's own jars (``spark-connect_*.jar`` ships in the
pip package; no download): ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``
(what PySpark's ``sbin/start-connect-server.sh`` runs, here in the foreground), master ``local[2]``, its gRPC
endpoint on a free loopback port (``spark.connect.grpc.binding.address`` / ``.port``).

The server is the Spark driver of every client session: it starts the Python workers that run format
``tributary`` (planning, reading, writing, a stream's offsets) with ``PYSPARK_PYTHON``, this interpreter, whose
environment has spark_io. It runs in a session of its own, its output in a log file; :meth:`stop` sends SIGTERM
to its process group and SIGKILLs whatever is left of its session (the Python workers, which put themselves
in process groups of their own) after a bounded wait. Linux only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from spark_io.faults import kill_session
from tests.support.processes import free_port
from tests.support.spark_cluster import spark_home

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnectServer:
    """A Spark Connect server on ``127.0.0.1:port``, master ``master``, working directory and log under ``home``."""

    def __init__(self, home: Path, master: str = "local[2]", **config: str):
        self.home = Path(home)
        self.master = master
        self.port = free_port()
        self.log_path = self.home / "connect-server.log"
        self.config = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            **config,
        }
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """What a client gives ``SparkSession.builder.remote``."""
        return f"sc://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        settings = [part for name, value in self.config.items() for part in ("--conf", f"{name}={value}")]
        return [str(Path(spark_home()) / "bin" / "spark-submit"), "--class", SERVER_CLASS,
                "--name", "Spark Connect server (tests)", "--master", self.master, *settings]

    def _environment(self) -> dict[str, str]:
        environment = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                       "PYSPARK_PYTHON": sys.executable}
        for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR",
                     "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
            environment.pop(name, None)
        return environment

    def start(self, timeout: float = 120.0) -> SparkConnectServer:
        """Starts the server and returns once its gRPC port accepts connections; fails with the log's tail if the
        server exits first or ``timeout`` seconds pass (the server is stopped then)."""
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command(), cwd=self.home, env=self._environment(),
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while not self.answers():
                if self.process.poll() is not None:
                    raise RuntimeError(f"the Spark Connect server exited ({self.process.returncode}) while "
                                       f"starting\n{self.logs()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Spark Connect server did not listen on port {self.port} within "
                                       f"{timeout}s\n{self.logs()}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def answers(self) -> bool:
        """Whether something accepts connections on the server's port."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def logs(self, lines: int = 60) -> str:
        """The last lines of the server's log."""
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:] if self.log_path.exists() else []
        return f"--- {self.log_path}\n" + "\n".join(text or ["(empty)"])

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the server's process group; SIGKILL to whatever is left of its session after ``timeout``
        seconds."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        kill_session(process.pid)  # start_new_session: the session's id is the server's pid
        process.wait(10)


def serve(tmp_path_factory, name: str = "spark-connect", **options):
    """A started server for a fixture (``yield from serve(...)``), stopped afterwards."""
    server = SparkConnectServer(tmp_path_factory.mktemp(name), **options).start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["SERVER_CLASS", "SparkConnectServer", "serve"]
