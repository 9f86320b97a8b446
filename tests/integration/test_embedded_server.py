"""tributary.testing (Server, ThreadedServer, ProcessServer) and the ``tributary`` pytest plugin:
servers started in tests answer on OS-chosen loopback ports, stop without leaving tasks, threads
or listening ports behind, keep their streams across a restart on the same data dir, fail to
start with a clear error, and the plugin's fixture works in a project that knows nothing but the
installed package."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tributary.testing import ProcessServer, Server, ServerStartupError, ThreadedServer

pytestmark = pytest.mark.process


def grpc_target(endpoint: tuple[str, int]) -> str:
    return f"{endpoint[0]}:{endpoint[1]}"


def stream_config(scope: str, stream: str) -> pb.StreamConfig:
    return pb.StreamConfig(streamInfo=pb.StreamInfo(scope=scope, stream=stream),
                           scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS,
                                                          minNumSegments=1))


async def create_scope_and_stream(endpoint, scope: str, stream: str) -> tuple[int, int]:
    async with grpc.aio.insecure_channel(grpc_target(endpoint)) as channel:
        stub = pb_grpc.ControllerServiceStub(channel)
        scope_reply = await stub.createScope(pb.ScopeInfo(scope=scope), timeout=10)
        stream_reply = await stub.createStream(stream_config(scope, stream), timeout=10)
        return scope_reply.status, stream_reply.status


async def stream_exists(endpoint, scope: str, stream: str) -> bool:
    async with grpc.aio.insecure_channel(grpc_target(endpoint)) as channel:
        stub = pb_grpc.ControllerServiceStub(channel)
        reply = await stub.checkStreamExists(pb.StreamInfo(scope=scope, stream=stream), timeout=10)
        return reply.exists


def stream_exists_sync(endpoint, scope: str, stream: str) -> bool:
    with grpc.insecure_channel(grpc_target(endpoint)) as channel:
        stub = pb_grpc.ControllerServiceStub(channel)
        return stub.checkStreamExists(pb.StreamInfo(scope=scope, stream=stream), timeout=10).exists


def assert_nothing_listens(*ports: int) -> None:
    for port in ports:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT, catch listeners
            probe.bind(("127.0.0.1", port))


@pytest.fixture
def busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


async def test_async_server_keeps_its_streams_across_a_restart(tmp_path):
    """An async Server serves the controller's gRPC API on an OS-chosen port; stop leaves no task
    and no listener behind; a second Server on the same data dir sees the scope and stream."""
    data_dir = tmp_path / "data"
    before = asyncio.all_tasks()
    async with Server(data_dir) as server:
        host, port = server.controller_endpoint
        assert server.controller_uri == f"tcp://127.0.0.1:{port}" and port != 0
        assert server.segment_store_endpoint[0] == "127.0.0.1" and server.segment_store_endpoint[1] != 0
        ports = (port, server.segment_store_endpoint[1])
        assert await create_scope_and_stream(server.controller_endpoint, "embedded", "kept") == (
            pb.CreateScopeStatus.SUCCESS, pb.CreateStreamStatus.SUCCESS)
    assert not server.running
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()
    assert_nothing_listens(*ports)

    async with Server(data_dir) as restarted:
        assert await stream_exists(restarted.controller_endpoint, "embedded", "kept")
        assert not await stream_exists(restarted.controller_endpoint, "embedded", "never-created")
    assert asyncio.all_tasks() - before == set()


async def test_async_server_startup_failures_are_clear_errors(tmp_path, busy_port):
    """A busy segment store or controller port, or another container count than the data dir was
    created with, raise ServerStartupError saying why, and leave nothing running."""
    data_dir = tmp_path / "data"
    before = asyncio.all_tasks()
    with pytest.raises(ServerStartupError, match=f"segment store cannot start: cannot listen on 127.0.0.1:{busy_port}"):
        await Server(data_dir, port=busy_port).start()
    with pytest.raises(ServerStartupError, match=f"controller cannot start: cannot listen on 127.0.0.1:{busy_port}"):
        await Server(data_dir, controller_port=busy_port).start()
    with pytest.raises(ServerStartupError, match="created with 2 containers; it cannot be opened with 3"):
        await Server(data_dir, containers=3).start()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()
    with pytest.raises(ValueError, match="log_file_size"):
        Server(data_dir, log_file_size=1024)


REAL_CLIENT_SCRIPT = """
import asyncio, json, os, sys
import pravega_client

