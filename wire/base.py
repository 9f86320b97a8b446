"""Command base classes, the type-code registry and the declaration decorators.

A command is declared once::

    @command(1, "request_id" / I64, "writer_id" / Uuid, "segment" / Utf, "delegation_token" / Utf)
    class SetupAppend(Request):
        \"\"\"Registers a writer on a segment for this connection.\"\"\"

and becomes an immutable value class with a validating constructor, a type
code, a construct layout and a compiled codec (:mod:`wire.compiler`). The
registry refuses a second class with a type code already taken.
"""

from __future__ import annotations

from typing import ClassVar

from . import compiler

_BUFFER_PREVIEW_BYTES = 32


class WireValue:
    """Base of commands and composite values: a frozen value with a readable repr."""

    __slots__ = ()
    FIELD_NAMES: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        parts = [f"{name}={_preview(getattr(self, name))}" for name in self.FIELD_NAMES]
        return f"{type(self).__name__}({', '.join(parts)})"


def _preview(value) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > _BUFFER_PREVIEW_BYTES:
            return f"<{len(value)} bytes>"
        return repr(bytes(value))
    return repr(value)


class Command(WireValue):
    """A wire command: one frame with a type code and a payload."""

    __slots__ = ()
    TYPE: ClassVar[int]
    IS_REQUEST: ClassVar[bool] = False
    IS_REPLY: ClassVar[bool] = False
    IS_ERROR: ClassVar[bool] = False


class Request(Command):
    """Sent by clients to the segment store."""

    __slots__ = ()
    IS_REQUEST = True


class Reply(Command):
    """Sent by the segment store to clients."""

    __slots__ = ()
    IS_REPLY = True


class ErrorReply(Reply):
    """A reply that reports a failed request."""

    __slots__ = ()
    IS_ERROR = True


class Inner(Command):
    """A frame that appears only inside append blocks or segment data (Event, Padding, PartialEvent)."""

    __slots__ = ()


REGISTRY: dict[int, type[Command]] = {}
"""Every command class, by type code."""


def register(cls: type[Command]) -> type[Command]:
    """Adds ``cls`` to the registry. Raises ValueError if its type code is taken."""
    existing = REGISTRY.get(cls.TYPE)
    if existing is not None:
        raise ValueError(f"type code {cls.TYPE} of {cls.__name__} is already used by {existing.__name__}")
    REGISTRY[cls.TYPE] = cls
    return cls


def command(type_code: int, *layout, check=None):
    """Class decorator declaring a command with its type code and field layout."""

    def declare(cls):
        cls.TYPE = type_code
        return register(compiler.build(cls, layout, check))

    return declare


def composite(*layout, check=None):
    """Class decorator declaring a nested structure (TableKey, ChunkInfo, ...)."""

    def declare(cls):
        return compiler.build(cls, layout, check)

    return declare
