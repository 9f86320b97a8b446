"""Why the controller refuses the SDK's gRPC channel, when TLS is the reason.

gRPC's channel hides a TLS mistake: a call fails UNAVAILABLE with the transport error of whichever
address it tried last (for ``localhost`` often ``ipv6:[::1] ... Connection refused``), and the retry
policy would try it for its whole budget although it cannot succeed. When a call fails so before the
client has ever reached the controller, :func:`diagnose` makes one connection of its own with the
standard ``ssl`` module and names the mistake:

* ``tls://`` and the server's certificate is not trusted (or not for this host name): the handshake's
  own verify message, and the trust file;
* ``tls://`` against a plaintext controller: the handshake fails and the same address answers a plaintext
  HTTP/2 preface with SETTINGS;
* ``tcp://`` against a TLS controller: a handshake that verifies nothing succeeds.

Anything else (nothing listening, a timeout, a handshake that works) is not a TLS mistake: the probe
says nothing and the call goes on being retried.
"""

from __future__ import annotations

import asyncio
import ssl

from .security import tls_context

PROBE_TIMEOUT_SECONDS = 3.0
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
_SETTINGS = 0x04


async def diagnose(host: str, port: int, tls: bool, trust: str | None,
                   timeout: float = PROBE_TIMEOUT_SECONDS, *, server_name: str | None = None) -> str | None:
    """One line naming the TLS mistake between this client and the controller at ``host:port``, or None.
    ``server_name``: the name its certificate must be for, when ``host`` is an address that name resolved to."""
    try:
        return await asyncio.wait_for(_diagnose(host, port, tls, trust, server_name or host), timeout)
    except (TimeoutError, OSError, EOFError):
        return None


async def _diagnose(host: str, port: int, tls: bool, trust: str | None, server_name: str) -> str | None:
    address = f"[{server_name}]:{port}" if ":" in server_name else f"{server_name}:{port}"
    if not tls:
        if await _handshake(host, port, _verifying_nothing(), server_name) is None:
            return (f"the controller at {address} expects TLS but the URI says plaintext: use "
                    f"tls://{address} (with ClientConfig(tls_trust=...) naming the CA that signed its certificate)")
        return None
    failure = await _handshake(host, port, tls_context(trust), server_name)
    if isinstance(failure, ssl.SSLCertVerificationError):
        trusted = trust if trust is not None else "the system's CA certificates"
        return (f"the controller at {address} presented a certificate this client does not trust: certificate "
                f"verify failed ({failure.verify_message}); trusted certificates: {trusted}")
    if failure is not None and await _speaks_plaintext_http2(host, port):
        return (f"the controller at {address} does not serve TLS (it answered in plaintext) but the URI says "
                f"tls://: use tcp://{address}, or start the controller with --tls-cert and --tls-key")
    return None


async def _handshake(host: str, port: int, context: ssl.SSLContext, server_name: str) -> Exception | None:
    """None when a TLS handshake with ``host:port`` (any address of ``host`` that accepts) succeeds, else
    why it did not: an SSLError, a reset or EOF in the handshake, or the TCP connection itself failing."""
    try:
        _, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=server_name)
    except (OSError, EOFError) as error:  # ssl.SSLError is an OSError
        return error
    writer.close()
    return None


async def _speaks_plaintext_http2(host: str, port: int) -> bool:
    """Whether ``host:port`` answers HTTP/2's client preface with a SETTINGS frame (a plaintext gRPC server)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(_H2_PREFACE)
        header = await reader.readexactly(9)  # length (3), type (1), flags (1), stream (4)
        return header[3] == _SETTINGS
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    finally:
        writer.close()


def _verifying_nothing() -> ssl.SSLContext:
    """A context that accepts any certificate: the probe only asks whether the server speaks TLS at all."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
