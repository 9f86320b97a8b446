"""The simulated gRPC (tests/simulation/grpc_sim.py): a toy servicer, then the real controller servicer and the
SDK's ControllerClient, talking over the world's network with crashes, partitions, pauses and restarts.

Every test runs in this process on the world's loop, in milliseconds of wall time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from clients.config import ClientConfig
from clients.controller_client import _CHANNEL_OPTIONS, ControllerClient
from clients.errors import InvalidArgument, StreamNotFound
from controller.endpoints import SegmentLocator
from controller.grpc_server import start_grpc_server
from controller.grpc_service import ControllerServicer
from controller.service.context import ControllerContext
from controller.service.services import ControllerServices
from controller.store import MetadataStore
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.simulation import NotSimulated, World
from tests.simulation.grpc_sim import SimChannel, SimGrpcServer, install
from tests.support.doubles.key_value_store import InMemoryKeyValueStore

SERVER = "10.0.0.1"
CLIENT = "10.0.0.2"
PORT = 9090
SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"].full_name
Code = grpc.StatusCode
OK = pb.CreateScopeStatus(status=pb.CreateScopeStatus.SUCCESS)


@pytest.fixture
def world() -> Iterator[World]:
    with World(seed=5) as w, install(w):
        yield w


class Toy:
    """createScope behaviours chosen by the scope name; what the server saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], str, float | None]] = []
        self.cancelled: list[tuple[str, float]] = []

    async def create_scope(self, request: pb.ScopeInfo,
                           context: grpc.aio.ServicerContext[Any, Any]) -> pb.CreateScopeStatus:
        scope = request.scope
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        self.seen.append((scope, metadata, context.peer(), context.time_remaining()))
        if scope == "forbidden":
            await context.abort(Code.PERMISSION_DENIED, "scope 'forbidden' is not for you")
        if scope == "broken":
            raise ValueError("boom")
        if scope.startswith("slow"):
            try:
                await asyncio.sleep(float(scope.partition(":")[2] or 60))
            except asyncio.CancelledError:
                self.cancelled.append((scope, asyncio.get_running_loop().time()))
                assert context.cancelled()
                raise
        return OK

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {"createScope": grpc.unary_unary_rpc_method_handler(
            self.create_scope, request_deserializer=pb.ScopeInfo.FromString,
            response_serializer=pb.CreateScopeStatus.SerializeToString)})


def _serving(toy: Toy, port: int = PORT) -> Callable[[], Awaitable[None]]:
    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        assert isinstance(server, SimGrpcServer)
        server.add_generic_rpc_handlers((toy.handler(),))
        assert server.add_insecure_port(f"0.0.0.0:{port}") == port
        await server.start()
        await server.wait_for_termination()

    return main


async def _create(stub: pb_grpc.ControllerServiceStub, scope: str, timeout: float = 5.0) -> str:
    """"OK", or the failure's code name and details."""
    try:
        await stub.createScope(pb.ScopeInfo(scope=scope), timeout=timeout)
    except grpc.aio.AioRpcError as error:
        return f"{error.code().name} {error.details()}"
    return "OK"


def _client(world: World, scenario: Callable[[], Awaitable[Any]]) -> Any:
    """Runs ``scenario`` as the main of a client process on CLIENT and returns its result."""
    return world.run(world.process("client", CLIENT).start(scenario), until=3600)


# -- the toy servicer --------------------------------------------------------------------------------------


