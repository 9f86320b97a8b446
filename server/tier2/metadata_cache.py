"""The write-through cache of committed SLTS records in front of the MetadataStore (design §5.3).

Every entry is a committed record (or the knowledge that the key is absent) together with the
store version it was read or written at; transactions take their snapshot from here and name
those versions in their conditional commit. The cache holds only what this instance read or
committed itself, so it equals the committed state unless another owner changed the store. If
one did, our next commit of such a key fails with VersionMismatch, and the keys of a failed
commit are dropped from the cache: the retry reads the store again (and then, typically, finds
a newer owner epoch and raises StorageNotPrimary).

Reads that miss go to the store. A commit that lands while such a read is in flight makes the
read's result stale, so the read does not enter it into the cache (``_fetches`` holds a token
per key being fetched; a commit or invalidation withdraws it). The least recently used entries
are dropped beyond ``records_max``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from . import records
from .metadata_store import NOT_EXISTS, MetadataStore, Write
from .records import Record


class Entry(NamedTuple):
    record: Record | None  # None: the key is absent
    version: int  # the store's version of the key; NOT_EXISTS when absent


class MetadataCache:
    def __init__(self, store: MetadataStore, records_max: int):
        self._store = store
        self._records_max = records_max
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        self._fetches: dict[str, object] = {}

    async def get(self, key: str) -> Entry:
        """The committed record of ``key`` (from the cache, else from the store)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        token = self._fetches[key] = object()
        versioned = await self._store.get(key)
        current = self._fetches.get(key) is token
        if current:
            del self._fetches[key]
        entry = Entry(None, NOT_EXISTS) if versioned is None else Entry(records.decode(versioned.value),
                                                                        versioned.version)
        if current:
            self._remember(key, entry)
        return entry

    async def commit(self, changes: Mapping[str, tuple[Record | None, int]]) -> None:
        """Writes ``key -> (after-image or None to remove, expected version)`` atomically.

        Raises VersionMismatch, StorageFenced, MetadataStoreUnavailable (the write may or may
        not have happened: the caller invalidates the keys).
        """
        writes = [Write(key, None if record is None else records.encode(record), expected)
                  for key, (record, expected) in changes.items()]
        versions = await self._store.write(writes)
        for key, (record, _) in changes.items():
            self._fetches.pop(key, None)
            self._remember(key, Entry(None, NOT_EXISTS) if record is None else Entry(record, versions[key]))

    def invalidate(self, keys: Iterable[str]) -> None:
        """Forgets ``keys``: their next read goes to the store."""
        for key in keys:
            self._entries.pop(key, None)
            self._fetches.pop(key, None)

    def _remember(self, key: str, entry: Entry) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._records_max:
            self._entries.popitem(last=False)
