"""An in-memory SLTS MetadataStore (``server/tier2/metadata_store.py``'s contract in a dict), for SLTS tests
and benchmarks, with knobs to fence it and to make writes fail."""

from __future__ import annotations

from collections.abc import Iterable

from server.tier2.metadata_store import (
    NOT_EXISTS,
    MetadataStore,
    MetadataStoreUnavailable,
    StorageFenced,
    Versioned,
    VersionMismatch,
    Write,
)


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
