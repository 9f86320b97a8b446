"""The Controller API's key-value-table value: a table's partition count and the fixed lengths of its keys.

The SDK exports it (``clients.kvt``), the controller's key-value-table service takes and returns it
and stores it (``controller.service.key_value_tables.KeyValueTableRecord``). The protobuf
conversions are in :mod:`controller_api.protobuf`.
"""

from __future__ import annotations

import dataclasses

from wire.constants import MAX_TABLE_KEY_LENGTH

from .errors import InvalidArgument


@dataclasses.dataclass(frozen=True)
class KeyValueTableConfiguration:
    """How a key-value table is laid out; fixed when it is created (Pravega's ``KeyValueTableConfiguration``).

    * ``partition_count``: the table segments the keys are spread over (at least 1);
    * ``primary_key_length``: the length in bytes of every primary key (at least 1);
    * ``secondary_key_length``: the length in bytes of every secondary key (0: the table has primary
      keys only);
    * ``rollover_size_bytes``: passed to the partitions' segments (0: the server's default).

    The two key lengths together are at most 8192 bytes. Raises :class:`InvalidArgument` otherwise.
    """

    partition_count: int
    primary_key_length: int
    secondary_key_length: int = 0
    rollover_size_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("partition_count", "primary_key_length", "secondary_key_length", "rollover_size_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgument(f"{name} must be an int, not {value!r}")
        if self.partition_count < 1:
            raise InvalidArgument(f"a key-value table needs at least one partition, not {self.partition_count}")
        if self.primary_key_length < 1:
            raise InvalidArgument(f"primary keys are at least 1 byte long, not {self.primary_key_length}")
        if self.secondary_key_length < 0:
            raise InvalidArgument(f"secondary_key_length must be 0 or more, not {self.secondary_key_length}")
        if self.total_key_length > MAX_TABLE_KEY_LENGTH:
            raise InvalidArgument(f"primary and secondary keys together are at most {MAX_TABLE_KEY_LENGTH} bytes, "
                                  f"not {self.total_key_length}")
        if self.rollover_size_bytes < 0:
            raise InvalidArgument(f"rollover_size_bytes must be 0 or more, not {self.rollover_size_bytes}")

    @property
    def total_key_length(self) -> int:
        """The length of every key in the table's segments: primary + secondary."""
        return self.primary_key_length + self.secondary_key_length

