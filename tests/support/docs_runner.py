"""Runs the ```shell blocks of one document as a reader would type them, in a scratch directory.

    python -m tests.support.docs_runner DOCUMENT SCRATCH_DIR

A document holding the line ``<!-- docs-commands: repository root -->`` is one for a checkout of the
repository (docs/simulation.md): its commands run from the repository's root instead, and must write
nothing there.

How each command is run (a command is a line, with its backslash continuations; ``#`` comments and blank
lines are skipped):

* A *server* (``tributary standalone|segmentstore|controller|logstore``, ZooKeeper's ``QuorumPeerMain``),
  with or without a trailing ``&``, is started in the background, as a reader would in another terminal,
  and the next command waits until it listens on every port it was given (or defaults to). Every server is
  still running when the document ends (one that exited early fails the run), then gets SIGTERM (SIGKILL
  after a grace), by PID.
* ``pip install 'tributary[EXTRA]'`` is not run (no package index in a test); the extra must exist in
  pyproject.toml.
* Anything else runs in ``bash -euo pipefail`` with a prompt's answers on stdin (``PASSWORD`` for every
  password prompt) and must exit 0 within ``COMMAND_TIMEOUT_SECONDS``.

Documents use fixed ports (9090, 12345, 2181 ...): the test runs this module in a network namespace of its own
where it can, so that nothing else on the machine can be in the way. Prints one JSON line: ``{"ok": true}`` or
``{"ok": false, "error": "..."}`` with the failing command, its output and the servers' logs.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pathlib
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
import tomllib

from tests.support.doc_blocks import fenced_blocks

REPOSITORY_ROOT = "<!-- docs-commands: repository root -->"  # a document whose commands run from a checkout
COMMAND_TIMEOUT_SECONDS = 180.0
SERVER_START_SECONDS = 60.0
SERVER_STOP_SECONDS = 15.0
PASSWORD = "docs-password"
ROOT = pathlib.Path(__file__).resolve().parents[2]

# The ports a server listens on: (option, default) per port, in the order they come up.
SERVER_PORTS = {
    "standalone": [("--port", 12345), ("--controller-port", 9090), ("--rest-port", None), ("--metrics-port", None)],
    "segmentstore": [("--port", 12345), ("--metrics-port", None)],
    "controller": [("--port", 9090), ("--rest-port", None), ("--metrics-port", None)],
    "logstore": [("--port", 12400), ("--metrics-port", None)],
}
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class DocumentFailed(Exception):
    pass


@dataclasses.dataclass
class Server:
    command: str
    process: subprocess.Popen
    log_path: pathlib.Path

    def log_tail(self, characters: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]


def commands(code: str) -> list[str]:
    """The commands of a block: lines joined across trailing backslashes, without comments and blank lines."""
    found, pending = [], ""
    for line in code.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole and not whole.startswith("#"):
            found.append(whole)
    return found


def words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def server_ports(command: str, directory: pathlib.Path) -> list[int] | None:
    """The ports the command listens on if it is a server (None: it is not one)."""
    argv = words(command.removesuffix("&"))
    if ZOOKEEPER_MAIN in argv:
        config = (directory / argv[argv.index(ZOOKEEPER_MAIN) + 1]).read_text()
        port = re.search(r"^clientPort=(\d+)", config, re.MULTILINE)
        return [int(port.group(1)) if port else 2181]
    if len(argv) < 2 or argv[0] != "tributary" or argv[1] not in SERVER_PORTS:
        return None
    ports = []
    for option, default in SERVER_PORTS[argv[1]]:
        value = argv[argv.index(option) + 1] if option in argv else default
        if value is not None:
            ports.append(int(value))
    return ports


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def check_extra(command: str) -> None:
    """``pip install 'tributary[EXTRA]'``: the extra exists (the command itself is not run)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    for argument in words(command)[2:]:
        match = re.fullmatch(r"tributary\[([\w,-]+)\]", argument)
        if not match or any(extra not in extras for extra in match.group(1).split(",")):
            raise DocumentFailed(f"{command!r}: pyproject.toml has no such extra (it has {sorted(extras)})")


