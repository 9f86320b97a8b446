"""How a key-value table's keys and values are laid out in its table segments, checked on the client.

A key is stored as its primary key's bytes followed by its secondary key's bytes, so every key of a
table has the same length (the partitions are fixed-key-length table segments, which refuse other
lengths) and the segment's key order is the order of (primary, secondary). Every length is checked
here, before anything is sent, so a bad key raises :class:`InvalidArgument` saying what is wrong.
"""

from __future__ import annotations

from controller_api.key_value_tables import KeyValueTableConfiguration
from wire.constants import MAX_TABLE_VALUE_LENGTH

from ..errors import InvalidArgument
from .model import TableKey, as_bytes


class KeyLayout:
    """Keys <-> segment keys, and the length rules of one table."""

    __slots__ = ("primary_length", "secondary_length")

    def __init__(self, config: KeyValueTableConfiguration):
        self.primary_length = config.primary_key_length
        self.secondary_length = config.secondary_key_length

    def key_bytes(self, key: TableKey) -> bytes:
        """The segment key of ``key``. Raises InvalidArgument for a key of the wrong shape."""
        if not isinstance(key, TableKey):
            raise InvalidArgument(f"expected a TableKey, not {type(key).__name__}")
        return self.primary(key.primary) + self.secondary(key.secondary)

    def key_of(self, segment_key: bytes) -> TableKey:
        """The TableKey a segment key stands for."""
        return TableKey(segment_key[:self.primary_length], segment_key[self.primary_length:])

    def primary(self, primary: object, what: str = "primary key") -> bytes:
        """``primary`` as bytes, if it has the table's primary key length."""
        data = as_bytes(primary, f"a {what}")
        if len(data) != self.primary_length:
            raise InvalidArgument(f"a {what} of this table is {self.primary_length} bytes long, not {len(data)}")
        return data

    def secondary(self, secondary: object, what: str = "secondary key") -> bytes:
        """``secondary`` as bytes, if it has the table's secondary key length (b"" when it has none)."""
        data = as_bytes(secondary, f"a {what}")
        if len(data) != self.secondary_length:
            if not self.secondary_length:
                raise InvalidArgument(f"this table has no secondary keys (got a {what} of {len(data)} bytes)")
            raise InvalidArgument(f"a {what} of this table is {self.secondary_length} bytes long, not {len(data)}")
        return data

    @staticmethod
    def prefix(prefix: object, length: int, what: str) -> bytes:
        """``prefix`` as bytes, if it is at most ``length`` bytes long."""
        data = as_bytes(prefix, f"a {what}")
        if len(data) > length:
            raise InvalidArgument(f"a {what} of this table is at most {length} bytes long, not {len(data)}")
        return data

    @staticmethod
    def value(value: object) -> bytes:
        """``value`` as bytes, if it is at most ``MAX_TABLE_VALUE_LENGTH`` bytes long."""
        data = as_bytes(value, "a value")
        if len(data) > MAX_TABLE_VALUE_LENGTH:
            raise InvalidArgument(f"a value is at most {MAX_TABLE_VALUE_LENGTH} bytes long, not {len(data)}")
        return data


__all__ = ["KeyLayout"]
