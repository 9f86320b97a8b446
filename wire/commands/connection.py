"""Connection-level frames: version handshake, keep-alive, and the inner frames of append data."""

from __future__ import annotations

from ..base import Command, Inner, Reply, Request, command
from ..fields import I32, BytesLike, Rest


@command(-127, "high_version" / I32, "low_version" / I32)
class Hello(Request, Reply):
    """Version handshake; the first frame each side sends on a connection."""

    high_version: int
    low_version: int

    @property
    def request_id(self) -> int:
        return 0


@command(100)
class KeepAlive(Request, Reply):
    """Echoed by the server; carries nothing."""

    @property
    def request_id(self) -> int:
        return -1


@command(0, "data" / Rest)
class Event(Inner):
    """The envelope of one event inside segment data: never a top-level frame."""

    data: BytesLike


@command(-1, "data" / Rest)
class Padding(Inner):
    """Zero bytes that fill the rest of an AppendBlock; ignored at top level."""

    data: BytesLike


@command(-2, "data" / Rest)
class PartialEvent(Inner):
    """The first part of an event split across an AppendBlock and its AppendBlockEnd."""

    data: BytesLike


__all__ = ["Command", "Event", "Hello", "KeepAlive", "Padding", "PartialEvent"]
