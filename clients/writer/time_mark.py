"""A writer's presence among the time marks of its stream (watermarks): once it has noted a time, the
controller counts it until it is told the writer is gone (removeWriter) or the mark times out there.

Both the event writer (``note_time``) and the transactional writer (a commit with ``timestamp_ms``) note
times; both hold one ``WriterTimeMark`` and call ``gone()`` when they close, so that a closed writer stops
holding the stream's watermarks back at once instead of after the stream's timestamp aggregation timeout.
"""

from __future__ import annotations

import asyncio
import logging

from ..controller_client import Controller
from ..errors import TributaryError

log = logging.getLogger("tributary.writer")
REMOVE_WRITER_SECONDS_MAX = 10.0  # close waits this long at most for the controller to forget the writer


class WriterTimeMark:
    def __init__(self, controller: Controller, writer_id: str, scope: str, stream: str):
        self._controller = controller
        self.writer_id, self.scope, self.stream = writer_id, scope, stream
        self.noted = False  # a time mark was sent: gone() tells the controller

    async def gone(self) -> None:
        """Tells the controller the writer is gone if it ever noted a time (once); failures are logged: the
        mark then times out on the controller."""
        if not self.noted:
            return
        self.noted = False
        try:
            async with asyncio.timeout(REMOVE_WRITER_SECONDS_MAX):
                await self._controller.remove_writer(self.writer_id, self.scope, self.stream)
        except (TimeoutError, TributaryError) as error:
            log.warning("could not tell the controller the writer is gone; its time mark will time out",
                        extra={"writer": self.writer_id, "stream": f"{self.scope}/{self.stream}",
                               "error": repr(error)})
