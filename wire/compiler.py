"""Turns a declarative construct layout into a value class and fast codec functions.

Theory of operation. A command or composite is declared once, as a list of
named construct fields (see :mod:`wire.fields`). From that one declaration this
module derives:

* an immutable value class (a frozen, slotted dataclass) whose fields are the
  layout's fields in order, trailing optional fields with their defaults;
* a validating ``__init__`` (ranges of integers, string sizes, buffer types),
  so a command that exists can always be encoded;
* a decoder ``read(view, pos, end) -> (value, pos)`` and an encoder
  ``write(value, out)`` that appends byte chunks to ``out``.

The decoder and encoder are generated Python source, compiled with ``exec``
(the same technique ``dataclasses`` uses), so that a run of fixed-width fields
costs one ``struct`` call and a buffer field costs one memoryview slice: no
per-field interpretation, no per-byte loops, no copies of payloads. Length
prefixes of strings, buffers and lists join the fixed-width run before them.
The interpreted construct layout stays available as the reference codec.

Decoded buffers are memoryview slices of the buffer that was decoded; whoever
keeps one beyond the life of that buffer copies it.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar, cast

import construct as c

from . import fields as f
from .constants import MAX_PAYLOAD_SIZE
from .errors import ProtocolError

Reader = Callable[[memoryview, int, int], tuple[Any, int]]
"""A generated ``read(view, position, end) -> (value, position after it)``."""
Writer = Callable[[Any, list[f.BytesLike]], None]
"""A generated ``write(value, out)`` appending the encoded chunks to ``out``."""

_SIGNED_FORMATS = {">b": "b", ">l": "i", ">i": "i", ">q": "q"}  # construct's spelling -> ours
_INT_RANGES = {"b": (-(2**7), 2**7 - 1), "i": (-(2**31), 2**31 - 1), "q": (-(2**63), 2**63 - 1)}


# --------------------------------------------------------------------------- field kinds


@dataclasses.dataclass(frozen=True)
class Kind:
    """What the compiler understood a construct field to be."""

    name: str  # scalar | bool | uuid | utf | buffer | rest | list | trailing | event | composite | size
    fmt: str = ""
    item: Kind | None = None
    default: Any = None
    min_bytes: int = 0
    covered_fields: int = 0
    value_class: Any = None

    @property
    def inner(self) -> Kind:
        """The element kind of a list, or the kind of a trailing field's value."""
        if self.item is None:
            raise TypeError(f"a {self.name} field has no inner kind")
        return self.item


def kind_of(con: Any) -> Kind:
    """Classifies a construct field. Raises TypeError for constructs the codec does not use."""
    if con is f.Bool:
        return Kind("bool", fmt="?")
    if isinstance(con, c.FormatField) and con.fmtstr in _SIGNED_FORMATS:
        return Kind("scalar", fmt=_SIGNED_FORMATS[con.fmtstr])
    simple = {f.JavaUtf: "utf", f.BufferField: "buffer", f.UuidField: "uuid", f.EventEnvelope: "event"}
    for con_type, name in simple.items():
        if isinstance(con, con_type):
            return Kind(name, fmt="16s" if name == "uuid" else "")
    if con is f.Rest:
        return Kind("rest")
    if isinstance(con, f.ListOf):
        return Kind("list", item=kind_of(con.subcon))
    if isinstance(con, f.Trailing):
        return Kind("trailing", item=kind_of(con.subcon), default=con.default, min_bytes=con.min_bytes)
    if isinstance(con, f.CompositeField):
        return Kind("composite", value_class=con.value_class)
    if isinstance(con, f.PayloadSize):
        return Kind("size", covered_fields=con.field_count)
    raise TypeError(f"the wire compiler does not know construct {con!r}")


def python_type(kind: Kind) -> Any:
    """The annotation a value class gets for a field of this kind."""
    return {"scalar": int, "bool": bool, "uuid": uuid.UUID, "utf": str, "buffer": bytes, "rest": bytes,
            "event": bytes, "list": tuple, "composite": kind.value_class}.get(
        kind.name, python_type(kind.item) if kind.item else Any)


