"""Naming and id conventions shared by the server, the controller and the clients.

Sources: protocol reference §5 and controller reference §5. Covers 64-bit segment
ids, qualified segment names (stream, transaction, transient, table), name
validation, the segment -> container mapping, and the routing-key -> key-space
hash. Everything here is pure computation.
"""

from __future__ import annotations

import re
import struct
import uuid
from typing import NamedTuple

import mmh3

EPOCH_DELIMITER = ".#epoch."
TRANSACTION_DELIMITER = "#transaction."
TRANSIENT_DELIMITER = "#transient."
TABLE_SUFFIX = "_kvtable"
INTERNAL_SCOPE = "_system"
_ID_HEX_LENGTH = 32

CONTAINER_HASH_SEED = 1661405012  # Java "SegmentToContainerMapper".hashCode()
ROUTING_KEY_HASH_SEED = 1741865571  # Java "EventRouter".hashCode()

_STREAM_NAME = re.compile(r"_?[A-Za-z0-9.\-]+")
_USER_NAME = re.compile(r"[A-Za-z0-9.\-]+")
MAX_SCOPE_NAME_LENGTH = 255
MAX_USER_NAME_LENGTH = 250


class InvalidName(ValueError):
    """A scope, stream or segment name that breaks the naming rules."""


# --------------------------------------------------------------------------- segment ids


def segment_id(segment_number: int, epoch: int) -> int:
    """The 64-bit id of segment ``segment_number`` created in ``epoch``: ``epoch << 32 | number``."""
    if not (0 <= segment_number < 2**31 and 0 <= epoch < 2**31):
        raise ValueError(f"segment number {segment_number} and epoch {epoch} must be non-negative int32s")
    return (epoch << 32) | segment_number


def segment_number_of(segment_id_value: int) -> int:
    """The segment number: the low 32 bits of a segment id."""
    return segment_id_value & 0xFFFFFFFF


def epoch_of(segment_id_value: int) -> int:
    """The creation epoch: the high 32 bits of a segment id."""
    return segment_id_value >> 32


# --------------------------------------------------------------------------- qualified names


class SegmentName(NamedTuple):
    """A parsed qualified stream segment name."""

    scope: str
    stream: str
    segment_id: int
    transaction_id: uuid.UUID | None = None

    @property
    def qualified_name(self) -> str:
        base = stream_segment_name(self.scope, self.stream, self.segment_id)
        if self.transaction_id is None:
            return base
        return base + TRANSACTION_DELIMITER + uuid_hex(self.transaction_id)


def uuid_hex(value: uuid.UUID) -> str:
    """32 lowercase hex digits: msb as %016x then lsb as %016x (two's complement)."""
    return f"{value.int:032x}"


def stream_segment_name(scope: str, stream: str, segment_id_value: int) -> str:
    """``scope/stream/<number>.#epoch.<epoch>`` (the epoch part is always written)."""
    return f"{scope}/{stream}/{segment_number_of(segment_id_value)}{EPOCH_DELIMITER}{epoch_of(segment_id_value)}"


def transaction_segment_name(parent_segment: str, transaction_id: uuid.UUID) -> str:
    """The segment of a transaction on ``parent_segment`` (whose epoch is the transaction's epoch)."""
    return parent_segment + TRANSACTION_DELIMITER + uuid_hex(transaction_id)


def transient_segment_name(parent_segment: str, writer_id: uuid.UUID, unique_id: uuid.UUID) -> str:
    """``<parent>#transient.<writer id hex>.<unique id hex>`` (§3.4.5)."""
    return f"{parent_segment}{TRANSIENT_DELIMITER}{uuid_hex(writer_id)}.{uuid_hex(unique_id)}"


def table_segment_name(scope: str, table: str, segment_number: int = 0, epoch: int = 0) -> str:
    """A key-value table's (or a Rust reader group's) table segment: ``scope/<table>_kvtable/N.#epoch.E``."""
    return f"{scope}/{table}{TABLE_SUFFIX}/{segment_number}{EPOCH_DELIMITER}{epoch}"


def transaction_epoch(transaction_id: uuid.UUID) -> int:
    """The epoch a transaction was created in: the top 32 bits of its id."""
    return transaction_id.int >> 96


def _suffix_start(name: str, delimiter: str) -> int:
    """Where a ``#transaction.``/``#transient.`` tail starts, or -1 if there is none."""
    index = name.rfind(delimiter)
    if index < 0 or len(name) - index - len(delimiter) < _ID_HEX_LENGTH:
        return -1
    return index


def is_transaction_segment(name: str) -> bool:
    return _suffix_start(name, TRANSACTION_DELIMITER) >= 0


def is_transient_segment(name: str) -> bool:
    return _suffix_start(name, TRANSIENT_DELIMITER) >= 0


def parent_segment_name(name: str) -> str:
    """The stream segment a transaction or transient segment belongs to (the name itself otherwise)."""
    for delimiter in (TRANSACTION_DELIMITER, TRANSIENT_DELIMITER):
        index = _suffix_start(name, delimiter)
        if index >= 0:
            return name[:index]
    return name


