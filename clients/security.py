"""The client's side of security (docs/security.md): credentials for the controller, TLS, delegation tokens.

With credentials, every controller call carries ``authorization: Basic base64(user:password)``, and every
segment-store request carries a delegation token for the segment's stream, which the controller hands out
(``getDelegationToken``). :class:`DelegationTokens` keeps one per stream: it is fetched before a flow
attaches or a raw call is made (both look the segment's endpoint up first), renewed in the background once
half its life is gone, and dropped when a store answers that it expired, so the retry fetches a new one.
Without credentials the token is empty (what a store without auth expects).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import pathlib
import ssl
import time
from collections.abc import Awaitable, Callable

from coordination import tls_files
from wire import naming

from .errors import InvalidArgument, TributaryError

log = logging.getLogger(__name__)

TLS_SCHEMES = ("tls", "ssl", "pravegas")
"""Controller URI schemes that mean TLS to the controller and to the segment stores."""


def basic_authorization(credentials: tuple[str, str]) -> str:
    user, password = credentials
    if ":" in user:
        raise InvalidArgument("a user name cannot contain ':'")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def tls_context(trust: str | pathlib.Path | None) -> ssl.SSLContext:
    """A client TLS context trusting the CA certificates in the PEM file ``trust`` (None: the system's).

    Raises:
        InvalidArgument: ``trust`` cannot be used (the message names it and says why).
    """
    try:
        return tls_files.client_context(trust)
    except tls_files.TlsFileError as error:
        raise InvalidArgument(str(error)) from None


def trusted_certificates(trust: str | pathlib.Path) -> bytes:
    """The PEM bytes of the trust file ``trust`` (for grpcio), checked as :func:`tls_context` checks them.

    Raises:
        InvalidArgument: ``trust`` cannot be used (the message names it and says why).
    """
    try:
        return tls_files.check_certificates(trust, "trusted certificates")
    except tls_files.TlsFileError as error:
        raise InvalidArgument(str(error)) from None


def token_expiry(token: str) -> int | None:
    """The ``exp`` claim of a JSON Web Token (seconds since the epoch), read without checking the signature."""
    try:
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        return int(claims["exp"])
    except (IndexError, KeyError, ValueError, TypeError, binascii.Error):
        return None


def _stream_of(segment: str) -> str:
    """``scope/stream`` of a segment name (stream, transaction, transient or table segment)."""
    scope, _, rest = naming.primary_segment_name(segment).partition("/")
    return f"{scope}/{rest.partition('/')[0]}"


class DelegationTokens:
    """Delegation tokens per stream. ``fetch(scope, stream)`` asks the controller for one; ``enabled``
    False (no credentials) makes every token empty."""

    def __init__(self, fetch: Callable[[str, str], Awaitable[str]], enabled: bool,
                 clock: Callable[[], float] | None = None):
        self._fetch = fetch
        self.enabled = enabled
        self._clock = clock or time.time  # looked up now: a patched clock (the simulation) counts
        self._tokens: dict[str, tuple[str, float]] = {}  # scope/stream -> (token, renew after)
        self._renewing: dict[str, asyncio.Task[None]] = {}

    def token_for(self, segment: str) -> str:
        """The token to send with a request about ``segment`` ("" without one); starts a renewal when due."""
        if not self.enabled:
            return ""
        stream = _stream_of(segment)
        cached = self._tokens.get(stream)
        if cached is None:
            return ""
        if self._clock() >= cached[1] and stream not in self._renewing:
            task = asyncio.get_running_loop().create_task(self._renew_quietly(stream))
            self._renewing[stream] = task
            task.add_done_callback(lambda _task: self._renewing.pop(stream, None))
        return cached[0]

    async def ensure(self, segment: str) -> None:
        """Fetches the token of ``segment``'s stream unless a fresh one is held. Raises the controller's errors."""
        if not self.enabled:
            return
        stream = _stream_of(segment)
        cached = self._tokens.get(stream)
        if cached is None or self._clock() >= cached[1]:
            await self._renew(stream)

    def expired(self, segment: str) -> None:
        """A store said the token of ``segment``'s stream expired: the next ``ensure`` fetches a new one."""
        self._tokens.pop(_stream_of(segment), None)

    async def _renew(self, stream: str) -> None:
        scope, _, name = stream.partition("/")
        token = await self._fetch(scope, name)
        now = self._clock()
        expiry = token_expiry(token)
        renew_after = now + (expiry - now) / 2 if expiry is not None else float("inf")
        self._tokens[stream] = (token, renew_after)

    async def _renew_quietly(self, stream: str) -> None:
        try:
            await self._renew(stream)
        except TributaryError as error:  # the held token still works; the next ensure() tries again
            log.debug("could not renew a delegation token", extra={"stream": stream, "error": str(error)})

    async def close(self) -> None:
        for task in list(self._renewing.values()):
            task.cancel()
        await asyncio.gather(*self._renewing.values(), return_exceptions=True)
