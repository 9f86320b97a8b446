"""Where SLTS keeps segment and chunk metadata records (design §5.3).

The store is a versioned key -> value map with atomic, conditional multi-key
writes. In the segment store it is the container's storage metadata table
segment (``server/containers/storage_metadata.py``): every commit is one table
update logged in Tier-1, so SLTS metadata is fenced exactly as Tier-1 is, and a
zombie owner can never commit. ``InMemoryMetadataStore`` is the same contract
in a dict, for SLTS unit tests.

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


class InMemoryMetadataStore(MetadataStore):
    """The contract in a dict, with knobs for tests: ``fenced = True`` makes every later write raise
    StorageFenced; ``fail_writes = n`` makes the next n writes raise MetadataStoreUnavailable (writing
    nothing); ``gets`` counts the calls of ``get``."""

    def __init__(self) -> None:
        self._entries: dict[str, Versioned] = {}
        self._next_version = 0
        self.fenced = False
        self.fail_writes = 0
        self.gets = 0

    async def get(self, key: str) -> Versioned | None:
        self.gets += 1
        return self._entries.get(key)

    async def write(self, writes: Iterable[Write]) -> dict[str, int]:
        writes = list(writes)
        if self.fail_writes:
            self.fail_writes -= 1
            raise MetadataStoreUnavailable("injected: the metadata store is unavailable")
        if self.fenced:
            raise StorageFenced("this metadata store was fenced by a newer owner")
        for key, _, expected in writes:
            current = self._entries.get(key)
            if expected is None:
                continue
            if expected == NOT_EXISTS:
                if current is not None:
                    raise VersionMismatch(f"{key} exists")
            elif current is None or current.version != expected:
                raise VersionMismatch(f"{key} is at {current and current.version}, expected {expected}")
        versions = {}
        for key, value, _ in writes:
            if value is None:
                self._entries.pop(key, None)
            else:
                self._next_version += 1
                self._entries[key] = Versioned(bytes(value), self._next_version)
                versions[key] = self._next_version
        return versions

    async def keys(self) -> list[str]:
        return sorted(self._entries)
