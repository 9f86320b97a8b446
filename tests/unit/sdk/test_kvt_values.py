"""The value types of key-value tables and the client-side checks of keys and values (no server)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients.errors import InvalidArgument
from clients.kvt import Insert, KeyValueTableConfiguration, Put, Remove, TableKey, Version
from clients.kvt.layout import KeyLayout
from wire.constants import MAX_TABLE_VALUE_LENGTH, NOT_EXISTS


@pytest.mark.parametrize("arguments", [
    (0, 4), (1, 0), (1, 4, -1), (1, 4, 0, -1), (1, 8000, 193), ("2", 4), (1, True),
])
def test_bad_configurations_are_refused(arguments):
    with pytest.raises(InvalidArgument):
        KeyValueTableConfiguration(*arguments)


def test_a_configuration():
    config = KeyValueTableConfiguration(4, 8, 4)
    assert config.total_key_length == 12 and config.rollover_size_bytes == 0
    assert KeyValueTableConfiguration(1, 8192).total_key_length == 8192


def test_keys_take_bytes_like_values_and_order_as_bytes():
    assert TableKey(bytearray(b"ab"), memoryview(b"c")) == TableKey(b"ab", b"c")
    assert TableKey(b"ab").secondary == b""
    with pytest.raises(InvalidArgument):
        TableKey("ab")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Put(TableKey(b"ab"), "text")  # type: ignore[arg-type]


@given(keys=st.lists(st.tuples(st.binary(min_size=2, max_size=2), st.binary(min_size=1, max_size=1)), max_size=20))
def test_keys_sort_as_their_segment_keys(keys):
    layout = KeyLayout(KeyValueTableConfiguration(1, 2, 1))
    table_keys = [TableKey(primary, secondary) for primary, secondary in keys]
    assert [layout.key_bytes(key) for key in sorted(table_keys)] == sorted(layout.key_bytes(k) for k in table_keys)
    assert all(layout.key_of(layout.key_bytes(key)) == key for key in table_keys)


def test_versions_as_text():
    version = Version(3, 1234)
    assert Version.from_text(version.as_text()) == version
    assert Version.from_text(Version.NOT_EXISTS.as_text()) == Version.NOT_EXISTS
    assert Version.NOT_EXISTS.segment_version == NOT_EXISTS
    for text in ("", "3", "a:b", "3:"):
        with pytest.raises(InvalidArgument):
            Version.from_text(text)


def test_modifications():
    key = TableKey(b"k")
    assert Insert(key, bytearray(b"v")).value == b"v" and Insert(key, b"v").version == Version.NOT_EXISTS
    assert Put(key, b"v").version is None and Remove(key).version is None


def test_the_layout_says_what_is_wrong_with_a_key():
    layout = KeyLayout(KeyValueTableConfiguration(2, 4, 2))
    assert layout.key_bytes(TableKey(b"abcd", b"ef")) == b"abcdef"
    with pytest.raises(InvalidArgument, match="primary key of this table is 4 bytes long, not 3"):
        layout.key_bytes(TableKey(b"abc", b"ef"))
    with pytest.raises(InvalidArgument, match="secondary key of this table is 2 bytes long, not 0"):
        layout.key_bytes(TableKey(b"abcd"))
    with pytest.raises(InvalidArgument, match="expected a TableKey"):
        layout.key_bytes(b"abcdef")  # type: ignore[arg-type]
    primary_only = KeyLayout(KeyValueTableConfiguration(2, 4))
    with pytest.raises(InvalidArgument, match="has no secondary keys"):
        primary_only.key_bytes(TableKey(b"abcd", b"x"))
    assert primary_only.value(b"x" * MAX_TABLE_VALUE_LENGTH)
    with pytest.raises(InvalidArgument, match="at most"):
        primary_only.value(b"x" * (MAX_TABLE_VALUE_LENGTH + 1))
