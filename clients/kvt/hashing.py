"""Which partition a primary key belongs to: its place in the key space [0, 1).

Pravega's Java client (``KeyValueTableSegments``) hashes the primary key's bytes with Guava's
``Hashing.murmur3_128(seed)``, seeded with ``"KeyValueTableRouter".hashCode()`` (-2020233499), takes
the first 64-bit word of the hash and turns its top 52 bits into a double in [0, 1) (the same bit
trick as :func:`wire.naming.routing_key_fraction`, which places routing keys). The partition is the
one whose key range holds that fraction.

The seed is negative, and that matters: Guava starts MurmurHash3 x64 128 with the int seed
*sign-extended* to 64 bits, while the ``mmh3`` package takes the seed as an unsigned 32-bit value (so
``mmh3`` with seed ``-2020233499 & 0xFFFFFFFF`` gives another hash, and it refuses negative seeds).
This module therefore implements MurmurHash3 x64 128 itself, with Guava's 64-bit seed; with a
non-negative seed it equals ``mmh3.hash64`` (a unit test checks that). It has not been checked
against a Java client: that a key lands in the partition Java would pick rests on this reading of
Guava's code, not on a test.
"""

from __future__ import annotations

import struct

KEY_FAMILY_HASH_SEED = -2020233499  # Java "KeyValueTableRouter".hashCode()

_MASK = 0xFFFFFFFFFFFFFFFF
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F
_BLOCKS = struct.Struct("<QQ")


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _MASK, 31) * _C2) & _MASK


def _mix_k2(k2: int) -> int:
    return (_rotl((k2 * _C2) & _MASK, 33) * _C1) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def murmur3_x64_128(data: bytes, seed: int) -> tuple[int, int]:
    """MurmurHash3 x64 128 of ``data``: its two 64-bit words (h1, h2), unsigned.

    ``seed`` is the 64-bit initial state, as Guava's ``murmur3_128(int)`` has it: a negative int seed
    stands for its sign extension (pass -1 for Guava's ``murmur3_128(-1)``).
    """
    h1 = h2 = seed & _MASK
    length = len(data)
    whole = length - length % 16
    for k1, k2 in _BLOCKS.iter_unpack(data[:whole]):
        h1 ^= _mix_k1(k1)
        h1 = (_rotl(h1, 27) + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        h2 ^= _mix_k2(k2)
        h2 = (_rotl(h2, 31) + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[whole:]
    if tail:
        h1 ^= _mix_k1(int.from_bytes(tail[:8], "little"))
        if len(tail) > 8:
            h2 ^= _mix_k2(int.from_bytes(tail[8:], "little"))
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return h1, h2


def fraction_of(word: int) -> float:
    """The top 52 bits of a 64-bit word as a double in [0, 1) (Java's ``HashHelper.longToDoubleFraction``)."""
    bits = 0x3FF0000000000000 | ((word >> 12) & 0x000FFFFFFFFFFFFF)
    value: float = struct.unpack(">d", struct.pack(">Q", bits))[0]
    return value - 1.0


def primary_key_fraction(primary_key: bytes) -> float:
    """Where ``primary_key`` falls in the key space [0, 1), as Pravega's Java client places it."""
    return fraction_of(murmur3_x64_128(primary_key, KEY_FAMILY_HASH_SEED)[0])


__all__ = ["KEY_FAMILY_HASH_SEED", "fraction_of", "murmur3_x64_128", "primary_key_fraction"]
