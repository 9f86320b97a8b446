"""Authorization conventions shared by the controller and the segment store (docs/security.md), sans-IO.

*Resources* are named as Pravega names them (``prn::/``, ``prn::/scope:S``,
``prn::/scope:S/stream:T``, ``.../reader-group:G``, ``.../key-value-table:K``); a segment belongs to
the stream resource of its scope and stream (a table segment ``S/X_kvtable/n`` to the stream
``X_kvtable``). *Permissions* are ``READ`` and ``READ_UPDATE`` (which includes READ). An *ACL* is a
list of (resource pattern, permission) entries, ``*`` matching any run of characters, written
``pattern,PERMISSION;pattern,PERMISSION`` (e.g. ``prn::/scope:sensors,READ_UPDATE;prn::/scope:sensors/*,READ``).

*Delegation tokens* are JSON Web Tokens (HS512) the controller signs and segment stores verify with
a key both are given: the claims name the subject, the audience ``segmentstore``, the expiry (``exp``,
seconds) and one claim per ACL entry (``"<pattern>": "<PERMISSION>"``), as Pravega's tokens do. The
Rust client reads ``exp`` out of the token's body with a plain (not URL-safe, padded) base64 decoder,
so the body is made to encode without ``-``, ``_`` or padding: ASCII JSON, the characters that would
encode to them written as ``\\u`` escapes, and a filler claim ``pad`` that makes its length a multiple
of three.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import re
from collections.abc import Iterable, Mapping

import jwt

from . import naming
from .watermark import MARK_STREAM_PREFIX

ROOT = "prn::/"
AUDIENCE = "segmentstore"
ALGORITHM = "HS512"


class Permission(enum.IntEnum):
    NONE = 0
    READ = 1
    READ_UPDATE = 2


def scope_resource(scope: str) -> str:
    return f"prn::/scope:{scope}"


def stream_resource(scope: str, stream: str) -> str:
    """A stream's resource; a mark stream (``_MARK<stream>``) is its stream's, as in Java, so whoever may
    read a stream may read its watermarks."""
    if stream.startswith(MARK_STREAM_PREFIX) and len(stream) > len(MARK_STREAM_PREFIX):
        stream = stream[len(MARK_STREAM_PREFIX):]
    return f"prn::/scope:{scope}/stream:{stream}"


def reader_group_resource(scope: str, group: str) -> str:
    return f"prn::/scope:{scope}/reader-group:{group}"


def table_resource(scope: str, table: str) -> str:
    return f"prn::/scope:{scope}/key-value-table:{table}"


def segment_resource(segment: str) -> str:
    """The stream resource a segment (stream, transaction, transient or table segment) belongs to."""
    primary = naming.primary_segment_name(segment)
    parts = primary.split("/")
    if len(parts) >= 2:
        return stream_resource(parts[0], parts[1])
    return f"prn::/segment:{primary}"


class InvalidAcl(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Acl:
    """(resource pattern, permission) entries; the permission on a resource is the highest that matches."""

    entries: tuple[tuple[str, Permission], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Acl:
        """``pattern,PERMISSION;...`` (empty entries ignored). Raises InvalidAcl."""
        entries = []
        for item in text.split(";"):
            item = item.strip()
            if not item:
                continue
            pattern, comma, permission = item.rpartition(",")
            if not comma or not pattern.startswith("prn::"):
                raise InvalidAcl(f"ACL entry {item!r} is not prn::<resource>,<READ|READ_UPDATE>")
            try:
                entries.append((pattern.strip(), Permission[permission.strip().upper()]))
            except KeyError:
                raise InvalidAcl(f"unknown permission {permission!r} (READ or READ_UPDATE)") from None
        return cls(tuple(entries))

    def text(self) -> str:
        return ";".join(f"{pattern},{permission.name}" for pattern, permission in self.entries)

    def permission_on(self, resource: str) -> Permission:
        return max((permission for pattern, permission in self.entries if matches(resource, pattern)),
                   default=Permission.NONE)

    def allows(self, resource: str, needed: Permission) -> bool:
        return self.permission_on(resource) >= needed

    def scoped_to(self, resources: Iterable[str]) -> Acl:
        """The entries that grant something on one of ``resources`` (what a token for them needs)."""
        wanted = list(resources)
        return Acl(tuple((pattern, permission) for pattern, permission in self.entries
                         if any(matches(resource, pattern) for resource in wanted)))


@functools.lru_cache(maxsize=4096)
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(map(re.escape, pattern.split("*"))), re.DOTALL)


def matches(resource: str, pattern: str) -> bool:
    """Whether an ACL ``pattern`` covers ``resource``: ``*`` matches any run of characters, and every other
    character only itself (``?`` and ``[...]`` are not wildcards, as they would be in fnmatch)."""
    return _pattern(pattern).fullmatch(resource) is not None


INTERNAL = Acl((("prn::*", Permission.READ_UPDATE),))  # the controller's own calls to segment stores


class TokenRejected(Exception):
    """A delegation token that is missing, forged, for another audience, or ``expired``."""

    def __init__(self, message: str, expired: bool = False):
        super().__init__(message)
        self.expired = expired


def issue_token(key: bytes, subject: str, acl: Acl, now: int, ttl_seconds: int) -> str:
    """A signed delegation token granting ``acl`` until ``now + ttl_seconds`` (seconds since the epoch)."""
    claims: dict[str, object] = {"sub": subject, "aud": AUDIENCE, "iat": now, "exp": now + ttl_seconds}
    claims.update({pattern: permission.name for pattern, permission in acl.entries})
    return jwt.api_jws.encode(_plain_base64_body(claims), key, algorithm=ALGORITHM)


# ASCII bytes whose low six bits are 62 or 63 encode to "-"/"_" (URL-safe) and "+"/"/" (standard) when
# they end a 3-byte group; JSON lets a string spell them as \u escapes instead (they occur only in strings).
_ALPHABET_SENSITIVE = {ord(c): f"\\u{ord(c):04x}" for c in ">?~\x7f"}


def _plain_base64_body(claims: dict[str, object]) -> bytes:
    """JSON for ``claims`` (ASCII, with a ``pad`` claim) whose base64 is the same in both alphabets, unpadded."""
    text = json.dumps({**claims, "pad": ""}, separators=(",", ":")).translate(_ALPHABET_SENSITIVE)
    filler = -len(text) % 3
    return (text[:-2] + "x" * filler + text[-2:]).encode()  # grows the empty "pad" value before '"}'


def decode_token(key: bytes, token: str) -> tuple[Acl, int]:
    """The ACL a token grants and its expiry (seconds), if ``key`` signed it. Raises TokenRejected."""
    if not token:
        raise TokenRejected("no delegation token")
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], audience=AUDIENCE,
                            options={"verify_exp": False, "verify_iat": False, "require": ["exp", "sub"]})
    except jwt.InvalidTokenError as error:
        raise TokenRejected(f"invalid delegation token: {error}") from None
    return acl_of_claims(claims), int(claims["exp"])


def check_expiry(expiry: int, now: int) -> None:
    """Raises TokenRejected (expired) if a token expiring at ``expiry`` is no longer valid at ``now``."""
    if expiry <= now:
        raise TokenRejected("the delegation token expired", expired=True)


def verify_token(key: bytes, token: str, now: int) -> Acl:
    """The ACL a token grants. Raises TokenRejected."""
    acl, expiry = decode_token(key, token)
    check_expiry(expiry, now)
    return acl


def acl_of_claims(claims: Mapping[str, object]) -> Acl:
    entries = []
    for name, value in claims.items():
        if name.startswith("prn::") and isinstance(value, str) and value in Permission.__members__:
            entries.append((name, Permission[value]))
    return Acl(tuple(entries))
