"""The controller's segment -> endpoint mapping agrees with the segment stores' container hash, and
its gRPC server refuses a busy port with a clear error."""

from __future__ import annotations

import socket

import pytest

from controller.endpoints import SegmentLocator
from controller_api import controller_pb2_grpc
from controller.grpc_server import GrpcStartupError, start_grpc_server
from wire import naming


def test_endpoint_follows_the_container_hash():
    """Containers 0..3 spread over two hosts; each segment goes to the host of its container."""
    hosts = {0: ("a", 1), 1: ("b", 2), 2: ("a", 1), 3: ("b", 2)}
    locator = SegmentLocator(4, hosts.__getitem__)
    for name in ["scope/stream/0.#epoch.0", "scope/stream/1.#epoch.0", "scope/rg_kvtable/0.#epoch.0"]:
        assert locator.endpoint_for(name) == hosts[naming.container_of(name, 4)]
    assert locator.endpoint_for_id("scope", "stream", 1) == locator.endpoint_for("scope/stream/1.#epoch.0")
    txn = "scope/stream/0.#epoch.1#transaction." + "0" * 31 + "5"
    assert locator.endpoint_for(txn) == locator.endpoint_for("scope/stream/0.#epoch.0")


async def test_busy_port_is_a_clear_error():
    """Starting the gRPC server on a port in use raises GrpcStartupError naming the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GrpcStartupError, match=str(port)):
            await start_grpc_server(controller_pb2_grpc.ControllerServiceServicer(), "127.0.0.1", port)
