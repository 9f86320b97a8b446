"""One ``SegmentStoreConnection`` driven through an in-memory transport: frames in, replies out.

Frames are built with ``wire``; the fake transport records the server's output, its
pause/resume_reading calls and its close. Containers and request handlers are fakes whose futures
the test resolves (see ``fakes``), so every step is deterministic: nothing sleeps, and ``settle()``
only runs what is ready (protocol reference §1.8, §3.1, §3.2, §3.4).
"""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from server import errors
from server.connection import ConnectionLimits
from server.replies import CloseConnection
from tests.unit.server.fakes import SEGMENT, Client, FakeCache, FakeContainer, append, settle
from wire import commands as c
from wire.constants import NULL_ATTRIBUTE_VALUE
from wire.envelope import envelope

WRITER = uuid.UUID(int=0xA)
OTHER_WRITER = uuid.UUID(int=0xB)
EVENT = envelope(b"event")
GARBAGE = b"\x13\x37" * 8  # an unknown type code


@pytest.fixture
async def client():
    return Client()


# ---------------------------------------------------------------- Hello, KeepAlive


async def test_hello_is_answered_with_15_5(client):
    client.send(c.Hello(15, 5))
    await settle()
    assert client.replies() == [c.Hello(15, 5)] and not client.closed


async def test_incompatible_hello_gets_hello_then_close(client):
    client.send(c.Hello(3, 1), c.KeepAlive())
    await settle()
    assert client.replies() == [c.Hello(15, 5)] and client.closed


async def test_keep_alive_is_echoed(client):
    client.send(c.KeepAlive(), c.KeepAlive())
    await settle()
    assert client.replies() == [c.KeepAlive(), c.KeepAlive()] and not client.closed


async def test_a_v11_client_is_closed_instead_of_sent_error_message(client):
    """A client whose Hello said high version 11 cannot decode ErrorMessage: the connection closes instead."""
    client.send(c.Hello(11, 5), c.CreateSegment(7, "", 0, 0, ""))
    await settle()
    client.handlers.answer(0, c.ErrorMessage(7, "", "invalid name", c.ErrorMessage.ILLEGAL_ARGUMENT))
    await settle()
    assert client.replies() == [c.Hello(15, 5)] and client.closed


async def test_a_v15_client_gets_error_message(client):
    client.send(c.Hello(15, 5), c.CreateSegment(7, "", 0, 0, ""))
    await settle()
    error = c.ErrorMessage(7, "", "invalid name", c.ErrorMessage.ILLEGAL_ARGUMENT)
    client.handlers.answer(0, error)
    await settle()
    assert client.replies() == [c.Hello(15, 5), error] and not client.closed


# ---------------------------------------------------------------- appends


async def test_setup_append_is_answered_with_the_last_event_number(client):
    client.container.attributes[(SEGMENT, WRITER)] = 17
    assert await client.setup(WRITER, request_id=5) == c.AppendSetup(5, SEGMENT, WRITER, 17)
    assert await client.setup(OTHER_WRITER, request_id=6) == c.AppendSetup(6, SEGMENT, OTHER_WRITER,
                                                                           NULL_ATTRIBUTE_VALUE)


async def test_setup_append_waits_for_an_append_of_the_segment_still_being_logged(client):
    """A writer whose connection dropped while its append was being logged sets up again on another: the answer
    waits until the append is durable, and names it. Answered with the number before it, the writer would send
    the event again, and if a seal came meanwhile, write it to the successor too (simulation seed 10)."""
    await client.setup(WRITER)
    in_flight, other = await _set_up_elsewhere_while_logging(client, 19, drop_first=True)
    assert other.replies() == []  # not "nothing stored yet" while event 19 is on its way to the log
    client.container.attributes[(SEGMENT, WRITER)] = 19
    in_flight.land_at(0)
    await settle()
    assert other.replies() == [c.AppendSetup(7, SEGMENT, WRITER, 19)]


async def _set_up_elsewhere_while_logging(client: Client, event_number: int, *, drop_first: bool = False):
    """WRITER's append ``event_number`` is being logged (sent on ``client``) when the writer sends SetupAppend
    (request 7) on another connection (``drop_first``: after ``client`` was lost). Returns the append's submission
    and the other connection."""
    client.send(append(WRITER, event_number))
    await settle()
    [in_flight] = client.container.pending()
    if drop_first:
        client.connection.connection_lost(None)
    other = Client(client.container)
    other.send(c.SetupAppend(7, WRITER, SEGMENT, ""))
    await settle()
    return in_flight, other


