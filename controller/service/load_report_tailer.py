"""Following the segment stores' load reports: one tail per container's report segment.

Theory of operation. Each segment container appends its load reports to its own report segment
(``wire.naming.load_report_segment_name``; ``wire.load_reports`` is the format). A ``ReportTailer``
follows one of them: it starts at the segment's head (what is left after truncation: the reports of
the last ``cold_mark_seconds`` at most, so a restarted controller sees again what may still
matter), then reads from where it stopped. A read at the end of the segment is a long poll: the
store answers when the next reports are appended (or closes the connection after its tail-read
limit, and the tailer asks again). So an idle system costs one parked read per container and no
work per segment. What the tailer reads it cuts into reports (``ReportSplitter``) and hands to
``deliver``. A read refused because the head moved (another controller truncated) skips to the new
head; a segment not created yet (no report so far) is looked for again after a pause.

Truncation: the tailer remembers where each report it read ends and when it was decided; now and
then (``truncate_interval_seconds``) it truncates the segment up to the first report younger than
``cold_mark_seconds`` -- older ones are ignored by every controller anyway, so several controllers
tailing the same segment (a cluster) may each truncate without coordinating.

Reads go through a client of their own (``ControllerContext.report_reads``), so a parked read never
shares a connection with the controller's other calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence

from clients import errors as client_errors
from clients.segment_store_client import SegmentStoreClient
from wire import naming
from wire.errors import ProtocolError
from wire.load_reports import LoadReport, ReportSplitter

from .auto_scale_settings import AutoScaleSettings

log = logging.getLogger("tributary.controller")
RETRY_PAUSE_SECONDS = 0.5  # after a failed read (a store restarting, a container moving)

Deliver = Callable[[Sequence[LoadReport]], None]


class ReportTailer:
    """Follows one report segment (see the module docstring)."""

    def __init__(self, segment: str, client: SegmentStoreClient, deliver: Deliver, now_ms: Callable[[], int],
                 settings: AutoScaleSettings):
        self.segment = segment
        self._client = client
        self._deliver = deliver
        self._now_ms = now_ms
        self._settings = settings
        self.offset = -1  # where the next read starts (-1: not found yet)
        self._splitter = ReportSplitter()
        self._base = 0  # the segment offset where the splitter started
        self._ends: deque[tuple[int, int]] = deque()  # (offset where a report ends, its timestamp), oldest first
        self._truncated_at = 0
        self.reports_read = 0

    async def run(self) -> None:
        """Follows the segment (and truncates it now and then) until cancelled."""
        truncating = asyncio.get_running_loop().create_task(self._truncate_forever())
        try:
            await self._follow()
        finally:
            truncating.cancel()
            await asyncio.gather(truncating, return_exceptions=True)

    async def _follow(self) -> None:
        while True:
            try:
                if self.offset < 0:
                    await self._find_head()
                else:
                    await self._read_once()
            except client_errors.NoSuchSegment:
                self._restart_at(-1)
                await asyncio.sleep(self._settings.missing_segment_wait_seconds)
            except client_errors.SegmentTruncated:
                self._restart_at(-1)  # another controller truncated past us: start again at the head
            except (client_errors.ConnectionFailed, client_errors.RequestTimeout) as error:
                # Usually the store ending a parked read (its tail-read limit) by closing the connection.
                log.debug("load report read ended; asking again", extra={"segment": self.segment,
                                                                         "error": repr(error)})
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
            except (client_errors.ClientError, ProtocolError) as error:
                log.info("load report read failed; retrying", extra={"segment": self.segment, "error": repr(error)})
                if isinstance(error, ProtocolError):
                    self._restart_at(-1)
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
            except Exception as error:  # noqa: BLE001 - a tail must outlive any one failure
                log.warning("load report tail failed; starting again", extra={"segment": self.segment,
                                                                             "error": repr(error)})
                self._restart_at(-1)
                await asyncio.sleep(self._settings.missing_segment_wait_seconds)

    def _restart_at(self, offset: int) -> None:
        self.offset = self._base = offset
        self._splitter = ReportSplitter()
        self._ends.clear()

    async def _find_head(self) -> None:
        info = await self._client.segment_info(self.segment)
        self._restart_at(info.start_offset)
        self._truncated_at = info.start_offset

    async def _read_once(self) -> None:
        reply = await self._client.read_segment(self.segment, self.offset, self._settings.read_bytes_max)
        data = reply.data
        if not data:
            return
        ended = self._splitter.feed_records(data)
        self.offset += len(data)
        if ended:
            self._ends.extend((self._base + end, report.timestamp_ms) for end, report in ended)
            self.reports_read += len(ended)
            self._deliver([report for _, report in ended])

    async def _truncate_forever(self) -> None:
        """Every ``truncate_interval_seconds`` (beside a read parked at the tail), truncates behind old reports."""
        while True:
            await asyncio.sleep(self._settings.truncate_interval_seconds)
            try:
                await self.truncate_expired(self._now_ms())
            except client_errors.ClientError as error:  # the next round tries again
                log.info("load report truncation failed", extra={"segment": self.segment, "error": repr(error)})

    async def truncate_expired(self, now: int) -> None:
        """Truncates the segment behind the reports read so far that are older than the cold-mark period."""
        horizon = now - self._settings.cold_mark_ms
        target = self._truncated_at
        while self._ends and self._ends[0][1] < horizon:  # the young reports start where the last old one ends
            target = self._ends.popleft()[0]
        if target > self._truncated_at:
            await self._client.truncate_segment(self.segment, target)
            self._truncated_at = target


class ReportTailers:
    """A tailer per container; ``run`` follows them all until cancelled."""

    def __init__(self, container_count: int, client: SegmentStoreClient, deliver: Deliver,
                 now_ms: Callable[[], int], settings: AutoScaleSettings):
        self.tailers = [ReportTailer(naming.load_report_segment_name(container), client, deliver, now_ms, settings)
                        for container in range(container_count)]

    async def run(self) -> None:
        tasks = [asyncio.get_running_loop().create_task(tailer.run(), name=f"tail {tailer.segment}")
                 for tailer in self.tailers]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

