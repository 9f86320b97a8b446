"""Client-side errors. Retry loops read ``retriable`` instead of listing classes."""

from __future__ import annotations


class ClientError(Exception):
    retriable = False


class ConnectionFailed(ClientError):
    """Connecting, or the connection itself, failed; pending requests fail with this."""

    retriable = True


class ProtocolViolation(ClientError):
    """The server sent something the protocol does not allow (bad frame, wrong reply)."""

    retriable = True


class ServerError(ClientError):
    """The server answered a request with an error reply (kept in ``reply``)."""

    def __init__(self, reply):
        super().__init__(repr(reply))
        self.reply = reply