def test_success_metadata_abort_errors_and_unknown_methods(world: World) -> None:
    toy = Toy()
    world.process("server", SERVER).start(_serving(toy))

    async def scenario() -> None:
        channel = grpc.aio.insecure_channel(f"{SERVER}:{PORT}")
        assert isinstance(channel, SimChannel) and channel.get_state() is grpc.ChannelConnectivity.IDLE
        stub = pb_grpc.ControllerServiceStub(channel)
        call = stub.createScope(pb.ScopeInfo(scope="alpha"), timeout=5, metadata=(("authorization", "Basic x"),))
        assert await call == OK
        assert await call.code() is Code.OK and call.done() and not call.cancelled()
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        scope, metadata, peer, remaining = toy.seen[0]
        assert scope == "alpha" and metadata["authorization"] == "Basic x" and "user-agent" in metadata
        assert peer.startswith(f"ipv4:{CLIENT}:") and remaining is not None and 4.99 < remaining < 5

        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.createScope(pb.ScopeInfo(scope="forbidden"), timeout=5)
        assert raised.value.code() is Code.PERMISSION_DENIED
        assert raised.value.details() == "scope 'forbidden' is not for you"
        assert await _create(stub, "broken") == "UNKNOWN Unexpected <class 'ValueError'>: boom"
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.getURI(pb.SegmentId(), timeout=5)
        assert (raised.value.code(), raised.value.details()) == (Code.UNIMPLEMENTED, "Method not found!")
        await channel.close()
        with pytest.raises(grpc.aio.UsageError):
            stub.createScope(pb.ScopeInfo(scope="late"))

    _client(world, scenario)
    calls = [line.split()[2:] for line in world.trace_tail() if " grpc_call " in line]
    assert [fields[-2:] for fields in calls] == [["'createScope'", "'OK'"], ["'createScope'", "'PERMISSION_DENIED'"],
                                                 ["'createScope'", "'UNKNOWN'"], ["'getURI'", "'UNIMPLEMENTED'"]]


def test_deadlines_and_cancellation_reach_the_server(world: World) -> None:
    toy = Toy()
    world.process("server", SERVER).start(_serving(toy))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        async with grpc.aio.insecure_channel(f"{SERVER}:{PORT}") as channel:
            stub = pb_grpc.ControllerServiceStub(channel)
            started = loop.time()
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.createScope(pb.ScopeInfo(scope="slow"), timeout=2)
            assert (raised.value.code(), raised.value.details()) == (Code.DEADLINE_EXCEEDED, "Deadline Exceeded")
            assert loop.time() - started == pytest.approx(2)
            await asyncio.sleep(0.1)
            assert [scope for scope, _ in toy.cancelled] == ["slow"]  # the server's handler was cancelled too

            async def awaiting() -> Any:
                return await stub.createScope(pb.ScopeInfo(scope="slow:30"), timeout=60)

            waiting = loop.create_task(awaiting())
            await asyncio.sleep(1)
            waiting.cancel()  # cancelling the awaiting task cancels the call, and the server's side of it
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await asyncio.sleep(0.1)
            assert [scope for scope, _ in toy.cancelled] == ["slow", "slow:30"]

            call = stub.createScope(pb.ScopeInfo(scope="slow:30"), timeout=60)
            quick = stub.createScope(pb.ScopeInfo(scope="slow:0.5"), timeout=60)
            closing = loop.create_task(channel.close(grace=1))
            assert await quick == OK  # finished within the grace
            with pytest.raises(asyncio.CancelledError):  # as grpcio: not an AioRpcError
                await call
            assert await call.code() is Code.CANCELLED and call.cancelled()
            await closing
            assert channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN

    _client(world, scenario)


def test_a_crashed_server_is_unavailable_and_its_restart_serves_the_same_channel(world: World) -> None:
    toy = Toy()
    server = world.process("server", SERVER)
    server.start(_serving(toy))

    async def scenario() -> list[str]:
        stub = pb_grpc.ControllerServiceStub(grpc.aio.insecure_channel(f"{SERVER}:{PORT}"))
        outcomes = [await _create(stub, "before")]
        in_flight = asyncio.get_running_loop().create_task(_create(stub, "slow"))
        await asyncio.sleep(1)
        server.crash()
        outcomes.append(await in_flight)
        outcomes.append(await _create(stub, "while down"))
        await asyncio.sleep(5)
        server.restart(_serving(toy))
        while (outcome := await _create(stub, "after")) != "OK":  # what the SDK's retry does
            assert outcome.startswith("UNAVAILABLE failed to connect"), outcome
            await asyncio.sleep(0.25)
        outcomes.append(outcome)
        return outcomes

    before, in_flight, while_down, after = _client(world, scenario)
    assert (before, after) == ("OK", "OK")
    assert in_flight == "UNAVAILABLE Stream removed (Socket closed)"
    assert while_down == (f"UNAVAILABLE failed to connect to all addresses; last error: UNKNOWN: ipv4:{SERVER}:{PORT}: "
                          f"Failed to connect to remote host: Connection refused")
    states = [line.split()[4] for line in world.trace_tail() if " grpc_channel " in line]
    assert states[:4] == ["'CONNECTING'", "'READY'", "'IDLE'", "'CONNECTING'"]
    assert "'TRANSIENT_FAILURE'" in states and states[-1] == "'READY'"


