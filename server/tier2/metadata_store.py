"""Where SLTS keeps segment and chunk metadata records (design §5.3).

The store is a versioned key -> value map with atomic, conditional multi-key
writes. In the segment store it is the container's storage metadata table
segment (``server/containers/storage_metadata.py``): every commit is one table
update logged in Tier-1, so SLTS metadata is fenced exactly as Tier-1 is, and a
zombie owner can never commit. The SLTS unit tests use an in-memory one
(``tests/support/doubles/slts_metadata.py``).

Versions are opaque integers chosen by the store. A write names, for each key,
the version it expects: ``NOT_EXISTS`` (the key must be absent), a version read
earlier, or ``None`` (unconditional). Either every key is written or none is.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import NamedTuple

NOT_EXISTS = -1  # expected version of a key that must be absent


class MetadataStoreError(Exception):
    pass


class VersionMismatch(MetadataStoreError):
    """A conditional write found a key at another version than expected; nothing was written."""


class StorageFenced(MetadataStoreError):
    """This owner can no longer write metadata: a newer owner took the container (Tier-1 fenced it)."""


class MetadataStoreUnavailable(MetadataStoreError):
    """The store cannot answer now (its container is stopping or recovering); retry later."""


class Versioned(NamedTuple):
    value: bytes
    version: int


class Write(NamedTuple):
    key: str
    value: bytes | None  # None removes the key
    expected_version: int | None  # None: unconditional; NOT_EXISTS: must be absent


class MetadataStore(abc.ABC):
    @abc.abstractmethod
    async def get(self, key: str) -> Versioned | None:
        """The key's value and version, or None if absent."""

    @abc.abstractmethod
    async def write(self, writes: Iterable[Write]) -> dict[str, int]:
        """Writes all or nothing; returns the new version of every written (not removed) key.

        Raises VersionMismatch, StorageFenced, MetadataStoreUnavailable.
        """

    @abc.abstractmethod
    async def keys(self) -> list[str]:
        """Every key present (for tools, sweeps and tests; may be slow)."""

