"""Connection-level frames: version handshake, keep-alive, and the inner frames of append data."""

from ..base import Command, Inner, Reply, Request, command
from ..fields import I32, Rest


@command(-127, "high_version" / I32, "low_version" / I32)
class Hello(Request, Reply):
    """Version handshake; the first frame each side sends on a connection."""

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


@command(-1, "data" / Rest)
class Padding(Inner):
    """Zero bytes that fill the rest of an AppendBlock; ignored at top level."""


@command(-2, "data" / Rest)
class PartialEvent(Inner):
    """The first part of an event split across an AppendBlock and its AppendBlockEnd."""


__all__ = ["Command", "Event", "Hello", "KeepAlive", "Padding", "PartialEvent"]