def test_a_partition_times_calls_out_unless_keepalive_notices_it_first(world: World) -> None:
    toy = Toy()
    world.process("server", SERVER).start(_serving(toy))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        plain = pb_grpc.ControllerServiceStub(grpc.aio.insecure_channel(f"{SERVER}:{PORT}"))
        pinging = pb_grpc.ControllerServiceStub(grpc.aio.insecure_channel(f"{SERVER}:{PORT}", options=_CHANNEL_OPTIONS))
        assert await _create(plain, "a") == await _create(pinging, "b") == "OK"
        world.network.partition(CLIENT, SERVER)
        started = loop.time()
        # without keep-alive the call waits out its deadline; the SDK's pings (every 5 s, 5 s to answer) give
        # up on the connection within 10 s. (Past the network's stall_reset_after, 30 s, the world resets a
        # connection whose bytes cannot get through: real TCP gives up only after ~15 minutes.)
        plain_call = loop.create_task(_create(plain, "c", timeout=20))
        assert await _create(pinging, "d", timeout=20) == "UNAVAILABLE Stream removed (ping timeout)"
        assert 5 < loop.time() - started <= 10
        assert await plain_call == "DEADLINE_EXCEEDED Deadline Exceeded"
        assert loop.time() - started == pytest.approx(20)
        assert await _create(pinging, "e", timeout=3) == "DEADLINE_EXCEEDED Deadline Exceeded"  # connecting
        world.network.heal()
        assert await _create(plain, "f") == "OK"  # the same connection, still there
        await asyncio.sleep(10)
        assert await _create(pinging, "g") == "OK"

    _client(world, scenario)
    assert [line.split()[-1] for line in world.trace_tail() if " grpc_channel " in line and "ping timeout" in line]


def test_a_paused_server_is_noticed_by_keepalive(world: World) -> None:
    toy = Toy()
    server = world.process("server", SERVER)
    server.start(_serving(toy))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        stub = pb_grpc.ControllerServiceStub(grpc.aio.insecure_channel(f"{SERVER}:{PORT}", options=_CHANNEL_OPTIONS))
        assert await _create(stub, "a") == "OK"  # the connection starts at 0: pings at 5, 10, 15 s...
        await asyncio.sleep(12 - loop.time())
        server.pause(30)
        assert await _create(stub, "b", timeout=40) == "UNAVAILABLE Stream removed (ping timeout)"
        assert loop.time() == pytest.approx(20, abs=0.01)  # pinged at 15 s, no answer by 20 s (as grpcio)
        await asyncio.sleep(25)
        assert await _create(stub, "c") == "OK"

    _client(world, scenario)


def test_stop_with_grace_finishes_short_calls_and_cancels_the_rest(world: World) -> None:
    toy = Toy()
    servers: list[grpc.aio.Server] = []

    async def serve() -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((toy.handler(),))
        server.add_insecure_port(f"{SERVER}:{PORT}")
        servers.append(server)
        await server.start()
        assert await server.wait_for_termination(timeout=1) is True
        await server.wait_for_termination()

    world.process("server", SERVER).start(serve)

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        stub = pb_grpc.ControllerServiceStub(grpc.aio.insecure_channel(f"{SERVER}:{PORT}"))
        assert await _create(stub, "a") == "OK"
        short = loop.create_task(_create(stub, "slow:1", timeout=60))
        long = loop.create_task(_create(stub, "slow:30", timeout=60))
        await asyncio.sleep(0.1)
        await servers[0].stop(2)  # (called from the client process: processes share objects, not only the network)
        outcomes = [await short, await long, await _create(stub, "after")]
        with pytest.raises(NotSimulated):
            servers[0].add_secure_port("0.0.0.0:1", grpc.ssl_server_credentials([(b"key", b"cert")]))
        return outcomes

    short, long, after = _client(world, scenario)
    assert short == "OK"
    assert long == "UNAVAILABLE Cancelling all calls"
    assert after.startswith("UNAVAILABLE failed to connect") and after.endswith("Connection refused")


