"""`tributary standalone` as a child process for tests: free loopback ports, waits for both
listeners, killed by PID (SIGKILL) or stopped with SIGTERM. Tier-1 log files are the smallest
allowed (16 MiB, preallocated), and ``remove_data`` frees the disk once a test is done."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time

from tests.support.processes import free_port, kill_process, terminate_process


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class StandaloneProcess:
    """One standalone (segment store + controller). Ports are kept across restarts."""

    def __init__(self, data_dir, log_path=None, container_count: int = 4, log_file_mib: int = 16):
        self.data_dir = data_dir
        self.log_file_mib = log_file_mib
        self.log_path = log_path
        self.container_count = container_count
        self.store_port = free_port()
        self.controller_port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def controller_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.controller_port}"

    def start(self, timeout: float = 30.0) -> "StandaloneProcess":
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tributary", "standalone", "--data-dir", str(self.data_dir),
             "--port", str(self.store_port), "--controller-port", str(self.controller_port),
             "--containers", str(self.container_count), "--log-file-size", str(self.log_file_mib)],
            stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"standalone exited with {self.process.returncode} while starting")
            if _listening(self.controller_port) and _listening(self.store_port):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"standalone did not listen within {timeout}s")

    def kill(self) -> None:
        kill_process(self.process)

    def terminate(self, timeout: float = 20.0) -> int:
        return terminate_process(self.process, timeout)

    def remove_data(self) -> None:
        """Kills the process and deletes its data dir (preallocated logs take disk space)."""
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)