# --------------------------------------------------------------------------- code generation


class _Source:
    """Accumulates generated lines and the constants they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_PE": ProtocolError, "_UUID": uuid.UUID, "_dutf": f.decode_utf, "_eutf": f.encode_utf,
            "_unpack_from": struct.unpack_from, "_pack": struct.pack, "_I32": struct.Struct(">i"),
            "_new": object.__new__, "_set": object.__setattr__}
        self._counter = 0

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def constant(self, value: object) -> str:
        name = f"_K{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def temporary(self) -> str:
        self._counter += 1
        return f"_t{self._counter}"

    def compile(self, function_name: str) -> Callable[..., Any]:
        exec("\n".join(self.lines), self.namespace)  # source generated from our own layouts, never from input
        function: Callable[..., Any] = self.namespace[function_name]
        return function


class _ReaderGen:
    """Generates ``read(mv, pos, end) -> (value, pos)`` for one layout."""

    def __init__(self, source: _Source):
        self.src = source
        self.run: list[tuple[str, str]] = []  # (struct format char(s), target name)
        self.after_run: list[str] = []

    def flush(self, ind: int) -> None:
        if not self.run:
            return
        packer = struct.Struct(">" + "".join(fmt for fmt, _ in self.run))
        targets = ", ".join(name for _, name in self.run) + ","
        self.src.emit(ind, f"{targets} = {self.src.constant(packer)}.unpack_from(mv, pos)")
        self.src.emit(ind, f"pos += {packer.size}")
        for line in self.after_run:
            self.src.emit(ind, line)
        self.run.clear()
        self.after_run.clear()

    def _take_bytes(self, ind: int, target: str, length: str, what: str) -> None:
        """Emits the bounds check and slice for ``length`` bytes at ``pos``."""
        self.src.emit(ind, f"_e = pos + {length}")
        self.src.emit(ind, f"if _e > end: raise _PE('{what} runs past the end of the frame')")
        self.src.emit(ind, f"{target} = mv[pos:_e]")
        self.src.emit(ind, "pos = _e")

    def field(self, target: str, kind: Kind, ind: int) -> None:
        src, name = self.src, kind.name
        if name in ("scalar", "bool"):
            self.run.append((kind.fmt, target))
        elif name == "size":
            self.run.append(("i", "_"))
        elif name == "uuid":
            self.run.append(("16s", target))
            self.after_run.append(f"{target} = _UUID(bytes={target})")
        elif name == "utf":
            length = src.temporary()
            self.run.append(("H", length))
            self.flush(ind)
            self._take_bytes(ind, target, length, "string")
            src.emit(ind, f"{target} = _dutf({target})")
        elif name in ("buffer", "event"):
            self._buffer(target, kind, ind)
        elif name == "rest":
            self.flush(ind)
            src.emit(ind, f"{target} = mv[pos:end]")
            src.emit(ind, "pos = end")
        elif name == "list":
            self._list(target, kind.inner, ind)
        elif name == "trailing":
            self.flush(ind)
            src.emit(ind, f"if end - pos >= {kind.min_bytes}:")
            self.field(target, kind.inner, ind + 1)
            self.flush(ind + 1)
            src.emit(ind, "else:")
            src.emit(ind + 1, f"{target} = {src.constant(kind.default)}")
        elif name == "composite":
            self.flush(ind)
            src.emit(ind, f"{target}, pos = {src.constant(kind.value_class._read)}(mv, pos, end)")
        else:
            raise TypeError(name)

    def _buffer(self, target: str, kind: Kind, ind: int) -> None:
        length = self.src.temporary()
        if kind.name == "event":
            event_type = self.src.temporary()
            self.run.append(("i", event_type))
            self.after_run.append(f"if {event_type} != 0: raise _PE('embedded event type is not 0')")
        self.run.append(("i", length))
        self.flush(ind)
        self.src.emit(ind, f"if {length} < 0: raise _PE('negative buffer length')")
        self._take_bytes(ind, target, length, "buffer")

    def _list(self, target: str, item: Kind, ind: int) -> None:
        src = self.src
        count = src.temporary()
        self.run.append(("i", count))
        self.flush(ind)
        if item.name == "scalar":
            size = struct.calcsize(">" + item.fmt)
            src.emit(ind, f"if not 0 <= {count} * {size} <= end - pos: raise _PE('bad list count')")
            src.emit(ind, f"{target} = _unpack_from('>%d{item.fmt}' % {count}, mv, pos)")
            src.emit(ind, f"pos += {count} * {size}")
            return
        # Every element takes at least one byte, which bounds the loop by the payload size.
        src.emit(ind, f"if not 0 <= {count} <= end - pos: raise _PE('bad list count')")
        items = src.temporary()
        src.emit(ind, f"{items} = []")
        src.emit(ind, f"for _ in range({count}):")
        self.field("_v", item, ind + 1)
        self.flush(ind + 1)
        src.emit(ind + 1, f"{items}.append(_v)")
        src.emit(ind, f"{target} = tuple({items})")


class _WriterGen:
    """Generates ``write(o, out)`` appending the encoded fields to ``out``."""

    def __init__(self, source: _Source):
        self.src = source
        self.run: list[tuple[str, str]] = []  # (struct format, expression)

    def flush(self, ind: int) -> None:
        if not self.run:
            return
        packer = struct.Struct(">" + "".join(fmt for fmt, _ in self.run))
        args = ", ".join(expr for _, expr in self.run)
        self.src.emit(ind, f"out.append({self.src.constant(packer)}.pack({args}))")
        self.run.clear()

    def field(self, expr: str, kind: Kind, ind: int) -> None:
        src, name = self.src, kind.name
        if name in ("scalar", "bool"):
            self.run.append((kind.fmt, expr))
        elif name == "uuid":
            self.run.append(("16s", f"{expr}.bytes"))
        elif name == "utf":
            encoded = src.temporary()
            src.emit(ind, f"{encoded} = _eutf({expr})")
            self.run.append(("H", f"len({encoded})"))
            self.flush(ind)
            src.emit(ind, f"out.append({encoded})")
        elif name in ("buffer", "event"):
            if name == "event":
                self.run.append(("i", "0"))
            self.run.append(("i", f"len({expr})"))
            self.flush(ind)
            src.emit(ind, f"out.append({expr})")
        elif name == "rest":
            self.flush(ind)
            src.emit(ind, f"out.append({expr})")
        elif name == "list":
            self.run.append(("i", f"len({expr})"))
            self.flush(ind)
            if kind.inner.name == "scalar":
                src.emit(ind, f"out.append(_pack('>%d{kind.inner.fmt}' % len({expr}), *{expr}))")
            else:
                element = src.temporary()
                src.emit(ind, f"for {element} in {expr}:")
                self.field(element, kind.inner, ind + 1)
                self.flush(ind + 1)
        elif name == "trailing":
            self.field(expr, kind.inner, ind)
        elif name == "composite":
            self.flush(ind)
            src.emit(ind, f"{src.constant(kind.value_class._write)}({expr}, out)")
        else:
            raise TypeError(name)


def _compile_reader(cls: type, layout: list[tuple[str, Kind]]) -> Reader:
    src = _Source()
    gen = _ReaderGen(src)
    src.namespace["_cls"] = cls
    src.emit(0, "def read(mv, pos, end):")
    for name, kind in layout:
        gen.field(name if kind.name != "size" else "_", kind, 1)
    gen.flush(1)
    src.emit(1, "o = _new(_cls)")
    for name, kind in layout:
        if kind.name != "size":
            src.emit(1, f"_set(o, '{name}', {name})")
    src.emit(1, "return o, pos")
    return src.compile("read")


def _compile_writer(layout: list[tuple[str, Kind]]) -> Writer:
    src = _Source()
    gen = _WriterGen(src)
    src.emit(0, "def write(o, out):")
    size_slots: list[tuple[str, int]] = []  # (placeholder variable, fields still to cover)
    for name, kind in layout:
        if kind.name == "size":
            gen.flush(1)
            slot = src.temporary()
            src.emit(1, f"{slot} = len(out)")
            src.emit(1, "out.append(b'')")
            size_slots.append((slot, kind.covered_fields))
            continue
        gen.field(f"o.{name}", kind, 1)
        size_slots = [(slot, left - 1) for slot, left in size_slots]
        for slot, left in size_slots:
            if left == 0:
                gen.flush(1)
                src.emit(1, f"out[{slot}] = _I32.pack(sum(map(len, out[{slot} + 1:])))")
        size_slots = [(slot, left) for slot, left in size_slots if left > 0]
    gen.flush(1)
    if len(src.lines) == 1:
        src.emit(1, "pass")
    return src.compile("write")


# --------------------------------------------------------------------------- validation


def _validate_value(kind: Kind, value: Any, field_name: str) -> Any:
    """Checks one field value; returns it, normalised (lists to tuples, buffers to bytes views)."""
    name = kind.name
    if name == "scalar":
        low, high = _INT_RANGES[kind.fmt]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ValueError(f"{field_name}: {value!r} is not an integer in [{low}, {high}]")
        return int(value)
    if name == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{field_name}: {value!r} is not a bool")
        return value
    if name == "uuid":
        if not isinstance(value, uuid.UUID):
            raise ValueError(f"{field_name}: {value!r} is not a UUID")
        return value
    if name == "utf":
        if not isinstance(value, str):
            raise ValueError(f"{field_name}: {value!r} is not a str")
        if len(value) * 3 > f.MAX_UTF_BYTES and len(f.encode_utf(value)) > f.MAX_UTF_BYTES:
            raise ValueError(f"{field_name}: string longer than {f.MAX_UTF_BYTES} encoded bytes")
        return value
    if name in ("buffer", "rest", "event"):
        return _validate_buffer(value, field_name)
    if name == "list":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(f"{field_name}: {value!r} is not a sequence")
        item_kind = cast(Kind, kind.item)
        return tuple(_validate_value(item_kind, item, field_name) for item in value)
    if name == "trailing":
        return _validate_value(cast(Kind, kind.item), value, field_name)
    if name == "composite":
        if not isinstance(value, kind.value_class):
            raise ValueError(f"{field_name}: {value!r} is not a {kind.value_class.__name__}")
        return value
    raise TypeError(name)


def _validate_buffer(value: object, field_name: str) -> f.BytesLike:
    data: f.BytesLike
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, (bytearray, memoryview)):
        data = value if isinstance(value, bytearray) else value.cast("B") if value.format != "B" else value
    else:
        raise ValueError(f"{field_name}: {type(value).__name__} is not a bytes-like buffer")
    if len(data) > MAX_PAYLOAD_SIZE:
        raise ValueError(f"{field_name}: {len(data)} bytes exceed the frame limit")
    return data


# --------------------------------------------------------------------------- class building


class BuiltValue(f.DeclaredValue, Protocol):
    """What ``build`` sets on a declared class (``base.WireValue`` declares the same for type checkers)."""

    KINDS: ClassVar[tuple[Kind, ...]]

    @staticmethod
    def _read(view: memoryview, position: int, end: int) -> tuple[Any, int]: ...

    @staticmethod
    def _write(value: Any, out: list[f.BytesLike]) -> None: ...


W = TypeVar("W", bound=BuiltValue)


def build(cls: type[W], layout_fields: tuple[Any, ...], extra_check: Callable[[Any], None] | None = None) -> type[W]:
    """Turns ``cls`` into the value class of ``layout_fields`` and attaches its codec.

    Sets on the returned class: ``LAYOUT`` (the construct Struct), ``FIELD_NAMES``,
    ``KINDS``, ``_read`` and ``_write``. ``extra_check(instance)`` runs after the
    per-field validation of the constructor.

    Raises:
        TypeError: a construct the codec does not know, or field annotations in ``cls``
            that disagree with the layout (see :func:`_check_declaration`).
    """
    layout = [(field.name, kind_of(field.subcon)) for field in layout_fields]
    value_fields = [(name, kind) for name, kind in layout if kind.name != "size"]
    _check_declaration(cls, value_fields)
    annotations = {name: python_type(kind) for name, kind in value_fields}
    namespace = dict(cls.__dict__)
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    namespace["__annotations__"] = annotations
    for name, kind in value_fields:
        if kind.name == "trailing":
            namespace[name] = kind.default
    new_cls = cast("type[W]", type(cls.__name__, cls.__bases__, namespace))
    new_cls = dataclasses.dataclass(frozen=True, slots=True, repr=False, init=False)(new_cls)
    new_cls.LAYOUT = c.Struct(*layout_fields)
    new_cls.FIELD_NAMES = tuple(name for name, _ in value_fields)
    new_cls.KINDS = tuple(kind for _, kind in value_fields)
    new_cls.__init__ = _make_init(new_cls, value_fields, extra_check)  # type: ignore[method-assign]
    new_cls._read = staticmethod(_compile_reader(new_cls, layout))  # type: ignore[method-assign,assignment]
    new_cls._write = staticmethod(_compile_writer(layout))  # type: ignore[method-assign,assignment]
    return new_cls


def _check_declaration(cls: type, value_fields: list[tuple[str, Kind]]) -> None:
    """Checks the field annotations of a declared class against its layout, if it has any.

    Type checkers see only the annotations (the decorators are dataclass transforms), so they
    must name the layout's fields in order, and exactly the trailing fields must have defaults,
    equal to the layout's. Their types are checked against the layouts by the static-check tests.
    """
    declared = [name for name, text in cls.__dict__.get("__annotations__", {}).items()
                if not str(text).startswith(("ClassVar", "typing.ClassVar"))]
    if not declared:
        return
    names = [name for name, _ in value_fields]
    if declared != names:
        raise TypeError(f"{cls.__name__} annotates the fields {declared}, but its layout has {names}")
    for name, kind in value_fields:
        declared_default = cls.__dict__.get(name, _NO_DEFAULT)
        if kind.name == "trailing" and (declared_default is _NO_DEFAULT or declared_default != kind.default):
            raise TypeError(f"{cls.__name__}.{name} must default to its layout's default {kind.default!r}")
        if kind.name != "trailing" and declared_default is not _NO_DEFAULT:
            raise TypeError(f"{cls.__name__}.{name} is not a trailing field, so it has no default")


_NO_DEFAULT = object()


def _make_init(cls: type, value_fields: list[tuple[str, Kind]],
               extra_check: Callable[[Any], None] | None) -> Callable[..., None]:
    defaults = {name: kind.default for name, kind in value_fields if kind.name == "trailing"}
    names = [name for name, _ in value_fields]
    kinds = dict(value_fields)
    setter = object.__setattr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__} takes {len(names)} fields, got {len(args)}")
        values = dict(zip(names, args, strict=False))  # fewer args than fields: the rest are named or defaulted
        for key, value in kwargs.items():
            if key not in kinds or key in values:
                raise TypeError(f"{cls.__name__}: unexpected or repeated field {key!r}")
            values[key] = value
        for name in names:
            if name not in values:
                if name not in defaults:
                    raise TypeError(f"{cls.__name__}: missing field {name!r}")
                values[name] = defaults[name]
            setter(self, name, _validate_value(kinds[name], values[name], f"{cls.__name__}.{name}"))
        if extra_check is not None:
            extra_check(self)

    return __init__
