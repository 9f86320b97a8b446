"""Key-value table partitioning: MurmurHash3 x64 128 with Guava's 64-bit seed, the key-space fraction of a
primary key, and which partition holds it."""

from __future__ import annotations

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients.errors import OperationFailed
from clients.kvt.hashing import KEY_FAMILY_HASH_SEED, fraction_of, murmur3_x64_128, primary_key_fraction
from clients.kvt.partitions import Partitions
from clients.model import Segment, SegmentRange
from wire import naming

MASK = 2**64 - 1


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (an int)."""
    value = 0
    for char in text:
        value = (31 * value + ord(char)) & 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def test_the_seed_is_javas_hash_of_the_router_name():
    assert KEY_FAMILY_HASH_SEED == java_string_hash("KeyValueTableRouter") == -2020233499
    assert java_string_hash("EventRouter") == naming.ROUTING_KEY_HASH_SEED  # the same rule for routing keys


@pytest.mark.parametrize("seed, h1, h2, text", [  # Guava's own known values (Murmur3Hash128Test)
    (0, 0x629942693E10F867, 0x92DB0B82BAEB5347, "hell"),
    (1, 0xA78DDFF5ADAE8D10, 0x128900EF20900135, "hello"),
    (2, 0x8A486B23F422E826, 0xF962A2C58947765F, "hello "),
    (3, 0x2EA59F466F6BED8C, 0xC610990ACC428A17, "hello w"),
    (4, 0x79F6305A386C572C, 0x46305AED3483B94E, "hello wo"),
    (5, 0xC2219D213EC1F1B5, 0xA1D8E2E0A52785BD, "hello wor"),
    (0, 0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347, "The quick brown fox jumps over the lazy dog"),
    (0, 0x658CA970FF85269A, 0x43FEE3EAA68E5C3E, "The quick brown fox jumps over the lazy cog"),
])
def test_guavas_known_values(seed, h1, h2, text):
    assert murmur3_x64_128(text.encode("ascii"), seed) == (h1, h2)


@given(data=st.binary(max_size=80), seed=st.integers(0, 2**32 - 1))
def test_equal_to_mmh3_where_the_seeds_mean_the_same(data, seed):
    """A non-negative 32-bit seed is the same 64-bit state in Guava and in mmh3."""
    h1, h2 = mmh3.hash64(data, seed, x64arch=True, signed=False)
    assert murmur3_x64_128(data, seed) == (h1, h2)


@given(data=st.binary(max_size=40))
def test_a_negative_seed_is_sign_extended_as_guava_does(data):
    """Guava starts with ``(long) seed``: -2020233499 is 0xFFFFFFFF87959... as the initial state, not the
    unsigned 32-bit value mmh3 would take."""
    sign_extended = KEY_FAMILY_HASH_SEED & MASK
    assert sign_extended >> 32 == 0xFFFFFFFF
    assert murmur3_x64_128(data, KEY_FAMILY_HASH_SEED) == murmur3_x64_128(data, sign_extended)
    unsigned_32 = KEY_FAMILY_HASH_SEED & 0xFFFFFFFF
    assert murmur3_x64_128(data, unsigned_32) == tuple(mmh3.hash64(data, unsigned_32, x64arch=True, signed=False))
    assert murmur3_x64_128(data, KEY_FAMILY_HASH_SEED) != murmur3_x64_128(data, unsigned_32)


@given(key=st.text(max_size=30))
def test_the_fraction_is_the_routing_key_bit_trick(key):
    """The same double as ``wire.naming.routing_key_fraction`` makes of a hash's first word."""
    h1 = naming._murmur_h1(key, naming.ROUTING_KEY_HASH_SEED) & MASK
    assert fraction_of(h1) == naming.routing_key_fraction(key)


@given(primary=st.binary(min_size=1, max_size=64))
def test_a_primary_key_falls_in_the_key_space(primary):
    fraction = primary_key_fraction(primary)
    assert 0.0 <= fraction < 1.0
    assert fraction == fraction_of(murmur3_x64_128(primary, KEY_FAMILY_HASH_SEED)[0])


def ranges(count: int, table: str = "t") -> list[SegmentRange]:
    return [SegmentRange(Segment("s", table, naming.segment_id(n, 0)), n / count, 1.0 if n == count - 1
                         else (n + 1) / count) for n in range(count)]


def test_partitions_are_named_and_ordered_by_key_range():
    partitions = Partitions("s", "t", reversed(ranges(3)))
    assert [p.name for p in partitions] == [naming.table_segment_name("s", "t", n) for n in range(3)]
    assert [p.name for p in partitions] == ["s/t_kvtable/0.#epoch.0", "s/t_kvtable/1.#epoch.0",
                                            "s/t_kvtable/2.#epoch.0"]


@given(primary=st.binary(min_size=1, max_size=8), count=st.integers(1, 16))
def test_a_primary_key_goes_to_the_partition_whose_range_holds_it(primary, count):
    partitions = Partitions("s", "t", ranges(count))
    chosen = partitions.of(primary)
    fraction = primary_key_fraction(primary)
    assert chosen.low <= fraction <= chosen.high  # Java's ceilingEntry: the upper bound belongs to the range
    assert partitions.of(primary) == chosen


def test_partitions_that_do_not_cover_the_key_space_are_refused():
    with pytest.raises(OperationFailed):
        Partitions("s", "t", [])
    with pytest.raises(OperationFailed):
        Partitions("s", "t", ranges(3)[:2])
    holed = ranges(3)
    holed[1] = SegmentRange(holed[1].segment, 0.4, holed[1].high)
    with pytest.raises(OperationFailed):
        Partitions("s", "t", holed)