async def _stored_and_acknowledged(client: Client, event_number: int) -> list[int]:
    """Sends WRITER's append ``event_number`` on ``client``, stores it, and returns the event numbers acknowledged
    (the connection still open)."""
    client.send(append(WRITER, event_number))
    await settle()
    client.container.submissions[-1].land_at(0)
    await settle()
    assert not client.closed
    return [reply.event_number for reply in client.replies()]


async def test_an_append_arriving_on_a_connection_the_writer_has_set_up_again_elsewhere_is_refused(client):
    """A writer gave up a connection (its acks were late) and set up on another, which named event 18 the last
    stored. Event 19, sent on the old connection and held up on its way, arrives now: written, the writer would
    send it again on the new one, and across a seal to the successor as well: read twice (simulation seed 196).
    The old connection is told InvalidEventNumber instead and stores nothing (it stays open: other flows may share
    it); the new one goes on."""
    await client.setup(WRITER)
    client.container.attributes[(SEGMENT, WRITER)] = 18
    other = Client(client.container)
    assert await other.setup(WRITER, request_id=7) == c.AppendSetup(7, SEGMENT, WRITER, 18)
    client.send(append(WRITER, 19, request_id=40))
    await settle()
    assert client.container.submissions == [] and not client.closed  # (other flows may share the connection)
    assert client.replies() == [c.InvalidEventNumber(WRITER, 40, "", 19)]  # a zombie's reply, as Java gives it
    assert await _stored_and_acknowledged(other, 19) == [19]
    assert len(client.container.submissions) == 1


async def test_a_setup_waiting_for_the_log_already_fences_the_old_connection(client):
    """The claim is taken when SetupAppend arrives, not when it is answered: an append reaching the old
    connection while the setup waits for an earlier one to be logged is refused too, so the answer names every
    event the segment will ever hold of this writer from the old connection."""
    await client.setup(WRITER)
    in_flight, other = await _set_up_elsewhere_while_logging(client, 19)
    client.send(append(WRITER, 20, request_id=20))
    await settle()
    assert len(client.container.submissions) == 1
    assert client.replies() == [c.InvalidEventNumber(WRITER, 20, "", 20)]
    client.container.attributes[(SEGMENT, WRITER)] = 19
    in_flight.land_at(0)
    await settle()
    assert other.replies() == [c.AppendSetup(7, SEGMENT, WRITER, 19)]


async def test_setup_on_a_deleted_segment_names_what_it_stored_of_the_writer(client):
    """The segment was sealed and deleted (a truncation) while the writer was away with events 18 and 19 in
    doubt; the store stored 18. AppendSetup names 18, so the writer acknowledges it and resends only 19, which
    is answered NoSuchSegment: only 19 goes to the successors (simulation seed 196). A writer the deleted
    segment never stored, or a segment never remembered, still gets NoSuchSegment."""
    client.container.failures[SEGMENT] = errors.NoSuchSegment(SEGMENT)
    client.container.deleted_writers[(SEGMENT, WRITER)] = 18
    assert await client.setup(WRITER, request_id=5) == c.AppendSetup(5, SEGMENT, WRITER, 18)
    client.send(append(WRITER, 18), append(WRITER, 19))
    await settle()
    [resent] = client.container.submissions
    assert resent.event_number == 19
    resent.fail(errors.NoSuchSegment(SEGMENT))
    await settle()
    assert [type(reply) for reply in client.replies()] == [c.DataAppended, c.NoSuchSegment]
    client.send(c.SetupAppend(6, OTHER_WRITER, SEGMENT, ""))
    await settle()
    assert client.replies() == [c.NoSuchSegment(6, SEGMENT, "", -1)]


async def test_setting_a_writer_up_again_on_the_same_connection_keeps_it_appending(client):
    """Only another setup takes the claim away: the same writer set up again on its connection appends on."""
    await client.setup(WRITER)
    await client.setup(WRITER, request_id=9)
    assert await _stored_and_acknowledged(client, 1) == [1]


async def test_setup_append_after_a_failed_append_names_the_last_stored_event(client):
    await client.setup(WRITER)
    client.container.attributes[(SEGMENT, WRITER)] = 18
    in_flight, other = await _set_up_elsewhere_while_logging(client, 19)
    in_flight.fail(errors.ContainerUnavailable("the log failed"))
    await settle()
    assert other.replies() == [c.AppendSetup(7, SEGMENT, WRITER, 18)]


