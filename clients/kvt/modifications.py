"""Changes to a key-value table, for :meth:`KeyValueTable.update <clients.kvt.table.KeyValueTable.update>`.

* :class:`Insert`: set the value only if the key does not exist;
* :class:`Put`: set the value, unconditionally (``version=None``) or only if the key is at ``version``
  (``Version.NOT_EXISTS``: only if it does not exist, as :class:`Insert`);
* :class:`Remove`: remove the key, unconditionally (absent keys too) or only if it is at ``version``.
"""

from __future__ import annotations

import dataclasses
from typing import TypeAlias

from .model import TableKey, Version, as_bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Insert:
    """Sets ``key`` to ``value`` if the key does not exist (else the update fails with BadKeyVersion)."""

    key: TableKey
    value: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", as_bytes(self.value, "a value"))

    @property
    def version(self) -> Version:
        return Version.NOT_EXISTS


@dataclasses.dataclass(frozen=True, slots=True)
class Put:
    """Sets ``key`` to ``value``: always (``version`` None), or only if the key is at ``version``."""

    key: TableKey
    value: bytes
    version: Version | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", as_bytes(self.value, "a value"))


@dataclasses.dataclass(frozen=True, slots=True)
class Remove:
    """Removes ``key``: always (``version`` None; an absent key is no error), or only if it is at ``version``."""

    key: TableKey
    version: Version | None = None


TableModification: TypeAlias = Insert | Put | Remove
"""One change of :meth:`KeyValueTable.update <clients.kvt.table.KeyValueTable.update>`."""

__all__ = ["Insert", "Put", "Remove", "TableModification"]
