"""ControllerClient moving to another controller: calls still on the channel it leaves behind are retried on
the next controller, not turned into a cancellation of their callers.

grpcio (1.85) ends a call whose channel is closed by raising ``asyncio.CancelledError`` in the task awaiting
it, not an ``AioRpcError(CANCELLED)``. The client closes the channel of a controller it left (after a grace),
so without care a slow call in flight there would reach the application as a cancellation of its task.
Found by the simulation's gRPC model (tests/simulation/grpc_sim.py), checked here against real grpcio."""

from __future__ import annotations

import asyncio

from clients.controller_client import ControllerClient
from controller.grpc_server import start_grpc_server
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc


class _Controller(pb_grpc.ControllerServiceServicer):
    """Answers checkScopeExists after ``delay`` seconds with ``exists``; knows of no other controller."""

    def __init__(self, delay: float, exists: bool):
        self.delay, self.exists = delay, exists
        self.calls = 0

    async def checkScopeExists(self, request, context):
        self.calls += 1
        await asyncio.sleep(self.delay)
        return pb.ExistsResponse(exists=self.exists)

    async def getControllerServerList(self, request, context):
        return pb.ServerResponse()


async def test_a_call_left_on_the_old_channel_is_retried_on_the_next_controller():
    slow, fast = _Controller(delay=30.0, exists=False), _Controller(delay=0.0, exists=True)
    slow_server, slow_port = await start_grpc_server(slow, "127.0.0.1", 0)
    fast_server, fast_port = await start_grpc_server(fast, "127.0.0.1", 0)
    client = ControllerClient(f"tcp://127.0.0.1:{slow_port},127.0.0.1:{fast_port}").open()
    try:
        left_behind = asyncio.ensure_future(client.scope_exists("first"))
        while slow.calls == 0:
            await asyncio.sleep(0.01)
        # another call finds the first controller unreachable: the client moves on and closes that channel
        client._unreachable(client._endpoints.current)
        assert await client.scope_exists("second") is True
        # after the close's grace the first call is cut off there, and answered by the next controller
        assert await asyncio.wait_for(left_behind, 15) is True
        assert not left_behind.cancelled()
    finally:
        await client.close()
        await slow_server.stop(None)
        await fast_server.stop(None)