def test_install_replaces_and_restores_grpc_aio() -> None:
    real = (grpc.aio.server, grpc.aio.insecure_channel, grpc.aio.secure_channel)
    with World(seed=1) as world, install(world):
        async def main() -> None:
            with pytest.raises(NotSimulated, match="TLS"):
                grpc.aio.secure_channel(f"{SERVER}:{PORT}", grpc.ssl_channel_credentials())
            channel = grpc.aio.insecure_channel(f"dns:///{SERVER}:{PORT}")
            with pytest.raises(NotSimulated):
                channel.unary_stream("/x.Y/z")
            server = grpc.aio.server()
            port = server.add_insecure_port("[::]:0")
            assert port >= 49152
            other = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            with pytest.raises(RuntimeError, match="Failed to bind"):
                other.add_insecure_port(f"[::]:{port}")
            with pytest.raises(NotSimulated, match="SO_REUSEPORT"):
                grpc.aio.server().add_insecure_port(f"[::]:{port}")
            await channel.close()
            await server.stop(None)

        world.run(main())
    assert (grpc.aio.server, grpc.aio.insecure_channel, grpc.aio.secure_channel) == real


# -- the real controller servicer and the SDK's controller client -------------------------------------------


def _controller(ports: list[int]) -> Callable[[], Awaitable[None]]:
    """The controller's real gRPC face (servicer, guard, metrics, server) over scope and stream services that
    keep their metadata in memory: the calls used here never reach a segment store."""

    async def main() -> None:
        store = MetadataStore(InMemoryKeyValueStore())  # type: ignore[no-untyped-call]
        await store.initialize()
        context = ControllerContext(store, segments=None,  # type: ignore[arg-type]
                                    locator=SegmentLocator.single_host(4, ("10.0.0.9", 12345)))

        async def no_transactions(*args: Any) -> None:
            raise AssertionError("no transaction is aborted here")

        services = ControllerServices(context, no_transactions)
        server, port = await start_grpc_server(ControllerServicer(services, None), host="0.0.0.0",  # type: ignore[arg-type]
                                               port=PORT)
        ports.append(port)
        await server.wait_for_termination()

    return main


def _sdk_scenario(world: World) -> tuple[list[Any], str]:
    ports: list[int] = []
    controller = world.process("controller", SERVER)

    async def scenario() -> list[Any]:
        # the SDK's first call finds no controller: UNAVAILABLE, the TLS probe (no TLS mistake), retries
        world.loop.call_later(2, controller.start, _controller(ports))
        config = ClientConfig()  # as clients.client.Client builds it
        client = ControllerClient(f"tcp://{SERVER}:{PORT}", retry_policy=config.controller_retry,
                                  rpc_timeout_seconds=config.controller_rpc_timeout_seconds,
                                  credentials=config.credentials, tls_trust=config.tls_trust).open()
        results: list[Any] = [await client.create_scope("alpha"), await client.create_scope("alpha"),
                              await client.scope_exists("alpha"), await client.scope_exists("beta")]
        for refused in (client.get_stream_configuration("alpha", "missing"), client.create_scope("no/slashes")):
            try:
                await refused
            except (StreamNotFound, InvalidArgument) as error:
                results.append((type(error).__name__, str(error)))
        controller.crash()  # the SDK retries while the controller restarts on the same address
        world.loop.call_later(3, controller.restart, _controller(ports))
        results.append(await client.scope_exists("alpha"))  # a new controller: the memory store starts empty
        await client.close()
        return results

    results = world.run(world.process("sdk", CLIENT).start(scenario), until=600)
    assert ports == [PORT, PORT]
    return results, world.trace_hash()


def test_the_real_controller_servicer_answers_the_sdk(world: World) -> None:
    results, _ = _sdk_scenario(world)
    created, again, exists, missing, not_found, invalid, after_restart = results
    assert (created, again, exists, missing, after_restart) == (True, False, True, False, False)
    assert world.now > 5  # the controller started at 2 s, restarted 3 s after the crash
    assert not_found[0] == "StreamNotFound" and "missing" in not_found[1]
    assert invalid[0] == "InvalidArgument"
    lines = world.trace_tail()
    assert any("'getStreamConfiguration' 'NOT_FOUND'" in line for line in lines)
    assert any("'getControllerServerList' 'OK'" in line for line in lines)  # the SDK's discovery, in the background


def test_the_same_seed_gives_the_same_trace() -> None:
    def run(seed: int) -> str:
        with World(seed) as world, install(world):
            return _sdk_scenario(world)[1]

    started = time.perf_counter()
    first = run(21)
    assert run(21) == first and run(21) == first
    assert run(22) != first
    assert time.perf_counter() - started < 30  # four runs with gRPC deadlines of seconds: virtual, not waited for
