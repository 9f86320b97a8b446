"""Attaching a flow (a segment writer or reader) to the connection of its segment's store, with retries.

Every flow reconnects the same way after a lost connection or a WrongHost: look
the segment's endpoint up, get a connection from its owner's cache, open the
flow on it, and, if any of that fails with a retriable error, try again after
the next delay of its backoff policy. :class:`FlowAttacher` is that loop, once.
Every attempt after the flow was attached once (it lost its connection: the store
died, went silent or closed it) and every attempt after a store could not be
reached forgets the segment's cached endpoint first, so it asks the controller where
the segment lives now (as the Rust client does on every reconnect): a container that
moved is found at its new owner at once, not after the cache expires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from coordination.retry import Backoff, is_retriable

from .connection import ConnectionFactory, EndpointResolver, Flow, WireConnection
from .errors import ConnectionFailed, TributaryError


class FlowAttacher:
    """Connects one flow, retrying under ``policy``.

    ``attach(delay)`` schedules one attempt (unless one is already scheduled): resolve the
    endpoint, get a connection, open the flow on it, then call ``on_attached(connection)``.
    A retriable failure schedules another attempt after the policy's next delay; a
    non-retriable one, or a spent budget, calls ``on_failed(error)``. ``progress()`` (a
    reply showed the flow works) restarts the budget.
    """

    def __init__(self, segment: str, request_id: int, flow: Flow, *, endpoint_of: EndpointResolver,
                 connection_for: ConnectionFactory, policy: Backoff,
                 on_attached: Callable[[WireConnection], None], on_failed: Callable[[BaseException], None],
                 purpose: str, forget_endpoint: Callable[[str], None] = lambda _segment: None):
        self._segment = segment
        self._request_id = request_id
        self._flow = flow
        self._endpoint_of = endpoint_of
        self._forget_endpoint = forget_endpoint
        self._connection_for = connection_for
        self._policy = policy
        self._on_attached = on_attached
        self._on_failed = on_failed
        self._purpose = purpose
        self._delays: Iterator[float] | None = None
        self._task: asyncio.Task[None] | None = None
        self._relocate = False  # the next attempt asks the controller again (the flow was attached before)


    @property
    def pending(self) -> bool:
        """An attempt is scheduled or running."""
        return self._task is not None and not self._task.done()

    def attach(self, delay: float | None = 0.0) -> None:
        """Schedules an attempt after ``delay`` seconds (None: the policy's next delay)."""
        if self.pending:
            return
        if delay is None:
            if self._delays is None:
                self._delays = self._policy.delays()
            delay = next(self._delays, None)
            if delay is None:
                self._on_failed(ConnectionFailed(f"could not re-establish the {self._purpose} connection of "
                                                 f"{self._segment}"))
                return
        self._task = asyncio.get_running_loop().create_task(self._attempt(delay))

    def progress(self) -> None:
        self._delays = None

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _attempt(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        try:
            if self._relocate:
                self._forget_endpoint(self._segment)
                self._relocate = False
            endpoint = await self._endpoint_of(self._segment)
            try:
                connection = await self._connection_for(endpoint)
            except ConnectionFailed:
                self._forget_endpoint(self._segment)  # ask the controller again next time
                raise
            connection.open_flow(self._request_id, self._flow)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - retriable ones are retried, the rest end the flow
            self._task = None
            if is_retriable(error):
                self.attach(None)
            else:
                self._on_failed(error if isinstance(error, TributaryError) else ConnectionFailed(repr(error)))
            return
        self._task = None
        self._relocate = True
        self._on_attached(connection)
