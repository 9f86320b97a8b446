"""Authentication and authorization at the controller (docs/security.md).

*Who*: callers present HTTP basic credentials (``authorization: Basic base64(user:password)``, gRPC
metadata or an HTTP header), checked against a password file of lines ``user:hash:acl``, where
``hash`` is ``pbkdf2_sha256$<iterations>$<salt>$<digest>`` (``hash_password``; ``tributary passwd``
writes such lines) and ``acl`` is a ``wire.auth.Acl``. Blank lines and ``#`` comments are ignored.

*What*: every gRPC method names the resource it acts on and the permission it needs (``RPC_RULES``:
READ to look, READ_UPDATE to change); listings only show what the caller may read.

*Tokens*: ``getDelegationToken`` (and the replies that carry one) hands out a delegation token for the
stream, signed with the key segment stores verify it with; it grants exactly the caller's
permission on that stream (for a ``<name>_kvtable`` table segment also what the caller may do on
reader group or key-value table ``<name>``), for ``token_ttl_seconds``. The controller's own calls to
segment stores carry an internal token that grants everything.
"""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import hashlib
import hmac
import os
import pathlib
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordination import tls_files
from wire import auth, naming
from wire.auth import Acl, Permission

READ, UPDATE = Permission.READ, Permission.READ_UPDATE
HASH_ITERATIONS = 100_000
INTERNAL_SUBJECT = "tributary-controller"
GROUP_STATE_PREFIX = "_RG"  # the SDK keeps a reader group's state in the table segment _RG<group>_kvtable


