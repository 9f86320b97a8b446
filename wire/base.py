"""Command base classes, the type-code registry and the declaration decorators.

A command is declared once::

    @command(1, "request_id" / I64, "writer_id" / Uuid, "segment" / Utf, "delegation_token" / Utf)
    class SetupAppend(Request):
        \"\"\"Registers a writer on a segment for this connection.\"\"\"

        request_id: int
        writer_id: UUID
        segment: str
        delegation_token: str

and becomes an immutable value class with a validating constructor, a type
code, a construct layout and a compiled codec (:mod:`wire.compiler`). The
layout is what the codec runs; the annotations repeat it for type checkers
(the decorators are dataclass transforms), and the compiler refuses a class
whose annotations name other fields or whose defaults differ from the layout's.
The registry refuses a second class with a type code already taken.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, dataclass_transform

from . import compiler

if TYPE_CHECKING:
    from .compiler import Kind
    from .fields import BytesLike

_BUFFER_PREVIEW_BYTES = 32

W = TypeVar("W", bound="WireValue")
C = TypeVar("C", bound="Command")

Check = Callable[[Any], None]
"""An extra validation of a whole value, run by its constructor (raises ValueError)."""


class WireValue:
    """Base of commands and composite values: a frozen value with a readable repr."""

    __slots__ = ()
    FIELD_NAMES: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:  # set on every declared class by compiler.build
        LAYOUT: ClassVar[Any]  # the construct Struct: the reference codec
        KINDS: ClassVar[tuple[Kind, ...]]

        def __init__(self, *fields: Any, **named_fields: Any) -> None: ...

        @staticmethod
        def _read(view: memoryview, position: int, end: int) -> tuple[WireValue, int]: ...

        @staticmethod
        def _write(value: Any, out: list[BytesLike]) -> None: ...

    def __repr__(self) -> str:
        parts = [f"{name}={_preview(getattr(self, name))}" for name in self.FIELD_NAMES]
        return f"{type(self).__name__}({', '.join(parts)})"


def _preview(value: object) -> str:
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

    if TYPE_CHECKING:

        @staticmethod
        def _read(view: memoryview, position: int, end: int) -> tuple[Command, int]: ...


class Request(Command):
    """Sent by clients to the segment store."""

    __slots__ = ()
    IS_REQUEST = True

    if TYPE_CHECKING:  # every request but AppendBlock, which the decoder joins to its AppendBlockEnd

        @property
        def request_id(self) -> int: ...



class Reply(Command):
    """Sent by the segment store to clients."""

    __slots__ = ()
    IS_REPLY = True

    if TYPE_CHECKING:  # every reply has one: a field, or a property (Hello, KeepAlive)

        @property
        def request_id(self) -> int: ...


class ErrorReply(Reply):
    """A reply that reports a failed request."""

    __slots__ = ()
    IS_ERROR = True


class Inner(Command):
    """A frame that appears only inside append blocks or segment data (Event, Padding, PartialEvent)."""

    __slots__ = ()


REGISTRY: dict[int, type[Command]] = {}
"""Every command class, by type code."""


def register(cls: type[C]) -> type[C]:
    """Adds ``cls`` to the registry. Raises ValueError if its type code is taken."""
    existing = REGISTRY.get(cls.TYPE)
    if existing is not None:
        raise ValueError(f"type code {cls.TYPE} of {cls.__name__} is already used by {existing.__name__}")
    REGISTRY[cls.TYPE] = cls
    return cls


@dataclass_transform(frozen_default=True)
def command(type_code: int, *layout: Any, check: Check | None = None) -> Callable[[type[C]], type[C]]:
    """Class decorator declaring a command with its type code and field layout."""

    def declare(cls: type[C]) -> type[C]:
        cls.TYPE = type_code
        return register(compiler.build(cls, layout, check))

    return declare


@dataclass_transform(frozen_default=True)
def composite(*layout: Any, check: Check | None = None) -> Callable[[type[W]], type[W]]:
    """Class decorator declaring a nested structure (TableKey, ChunkInfo, ...)."""

    def declare(cls: type[W]) -> type[W]:
        return compiler.build(cls, layout, check)

    return declare
