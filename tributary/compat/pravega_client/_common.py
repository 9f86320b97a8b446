"""What the modules of the compatibility API share: the exception the binding defines, the way its
objects refuse direct construction, argument checks with the binding's messages, and the text of
its ``repr``s (which print Rust's ``Debug`` form of the client's values)."""

from __future__ import annotations

from typing import Any, TypeVar

_Made = TypeVar("_Made", bound="Internal")


class TxnFailedException(Exception):
    """A transaction has failed: it was committed or aborted already, or it timed out.

    ``args[0]`` is the transaction id (an int), as the binding raises it.
    """


class Internal:
    """A class whose objects only the API makes (``StreamManager.create_writer`` and the like); calling
    the class raises TypeError, as the binding's classes without a constructor do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("No constructor defined")

    @classmethod
    def _new(cls: type[_Made]) -> _Made:
        return object.__new__(cls)


def check_type(value: Any, kind: type, argument: str) -> None:
    """Raises the TypeError the binding raises for an argument of the wrong type."""
    if not isinstance(value, kind):
        names: dict[type, str] = {str: "PyString", bytes: "PyBytes", bytearray: "PyByteArray"}
        raise TypeError(f"argument '{argument}': '{type(value).__name__}' object cannot be converted to "
                        f"'{names.get(kind, kind.__name__)}'")


def check_routing_key(routing_key: Any) -> None:
    if routing_key is not None:
        check_type(routing_key, str, "routing_key")


def debug_string(text: str) -> str:
    """Rust's ``Debug`` form of a string: quoted, with quotes and backslashes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scoped_stream_text(scope: str, stream: str) -> str:
    """``ScopedStream { scope: Scope { name: "s" }, stream: Stream { name: "t" } }``."""
    return (f"ScopedStream {{ scope: Scope {{ name: {debug_string(scope)} }}, "
            f"stream: Stream {{ name: {debug_string(stream)} }} }}")


def stream_cut_text(scope: str, stream: str, positions: dict[int, int]) -> str:
    offsets = ", ".join(f"{segment}: {offset}" for segment, offset in sorted(positions.items()))
    return f"StreamCut {{ scoped_stream: {scoped_stream_text(scope, stream)}, segment_offset_map: {{{offsets}}} }}"


def error_text(error: BaseException) -> str:
    """How a failure of the SDK appears in the messages: its class and its message."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