def primary_segment_name(name: str) -> str:
    """The name used for container hashing: the parent name cut at its last ``.#epoch.``."""
    parent = parent_segment_name(name)
    index = parent.rfind(EPOCH_DELIMITER)
    return parent if index < 0 else parent[:index]


def parse_segment_name(name: str) -> SegmentName:
    """Parses ``scope/stream/N[.#epoch.E][#transaction.<hex>]``; a missing epoch means 0.

    Raises:
        InvalidName: the name is not a qualified stream segment name.
    """
    transaction = None
    index = _suffix_start(name, TRANSACTION_DELIMITER)
    if index >= 0:
        hex_digits = name[index + len(TRANSACTION_DELIMITER):]
        try:
            transaction = uuid.UUID(int=int(hex_digits[:_ID_HEX_LENGTH], 16))
        except ValueError:
            raise InvalidName(f"bad transaction id in {name!r}") from None
        name = name[:index]
    parts = name.split("/")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise InvalidName(f"{name!r} is not scope/stream/segment")
    scope, stream, segment = parts
    number_text, _, epoch_text = segment.partition(EPOCH_DELIMITER)
    try:
        number, epoch = int(number_text), int(epoch_text or "0")
        return SegmentName(scope, stream, segment_id(number, epoch), transaction)
    except ValueError:
        raise InvalidName(f"{name!r} has no numeric segment number and epoch") from None


# --------------------------------------------------------------------------- validation


def validate_scope_name(name: str) -> str:
    """Scope names: optional leading ``_``, then ``[A-Za-z0-9.-]+``, at most 255 characters."""
    if not _STREAM_NAME.fullmatch(name) or len(name) > MAX_SCOPE_NAME_LENGTH:
        raise InvalidName(f"invalid scope name {name!r}")
    return name


def validate_stream_name(name: str) -> str:
    """Stream names: optional leading ``_``, then ``[A-Za-z0-9.-]+``, at most 255 characters."""
    if not _STREAM_NAME.fullmatch(name) or len(name) > MAX_SCOPE_NAME_LENGTH:
        raise InvalidName(f"invalid stream name {name!r}")
    return name


def validate_user_name(name: str, kind: str = "name") -> str:
    """User-facing names (streams, reader groups, writer ids): ``[A-Za-z0-9.-]+``, at most 250."""
    if not _USER_NAME.fullmatch(name) or len(name) > MAX_USER_NAME_LENGTH:
        raise InvalidName(f"invalid {kind} {name!r}")
    return name


# --------------------------------------------------------------------------- hashing


def _murmur_h1(text: str, seed: int) -> int:
    """First 64-bit word (signed) of MurmurHash3 x64 128 over the UTF-16LE code units of ``text``."""
    data = text.encode("utf-16-le", "surrogatepass")
    return mmh3.hash64(data, seed, x64arch=True, signed=True)[0]


def jump_consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)``: a stable bucket in [0, buckets)."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        numerator = (state >> 33) + 1
        if numerator == 2**31:  # Java int overflow of (int)(state >>> 33) + 1
            numerator = -(2**31)
        fraction = numerator / 2**31
        quotient = (candidate + 1) / fraction
        following = -1 if quotient < 0 else min(int(quotient), 2**31 - 1)
        if 0 <= following < buckets:
            candidate = following
        else:
            return candidate


_CONTAINER_METADATA = re.compile(r"_system/containers/(?:storage_metadata|metadata|load_reports)_(\d+)")


def load_report_segment_name(container_id: int) -> str:
    """The segment where container ``container_id`` appends its load reports (``wire.load_reports``)."""
    return f"{INTERNAL_SCOPE}/containers/load_reports_{container_id}"


def container_of(segment_name: str, container_count: int) -> int:
    """The container that owns a segment: transaction and transient segments share their parent's.

    Same mapping as Pravega's controller and segment store, so getURI and WrongHost agree.
    Container segments ``_system/containers/{metadata,storage_metadata,load_reports}_<n>`` are pinned to ``n``.
    """
    pinned = _CONTAINER_METADATA.fullmatch(segment_name)
    if pinned is not None:
        return int(pinned.group(1)) % container_count
    primary = primary_segment_name(segment_name)
    return jump_consistent_hash(_murmur_h1(primary, CONTAINER_HASH_SEED), container_count)


def routing_key_fraction(routing_key: str) -> float:
    """Where a routing key falls in the key space [0, 1), as Pravega clients compute it."""
    h1 = _murmur_h1(routing_key, ROUTING_KEY_HASH_SEED) & 0xFFFFFFFFFFFFFFFF
    bits = 0x3FF0000000000000 | ((h1 >> 12) & 0x000FFFFFFFFFFFFF)
    value: float = struct.unpack(">d", struct.pack(">Q", bits))[0]
    return value - 1.0
