"""In-memory stand-ins for the connection layer's surroundings: no sockets, no clocks, no sleeps.

* :class:`FakeContainer` -- the container methods the connection layer calls; every
  ``submit_event_append`` returns a future the test resolves, in any order;
* :class:`FakeTransport` -- records what the server writes, its pause/resume_reading calls and its close;
* :class:`FakeHandlers` -- replaces a connection's request handlers: each request waits on a future the
  test resolves, so these tests do not depend on ``server.handlers`` or the containers;
* :class:`Client` -- one SegmentStoreConnection on a FakeTransport, fed frames built with ``wire``;
* :func:`settle` -- runs the event loop until nothing is ready to run (no time passes).
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import wire
from server import errors
from server.connection import ConnectionLimits, SegmentStoreConnection
from server.containers.writer_attributes import WriterClaim, WriterClaims
from wire import commands as c
from wire.constants import NULL_ATTRIBUTE_VALUE
from wire.envelope import envelope_all

SEGMENT = "scope/stream/0.#epoch.0"
OTHER_SEGMENT = "scope/stream/1.#epoch.0"


async def settle() -> None:
    """Lets every callback and task that is ready run, until none is; timers are not waited for."""
    loop = asyncio.get_running_loop()
    for _ in range(10_000):
        await asyncio.sleep(0)  # one turn of the loop, not a wait
        if not getattr(loop, "_ready", ()):
            return
    raise AssertionError("the event loop never became idle")


class Submission:
    """One ``submit_event_append`` call; the test decides its outcome."""

    def __init__(self, segment, data, writer_id, event_number, previous, event_count, expected_offset, future):
        self.segment = segment
        self.data = bytes(data)
        self.writer_id = writer_id
        self.event_number = event_number
        self.previous = previous
        self.event_count = event_count
        self.expected_offset = expected_offset
        self.future: asyncio.Future = future

    def __repr__(self) -> str:
        return f"<Submission {self.writer_id.int}:{self.event_number} done={self.future.done()}>"

    def land_at(self, offset: int) -> None:
        """The data was stored at ``offset``."""
        self.future.set_result(offset)

    def fail(self, error: BaseException) -> None:
        self.future.set_exception(error)


class FakeContainer:
    """What the connection layer uses of a container: get_attribute, has_pending, settled, get_info,
    submit_event_append, flush_if_idle, delete_soon, claim_writer/release_writer, deleted_writer."""

    def __init__(self):
        self.attributes: dict = {}  # (segment, attribute id) -> value
        self.deleted_writers: dict = {}  # (deleted segment, writer id) -> the last event number it stored
        self.lengths: dict = {}  # segment -> length reported by get_info
        self.failures: dict = {}  # segment -> error raised by get_attribute / get_info
        self.submissions: list[Submission] = []
        self.deleted: list[str] = []
        self.flushes = 0  # calls of flush_if_idle: the connection hands a read's appends over at once
        self.claims = WriterClaims()

    def claim_writer(self, segment: str, writer_id) -> WriterClaim:
        return self.claims.claim(segment, writer_id)

    def release_writer(self, claim: WriterClaim) -> None:
        self.claims.release(claim)

    @property
    def attached(self) -> set:
        """(segment, writer id) of the writers a connection has set up."""
        return set(self.claims)

    def deleted_writer(self, segment: str, attribute_id) -> int | None:
        return self.deleted_writers.get((segment, attribute_id))

    def get_attribute(self, segment: str, attribute_id) -> int:
        if segment in self.failures:
            raise self.failures[segment]
        return self.attributes.get((segment, attribute_id), NULL_ATTRIBUTE_VALUE)

    def has_pending(self, segment: str) -> bool:
        return any(submission.segment == segment for submission in self.pending())

    async def settled(self) -> None:
        pending = [submission.future for submission in self.pending()]
        if pending:
            await asyncio.wait(pending)

    def get_info(self, segment: str):
        if segment in self.failures:
            raise self.failures[segment]
        return SimpleNamespace(length=self.lengths.get(segment, 0))

    def submit_event_append(self, name, data, writer_id, event_number, previous_event_number, event_count,
                            expected_offset) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.submissions.append(Submission(name, data, writer_id, event_number, previous_event_number, event_count,
                                           expected_offset, future))
        return future

    def flush_if_idle(self) -> None:
        self.flushes += 1

    def delete_soon(self, name: str) -> asyncio.Future:
        self.deleted.append(name)
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    def pending(self) -> list[Submission]:
        return [submission for submission in self.submissions if not submission.future.done()]


class Routes:
    """``container_for`` / ``container_by_id`` / ``cache`` over one FakeContainer; segments in
    ``elsewhere`` belong to another host."""

    def __init__(self, container: FakeContainer, cache=None):
        self.container = container
        self.cache = cache
        self.elsewhere: set[str] = set()

    def container_for(self, segment: str) -> FakeContainer:
        if segment in self.elsewhere:
            raise errors.WrongHost(segment)
        return self.container

    def container_by_id(self, container_id: int) -> list:
        return [self.container]


class FakeCache:
    """A cache whose throttling the test switches."""

    def __init__(self):
        self.throttled = False
        self._relief: list = []

    def when_relieved(self, callback) -> None:
        if not self.throttled:
            callback()
        else:
            self._relief.append(callback)

    def relieve(self) -> None:
        self.throttled = False
        callbacks, self._relief = self._relief, []
        for callback in callbacks:
            callback()


class FakeTransport:
    """Records the server's output and reading state; ``close`` reports connection_lost on the next turn,
    as asyncio's transports do."""

    def __init__(self, protocol: asyncio.Protocol):
        self._protocol = protocol
        self.output = bytearray()
        self.reading = True
        self.reading_changes: list[str] = []  # "pause" / "resume", each time the state changes
        self.closed = False
        self.closed_event = asyncio.Event()
        self.high_water = None

    def get_extra_info(self, name, default=None):
        return ("in-memory", 0) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self.high_water = high

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        assert not self.closed, "write after close"
        self.output += data

    def writelines(self, parts) -> None:
        for part in parts:
            self.write(part)

    def pause_reading(self) -> None:
        if self.reading:
            self.reading = False
            self.reading_changes.append("pause")

    def resume_reading(self) -> None:
        if not self.reading:
            self.reading = True
            self.reading_changes.append("resume")

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.closed_event.set()
        asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)