manager = pravega_client.StreamManager(sys.argv[1], False, False)
manager.create_scope("threaded")
manager.create_stream("threaded", "events", 2)
writer = manager.create_writer("threaded", "events")
for number in range(20):
    writer.write_event(f"event-{number}", f"key-{number % 3}")
writer.flush()
reader = manager.create_reader_group("group", "threaded", "events").create_reader("reader")

async def read_all():
    received = []
    while len(received) < 20:
        segment_slice = await asyncio.wait_for(reader.get_segment_slice_async(), 30)
        received.extend(event.data().decode() for event in segment_slice)
        reader.release_segment(segment_slice)
    return received

print("RESULT " + json.dumps(asyncio.run(read_all())), flush=True)
os._exit(0)  # skip the binding's runtime teardown, which can abort (SIGABRT) with connections open
"""


@pytest.mark.interop
def test_threaded_server_serves_the_real_client_from_a_sync_test(tmp_path):
    """A ThreadedServer started from a plain sync test serves the real pravega client (run in a
    child process: the binding holds the GIL while it blocks) writing and reading back events;
    stop joins the server's thread and frees both ports."""
    threads_before = set(threading.enumerate())
    with ThreadedServer(tmp_path / "data") as server:
        ports = (server.controller_endpoint[1], server.segment_store_endpoint[1])
        client = subprocess.run([sys.executable, "-c", REAL_CLIENT_SCRIPT, server.controller_uri],
                                capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stdout[-4000:] + client.stderr[-4000:]
        received = json.loads(client.stdout.splitlines()[-1].removeprefix("RESULT "))
        assert sorted(received) == sorted(f"event-{number}" for number in range(20))
        assert stream_exists_sync(server.controller_endpoint, "threaded", "events")
    assert not server.running
    assert not [thread for thread in set(threading.enumerate()) - threads_before
                if thread.name == "tributary-testing-server"]
    assert_nothing_listens(*ports)


def test_threaded_server_outlives_the_event_loops_that_use_it(tmp_path):
    """A ThreadedServer keeps serving while short-lived event loops of the test come and go, and
    restarts on the same data dir with its streams."""
    server = ThreadedServer(tmp_path / "data").start()
    try:
        assert asyncio.run(create_scope_and_stream(server.controller_endpoint, "loops", "s")) == (
            pb.CreateScopeStatus.SUCCESS, pb.CreateStreamStatus.SUCCESS)
        assert asyncio.run(stream_exists(server.controller_endpoint, "loops", "s"))
        server.stop()
        server.start()
        assert asyncio.run(stream_exists(server.controller_endpoint, "loops", "s"))
    finally:
        server.stop()


def test_threaded_and_process_servers_report_startup_failures(tmp_path, busy_port):
    """ThreadedServer.start and ProcessServer.start raise ServerStartupError for a busy port (no
    hang), and leave no thread or child process behind."""
    threads_before = set(threading.enumerate())
    with pytest.raises(ServerStartupError, match=f"cannot listen on 127.0.0.1:{busy_port}"):
        ThreadedServer(tmp_path / "data", controller_port=busy_port).start()
    assert not [thread for thread in set(threading.enumerate()) - threads_before
                if thread.name == "tributary-testing-server"]
    process_server = ProcessServer(tmp_path / "data", port=busy_port)
    with pytest.raises(ServerStartupError, match=f"cannot listen on 127.0.0.1:{busy_port}"):
        process_server.start()
    assert process_server.pid is None and not process_server.running


@pytest.mark.interop
def test_process_server_serves_the_real_client_in_this_process(tmp_path):
    """The real pravega client, in the test's own process, creates, writes and reads back an event
    through a ProcessServer; after a restart on the same data dir the stream is still there."""
    import pravega_client

    data_dir = tmp_path / "data"
    with ProcessServer(data_dir) as server:
        manager = pravega_client.StreamManager(server.controller_uri, False, False)
        assert manager.create_scope("process")
        assert manager.create_stream("process", "events", 1)
        writer = manager.create_writer("process", "events")
        writer.write_event("x")
        writer.flush()
        reader = manager.create_reader_group("group", "process", "events").create_reader("reader")

        async def read_one_slice() -> list[bytes]:
            segment_slice = await asyncio.wait_for(reader.get_segment_slice_async(), 30)
            events = [event.data() for event in segment_slice]
            reader.release_segment(segment_slice)  # no reader_offline(): in 0.3.8 it sometimes blocks 30 s
            return events

        assert asyncio.run(read_one_slice()) == [b"x"]
        pid = server.pid
    with pytest.raises(ProcessLookupError):  # the child has exited and been reaped
        os.kill(pid, 0)
    with ProcessServer(data_dir) as restarted:
        manager = pravega_client.StreamManager(restarted.controller_uri, False, False)
        assert not manager.create_stream("process", "events", 1)  # False: it exists already


OUTSIDE_TEST_MODULE = '''
"""A project that knows only the installed tributary package and its pytest plugin."""
import asyncio
import socket

import grpc
import pytest

import tributary


def answers(uri):
    assert uri.startswith("tcp://127.0.0.1:")
    with grpc.insecure_channel(uri[len("tcp://"):]) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)


def test_sync(tributary_server):
    """The controller URI answers; the segment store accepts connections."""
    assert type(tributary_server).__module__ == "tributary.testing"
    answers(tributary_server.controller_uri)
    socket.create_connection(tributary_server.segment_store_endpoint, timeout=5).close()


def test_session_server(tributary_session_server):
    """The session-wide server answers too."""
    answers(tributary_session_server.controller_uri)


@pytest.mark.asyncio
async def test_async(tributary_server):
    """The fixture works in an async test (pytest-asyncio, strict mode)."""
    async with grpc.aio.insecure_channel(tributary_server.controller_uri[len("tcp://"):]) as channel:
        await asyncio.wait_for(channel.channel_ready(), 10)


def test_pravega_client(tributary_server):
    """The real client in the test's process (the default, process-backed server)."""
    import pravega_client
    manager = pravega_client.StreamManager(tributary_server.controller_uri, False, False)
    assert manager.create_scope("outside")
'''


def run_pytest_outside(tmp_path, test_file, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "basetemp"), *options, str(test_file)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.interop
def test_plugin_fixture_works_in_a_project_outside_this_one(tmp_path):
    """pytest, run on a lone test module in an empty directory (no conftest, no configuration),
    finds the tributary_server fixtures through the installed pytest11 entry point: sync, async
    (pytest-asyncio strict mode) and real-client tests pass; so do the sync tests with
    pytest-asyncio disabled and the in-process (thread) mode."""
    project = tmp_path / "project"
    project.mkdir()
    test_file = project / "test_outside.py"
    test_file.write_text(textwrap.dedent(OUTSIDE_TEST_MODULE))
    assert sorted(path.name for path in project.iterdir()) == ["test_outside.py"]

    default = run_pytest_outside(project, test_file)
    assert default.returncode == 0, default.stdout + default.stderr
    assert "4 passed" in default.stdout

    threaded = run_pytest_outside(project, test_file, "-p", "no:asyncio", "-o", "tributary_server_mode=thread",
                                  "-k", "test_sync or test_session_server")
    assert threaded.returncode == 0, threaded.stdout + threaded.stderr
    assert "2 passed, 2 deselected" in threaded.stdout
