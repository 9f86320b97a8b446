"""Nested structures carried inside commands (protocol reference §1.5)."""

from __future__ import annotations

from uuid import UUID

from ..base import WireValue, composite
from ..constants import MAX_TABLE_KEY_LENGTH
from ..fields import I8, I64, Bool, Buffer, BytesLike, PayloadSize, Utf, Uuid


def _check_key(value: TableKey | TableEntry) -> None:
    if not 1 <= len(value.key) <= MAX_TABLE_KEY_LENGTH:
        # Java omits the version of an empty key while Rust always writes it, so an
        # empty key cannot be sent unambiguously; nor may a key exceed the table limit.
        raise ValueError(f"table keys are 1..{MAX_TABLE_KEY_LENGTH} bytes, got {len(value.key)}")


@composite(
    "payload_size" / PayloadSize(2, lambda ctx: 4 + len(ctx.key) + 8),
    "key" / Buffer,
    "version" / I64,
    check=_check_key,
)
class TableKey(WireValue):
    """A table key with its version (NO_VERSION, NOT_EXISTS or a byte offset)."""

    key: BytesLike
    version: int


@composite(
    "key_payload_size" / PayloadSize(2, lambda ctx: 4 + len(ctx.key) + 8),
    "key" / Buffer,
    "version" / I64,
    "value_payload_size" / PayloadSize(1, lambda ctx: 4 + len(ctx.value)),
    "value" / Buffer,
    check=_check_key,
)
class TableEntry(WireValue):
    """One element of TableEntries: a TableKey followed by its TableValue."""

    key: BytesLike
    version: int
    value: BytesLike


@composite(
    "attribute_id" / Uuid,
    "update_type" / I8,
    "new_value" / I64,
    "old_value" / I64,
)
class ConditionalAttributeUpdate(WireValue):
    """An attribute update applied to a merge target (types: 1 Replace, 4 ReplaceIfEquals, ...)."""

    attribute_id: UUID
    update_type: int
    new_value: int
    old_value: int

    NONE = 0
    REPLACE = 1
    REPLACE_IF_GREATER = 2
    ACCUMULATE = 3
    REPLACE_IF_EQUALS = 4


@composite(
    "length_in_metadata" / I64,
    "length_in_storage" / I64,
    "start_offset" / I64,
    "chunk_name" / Utf,
    "exists_in_storage" / Bool,
)
class ChunkInfo(WireValue):
    """One Tier-2 chunk of a segment, as listed by ListStorageChunks."""

    length_in_metadata: int
    length_in_storage: int
    start_offset: int
    chunk_name: str
    exists_in_storage: bool


@composite(
    "source" / Utf,
    "new_target_write_offset" / I64,
)
class MergedSource(WireValue):
    """One (source, target length after merging it) pair of SegmentsBatchMerged."""

    source: str
    new_target_write_offset: int
