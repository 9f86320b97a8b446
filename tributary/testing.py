"""A Tributary standalone (segment store + controller on 127.0.0.1) for the tests of applications.

Three ways to run the same server:

* :class:`Server` runs on the caller's event loop, for asyncio clients (grpc.aio, Tributary's
  own asyncio clients)::

      async with tributary.testing.Server(tmp_path) as server:
          async with grpc.aio.insecure_channel(server.controller_uri[len("tcp://"):]) as channel:
              ...

* :class:`ThreadedServer` runs it on its own event loop (uvloop) in a background daemon thread,
  for synchronous tests and for tests whose event loop lives shorter than the server (a
  session-wide server)::

      with tributary.testing.ThreadedServer(tmp_path) as server:
          ...

* :class:`ProcessServer` runs it in a child process, for clients that hold the GIL while they
  block, as the ``pravega`` package does: an in-process server can never answer such a client
  (its call hangs), a child process can::

      with tributary.testing.ProcessServer(tmp_path) as server:
          manager = pravega_client.StreamManager(server.controller_uri, False, False)

All three take the same arguments and offer ``controller_uri`` ("tcp://127.0.0.1:PORT"),
``controller_endpoint`` and ``segment_store_endpoint`` ((host, port)). They listen on ports
the OS picks (unless told otherwise) and read them back once started. The data directory keeps
everything, so a server started on it after the previous one stopped sees the same scopes,
streams and events (its ports may differ). The defaults suit tests: 2 containers, the smallest
Tier-1 log files (16 MiB each, written out in full when created), a 64 MiB cache and a
filesystem Tier-2 under the data directory. Startup failures (a busy port, an unusable data
directory, a container count that differs from the one the directory was created with, a start
that takes too long) raise :class:`ServerStartupError`.

Logging is left as the application configured it: the servers log through the standard
``logging`` module (loggers ``tributary.*``) and print nothing themselves.

This module belongs to the composition root: the servers are ``tributary.assembly``'s
:class:`~tributary.assembly.Standalone`, as ``tributary standalone`` runs it, imported only when a
server is created or started, so importing it is cheap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import pathlib
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assembly import Standalone

__all__ = ["ProcessServer", "Server", "ServerStartupError", "ThreadedServer"]

DEFAULT_CONTAINERS = 2
DEFAULT_LOG_FILE_SIZE = 16 * 1024 * 1024  # the smallest a segment store accepts
DEFAULT_CACHE_SIZE = 64 * 1024 * 1024
DEFAULT_STARTUP_TIMEOUT = 30.0  # seconds for the segment store and the controller together
DEFAULT_STOP_TIMEOUT = 60.0  # seconds ThreadedServer.stop / ProcessServer.stop wait for the thread / process
PROCESS_LOG_NAME = "tributary-server.log"  # ProcessServer: the child's stderr, in the data dir


class ServerStartupError(RuntimeError):
    """The embedded server could not start; the message says why. Nothing is left running."""


class _Endpoints:
    """What clients need of a running server: its endpoints (``_endpoints`` is (controller, segment
    store) once it runs, else None)."""

    _endpoints: tuple[tuple[str, int], tuple[str, int]] | None

    @property
    def running(self) -> bool:
        return self._endpoints is not None

    @property
    def controller_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of the controller's gRPC listener."""
        return self._running_endpoints()[0]

    @property
    def controller_uri(self) -> str:
        """``tcp://host:port`` of the controller, what Pravega clients are given."""
        host, port = self.controller_endpoint
        return f"tcp://{host}:{port}"

    @property
    def segment_store_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of the segment store's wire-protocol listener."""
        return self._running_endpoints()[1]

    def _running_endpoints(self):
        endpoints = self._endpoints
        if endpoints is None:
            raise RuntimeError("the server is not running (call start() first)")
        return endpoints


