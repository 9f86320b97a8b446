"""Naming conventions: segment ids, qualified names, and the two hashes checked against the
sample values the references computed on a JVM (controller reference §5.6, §5.8)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import naming


@pytest.mark.parametrize("name, count4, count16", [
    ("scope/stream/0.#epoch.0", 3, 3),
    ("scope/stream/1.#epoch.0", 3, 15),
    ("scope/stream/0.#epoch.1#transaction.00000001000000000000000000000005", 3, 3),
    ("_system/_requeststream/0.#epoch.0", 1, 4),
    ("scope/rg_kvtable/0.#epoch.0", 2, 11),
])
def test_container_mapping_matches_pravega(name, count4, count16):
    """Segments map to the same containers as in Pravega (JVM-computed sample values)."""
    assert naming.container_of(name, 4) == count4
    assert naming.container_of(name, 16) == count16


def test_transient_and_transaction_segments_share_the_parent_container():
    """Transaction and transient segments live in their parent's container."""
    parent = "sc/st/7.#epoch.3"
    transient = naming.transient_segment_name(parent, uuid.uuid4(), uuid.uuid4())
    txn = naming.transaction_segment_name(parent, uuid.UUID(int=(3 << 96) | 42))
    for count in (1, 4, 16, 64):
        assert naming.container_of(transient, count) == naming.container_of(parent, count)
        assert naming.container_of(txn, count) == naming.container_of(parent, count)


def test_container_metadata_segments_are_pinned():
    assert naming.container_of("_system/containers/metadata_3", 4) == 3
    assert naming.container_of("_system/containers/storage_metadata_2", 4) == 2


def test_routing_key_fraction_matches_the_rust_client():
    """The Rust client's unit-test vector: "hello" -> 0.658716230571337."""
    assert naming.routing_key_fraction("hello") == pytest.approx(0.658716230571337, abs=1e-15)


@given(st.integers(0, 2**63 - 1), st.integers(1, 2000))
def test_jump_hash_is_in_range(value, buckets):
    assert 0 <= naming.jump_consistent_hash(value, buckets) < buckets


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_segment_names_round_trip(number, epoch):
    """Qualified names parse back to the id they were made from; the epoch is always written."""
    sid = naming.segment_id(number, epoch)
    name = naming.stream_segment_name("sc", "st", sid)
    assert name == f"sc/st/{number}.#epoch.{epoch}"
    assert naming.parse_segment_name(name) == naming.SegmentName("sc", "st", sid)


def test_segment_id_example_and_parsing_details():
    assert naming.segment_id(1, 1) == 4294967297
    assert naming.parse_segment_name("sc/st/3").segment_id == 3
    txn = uuid.UUID(int=(1 << 96) | 5)
    parsed = naming.parse_segment_name("sc/st/0.#epoch.1#transaction.00000001000000000000000000000005")
    assert parsed.transaction_id == txn and naming.transaction_epoch(txn) == 1
    assert parsed.qualified_name == "sc/st/0.#epoch.1#transaction.00000001000000000000000000000005"
    assert naming.primary_segment_name("sc/st/3.#epoch.2#transaction." + "0" * 32) == "sc/st/3"
    for bad in ["sc/st", "sc//0", "sc/st/x.#epoch.0", "sc/st/0.#epoch.y"]:
        with pytest.raises(naming.InvalidName):
            naming.parse_segment_name(bad)


def test_transient_name_format():
    writer, unique = uuid.UUID(int=1), uuid.UUID(int=2)
    name = naming.transient_segment_name("sc/st/0.#epoch.0", writer, unique)
    assert name == "sc/st/0.#epoch.0#transient." + "0" * 31 + "1." + "0" * 31 + "2"
    assert naming.is_transient_segment(name) and not naming.is_transaction_segment(name)
    assert naming.parent_segment_name(name) == "sc/st/0.#epoch.0"


@pytest.mark.parametrize("name, ok", [("abc", True), ("_internal", True), ("a.b-c", True), ("", False),
                                      ("a/b", False), ("a b", False), ("é", False), ("x" * 256, False)])
def test_stream_name_validation(name, ok):
    if ok:
        assert naming.validate_stream_name(name) == name
    else:
        with pytest.raises(naming.InvalidName):
            naming.validate_stream_name(name)
