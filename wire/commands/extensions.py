"""Tributary's own commands, with type codes no Pravega version uses.

MergeSegmentsWithHeader (type code 1000) implements PDP-43's "merge with
header": in one atomic operation the server appends ``header`` to ``target``
and then merges ``source`` after it. A large event is written to a transient
segment as raw payload; merging it with its envelope header as ``header``
makes it one ordinary event in the target. It is answered by SegmentsMerged
(``new_target_write_offset`` = target length after header and source) and
fails like MergeSegments. Pravega clients never send it; Tributary's SDK does.

Layout: ``requestId:i64, target:utf, source:utf, header:bytes, delegationToken:utf``.
"""

from __future__ import annotations

from ..base import Request, command
from ..fields import I64, Buffer, BytesLike, Utf

TRIBUTARY_TYPE_CODE_BASE = 1000
"""Tributary extension codes start here, far above Pravega's range (-127..100)."""


@command(
    TRIBUTARY_TYPE_CODE_BASE,
    "request_id" / I64,
    "target" / Utf,
    "source" / Utf,
    "header" / Buffer,
    "delegation_token" / Utf,
)
class MergeSegmentsWithHeader(Request):
    """Appends ``header`` to ``target`` and merges ``source`` after it, atomically (PDP-43)."""

    request_id: int
    target: str
    source: str
    header: BytesLike
    delegation_token: str
