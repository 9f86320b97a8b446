"""Starting and killing real server processes in tests (loopback only, stopped by PID)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


def kill_process(process: subprocess.Popen | None) -> None:
    """SIGKILL by PID, then reap."""
    if process is not None and process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


def terminate_process(process: subprocess.Popen | None, timeout: float = 20.0) -> int:
    """SIGTERM (a clean stop); SIGKILL if it does not exit in time. Returns the exit status."""
    if process is None:
        return 0
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_process(process)
    return process.returncode


def wait_until_ready(process: subprocess.Popen, probe, what: str, timeout: float) -> None:
    """Calls ``probe`` until it stops raising OSError. Fails (killing the process) if the process exits
    first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} while starting")
        try:
            probe()
            return
        except OSError:
            time.sleep(0.05)
    kill_process(process)
    raise RuntimeError(f"{what} was not ready within {timeout}s")


def listening(port: int):
    """A probe for wait_until_ready: something accepts connections on 127.0.0.1:``port``."""
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=0.2).close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """A `tributary <command>` child process, started on a free loopback port."""

    def __init__(self, command: str, data_dir, port: int | None = None, extra_args=(), log_path=None):
        self.command = command
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tributary", self.command, "--data-dir", str(self.data_dir),
             "--port", str(self.port), *self.extra_args],
            stdout=log, stderr=log)
        wait_until_ready(self.process, listening(self.port), f"{self.command} on port {self.port}", timeout)
        return self

    def kill(self) -> None:
        kill_process(self.process)

    def terminate(self, timeout: float = 20.0) -> int:
        return terminate_process(self.process, timeout)
