"""Segment attributes: well-known ids and the conditional update rules (pure logic).

An attribute id is a UUID; its value an i64, where NULL_ATTRIBUTE_VALUE means
unset. Core attributes have the most significant 64 bits 0x8000000000000000.
Writer ids are used directly as attribute ids holding each writer's last
event number. Update types (protocol reference §1.5, design §3.4):

=================  =====================================================
NONE (0)           set only if absent
REPLACE (1)        set
REPLACE_IF_GREATER set if the new value is greater (absent counts as less)
ACCUMULATE (3)     add to the current value (absent counts as 0)
REPLACE_IF_EQUALS  set if the current value equals the comparison value
=================  =====================================================
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from wire.constants import NULL_ATTRIBUTE_VALUE

from ..errors import BadAttributeUpdate

_CORE_MSB = 0x8000000000000000


def core_attribute(number: int) -> uuid.UUID:
    return uuid.UUID(int=(_CORE_MSB << 64) | number)


CREATION_TIME = core_attribute(0)
EVENT_COUNT = core_attribute(1)
SCALE_POLICY_TYPE = core_attribute(2)
SCALE_POLICY_RATE = core_attribute(3)
ROLLOVER_SIZE = core_attribute(4)
SEGMENT_TYPE = core_attribute(9)
CREATION_EPOCH = core_attribute(10)
TABLE_KEY_LENGTH = core_attribute(11)  # a table segment's fixed key length (absent or 0: a hash table)


def is_core(attribute_id: uuid.UUID) -> bool:
    return attribute_id.int >> 64 == _CORE_MSB


NONE = 0
REPLACE = 1
REPLACE_IF_GREATER = 2
ACCUMULATE = 3
REPLACE_IF_EQUALS = 4
UPDATE_TYPES = frozenset({NONE, REPLACE, REPLACE_IF_GREATER, ACCUMULATE, REPLACE_IF_EQUALS})


class AttributeUpdate(NamedTuple):
    """A requested update; ``compare_value`` matters only for REPLACE_IF_EQUALS."""

    attribute_id: uuid.UUID
    update_type: int
    value: int
    compare_value: int = NULL_ATTRIBUTE_VALUE


def decide(segment: str, updates: Iterable[AttributeUpdate],
           current: Callable[[uuid.UUID], int]) -> dict[uuid.UUID, int]:
    """Validates ``updates`` together against ``current`` values and returns the values to store.

    Updates apply in order, each seeing the effect of the previous ones in the
    same batch. Raises BadAttributeUpdate (changing nothing) if any condition fails.
    """
    decided: dict[uuid.UUID, int] = {}
    for update in updates:
        attribute_id = update.attribute_id
        old = decided[attribute_id] if attribute_id in decided else current(attribute_id)
        new = _apply_one(segment, update, old)
        if new is not None:
            decided[attribute_id] = new
    return decided


def _apply_one(segment: str, update: AttributeUpdate, old: int) -> int | None:
    kind = update.update_type
    if kind == REPLACE:
        return update.value
    if kind == ACCUMULATE:
        base = 0 if old == NULL_ATTRIBUTE_VALUE else old
        return _wrap_i64(base + update.value)
    if kind == REPLACE_IF_EQUALS:
        if old != update.compare_value:
            raise BadAttributeUpdate(segment, update.attribute_id, update.compare_value, old)
        return update.value
    if kind == REPLACE_IF_GREATER:
        if old != NULL_ATTRIBUTE_VALUE and update.value <= old:
            raise BadAttributeUpdate(segment, update.attribute_id, f"< {update.value}", old)
        return update.value
    if kind == NONE:
        if old != NULL_ATTRIBUTE_VALUE:
            raise BadAttributeUpdate(segment, update.attribute_id, NULL_ATTRIBUTE_VALUE, old)
        return update.value
    raise ValueError(f"unknown attribute update type {kind}")


def _wrap_i64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def read(attributes: Mapping[uuid.UUID, int], attribute_id: uuid.UUID) -> int:
    return attributes.get(attribute_id, NULL_ATTRIBUTE_VALUE)