class Session:
    """One document's commands in one scratch directory, with the servers they started."""

    def __init__(self, directory: pathlib.Path):
        self.directory = directory
        self.servers: list[Server] = []
        self.environment = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}",
                            "PYTHONUNBUFFERED": "1"}

    def run(self, where: str, command: str) -> None:
        self.check_servers()
        if command.startswith("pip install "):
            check_extra(command)
            return
        ports = server_ports(command, self.directory)
        if ports is not None:
            self._start_server(where, command.removesuffix("&").strip(), ports)
            return
        try:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=self.directory,
                                  env=self.environment, input=f"{PASSWORD}\n" * 4, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT_SECONDS, start_new_session=True)  # no tty: prompts read stdin
        except subprocess.TimeoutExpired as timeout:
            raise DocumentFailed(f"{where}: `{command}` ran past {COMMAND_TIMEOUT_SECONDS}s:\n"
                                 f"{(timeout.stdout or b'')[-2000:]!r}\n{(timeout.stderr or b'')[-2000:]!r}") from None
        if done.returncode != 0:
            raise DocumentFailed(f"{where}: `{command}` exited with {done.returncode}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")

    def _start_server(self, where: str, command: str, ports: list[int]) -> None:
        log_path = self.directory / f"server-{len(self.servers)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.directory, env=self.environment,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        server = Server(command, process, log_path)
        self.servers.append(server)
        deadline = time.monotonic() + SERVER_START_SECONDS
        for port in ports:
            while not listening(port):
                if process.poll() is not None:
                    raise DocumentFailed(f"{where}: `{command}` exited with {process.returncode} while starting:\n"
                                         f"{server.log_tail()}")
                if time.monotonic() > deadline:
                    raise DocumentFailed(f"{where}: `{command}` did not listen on {port} within "
                                         f"{SERVER_START_SECONDS}s:\n{server.log_tail()}")
                time.sleep(0.05)

    def check_servers(self) -> None:
        for server in self.servers:
            if server.process.poll() is not None:
                raise DocumentFailed(f"`{server.command}` exited with {server.process.returncode} before the "
                                     f"document ended:\n{server.log_tail()}")

    def stop_servers(self) -> None:
        """SIGTERM, then SIGKILL, newest first, by PID."""
        for server in reversed(self.servers):
            _stop(server.process)

    def logs(self) -> str:
        return "\n".join(f"--- {server.command}\n{server.log_tail(1500)}" for server in self.servers)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(SERVER_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run_document(document: pathlib.Path, directory: pathlib.Path) -> None:
    """Raises DocumentFailed (with the servers' logs)."""
    if REPOSITORY_ROOT in document.read_text():
        directory = ROOT
    session = Session(directory)
    try:
        for block in fenced_blocks(document):
            if block.language == "shell":
                for command in commands(block.code):
                    session.run(block.where, command)
        session.check_servers()
    except DocumentFailed as failure:
        raise DocumentFailed(f"{failure}\n\nservers:\n{session.logs()}") from None
    finally:
        session.stop_servers()


def loopback_up() -> None:
    """Brings the namespace's loopback interface up (what ``ip link set lo up`` does, without iproute2)."""
    get_flags, set_flags, up = 0x8913, 0x8914, 0x1  # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP (linux/sockios.h, if.h)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(control, get_flags, request))[1]
        fcntl.ioctl(control, set_flags, struct.pack("16sH14x", b"lo", flags | up))


def main() -> None:
    document, directory = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    if len(sys.argv) > 3 and sys.argv[3] == "--loopback-up":  # in a fresh network namespace
        loopback_up()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        run_document(document, directory)
    except DocumentFailed as failure:
        print(json.dumps({"ok": False, "error": str(failure)}))
        return
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
