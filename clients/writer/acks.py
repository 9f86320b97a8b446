"""Acknowledgements of written events, shared by every event of one append block.

A writer hands each ``write`` the :class:`WriteAck` of the block the event went
into, so acknowledging costs one object per block, not one future per event. An
ack counts the events written under it (``expect``) and is settled as blocks
holding them are acknowledged (``settle``), possibly across several segments
after a scale moved some of them; it completes when the count reaches zero, or
fails for all of them at once. Its asyncio future is made only if someone awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any


class WriteAck:
    """Awaitable: completes when every event written under it is durable; raises if they failed."""

    __slots__ = ("_pending", "_future", "_error", "_done")

    def __init__(self) -> None:
        self._pending = 0
        self._future: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._done = False

    def __repr__(self) -> str:
        state = "failed" if self._error else "done" if self._done else f"pending={self._pending}"
        return f"<WriteAck {state}>"

    def done(self) -> bool:
        """True once the events are acknowledged or failed."""
        return self._done

    def exception(self) -> BaseException | None:
        """The failure, if the events failed."""
        return self._error

    def __await__(self) -> Generator[Any, None, None]:

        if not self._done:
            if self._future is None:
                self._future = asyncio.get_running_loop().create_future()
            yield from asyncio.shield(self._future).__await__()
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------------ the writer's side

    def expect(self, events: int) -> None:
        self._pending += events

    def settle(self, events: int) -> None:
        """``events`` of this ack's events are durable."""
        self._pending -= events
        if self._pending <= 0 and not self._done:
            self._done = True
            if self._future is not None and not self._future.done():
                self._future.set_result(None)

    def fail(self, error: BaseException) -> None:
        """Every event still pending under this ack failed with ``error``."""
        if self._done:
            return
        self._done, self._error = True, error
        if self._future is not None and not self._future.done():
            self._future.set_exception(error)
            self._future.exception()  # retrieved here: an ack nobody awaits must not warn