async def test_appends_are_acknowledged_in_order_per_writer(client):
    """Three appends in one packet; the container finishes them last first; the acks leave 1, 2, 3."""
    await client.setup(WRITER)
    client.send(*(append(WRITER, n) for n in (1, 2, 3)))
    await settle()
    first, second, third = client.container.submissions
    assert [s.data for s in client.container.submissions] == [EVENT] * 3
    third.land_at(2 * len(EVENT))
    second.land_at(len(EVENT))
    await settle()
    assert client.replies() == []
    first.land_at(0)
    await settle()
    assert [(r.event_number, r.previous_event_number, r.current_segment_write_offset) for r in client.replies()] == [
        (1, NULL_ATTRIBUTE_VALUE, len(EVENT)), (2, 1, 2 * len(EVENT)), (3, 2, 3 * len(EVENT))]


async def test_the_appends_of_one_read_are_submitted_and_handed_over_in_that_read(client):
    """No loop turn between the socket read and the log: the read is pumped at once, and the container is
    told once, after the read's last append, that it may hand them to an idle log."""
    await client.setup(WRITER)
    flushes = client.container.flushes
    client.send(*(append(WRITER, n) for n in (1, 2, 3)))
    assert len(client.container.submissions) == 3  # synchronously, within data_received
    assert client.container.flushes == flushes + 1


async def test_duplicates_are_acknowledged_without_being_written(client):
    client.container.attributes[(SEGMENT, WRITER)] = 2
    client.container.lengths[SEGMENT] = 2 * len(EVENT)
    await client.setup(WRITER)
    client.send(append(WRITER, 1), append(WRITER, 2), append(WRITER, 3))
    await settle()
    assert [s.event_number for s in client.container.submissions] == [3]
    assert client.replies() == [c.DataAppended(WRITER, 1, 2, 1, 2 * len(EVENT)),
                                c.DataAppended(WRITER, 2, 2, 2, 2 * len(EVENT))]


async def test_an_append_block_is_reassembled_into_one_append(client):
    """A Java client's AppendBlock + AppendBlockEnd (split event) become one submission of the joined bytes."""
    await client.setup(WRITER)
    whole, split = envelope(b"first"), envelope(b"second")
    partial = wire.encode(c.PartialEvent(split[:5]))
    client.send(c.AppendBlock(WRITER, whole + partial), c.AppendBlockEnd(WRITER, len(whole), split[5:], 2, 2, 9))
    await settle()
    (submission,) = client.container.submissions
    assert (submission.data, submission.event_number, submission.event_count) == (whole + split, 2, 2)


async def test_event_numbers_going_backwards_close_the_connection(client):
    await client.setup(WRITER)
    client.send(append(WRITER, 5), append(WRITER, 4), c.KeepAlive())
    await settle()
    assert client.closed and client.replies() == []
    assert [s.event_number for s in client.container.submissions] == [5]


async def test_append_without_setup_closes_the_connection(client):
    client.send(append(WRITER, 1), c.KeepAlive())
    await settle()
    assert client.closed and client.replies() == [] and client.container.submissions == []
    assert client.closed_reports == [client.connection]  # connection_lost reached the service


async def test_conditional_append_at_the_wrong_offset_gets_conditional_check_failed(client):
    await client.setup(WRITER)
    client.send(c.ConditionalAppend(WRITER, 1, 0, b"x", 21))
    await settle()
    client.container.submissions[0].fail(errors.BadOffset(SEGMENT, 0, 9))
    await settle()
    assert client.replies() == [c.ConditionalCheckFailed(WRITER, 1, 21)] and not client.closed


async def test_zombie_writer_gets_invalid_event_number_and_the_connection_closes(client):
    await client.setup(WRITER)
    client.send(append(WRITER, 4, request_id=40))
    await settle()
    client.container.submissions[0].fail(errors.BadAttributeUpdate(SEGMENT, WRITER, 3, 4))
    await settle()
    assert client.replies() == [c.InvalidEventNumber(WRITER, 40, "", 4)] and client.closed


