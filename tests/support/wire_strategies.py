"""Hypothesis strategies for every wire command, derived from the commands' declared layouts."""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

import wire
from wire.commands import AuthTokenCheckFailed, TableEntry, TableKey
from wire.compiler import _INT_RANGES, Kind

# Text over the whole of Unicode, surrogates included: they must survive a round trip too.
_TEXT = st.text(alphabet=st.characters(), max_size=40) | st.text(
    alphabet=st.characters(min_codepoint=0x80), min_size=1, max_size=8)
_BUFFERS = st.binary(max_size=64) | st.binary(min_size=1000, max_size=70_000)

_SPECIAL_STRATEGIES = {
    # Keys are 1..8192 bytes by construction rules; keep them small for speed.
    (TableKey, "key"): st.binary(min_size=1, max_size=40),
    (TableEntry, "key"): st.binary(min_size=1, max_size=40),
    (AuthTokenCheckFailed, "error_code"): st.sampled_from([-1, 0, 1]),
}


def _integers(fmt: str):
    low, high = _INT_RANGES[fmt]
    return st.integers(low, high) | st.sampled_from([low, high, -1, 0, 1])


def strategy_for_kind(kind: Kind):
    """A strategy producing valid values of one field kind."""
    name = kind.name
    if name == "scalar":
        return _integers(kind.fmt)
    if name == "bool":
        return st.booleans()
    if name == "uuid":
        return st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
    if name == "utf":
        return _TEXT
    if name in ("buffer", "rest", "event"):
        return _BUFFERS
    if name == "list":
        return st.lists(strategy_for_kind(kind.item), max_size=5).map(tuple)
    if name == "trailing":
        return strategy_for_kind(kind.item)
    if name == "composite":
        return strategy_for_value_class(kind.value_class)
    raise TypeError(name)


def strategy_for_value_class(cls):
    """A strategy producing instances of a command or composite class."""
    fields = {
        name: _SPECIAL_STRATEGIES.get((cls, name), strategy_for_kind(kind))
        for name, kind in zip(cls.FIELD_NAMES, cls.KINDS)
    }
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


COMMAND_CLASSES = sorted(wire.REGISTRY.values(), key=lambda cls: cls.TYPE)

any_command = st.sampled_from(COMMAND_CLASSES).flatmap(strategy_for_value_class)
