"""The one storage interface of the controller's metadata: versioned tables with optimistic concurrency.

Model. A store holds named *tables*; a table maps string keys to byte values. Every write gives
the key a new *version* (an integer >= 0, larger than any version the key had before; for table
segments it is the entry's segment offset). A write can name the version it expects the key to
have, so read-modify-write cycles detect lost races instead of overwriting them:

    ANY     (None) unconditional;
    ABSENT  (-1)   the key must not exist (create);
    v >= 0         the key must currently have version v (compare-and-swap).

``write_batch`` applies several writes to *one* table atomically: all of them or none. This is
what table segments give (one update batch is one append), and the PDP-32 record layout relies
on it to commit an epoch, its history entries and its sealed-epoch records together.

Every abstract method below is one round trip to the backing store, which is what the
scalability tests count; the convenience methods on the base class each call exactly one of them.

Failures raise ``errors.NotFound`` (missing table, or a versioned write to a missing key),
``errors.AlreadyExists`` (ABSENT expected, key present), ``errors.WriteConflict`` (version
mismatch) and ``errors.RecordTooLarge`` (key or value over the table-entry limits).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import NamedTuple

from .errors import AlreadyExists, NotFound, RecordTooLarge, WriteConflict

ANY: None = None
ABSENT = -1
KEY_BYTES_MAX = 8192  # table-segment limits, enforced by both implementations
VALUE_BYTES_MAX = 1024 * 1024 - 8192
PAGE_ENTRIES_DEFAULT = 1000


class Versioned(NamedTuple):
    """A value and the version it was written with."""

    version: int
    value: bytes


class Write(NamedTuple):
    """One entry of a write batch: the new value of ``key`` if it has version ``expected``."""

    key: str
    value: bytes
    expected: int | None = ANY


class Page(NamedTuple):
    """One page of a table listing and the token that resumes after it (empty once exhausted)."""

    entries: list[tuple[str, Versioned]]
    token: bytes


class VersionedKeyValueStore(abc.ABC):
    """Versioned tables with optimistic concurrency; see the module docstring for the model."""

    # ------------------------------------------------------------------ primitives (one call each)

    @abc.abstractmethod
    async def create_table(self, table: str) -> bool:
        """Creates an empty table. Returns False if it already existed."""

    @abc.abstractmethod
    async def delete_table(self, table: str) -> bool:
        """Deletes a table and all its entries. Returns False if it did not exist."""

    @abc.abstractmethod
    async def get_many(self, table: str, keys: Sequence[str]) -> list[Versioned | None]:
        """The current value of each key (None where absent), in the order asked.

        Raises:
            NotFound: the table does not exist.
        """

    @abc.abstractmethod
    async def write_batch(self, table: str, writes: Sequence[Write]) -> list[int]:
        """Applies all writes atomically, or none. Returns the new version of each key.

        Raises:
            NotFound: the table is missing, or a write expects a version of a missing key.
            AlreadyExists: a write expects ABSENT and the key exists.
            WriteConflict: a write expects a version the key does not have.
            RecordTooLarge: a key or value is over the limits.
        """

    @abc.abstractmethod
    async def remove_batch(self, table: str, keys: Sequence[tuple[str, int | None]]) -> None:
        """Removes (key, expected version) pairs atomically. Removing an absent key with ANY is a no-op.

        Raises:
            NotFound: the table is missing, or a versioned removal names a missing key.
            WriteConflict: a key has another version than expected.
        """

    @abc.abstractmethod
    async def list_entries(self, table: str, token: bytes = b"", limit: int = PAGE_ENTRIES_DEFAULT) -> Page:
        """Up to ``limit`` entries after ``token`` (b"" starts over), in an order fixed per table.

        An exhausted listing returns an empty page with an empty token. Entries written or removed
        during a listing may or may not appear, but no entry is returned twice.

        Raises:
            NotFound: the table does not exist.
            ValueError: ``token`` is not a token of this table's listing.
        """

    # ------------------------------------------------------------------ conveniences

    async def get(self, table: str, key: str) -> Versioned:
        """The value of ``key``. Raises NotFound if the key (or table) is missing."""
        (found,) = await self.get_many(table, [key])
        if found is None:
            raise NotFound(f"no key {key!r} in {table!r}", table, key)
        return found

    async def create(self, table: str, key: str, value: bytes) -> int:
        """Writes a new key. Returns its version. Raises AlreadyExists if the key exists."""
        (version,) = await self.write_batch(table, [Write(key, value, ABSENT)])
        return version

    async def replace(self, table: str, key: str, value: bytes, expected: int) -> int:
        """Compare-and-swap. Returns the new version. Raises NotFound or WriteConflict."""
        (version,) = await self.write_batch(table, [Write(key, value, expected)])
        return version

    async def put(self, table: str, key: str, value: bytes) -> int:
        """Unconditional write. Returns the new version."""
        (version,) = await self.write_batch(table, [Write(key, value, ANY)])
        return version

    async def remove(self, table: str, key: str, expected: int | None = ANY) -> None:
        """Removes one key (see ``remove_batch``)."""
        await self.remove_batch(table, [(key, expected)])


# ---------------------------------------------------------------------- shared checks


def encode_key(key: str) -> bytes:
    """A key's bytes on the wire. Raises RecordTooLarge beyond the table-segment key limit."""
    data = key.encode("utf-8")
    if not 1 <= len(data) <= KEY_BYTES_MAX:
        raise RecordTooLarge(f"keys are 1..{KEY_BYTES_MAX} bytes, got {len(data)}", key=key[:100])
    return data


