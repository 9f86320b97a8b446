"""The controller's gRPC server lifecycle (grpcio asyncio API). The servicer is registered behind
``bad_requests.add_guarded_servicer``: undecodable and invalid requests (``api_validation``) are
refused before the servicer sees them, counted, and logged rate-limited."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from .bad_requests import add_guarded_servicer
from .security import Security

DEFAULT_PORT = 9090


class GrpcStartupError(Exception):
    """The gRPC port could not be bound."""


async def start_grpc_server(servicer, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                            security: Security | None = None,
                            tls: tuple[bytes, bytes] | None = None,
                            cut_off: Callable[[], str | None] | None = None) -> tuple[grpc.aio.Server, int]:
    """Starts serving ``servicer`` (a ControllerServiceServicer); returns the server and its port.

    ``security``: authenticate and authorize every call; ``tls``: (certificate chain, private key), PEM;
    ``cut_off``: why not to answer now (every call UNAVAILABLE with it), or None."""
    # Clients ping a call that stays open for a few seconds (the SDK every 5 s, to notice a controller that
    # stopped answering); gRPC's default would answer the third such ping with GOAWAY (too_many_pings).
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0),
                                      ("grpc.http2.min_ping_interval_without_data_ms", 1_000)])
    add_guarded_servicer(servicer, server, security=security, cut_off=cut_off)
    try:
        if tls is not None:
            bound = server.add_secure_port(f"{host}:{port}", grpc.ssl_server_credentials([(tls[1], tls[0])]))
        else:
            bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as error:
        raise GrpcStartupError(f"cannot listen on {host}:{port}: {error}") from error
    if bound == 0:
        raise GrpcStartupError(f"cannot listen on {host}:{port}: address in use or not available")
    await server.start()
    return server, bound
