"""Administrative commands (Java serves them on its admin port; Tributary on the data port)."""

from __future__ import annotations

from collections.abc import Sequence

from ..base import Reply, Request, command
from ..fields import I32, I64, CompositeField, ListOf, Utf
from .composites import ChunkInfo


@command(-3, "container_id" / I32, "delegation_token" / Utf, "request_id" / I64)
class FlushToStorage(Request):
    """Flushes everything a container holds to Tier-2."""

    container_id: int
    delegation_token: str
    request_id: int


@command(-4, "request_id" / I64)
class StorageFlushed(Reply):
    """FlushToStorage completed."""

    request_id: int


@command(-5, "segment" / Utf, "delegation_token" / Utf, "request_id" / I64)
class ListStorageChunks(Request):
    """Lists the Tier-2 chunks of a segment."""

    segment: str
    delegation_token: str
    request_id: int


@command(-6, "request_id" / I64, "chunks" / ListOf(CompositeField(ChunkInfo)))
class StorageChunksListed(Reply):
    """The chunks of a segment, in offset order."""

    request_id: int
    chunks: Sequence[ChunkInfo]