def check_writes(table: str, writes: Sequence[Write]) -> None:
    """Programmer errors in a batch (duplicate keys, bad expectations) and over-limit entries."""
    if len({write.key for write in writes}) != len(writes):
        raise ValueError(f"a write batch on {table!r} names a key twice")
    for write in writes:
        encode_key(write.key)
        if len(write.value) > VALUE_BYTES_MAX:
            raise RecordTooLarge(f"values are at most {VALUE_BYTES_MAX} bytes, got {len(write.value)}",
                                 table, write.key)
        if write.expected is not None and write.expected < ABSENT:
            raise ValueError(f"expected version {write.expected} of {write.key!r} is not ANY, ABSENT or >= 0")


def check_removals(keys: Sequence[tuple[str, int | None]]) -> None:
    """Programmer errors in a removal batch (expecting ABSENT) and over-limit keys."""
    if any(expected == ABSENT for _, expected in keys):
        raise ValueError("a removal cannot expect the key to be absent")
    for key, _ in keys:
        encode_key(key)


def conflict_for(table: str, expectations: Sequence[tuple[str, int | None]],
                 current: Sequence[Versioned | None]) -> Exception | None:
    """The error a conditional batch deserves given the keys' current versions, or None if it holds.

    Both implementations use this so that they agree on which error wins: a versioned write to a
    missing key (NotFound) before a create of an existing key (AlreadyExists) before a mismatch.
    """
    missing = [key for (key, expected), found in zip(expectations, current, strict=True)
               if found is None and expected is not None and expected >= 0]
    if missing:
        return NotFound(f"key {missing[0]!r} of {table!r} does not exist", table, missing[0])
    existing = [key for (key, expected), found in zip(expectations, current, strict=True)
                if found is not None and expected == ABSENT]
    if existing:
        return AlreadyExists(f"key {existing[0]!r} of {table!r} already exists", table, existing[0])
    mismatched = [key for (key, expected), found in zip(expectations, current, strict=True)
                  if found is not None and expected is not None and expected >= 0 and found.version != expected]
    if mismatched:
        return WriteConflict(f"key {mismatched[0]!r} of {table!r} has another version", table, mismatched[0])
    return None
