"""Administrative commands (Java serves them on its admin port; Tributary on the data port)."""

from ..base import Reply, Request, command
from ..fields import I32, I64, CompositeField, ListOf, Utf
from .composites import ChunkInfo


@command(-3, "container_id" / I32, "delegation_token" / Utf, "request_id" / I64)
class FlushToStorage(Request):
    """Flushes everything a container holds to Tier-2."""


@command(-4, "request_id" / I64)
class StorageFlushed(Reply):
    """FlushToStorage completed."""


@command(-5, "segment" / Utf, "delegation_token" / Utf, "request_id" / I64)
class ListStorageChunks(Request):
    """Lists the Tier-2 chunks of a segment."""


@command(-6, "request_id" / I64, "chunks" / ListOf(CompositeField(ChunkInfo)))
class StorageChunksListed(Reply):
    """The chunks of a segment, in offset order."""
