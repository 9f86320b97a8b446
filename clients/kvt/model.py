"""The values of a key-value table: keys (primary + secondary), versions, and entries."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from wire.constants import NOT_EXISTS

from ..errors import InvalidArgument

NO_SEGMENT = -1
"""The segment id of versions that belong to no partition (:attr:`Version.NOT_EXISTS`)."""


def as_bytes(value: object, what: str) -> bytes:
    """``value`` as bytes (bytes, bytearray and memoryview are taken); InvalidArgument for anything else."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidArgument(f"{what} must be bytes, not {type(value).__name__}")


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class TableKey:
    """A key of a key-value table: a primary key and, in tables that have them, a secondary key.

    Keys that share a primary key form a *key family*: they live in the same partition, can be
    updated together atomically and iterated together. Every primary key of a table has the same
    length, and so does every secondary key (``b""`` in a table without secondary keys); see
    :class:`~controller_api.key_value_tables.KeyValueTableConfiguration`. Keys compare as their bytes do
    (primary first), the order iteration returns them in.
    """

    primary: bytes
    secondary: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "primary", as_bytes(self.primary, "a primary key"))
        object.__setattr__(self, "secondary", as_bytes(self.secondary, "a secondary key"))


@dataclasses.dataclass(frozen=True, slots=True)
class Version:
    """The version of a key in a key-value table: where its last update is in its partition.

    Treat it as opaque: get it from a read or an update and hand it back to a conditional update
    (``replace``, :class:`~clients.kvt.modifications.Put`, :class:`~clients.kvt.modifications.Remove`).
    A version belongs to one partition; given for a key of another partition it never matches.
    ``Version.NOT_EXISTS`` is the condition "the key must not exist". ``as_text()`` and
    ``Version.from_text`` turn a version into a string and back, to keep it elsewhere.
    """

    segment_id: int
    segment_version: int

    NOT_EXISTS: ClassVar[Version]

    def as_text(self) -> str:
        return f"{self.segment_id}:{self.segment_version}"

    @classmethod
    def from_text(cls, text: str) -> Version:
        """The version ``as_text()`` gave. Raises InvalidArgument for any other text."""
        segment_id, colon, segment_version = text.partition(":")
        try:
            if colon:
                return cls(int(segment_id), int(segment_version))
        except ValueError:
            pass
        raise InvalidArgument(f"{text!r} is not a key-value table version")


Version.NOT_EXISTS = Version(NO_SEGMENT, NOT_EXISTS)


@dataclasses.dataclass(frozen=True, slots=True)
class TableEntry:
    """A key, its value, and the key's current version."""

    key: TableKey
    value: bytes
    version: Version


__all__ = ["TableEntry", "TableKey", "Version"]