@pytest.mark.parametrize("error, expected", [
    (errors.NoSuchSegment(SEGMENT), c.NoSuchSegment(7, SEGMENT, "", -1)),
    (errors.SegmentIsSealed(SEGMENT), c.SegmentIsSealed(7, SEGMENT, "", 7)),
    (errors.WrongHost(SEGMENT), c.WrongHost(7, SEGMENT, "", "")),
], ids=["NoSuchSegment", "SegmentIsSealed", "WrongHost"])
async def test_failed_appends_are_answered_and_the_writer_must_set_up_again(client, error, expected):
    await client.setup(WRITER)
    client.send(append(WRITER, 7))
    await settle()
    client.container.submissions[0].fail(error)
    await settle()
    assert client.replies() == [expected] and not client.closed
    await client.setup(WRITER)  # set up again: appends are taken
    client.send(append(WRITER, 8))
    await settle()
    assert [s.event_number for s in client.container.submissions] == [7, 8] and not client.closed


async def test_an_append_after_a_failure_without_setup_is_dropped(client):
    """Sent before the writer read of the failure: dropped unanswered, nothing stored, the connection open (it
    may carry other writers); after a new SetupAppend the writer appends again."""
    await client.setup(WRITER)
    client.send(append(WRITER, 7))
    await settle()
    client.container.submissions[0].fail(errors.SegmentIsSealed(SEGMENT))
    await settle()
    assert client.replies() == [c.SegmentIsSealed(7, SEGMENT, "", 7)]
    client.send(append(WRITER, 8))
    await settle()
    assert not client.closed and len(client.container.submissions) == 1 and client.replies() == []
    await client.setup(WRITER)
    client.send(append(WRITER, 8))
    await settle()
    assert len(client.container.submissions) == 2


async def test_appends_pipelined_behind_a_sealed_one_keep_the_connection_and_its_reply(client):
    """Events 7, 8, 9 in flight when the segment is sealed: 7 is answered SegmentIsSealed, and 8 and 9, whose
    own failures follow from it (8 expected 7 stored), are not answered. Answered InvalidEventNumber, 8 closed the
    connection, and a client still sending got a reset that dropped the SegmentIsSealed unread: it set up again,
    resent, and went round so for seconds (simulation seed 196)."""
    await client.setup(WRITER)
    client.send(*(append(WRITER, n) for n in (7, 8, 9)))
    await settle()
    first, second, third = client.container.submissions
    first.fail(errors.SegmentIsSealed(SEGMENT))
    second.fail(errors.BadAttributeUpdate(SEGMENT, WRITER, 6, 7))
    third.fail(errors.BadAttributeUpdate(SEGMENT, WRITER, 6, 8))
    await settle()
    assert client.replies() == [c.SegmentIsSealed(7, SEGMENT, "", 7)] and not client.closed


@pytest.mark.parametrize("error, expected", [
    (errors.NoSuchSegment(SEGMENT), c.NoSuchSegment(1, SEGMENT, "", -1)),
    (errors.WrongHost(SEGMENT), c.WrongHost(1, SEGMENT, "", "")),
], ids=["NoSuchSegment", "WrongHost"])
async def test_setup_errors_are_answered(client, error, expected):
    client.container.failures[SEGMENT] = error
    client.send(c.SetupAppend(1, WRITER, SEGMENT, ""))
    await settle()
    assert client.replies() == [expected] and not client.closed


async def test_setup_on_a_failed_container_closes(client):
    client.container.failures[SEGMENT] = errors.ContainerUnavailable(SEGMENT)
    client.send(c.SetupAppend(1, WRITER, SEGMENT, ""), c.KeepAlive())
    await settle()
    assert client.replies() == [] and client.closed


# ---------------------------------------------------------------- flow control