class Server(_Endpoints):
    """A standalone Tributary (segment store + controller) on the running event loop.

    Args:
        data_dir: directory for the Tier-1 logs and the filesystem Tier-2 (created if missing).
        containers: segment containers; fixed per data directory (a restart must give the same).
        host: address both listeners bind and clients are told to use.
        port: segment store (wire protocol) port; 0 lets the OS pick a free one.
        controller_port: controller gRPC port; 0 lets the OS pick a free one.
        log_file_size: bytes per preallocated Tier-1 log file (at least 16 MiB).
        cache_size: bytes of segment data kept in memory (at least 16 MiB).
        tier2: "filesystem" (under ``data_dir/tier2`` unless ``tier2_dir`` is given), "s3" or "none".
        startup_timeout: seconds :meth:`start` may take before it gives up.
        **store_options: any other field of ``server.config.SegmentStoreConfig`` (``tier2_dir``,
            ``s3_bucket``, ``flush_interval``, ...).

    Raises:
        ValueError, TypeError: an option is invalid (checked here, before anything starts).
    """

    def __init__(self, data_dir: str | os.PathLike, *, containers: int = DEFAULT_CONTAINERS,
                 host: str = "127.0.0.1", port: int = 0, controller_port: int = 0,
                 log_file_size: int = DEFAULT_LOG_FILE_SIZE, cache_size: int = DEFAULT_CACHE_SIZE,
                 tier2: str = "filesystem", startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
                 **store_options: Any):
        from server.config import SegmentStoreConfig

        if not 0 <= controller_port <= 65535:
            raise ValueError("controller_port must be in [0, 65535]")
        self.config = SegmentStoreConfig(data_dir=pathlib.Path(data_dir), host=host, port=port,
                                         container_count=containers, log_file_size=log_file_size,
                                         cache_size=cache_size, tier2=tier2, **store_options)

        self._controller_port = controller_port
        self.startup_timeout = startup_timeout
        self._standalone: Standalone | None = None  # while running

    # ------------------------------------------------------------------ what clients need

    @property
    def data_dir(self):
        return self.config.data_dir

    @property  # computed here; the other servers keep it as a field, hence the ignore
    def _endpoints(self) -> tuple[tuple[str, int], tuple[str, int]] | None:  # type: ignore[override]
        standalone = self._standalone
        if standalone is None or standalone.controller is None or standalone.store is None:
            return None
        return (self.config.host, standalone.controller.port), (self.config.host, standalone.store.port)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Server:
        """Starts the segment store, then the controller; returns once both accept connections.

        Raises:
            ServerStartupError: either could not start, or not within ``startup_timeout`` seconds
                (whatever had started is stopped again).
            RuntimeError: the server is already running.
        """
        if self._standalone is not None:
            raise RuntimeError("the server is already running")
        from .assembly import Standalone, StartupFailed

        standalone = Standalone(self.config, self._controller_port)
        try:
            await standalone.start(self.startup_timeout)
        except StartupFailed as error:
            raise ServerStartupError(f"the {error.part} cannot start: {error}") from error
        self._standalone = standalone
        return self

    async def stop(self) -> None:
        """Stops the controller, then the segment store, and releases both ports (idempotent)."""
        standalone, self._standalone = self._standalone, None
        if standalone is not None:
            await standalone.stop()

    async def __aenter__(self) -> Server:
        return await self.start()

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    def __repr__(self) -> str:
        where = self.controller_uri if self.running else "stopped"
        return f"<tributary.testing.Server {where} data_dir={str(self.config.data_dir)!r}>"


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; fall back for odd platforms
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ThreadedServer(_Endpoints):
    """A :class:`Server` on its own event loop (uvloop when available) in a background daemon thread.

    Takes the same arguments as :class:`Server`. :meth:`start` blocks until both listeners accept
    connections (or raises :class:`ServerStartupError`); :meth:`stop` stops the server and joins
    the thread. A stopped ThreadedServer can be started again (on the same data directory; ports
    chosen by the OS may then differ). Usable as a context manager, also from async code: no
    call blocks on the caller's event loop except for start and stop themselves. Not for
    clients that hold the GIL while they block (the ``pravega`` package): use
    :class:`ProcessServer` for those.
    """

    def __init__(self, data_dir: str | os.PathLike, **options: Any):
        self._server = Server(data_dir, **options)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main_task: asyncio.Task | None = None
        self._stop_requested: asyncio.Event | None = None
        self._stop_error: BaseException | None = None
        self._lock = threading.Lock()
        self._endpoints: tuple[tuple[str, int], tuple[str, int]] | None = None

    # ------------------------------------------------------------------ what clients need

    @property
    def data_dir(self):
        return self._server.data_dir

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float | None = None) -> ThreadedServer:
        """Starts the thread and the server in it; returns once both listeners accept connections.

        Args:
            timeout: seconds to wait (default: the server's ``startup_timeout`` plus 10).

        Raises:
            ServerStartupError: the server could not start (the thread is stopped again).
            RuntimeError: already running.
        """
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the server is already running")
            started: concurrent.futures.Future = concurrent.futures.Future()
            thread = threading.Thread(target=self._serve, args=(started,), name="tributary-testing-server",
                                      daemon=True)
            self._thread, self._stop_error = thread, None
            thread.start()
            wait = self._server.startup_timeout + 10.0 if timeout is None else timeout
            try:
                self._endpoints = started.result(wait)
            except BaseException as error:
                self._abandon_start()
                if isinstance(error, concurrent.futures.TimeoutError):
                    raise ServerStartupError(f"the server did not start within {wait}s") from None
                raise
        return self

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stops the server and joins its thread (idempotent).

        Raises:
            RuntimeError: the thread did not finish within ``timeout`` seconds.
            Exception: whatever stopping the server raised (the thread has finished all the same).
        """
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._endpoints = None
            loop, stop_requested = self._loop, self._stop_requested
            if loop is not None and stop_requested is not None:
                try:
                    loop.call_soon_threadsafe(stop_requested.set)
                except RuntimeError:  # the loop has already closed: the thread is finishing
                    pass
            thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError(f"the tributary server thread did not stop within {timeout}s")
            self._thread = self._loop = self._stop_requested = self._main_task = None
            error, self._stop_error = self._stop_error, None
        if error is not None:
            raise error

    def _abandon_start(self) -> None:
        """After a failed or timed-out start: cancels the start in the thread and joins it."""
        loop, task, thread = self._loop, self._main_task, self._thread
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop has already closed
                pass
        assert thread is not None, "a start made the thread"
        thread.join(DEFAULT_STOP_TIMEOUT)
        self._thread = self._loop = self._stop_requested = self._main_task = None
        self._endpoints = None

    def _serve(self, started: concurrent.futures.Future) -> None:
        """The thread: runs the server until stop() asks, then closes the loop."""
        try:
            with asyncio.Runner(loop_factory=_new_event_loop) as runner:
                runner.run(self._main(started))
        except BaseException as error:  # noqa: BLE001 - reported to start() or stop(), never printed
            if not started.done():
                started.set_exception(error)
            elif not isinstance(error, asyncio.CancelledError):
                self._stop_error = error

    async def _main(self, started: concurrent.futures.Future) -> None:
        self._loop = asyncio.get_running_loop()
        self._main_task = asyncio.current_task()
        self._stop_requested = asyncio.Event()
        try:
            await self._server.start()
        except BaseException as error:  # noqa: BLE001 - start() re-raises it in the caller's thread
            if not started.done():
                started.set_exception(error)
            return
        try:
            if started.done():  # start() gave up waiting meanwhile
                return
            started.set_result((self._server.controller_endpoint, self._server.segment_store_endpoint))
            await self._stop_requested.wait()
        finally:
            await self._server.stop()

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.controller_uri if self.running else "stopped"
        return f"<tributary.testing.ThreadedServer {where} data_dir={str(self.data_dir)!r}>"


_SOURCE_ROOT = pathlib.Path(__file__).resolve().parent.parent  # the child imports this same code


class ProcessServer(_Endpoints):
    """The same server in a child process (``python -m tributary.testing``), with the same interface.

    Needed by clients that block while holding the GIL: the ``pravega`` package's blocking calls
    (``StreamManager``, ``write_event``, ``flush``, ...) do, so an in-process server (:class:`Server`,
    :class:`ThreadedServer`) can never answer them and such a call hangs. Takes the same arguments
    as :class:`Server` (checked here, in the caller). The child's stderr goes to
    ``DATA_DIR/tributary-server.log``. It stops when :meth:`stop` closes its stdin, or when the
    parent process dies (its stdin then reaches end of file), and runs in its own session, so a
    Ctrl-C in a terminal reaches only the parent (which stops it).
    """

    def __init__(self, data_dir: str | os.PathLike, **options: Any):
        checked = Server(data_dir, **options)  # invalid options fail here, in the caller
        self._data_dir = checked.data_dir
        self._options = options
        self._startup_timeout = checked.startup_timeout
        self._process: subprocess.Popen | None = None
        self._endpoints: tuple[tuple[str, int], tuple[str, int]] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ what clients need

    @property
    def data_dir(self):
        return self._data_dir

    @property
    def log_path(self) -> pathlib.Path:
        return self._data_dir / PROCESS_LOG_NAME

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float | None = None) -> ProcessServer:
        """Starts the child process; returns once both its listeners accept connections.

        Args:
            timeout: seconds to wait (default: the server's ``startup_timeout`` plus 10).

        Raises:
            ServerStartupError: the server could not start (the child is gone again).
            RuntimeError: already running.
        """
        with self._lock:
            if self._process is not None:
                raise RuntimeError("the server is already running")
            try:
                self._data_dir.mkdir(parents=True, exist_ok=True)
                log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the with-block below
            except OSError as error:
                raise ServerStartupError(f"data dir {self._data_dir} is not usable: {error}") from error
            options = json.dumps({"data_dir": str(self._data_dir), **self._options}, default=str)
            python_path = [str(_SOURCE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
            with log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "tributary.testing", options], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(python_path)})
            wait = self._startup_timeout + 10.0 if timeout is None else timeout
            try:
                kind, payload = _read_status(process, time.monotonic() + wait)
            except BaseException:
                _kill(process)
                raise
            if kind != "READY":
                _kill(process)
                if kind == "FAILED":
                    raise ServerStartupError(payload)
                raise ServerStartupError(f"the server process {payload}; its output:\n{self._log_tail()}")
            self._process = process
            self._endpoints = tuple(payload["controller"]), tuple(payload["segment_store"])
        return self

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stops the child process (idempotent); it is killed if it does not finish within ``timeout``.

        Raises:
            RuntimeError: it had to be killed, or it reported an error while stopping.
        """
        with self._lock:
            process, self._process, self._endpoints = self._process, None, None
            if process is None:
                return
            assert process.stdin is not None and process.stdout is not None  # made with both piped
            try:
                process.stdin.close()
            except OSError:  # it is gone already
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill(process)
                raise RuntimeError(f"the tributary server process did not stop within {timeout}s and was "
                                   f"killed; see {self.log_path}") from None
            finally:
                process.stdout.close()
            if process.returncode != 0:
                raise RuntimeError(f"the tributary server process exited with status {process.returncode} "
                                   f"while stopping; its output:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> ProcessServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.controller_uri if self.running else "stopped"
        return f"<tributary.testing.ProcessServer {where} data_dir={str(self.data_dir)!r}>"


def _read_status(process: subprocess.Popen, deadline: float) -> tuple[str, Any]:
    """The child's first status line: ("READY", endpoints), ("FAILED", message) or ("EXITED", text)."""
    assert process.stdout is not None, "made with stdout=PIPE"
    descriptor, received = process.stdout.fileno(), b""
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        while True:
            while b"\n" in received:
                line, _, received = received.partition(b"\n")
                kind, _, payload = line.decode(errors="replace").strip().partition(" ")
                if kind in ("READY", "FAILED"):
                    return kind, json.loads(payload)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "EXITED", "did not start in time (it was killed)"
            if not selector.select(remaining):
                continue
            chunk = os.read(descriptor, 65536)
            if not chunk:
                return "EXITED", f"exited with status {process.wait()} while starting"
            received += chunk


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is None:
            continue  # not piped (never the case here)
        try:
            stream.close()

        except OSError:
            pass


# ---------------------------------------------------------------------- the ProcessServer child


def _say(kind: str, payload: Any) -> None:
    sys.stdout.write(f"{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


async def _serve_child(data_dir: str, options: dict) -> int:
    """Runs a Server until stdin reaches end of file or SIGTERM arrives."""
    server = Server(data_dir, **options)
    try:
        await server.start()
    except ServerStartupError as error:
        _say("FAILED", str(error))
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        _say("READY", {"controller": server.controller_endpoint, "segment_store": server.segment_store_endpoint})
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        waiters = {asyncio.ensure_future(reader.read()), asyncio.ensure_future(stop.wait())}
        _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in pending:
            waiter.cancel()
    finally:
        await server.stop()
    return 0


def _child_main(arguments: list[str]) -> int:
    options = json.loads(arguments[0])
    data_dir = options.pop("data_dir")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    coroutine = _serve_child(data_dir, options)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; fall back for odd platforms
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
