"""Round trips of every command: encode then decode is the identity, and the compiled codec
agrees byte for byte with construct's interpretation of the same declared layout."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import wire
from tests.support.wire_strategies import COMMAND_CLASSES, any_command, strategy_for_value_class

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _payload(command) -> bytes:
    return wire.encode(command)[wire.constants.FRAME_HEADER_SIZE:]


def _as_plain(value):
    """Normalizes decoded values (memoryviews, tuples of composites) for comparison with construct."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, tuple):
        return tuple(_as_plain(item) for item in value)
    return value


def test_every_command_has_a_distinct_registered_type_code():
    """The registry holds all 73 commands (v15 + v17 Java extras + legacy + our extension), one per code."""
    assert len(COMMAND_CLASSES) == 73
    assert len({cls.TYPE for cls in COMMAND_CLASSES}) == 73
    assert {cls.__name__ for cls in COMMAND_CLASSES} >= {"Hello", "MergeSegmentsWithHeader", "SegmentsBatchMerged"}


@pytest.mark.parametrize("command_class", COMMAND_CLASSES, ids=lambda cls: cls.__name__)
def test_encode_then_decode_is_identity(command_class):
    """For each command, values across their full ranges survive encode -> decode_frame unchanged."""

    @_SETTINGS
    @given(strategy_for_value_class(command_class))
    def check(command):
        frame = wire.encode(command)
        type_code, length = wire.FRAME_HEADER.unpack_from(frame)
        assert type_code == command_class.TYPE
        assert length == len(frame) - 8
        decoded = wire.decode_frame(type_code, frame[8:])
        assert type(decoded) is command_class
        assert decoded == command
        assert wire.encode(decoded) == frame

    check()


@pytest.mark.parametrize("command_class", COMMAND_CLASSES, ids=lambda cls: cls.__name__)
def test_compiled_codec_matches_construct_reference(command_class):
    """The generated codec and construct's interpreter of the same layout produce and read the same bytes."""

    @_SETTINGS
    @given(strategy_for_value_class(command_class))
    def check(command):
        values = {name: getattr(command, name) for name in command_class.FIELD_NAMES}
        reference_bytes = command_class.LAYOUT.build(values)
        assert reference_bytes == _payload(command)
        parsed = command_class.LAYOUT.parse(reference_bytes)
        for name in command_class.FIELD_NAMES:
            assert _as_plain(parsed[name]) == _as_plain(getattr(command, name)), name

    check()


@_SETTINGS
@given(any_command)
def test_commands_are_immutable(command):
    """Commands are frozen values: assigning any field raises."""
    for name in type(command).FIELD_NAMES:
        with pytest.raises(AttributeError):
            setattr(command, name, None)


_BUFFER_COMMANDS = [cls for cls in COMMAND_CLASSES if any(kind.name == "buffer" for kind in cls.KINDS)]


@pytest.mark.parametrize("command_class", _BUFFER_COMMANDS, ids=lambda cls: cls.__name__)
def test_encode_around_leaves_exactly_the_buffer_out(command_class):
    """For any buffer field, head + the field's bytes + tail is the whole frame (what sendfile relies on)."""
    fields = [name for name, kind in zip(command_class.FIELD_NAMES, command_class.KINDS, strict=True)
              if kind.name == "buffer"]

    @_SETTINGS
    @given(strategy_for_value_class(command_class))
    def check(command):
        for field in fields:
            data = bytes(getattr(command, field))
            head, tail = wire.encode_around(command, field, len(data))
            assert head + data + tail == wire.encode(command)

    check()


def test_encode_around_refuses_what_is_not_a_buffer_field():
    read = wire.SegmentRead("a/b/0", 0, False, False, b"", 1)
    for field, size in (("segment", 3), ("offset", 8), ("nothing", 1), ("data", -1)):
        with pytest.raises(ValueError):
            wire.encode_around(read, field, size)
    with pytest.raises(ValueError):
        wire.encode_around(read, "data", wire.constants.MAX_PAYLOAD_SIZE)