# The caller of the gRPC method being served (set by the guard in front of the servicer; None without auth).
CURRENT_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The controller's TLS: its certificate chain and key (PEM files) for the gRPC and REST listeners, and
    the certificates it trusts when it connects to segment stores over TLS (None: the system's).

    Every file is checked by ``coordination.tls_files`` as it is loaded: a bad one raises ``TlsFileError``, one line
    naming the file and what is wrong with it (grpcio and OpenSSL would say ``PEM lib`` or nothing)."""

    certificate: pathlib.Path
    key: pathlib.Path
    trust: pathlib.Path | None = None
    trust_own_certificate: bool = False  # the standalone: its segment store serves this same certificate

    def check(self) -> None:
        """Loads every file once, so that a bad one stops a server before it starts anything. Raises TlsFileError."""
        self.server_context()
        self.client_context()

    def server_pair(self) -> tuple[bytes, bytes]:
        """(certificate chain, private key) as grpcio wants them. Raises TlsFileError."""
        return tls_files.server_pair(self.certificate, self.key)

    def server_context(self) -> ssl.SSLContext:
        """The REST listener's context. Raises TlsFileError."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        tls_files.load_server_chain(context, self.certificate, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context the controller connects to segment stores with: it trusts ``trust`` (or the system's
        CAs) and, with ``trust_own_certificate``, the controller's own certificate itself, as a trust anchor
        (a leaf signed by a private CA is then accepted without that CA: the store in the same process
        serves it). Raises TlsFileError."""
        context = tls_files.client_context(self.trust)
        if self.trust_own_certificate:
            tls_files.load_trust(context, self.certificate)
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        return context


class Unauthenticated(Exception):
    """No credentials, or wrong ones."""


class PermissionDenied(Exception):
    """The caller may not do this."""


def hash_password(password: str, iterations: int = HASH_ITERATIONS, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def _password_matches(password: str, stored: str) -> bool:
    try:
        scheme, iterations, salt, digest = stored.split("$")
        if scheme != "pbkdf2_sha256":
            return False
        computed = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
        return hmac.compare_digest(computed, base64.b64decode(digest))
    except (ValueError, TypeError):
        return False


@dataclasses.dataclass(frozen=True)
class Principal:
    user: str
    acl: Acl


class InvalidPasswordFile(ValueError):
    pass


def load_password_file(path: pathlib.Path | str) -> dict[str, tuple[str, Acl]]:
    """user -> (stored hash, ACL). Raises InvalidPasswordFile (or OSError)."""
    users: dict[str, tuple[str, Acl]] = {}
    for number, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, rest = line.partition(":")
        stored, colon2, acl = rest.partition(":")
        if not colon or not colon2 or not user or not stored.startswith("pbkdf2_sha256$"):
            raise InvalidPasswordFile(f"{path}:{number}: expected user:pbkdf2_sha256$...:acl")
        try:
            users[user] = (stored, Acl.parse(acl))
        except auth.InvalidAcl as error:
            raise InvalidPasswordFile(f"{path}:{number}: {error}") from None
    return users


class Security:
    """Credentials, permissions and delegation tokens (see the module docstring)."""

    def __init__(self, users: Mapping[str, tuple[str, Acl]], token_key: bytes, token_ttl_seconds: int = 600,
                 clock: Callable[[], float] | None = None):
        self._users = dict(users)
        self._key = token_key
        self.token_ttl_seconds = token_ttl_seconds
        self._clock = clock or time.time  # looked up now: a patched clock (the simulation) counts
        self._internal: tuple[str, int] | None = None
        self._verified: dict[str, Principal] = {}  # authorization header -> principal (hashing is slow on purpose)

    @classmethod
    def from_files(cls, password_file: pathlib.Path | str, token_key: bytes, token_ttl_seconds: int = 600) -> Security:
        return cls(load_password_file(password_file), token_key, token_ttl_seconds)

    # ------------------------------------------------------------------ who

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller of an ``authorization`` header value. Raises Unauthenticated."""
        if not authorization:
            raise Unauthenticated("no credentials: send authorization: Basic <base64(user:password)>")
        known = self._verified.get(authorization)
        if known is not None:
            return known
        method, _, value = authorization.partition(" ")
        if method.lower() != "basic":
            raise Unauthenticated(f"unsupported authorization method {method!r} (Basic)")
        try:
            user, colon, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise Unauthenticated("malformed Basic credentials") from None
        entry = self._users.get(user)
        if not colon or entry is None or not _password_matches(password, entry[0]):
            raise Unauthenticated("wrong user name or password")
        principal = Principal(user, entry[1])
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[authorization] = principal
        return principal

    # ------------------------------------------------------------------ what

    def require(self, principal: Principal, resource: str | tuple[str, ...], permission: Permission) -> None:
        """Raises PermissionDenied unless ``principal`` has ``permission`` on ``resource`` (on one of them,
        for a tuple of resources that each open the same thing)."""
        resources = (resource,) if isinstance(resource, str) else resource
        if not any(principal.acl.allows(each, permission) for each in resources):
            raise PermissionDenied(f"{principal.user} may not {'change' if permission == UPDATE else 'read'} "
                                   f"{resources[0]}")

    def may_read(self, principal: Principal, resource: str) -> bool:
        return principal.acl.allows(resource, READ)

    # ------------------------------------------------------------------ tokens

    def stream_permission(self, principal: Principal, scope: str, stream: str) -> Permission:
        """The caller's permission on a stream's segments: the highest on any of ``stream_resources``."""
        return max(principal.acl.permission_on(resource) for resource in stream_resources(scope, stream))

    def token_for(self, principal: Principal, scope: str, stream: str) -> str:
        """A delegation token granting the caller's permission on the stream (READ at least: checked before)."""
        permission = self.stream_permission(principal, scope, stream)
        grant = Acl(((auth.stream_resource(scope, stream), permission),)) if permission else Acl()
        return auth.issue_token(self._key, principal.user, grant, int(self._clock()), self.token_ttl_seconds)

    def internal_token(self) -> str:
        """The controller's own token (every resource), renewed when half its life is gone."""
        now = int(self._clock())
        if self._internal is None or now >= self._internal[1]:
            token = auth.issue_token(self._key, INTERNAL_SUBJECT, auth.INTERNAL, now, self.token_ttl_seconds)
            self._internal = (token, now + self.token_ttl_seconds // 2)
        return self._internal[0]


# ---------------------------------------------------------------------- the rules of the gRPC methods


def _scope(request: Any) -> str:
    return auth.scope_resource(request.scope)


def _scope_of(field: str) -> Callable[[Any], str]:
    return lambda request: auth.scope_resource(getattr(request, field).scope)


def stream_resources(scope: str, stream: str) -> tuple[str, ...]:
    """The resources whose permission opens a stream's segments: the stream's; for a ``<name>_kvtable``
    table segment also reader group ``<name>`` (``_RG<name>`` holds the SDK's group state) and key-value
    table ``<name>``."""
    if not stream.endswith(naming.TABLE_SUFFIX):
        return (auth.stream_resource(scope, stream),)
    name = stream[:-len(naming.TABLE_SUFFIX)]
    group = name.removeprefix(GROUP_STATE_PREFIX) or name
    return (auth.stream_resource(scope, stream), auth.reader_group_resource(scope, group),
            auth.table_resource(scope, name))


def _stream(request: Any) -> str:
    return auth.stream_resource(request.scope, request.stream)


def _segments(request: Any) -> tuple[str, ...]:
    return stream_resources(request.scope, request.stream)


def _stream_of(*path: str) -> Callable[[Any], str]:
    """The stream resource of the StreamInfo at ``path`` (field names) in the request."""
    def resource(request: Any) -> str:
        info = request
        for field in path:
            info = getattr(info, field)
        return auth.stream_resource(info.scope, info.stream)
    return resource


def _table(request: Any) -> str:
    return auth.table_resource(request.scope, request.kvtName)


def _root(request: Any) -> str:
    return auth.ROOT


def _group(request: Any) -> str:
    return auth.reader_group_resource(request.scope, request.readerGroupName)


def _group_info(request: Any) -> str:
    return auth.reader_group_resource(request.scope, request.readerGroup)


RPC_RULES: dict[str, tuple[Callable[[Any], str | tuple[str, ...]], Permission]] = {
    "getControllerServerList": (_root, Permission.NONE),
    "getControllerToBucketMapping": (_root, READ),
    "createScope": (_root, UPDATE),
    "listScopes": (_root, Permission.NONE),  # listed: only the scopes the caller may read
    "checkScopeExists": (_scope, READ),
    "deleteScope": (_scope, UPDATE),
    "deleteScopeRecursive": (_scope, UPDATE),
    "listStreamsInScope": (_scope_of("scope"), READ),
    "listStreamsInScopeForTag": (_scope_of("scope"), READ),
    "listKeyValueTablesInScope": (_scope_of("scope"), READ),
    "createStream": (_stream_of("streamInfo"), UPDATE),
    "updateStream": (_stream_of("streamInfo"), UPDATE),
    "truncateStream": (_stream_of("streamInfo"), UPDATE),
    "sealStream": (_stream, UPDATE),
    "deleteStream": (_stream, UPDATE),
    "getStreamConfiguration": (_stream, READ),
    "checkStreamExists": (_stream, READ),
    "getCurrentSegments": (_stream, READ),
    "getEpochSegments": (_stream_of("streamInfo"), READ),
    "getSegments": (_stream_of("streamInfo"), READ),
    "getSegmentsImmediatlyFollowing": (_stream_of("streamInfo"), READ),
    "getSegmentsImmediatelyFollowing": (_stream_of("streamInfo"), READ),
    "getSegmentsBetween": (_stream_of("streamInfo"), READ),
    "isSegmentValid": (_stream_of("streamInfo"), READ),
    "isStreamCutValid": (_stream_of("streamInfo"), READ),
    "getURI": (lambda request: _segments(request.streamInfo), READ),
    "scale": (_stream_of("streamInfo"), UPDATE),
    "checkScale": (_stream_of("streamInfo"), READ),
    "getDelegationToken": (_segments, READ),
    "createTransaction": (_stream_of("streamInfo"), UPDATE),
    "commitTransaction": (_stream_of("streamInfo"), UPDATE),
    "abortTransaction": (_stream_of("streamInfo"), UPDATE),
    "pingTransaction": (_stream_of("streamInfo"), UPDATE),
    "checkTransactionState": (_stream_of("streamInfo"), READ),
    "listCompletedTransactions": (_stream_of("streamInfo"), READ),
    "noteTimestampFromWriter": (_stream_of("position", "streamInfo"), UPDATE),
    "removeWriter": (_stream_of("stream"), UPDATE),
    "listSubscribers": (_stream, READ),
    "updateSubscriberStreamCut": (_stream_of("streamCut", "streamInfo"), UPDATE),  # as Java: READ_UPDATE
    "createReaderGroup": (_group, UPDATE),
    "updateReaderGroup": (_group, UPDATE),
    "getReaderGroupConfig": (_group_info, READ),
    "deleteReaderGroup": (_group_info, UPDATE),
    "createKeyValueTable": (_table, UPDATE),
    "deleteKeyValueTable": (_table, UPDATE),
    "getKeyValueTableConfiguration": (_table, READ),
    "getCurrentSegmentsKeyValueTable": (_table, READ),
}


def check_rpc(security: Security, rpc: str, request: Any, authorization: str | None) -> Principal:
    """Authenticates the caller and authorizes ``rpc`` on ``request``. Raises Unauthenticated or
    PermissionDenied (a method with no rule needs READ_UPDATE on every resource)."""
    principal = security.authenticate(authorization)
    resource_of, permission = RPC_RULES.get(rpc, (lambda _request: "prn::*", UPDATE))
    if permission != Permission.NONE:
        security.require(principal, resource_of(request), permission)
    return principal


def readable(security: Security, principal: Principal, resources: Iterable[tuple[str, str]]) -> list[str]:
    """The names of (name, resource) pairs the caller may read (for listings)."""
    return [name for name, resource in resources if security.may_read(principal, resource)]
