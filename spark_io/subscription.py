"""Consumption-based retention from a streaming query (option ``subscriber``): the query's committed
progress holds back the stream's retention, as a Pravega reader group's does.

The query registers a reader group of the given name (in the stream's scope) that subscribes to the
stream with ``MANUAL_RELEASE_AT_USER_STREAMCUT``, starting at the query's start cut. Spark calls the
source's ``commit(end)`` only once the micro-batch ending at ``end`` is in the query's commit log,
so no replay will ever read before ``end``; only then is ``end`` released as the group's subscriber
cut (``updateSubscriberStreamCut``). Retention truncates a stream with a retention policy at its
slowest subscriber (never keeping less than the policy's minimum, never more than its maximum), so
the stream is truncated behind the query's commits, never ahead of them.

The group outlives the query, and its runs: a query restarted from its checkpoint goes on releasing
through the same group (made again if someone deleted it). Deleting the group (``tributary`` CLI,
the SDK's ``delete_reader_group``) stops it holding data back. A release that fails (a controller
unreachable for longer than the client's retries) is logged and made good by the next commit: the
data is then kept a little longer, never dropped early.
"""

from __future__ import annotations

import logging

from clients.client import Client
from clients.errors import InvalidArgument, ReaderGroupNotFound, TributaryError
from clients.reader.reader_group import ReaderGroup, ReaderGroupConfig, StreamDataRetention
from clients.stream_cut import StreamCut

log = logging.getLogger("tributary.spark")
_MANUAL = ReaderGroupConfig(retention=StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT)


class Subscription:
    """The reader group through which one query's commits release its stream."""

    def __init__(self, scope: str, stream: str, group: str):
        self.scope, self.stream, self.group = scope, stream, group
        self._checked = False

    async def join(self, client: Client, start: StreamCut) -> ReaderGroup:
        """The group, made to subscribe from ``start`` if it does not exist yet.

        Raises:
            ValueError: a group of that name exists but reads other streams or does not release manually.
        """
        group = await client.create_reader_group(self.scope, self.group, [start], config=_MANUAL)
        if not self._checked:
            config = await group.group_config()
            if config.retention != StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT or \
                    tuple(config.streams) != (f"{self.scope}/{self.stream}",):
                raise ValueError(f"option subscriber: reader group {self.scope}/{self.group} exists and is not this "
                                 f"query's (it reads {', '.join(config.streams)} with retention "
                                 f"{StreamDataRetention(config.retention).name}); name another group")
            self._checked = True
        return group

    async def release(self, client: Client, end: StreamCut) -> None:
        """Lets retention drop the data before ``end``, the end of a committed micro-batch."""
        try:
            try:
                await client.reader_group(self.scope, self.group).release_at([end])
            except ReaderGroupNotFound:
                await self.join(client, end)  # deleted meanwhile: subscribe again from here
                await client.reader_group(self.scope, self.group).release_at([end])
        except InvalidArgument as error:  # behind the group's cut: another query shares the group, or a reset
            log.warning("the subscriber cut was not moved: the group is already further",
                        extra={"group": f"{self.scope}/{self.group}", "error": str(error)})
        except TributaryError as error:
            log.warning("releasing a committed micro-batch failed; the next commit releases it",
                        extra={"group": f"{self.scope}/{self.group}", "error": repr(error)})


__all__ = ["Subscription"]