class FakeHandlers:
    """Stands in for ``RequestHandlers``: each request waits until the test answers it."""

    def __init__(self):
        self.requests: list[tuple[object, asyncio.Future]] = []

    async def handle(self, command):
        future = asyncio.get_running_loop().create_future()
        self.requests.append((command, future))
        return await future

    def answer(self, index: int, reply) -> None:
        self.requests[index][1].set_result(reply)

    def fail(self, index: int, error: BaseException) -> None:
        self.requests[index][1].set_exception(error)


class Client:
    """The client end of one in-memory connection: sends frames, reads the server's replies."""

    def __init__(self, container: FakeContainer | None = None, limits: ConnectionLimits | None = None,
                 cache=None, fake_handlers: bool = True):
        self.container = container or FakeContainer()
        self.routes = Routes(self.container, cache)
        self.closed_reports: list = []
        self.connection = SegmentStoreConnection(self.routes, limits or ConnectionLimits(),
                                                 on_closed=self.closed_reports.append)
        self.handlers = FakeHandlers()
        if fake_handlers:
            self.connection._handlers = self.handlers
        self.transport = FakeTransport(self.connection)
        self.connection.connection_made(self.transport)
        self._decoder = wire.Decoder()
        self._read = 0

    def send(self, *commands) -> None:
        """Delivers the frames of ``commands`` in one chunk."""
        self.send_bytes(b"".join(wire.encode(command) for command in commands))

    def send_bytes(self, data: bytes) -> None:
        self.connection.data_received(data)

    def replies(self) -> list:
        """The replies written since the last call."""
        new = bytes(self.transport.output[self._read:])
        self._read = len(self.transport.output)
        self._decoder.feed(new)
        return list(self._decoder.commands())

    @property
    def closed(self) -> bool:
        return self.transport.closed

    async def setup(self, writer: uuid.UUID, segment: str = SEGMENT, request_id: int = 1):
        self.send(c.SetupAppend(request_id, writer, segment, ""))
        await settle()
        (reply,) = self.replies()
        assert isinstance(reply, c.AppendSetup), reply
        return reply


def append(writer: uuid.UUID, event_number: int, payload: bytes = b"event", request_id: int | None = None,
           events: int = 1) -> c.AppendBlockEnd:
    """The AppendBlockEnd a Rust writer sends: ``events`` events ending at ``event_number``."""
    data = envelope_all([payload] * events)
    return c.AppendBlockEnd(writer, len(data), data, events, event_number,
                            event_number if request_id is None else request_id)
