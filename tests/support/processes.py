"""Starting and killing real server processes in tests (loopback only, stopped by PID)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time


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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command} exited with {self.process.returncode} while starting")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.command} did not listen on {self.port} within {timeout}s")

    def kill(self) -> None:
        """SIGKILL by PID, then reap."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    async def wait_listening(self) -> None:
        await asyncio.sleep(0)
