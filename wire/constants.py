"""Protocol-wide constants of the Pravega segment-store wire protocol (v15).

Values come from the protocol reference (shared/spec/wire-protocol.md §0.3, §1.3, §3.3).
"""

WIRE_VERSION = 15
"""The protocol version Tributary speaks and advertises as its high version."""

OLDEST_COMPATIBLE_VERSION = 5
"""The oldest version whose peers we still accept (advertised as the low version)."""

FRAME_HEADER_SIZE = 8
"""Every frame starts with an i32 type code and an i32 payload length."""

MAX_WIRECOMMAND_SIZE = 0x00FFFFFF
"""Largest whole frame (header included) either side may send: 16,777,215 bytes."""

MAX_PAYLOAD_SIZE = MAX_WIRECOMMAND_SIZE - FRAME_HEADER_SIZE
"""Largest payload a frame may carry: 16,777,207 bytes."""

MAX_READ_SIZE = 2 * 1024 * 1024
"""A SegmentRead reply carries at most this much data (Java's MAX_READ_SIZE)."""

MAX_EVENT_SIZE = 8 * 1024 * 1024
"""Largest event payload a client sends in one append (larger events use transient segments)."""

NULL_ATTRIBUTE_VALUE = -(2**63)
"""Value of an attribute that was never set (Java Long.MIN_VALUE)."""

NO_VERSION = -(2**63)
"""Table key version meaning "unconditional"."""

NOT_EXISTS = -1
"""Table key version meaning "the key must not exist" (and the version of an absent key)."""

NULL_TABLE_SEGMENT_OFFSET = -1
"""UpdateTableEntries/RemoveTableKeys offset meaning "no offset condition"."""

NO_REQUEST_ID = -1
"""Default request id of versioned commands whose trailing requestId is absent."""

MAX_TABLE_KEY_LENGTH = 8192
MAX_TABLE_VALUE_LENGTH = 1024 * 1024 - 8192

EVENT_TYPE_CODE = 0
"""Type code of the event envelope stored inside segment data."""
