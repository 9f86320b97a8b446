"""The segment store's side of authorization (docs/security.md): every request that names a segment carries
a delegation token the controller signed (``wire.auth``), and is served only if the token grants the
permission the request needs on the segment's stream.

READ for reads and queries, READ_UPDATE for everything that changes a segment or a table; the admin
requests (FlushToStorage, ListStorageChunks) need READ_UPDATE on every resource (the controller's own
token). Hello and KeepAlive need nothing, and appends are authorized once, by their SetupAppend.
A refusal is ``AuthTokenCheckFailed`` (code 1 when the token expired, so clients fetch a new one; 0
otherwise), and the connection stays open.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import wire
from wire import auth
from wire import commands as wc
from wire.auth import Permission

READ, UPDATE = Permission.READ, Permission.READ_UPDATE

# request type -> (the field naming its segment, the permission it needs); None: every resource (admin)
_NEEDS: dict[type, tuple[str | None, Permission]] = {
    wc.SetupAppend: ("segment", UPDATE),
    wc.ReadSegment: ("segment", READ),
    wc.GetStreamSegmentInfo: ("segment_name", READ),
    wc.GetSegmentAttribute: ("segment_name", READ),
    wc.LocateOffset: ("segment", READ),
    wc.CreateSegment: ("segment", UPDATE),
    wc.UpdateSegmentPolicy: ("segment", UPDATE),
    wc.SealSegment: ("segment", UPDATE),
    wc.TruncateSegment: ("segment", UPDATE),
    wc.DeleteSegment: ("segment", UPDATE),
    wc.UpdateSegmentAttribute: ("segment_name", UPDATE),
    wc.CreateTransientSegment: ("parent_segment", UPDATE),
    wc.MergeSegments: ("target", UPDATE),
    wc.MergeSegmentsWithHeader: ("target", UPDATE),
    wc.MergeSegmentsBatch: ("target_segment_id", UPDATE),
    wc.GetTableSegmentInfo: ("segment_name", READ),
    wc.CreateTableSegment: ("segment", UPDATE),
    wc.DeleteTableSegment: ("segment", UPDATE),
    wc.MergeTableSegments: ("target", UPDATE),
    wc.SealTableSegment: ("segment", UPDATE),
    wc.UpdateTableEntries: ("segment", UPDATE),
    wc.RemoveTableKeys: ("segment", UPDATE),
    wc.ReadTable: ("segment", READ),
    wc.ReadTableKeys: ("segment", READ),
    wc.ReadTableEntries: ("segment", READ),
    wc.ReadTableEntriesDelta: ("segment", READ),
    wc.FlushToStorage: (None, UPDATE),
    wc.ListStorageChunks: (None, UPDATE),
}


VERIFIED_TOKENS_MAX = 1024  # signature-checked tokens remembered (a reader sends the same one with every read)


class TokenChecker:
    """Checks the delegation token of each request (``key``: the signing key shared with the controller).

    Checking a signature costs ~40 us, so tokens whose signature checked out are remembered with
    their ACL and expiry (the expiry is still checked on every request); forged ones are not.
    """

    def __init__(self, key: bytes, clock: Callable[[], float] | None = None):
        self._key = key
        self._clock = clock or time.time  # looked up now: a patched clock (the simulation) counts
        self._verified: dict[str, tuple[auth.Acl, int]] = {}

    def _acl(self, token: str) -> auth.Acl:
        """The ACL of a valid, unexpired token. Raises TokenRejected."""
        found = self._verified.get(token)
        if found is None:
            found = auth.decode_token(self._key, token)
            if len(self._verified) >= VERIFIED_TOKENS_MAX:
                self._verified.clear()
            self._verified[token] = found
        auth.check_expiry(found[1], int(self._clock()))
        return found[0]

    def check(self, command: wire.Command) -> wc.AuthTokenCheckFailed | None:
        """None when ``command`` may be served; else the reply refusing it."""
        needed = _NEEDS.get(type(command))
        if needed is None:
            return None
        field, permission = needed
        request_id: int = command.request_id  # type: ignore[attr-defined]  # every checked request has one
        try:
            acl = self._acl(getattr(command, "delegation_token", ""))
        except auth.TokenRejected as error:
            failed = wc.AuthTokenCheckFailed
            return failed(request_id, str(error), failed.TOKEN_EXPIRED if error.expired else failed.TOKEN_CHECK_FAILED)
        resources = ["prn::*"] if field is None else _resources(getattr(command, field))
        if all(acl.allows(resource, permission) for resource in resources):
            return None
        return wc.AuthTokenCheckFailed(request_id, f"the token does not grant {permission.name} on "
                                       f"{', '.join(resources)}", wc.AuthTokenCheckFailed.TOKEN_CHECK_FAILED)


def _resources(segment: object) -> list[str]:
    """The stream resource of the segment a request names (a segment id names no resource: any will do)."""
    if isinstance(segment, str):
        return [auth.segment_resource(segment)]
    return ["prn::*"]
