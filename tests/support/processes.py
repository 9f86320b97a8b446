"""Starting and killing real server processes in tests (loopback only, stopped by PID)."""

from __future__ import annotations

import os
import pathlib
import random
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


_PORTS_PER_WORKER = 2000
_PORT_BASE = 12000


def _ephemeral_low() -> int:
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_slice() -> range | None:
    """This pytest-xdist worker's own ports, below the kernel's ephemeral range (None: no room there)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    start = _PORT_BASE + index * _PORTS_PER_WORKER
    if start + _PORTS_PER_WORKER > _ephemeral_low():
        return None
    return range(start, start + _PORTS_PER_WORKER)


_PORTS = _port_slice()  # xdist sets the worker's name before it imports anything of the tests
_port_cursor = random.randrange(_PORTS_PER_WORKER)


def free_port() -> int:
    """A loopback port nothing listens on, for a child process to bind.

    Not one from the kernel's ephemeral range: between this call and the child's bind, any outgoing
    connection of another test may take that as its source port ("address already in use", seen under the
    parallel suite). Each xdist worker hands out its own slice below that range, in turn, skipping ports
    in use; where there is no room below it, the kernel picks."""
    global _port_cursor
    ports = _PORTS
    if ports is not None:
        for _ in range(len(ports)):
            _port_cursor = (_port_cursor + 1) % len(ports)
            port = ports[_port_cursor]
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
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