async def test_reading_pauses_while_append_bytes_exceed_the_limit_and_resumes_at_half():
    """Limit 2.5 events: the third append pauses reading and the pump (the KeepAlive behind it waits);
    one event settled (2 left, above half) keeps it paused; two settled (1 left) resume both."""
    client = Client(limits=ConnectionLimits(append_bytes_outstanding_max=len(EVENT) * 5 // 2))
    await client.setup(WRITER)
    assert client.transport.reading
    client.send(append(WRITER, 1), append(WRITER, 2), append(WRITER, 3), append(WRITER, 4), c.KeepAlive())
    await settle()
    assert [s.event_number for s in client.container.submissions] == [1, 2, 3]
    assert not client.transport.reading and client.replies() == []
    first, second, third = client.container.submissions
    first.land_at(0)
    await settle()
    assert not client.transport.reading
    assert client.replies() == [c.DataAppended(WRITER, 1, NULL_ATTRIBUTE_VALUE, 1, len(EVENT))]
    assert len(client.container.submissions) == 3
    second.land_at(len(EVENT))
    await settle()
    assert client.transport.reading and client.transport.reading_changes == ["pause", "resume"]
    assert [s.event_number for s in client.container.submissions] == [1, 2, 3, 4]
    assert client.replies() == [c.DataAppended(WRITER, 2, 1, 2, 2 * len(EVENT)), c.KeepAlive()]


async def test_output_backpressure_stops_the_pump_and_holds_replies(client):
    """While the transport is above its high-water mark: no frame is taken, reading is paused, and a request's
    reply waits; when it drains, the reply goes out and the waiting frames are taken."""
    client.send(c.GetStreamSegmentInfo(1, SEGMENT, ""))
    await settle()
    client.connection.pause_writing()
    client.send(c.KeepAlive())
    client.handlers.answer(0, c.StreamSegmentInfo(1, SEGMENT, True, False, False, 0, 0, 0))
    await settle()
    assert client.replies() == [] and not client.transport.reading
    client.connection.resume_writing()
    await settle()
    assert [type(r) for r in client.replies()] == [c.StreamSegmentInfo, c.KeepAlive]
    assert client.transport.reading


async def test_request_tasks_are_bounded():
    """With at most two request tasks, a third request waits (reading paused) until one finishes."""
    client = Client(limits=ConnectionLimits(request_tasks_max=2))
    client.send(*(c.GetStreamSegmentInfo(n, SEGMENT, "") for n in (1, 2, 3)))
    await settle()
    assert len(client.handlers.requests) == 2 and not client.transport.reading
    client.handlers.answer(1, c.StreamSegmentInfo(2, SEGMENT, True, False, False, 0, 0, 0))
    await settle()
    assert [r.request_id for r in client.replies()] == [2]
    assert [command.request_id for command, _ in client.handlers.requests] == [1, 2, 3]
    assert client.transport.reading


async def test_appends_wait_while_the_cache_is_throttled():
    cache = FakeCache()
    client = Client(cache=cache)
    await client.setup(WRITER)
    cache.throttled = True
    client.send(append(WRITER, 1), c.KeepAlive())
    await settle()
    assert client.container.submissions == [] and client.replies() == [] and not client.transport.reading
    cache.relieve()
    await settle()
    assert len(client.container.submissions) == 1 and client.replies() == [c.KeepAlive()]
    assert client.transport.reading


async def test_a_waiting_request_does_not_block_later_frames(client):
    """A tail read waits for data; the frames after it are answered meanwhile, and its reply comes later."""
    await client.setup(WRITER)
    client.send(c.ReadSegment(SEGMENT, 0, 100, "", 1), c.KeepAlive(), append(WRITER, 1))
    await settle()
    client.container.submissions[0].land_at(0)
    await settle()
    assert [type(r) for r in client.replies()] == [c.KeepAlive, c.DataAppended]
    read = c.SegmentRead(SEGMENT, 0, True, False, EVENT, 1)
    client.handlers.answer(0, read)
    await settle()
    assert client.replies() == [read]


# ---------------------------------------------------------------- malformed input and closing


async def test_a_malformed_frame_closes_only_its_connection():
    bad, good = Client(), Client()
    bad.send_bytes(GARBAGE)
    good.send(c.KeepAlive())
    await settle()
    assert bad.closed and bad.replies() == []
    assert not good.closed and good.replies() == [c.KeepAlive()]


@pytest.mark.parametrize("data", [
    struct.pack(">ii", c.KeepAlive.TYPE, -5),  # negative length
    struct.pack(">ii", c.AppendBlockEnd.TYPE, 20 << 20),  # over the frame limit
    wire.encode(c.Event(b"x")),  # never a top-level frame
    struct.pack(">ii", c.SetupAppend.TYPE, 4) + b"\0" * 4,  # cut short
], ids=["negative length", "oversize", "top-level Event", "truncated payload"])
async def test_malformed_input_closes_without_reply(client, data):
    client.send_bytes(data)
    await settle()
    assert client.closed and client.replies() == []


async def test_a_partial_frame_waits_for_its_rest(client):
    frame = wire.encode(c.KeepAlive()) + wire.encode(c.Hello(15, 5))
    client.send_bytes(frame[:11])
    await settle()
    assert client.replies() == [c.KeepAlive()] and not client.closed
    client.send_bytes(frame[11:])
    await settle()
    assert client.replies() == [c.Hello(15, 5)]


async def test_frames_before_a_malformed_one_are_answered_first(client):
    """Everything taken before the bad frame is answered -- here a request and an append still in flight --
    then the connection closes at once, without waiting for time to pass."""
    await client.setup(WRITER)
    client.send_bytes(wire.encode(c.KeepAlive()) + wire.encode(c.GetStreamSegmentInfo(2, SEGMENT, ""))
                      + wire.encode(append(WRITER, 1)) + GARBAGE)
    await settle()
    assert client.replies() == [c.KeepAlive()] and not client.closed and not client.transport.reading
    client.send(c.KeepAlive())  # ignored: the stream is broken
    client.handlers.answer(0, c.StreamSegmentInfo(2, SEGMENT, True, False, False, 0, 0, 0))
    await settle()
    assert [type(r) for r in client.replies()] == [c.StreamSegmentInfo] and not client.closed
    client.container.submissions[0].land_at(0)
    await settle()
    assert client.replies() == [c.DataAppended(WRITER, 1, NULL_ATTRIBUTE_VALUE, 1, len(EVENT))]
    assert client.closed


async def test_closing_after_pending_work_gives_up_after_the_grace_period(client):
    """Appends that never finish do not keep a broken connection open: it closes after the grace period."""
    await client.setup(WRITER)
    client.send(append(WRITER, 1))
    await settle()
    client.connection._close_after_pending("test", grace_seconds=0.01)
    await settle()
    assert not client.closed
    await asyncio.wait_for(client.transport.closed_event.wait(), 5)  # the grace timer, not a sleep
    assert client.replies() == []


@pytest.mark.parametrize("failure, reason", [
    (CloseConnection("no reply"), "CloseConnection"),
    (errors.ContainerUnavailable(SEGMENT), "ContainerUnavailable"),
    (RuntimeError("a bug"), "unexpected"),
])
async def test_a_request_without_a_reply_closes(client, failure, reason):
    client.send(c.GetStreamSegmentInfo(1, SEGMENT, ""))
    await settle()
    client.handlers.fail(0, failure)
    await settle()
    assert client.closed and client.replies() == []


async def test_transient_segments_are_deleted_when_the_connection_closes(client):
    """Transient segments created on the connection and not merged are deleted when it is lost."""
    client.send(c.CreateTransientSegment(1, WRITER, SEGMENT, ""), c.CreateTransientSegment(2, WRITER, SEGMENT, ""))
    await settle()
    names = [f"{SEGMENT}#transient.{n}" for n in (1, 2)]
    for index, name in enumerate(names):
        client.connection._transients.add(name)  # what the real handler does when it creates one
        client.handlers.answer(index, c.SegmentCreated(index + 1, name))
    client.connection._transients.discard(names[0])  # ... and when it merges one
    await settle()
    assert client.container.deleted == []
    client.connection.connection_lost(None)
    await settle()
    assert client.container.deleted == [names[1]]


async def test_pending_requests_are_cancelled_when_the_connection_is_lost(client):
    client.send(c.ReadSegment(SEGMENT, 0, 100, "", 1))
    await settle()
    client.connection.connection_lost(None)
    await settle()
    assert client.handlers.requests[0][1].cancelled()


# ---------------------------------------------------------------- property


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.lists(st.integers(0, 2), min_size=1, max_size=12), st.data())
def test_any_split_and_finishing_order_gives_the_same_acks(writer_count, writers_of_appends, data):
    """Appends of several writers, delivered in arbitrary chunks and finished by the container in any
    order: every append is acknowledged exactly once, each writer's acks in event-number order."""
    writers = [uuid.UUID(int=n + 1) for n in range(writer_count)]
    sends = [(writers[index % writer_count], number) for number, index in enumerate(writers_of_appends, 1)]
    stream = b"".join(wire.encode(append(writer, number)) for writer, number in sends)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    order = data.draw(st.permutations(range(len(sends))))

    async def run():
        client = Client(container=FakeContainer())
        for writer in writers:
            await client.setup(writer)
        start = 0
        for cut in cuts + [len(stream)]:
            client.send_bytes(stream[start:cut])
            start = cut
            await settle()
        submissions = client.container.submissions
        for position in order:
            submissions[position].land_at(position * len(EVENT))
            if data.draw(st.booleans()):
                await settle()
        await settle()
        return client.replies(), client.closed

    replies, closed = asyncio.run(run())
    assert not closed and all(type(reply) is c.DataAppended for reply in replies)
    for writer in writers:
        acked = [reply.event_number for reply in replies if reply.writer_id == writer]
        assert acked == [number for w, number in sends if w == writer]
