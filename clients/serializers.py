"""Serializers turn application objects into event bytes and back.

A serializer has ``serialize(obj) -> bytes`` and ``deserialize(data) -> obj``.
Writers and readers default to :class:`BytesSerializer`, which passes bytes
through untouched (and costs nothing per event).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from wire.fields import BytesLike

from .errors import InvalidArgument


class Serializer(Protocol):
    """Turns application values into event payloads (``serialize``) and back (``deserialize``)."""

    def serialize(self, value: Any) -> BytesLike: ...

    def deserialize(self, data: bytes) -> Any: ...


class BytesSerializer:
    """Events are bytes as they are."""

    def serialize(self, value: object) -> BytesLike:
        if not isinstance(value, (bytes, bytearray, memoryview)):

            raise InvalidArgument(f"the bytes serializer takes bytes, not {type(value).__name__}")
        return value

    def deserialize(self, data: bytes) -> bytes:
        return data


class StringSerializer:
    """Events are text, stored as UTF-8."""

    def __init__(self, encoding: str = "utf-8"):
        self._encoding = encoding

    def serialize(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise InvalidArgument(f"the string serializer takes str, not {type(value).__name__}")
        return value.encode(self._encoding)

    def deserialize(self, data: bytes) -> str:
        return bytes(data).decode(self._encoding)


class JsonSerializer:
    """Events are JSON documents (UTF-8, compact)."""

    def serialize(self, value: Any) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError) as error:
            raise InvalidArgument(f"not JSON-serializable: {error}") from None

    def deserialize(self, data: bytes) -> Any:
        return json.loads(bytes(data))
