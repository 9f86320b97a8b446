"""The per-connection append state machine (``server.appends.AppendProcessor``), driven directly.

A fake container hands out one future per submitted append and the test resolves them in any order;
``send``/``close``/``on_bytes_settled`` are recorded. Nothing here waits for time: ``settle()`` only
lets the callbacks that are ready run (protocol reference §3.4).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server import errors
from server.appends import AppendProcessor
from server.replies import CloseConnection
from tests.unit.server.fakes import OTHER_SEGMENT, SEGMENT, FakeContainer, Routes, append, settle
from wire import commands as c
from wire.constants import NULL_ATTRIBUTE_VALUE
from wire.envelope import envelope

WRITER = uuid.UUID(int=0xA)
OTHER_WRITER = uuid.UUID(int=0xB)
EVENT = envelope(b"event")  # what one default append carries


class Appends:
    """One AppendProcessor over a FakeContainer, with its outputs recorded."""

    def __init__(self):
        self.container = FakeContainer()
        self.routes = Routes(self.container)
        self.sent: list = []
        self.closes: list[str] = []
        self.settled: list[int] = []
        self.processor = AppendProcessor(self.routes.container_for, self.sent.append, self.closes.append,
                                         self.settled.append)

    def setup(self, writer=WRITER, segment=SEGMENT, request_id=1):
        return self.processor.setup_append(c.SetupAppend(request_id, writer, segment, ""))

    def append(self, writer=WRITER, event_number=1, payload=b"event", request_id=None) -> int:
        return self.processor.append_block_end(append(writer, event_number, payload, request_id))

    def conditional(self, event_number, expected_offset, data, writer=WRITER, request_id=None) -> int:
        request_id = event_number if request_id is None else request_id
        return self.processor.conditional_block_end(
            c.ConditionalBlockEnd(writer, event_number, expected_offset, data, request_id))

    def take(self) -> list:
        sent = list(self.sent)
        self.sent.clear()
        return sent


@pytest.fixture
def appends():
    return Appends()


# ---------------------------------------------------------------- SetupAppend


async def test_setup_answers_the_last_stored_event_number(appends):
    """AppendSetup carries the writer's attribute: NULL_ATTRIBUTE_VALUE for a new writer, else its value."""
    assert appends.setup(request_id=7) == c.AppendSetup(7, SEGMENT, WRITER, NULL_ATTRIBUTE_VALUE)
    appends.container.attributes[(SEGMENT, OTHER_WRITER)] = 41
    assert appends.setup(OTHER_WRITER, request_id=8) == c.AppendSetup(8, SEGMENT, OTHER_WRITER, 41)


@pytest.mark.parametrize("error, expected", [
    (errors.NoSuchSegment(SEGMENT), c.NoSuchSegment(3, SEGMENT, "", -1)),
    (errors.SegmentIsSealed(SEGMENT), c.SegmentIsSealed(3, SEGMENT, "", -1)),
])
async def test_setup_errors_are_answered_and_register_nothing(appends, error, expected):
    """A setup that fails is answered (§3.0, append table) and leaves no writer: its appends close."""
    appends.container.failures[SEGMENT] = error
    assert appends.setup(request_id=3) == expected
    with pytest.raises(CloseConnection):
        appends.append(event_number=1)
    assert appends.container.submissions == []


async def test_setup_on_another_host_gets_wrong_host(appends):
    appends.routes.elsewhere.add(SEGMENT)
    assert appends.setup(request_id=4) == c.WrongHost(4, SEGMENT, "", "")


@pytest.mark.parametrize("error", [errors.ContainerUnavailable(SEGMENT), errors.SegmentIsTruncated(SEGMENT, 5, 0)])
async def test_setup_errors_without_a_reply_close(appends, error):
    appends.container.failures[SEGMENT] = error
    with pytest.raises(CloseConnection):
        appends.setup()


async def test_a_writer_is_attached_while_set_up_on_the_connection(appends):
    """The container hears which writers a connection has set up (their attributes do not expire meanwhile):
    once per writer however often it sets up again, until the connection closes."""
    appends.setup()
    appends.setup()
    appends.setup(OTHER_WRITER)
    assert appends.container.attached == {(SEGMENT, WRITER), (SEGMENT, OTHER_WRITER)}
    appends.append(event_number=1)
    appends.container.submissions[0].fail(errors.NoSuchSegment(SEGMENT))
    await settle()
    assert appends.container.attached == {(SEGMENT, WRITER), (SEGMENT, OTHER_WRITER)}
    appends.setup(segment=OTHER_SEGMENT)
    assert appends.container.attached == {(OTHER_SEGMENT, WRITER), (SEGMENT, OTHER_WRITER)}
    appends.processor.close()
    assert appends.container.attached == set()


# ---------------------------------------------------------------- acknowledgements


async def test_acks_follow_submission_order_whatever_order_appends_finish_in(appends):
    """Appends 1, 2, 3 finishing as 3, 2, 1: no ack until 1 is stored, then 1, 2, 3 with their chain of
    previous event numbers and the segment length after each."""
    appends.setup()
    assert [appends.append(event_number=n) for n in (1, 2, 3)] == [len(EVENT)] * 3
    first, second, third = appends.container.submissions
    third.land_at(2 * len(EVENT))
    second.land_at(len(EVENT))
    await settle()
    assert appends.take() == [] and appends.settled == []
    first.land_at(0)
    await settle()
    assert appends.take() == [c.DataAppended(WRITER, 1, NULL_ATTRIBUTE_VALUE, 1, len(EVENT)),
                              c.DataAppended(WRITER, 2, 1, 2, 2 * len(EVENT)),
                              c.DataAppended(WRITER, 3, 2, 3, 3 * len(EVENT))]
    assert appends.settled == [len(EVENT)] * 3


async def test_submissions_carry_the_dedup_and_fencing_inputs(appends):
    """Each submission names the previous stored event number (the attribute's expected value), the event
    count and, for conditional appends, the expected offset; a ConditionalAppend's envelope is appended."""
    appends.setup()
    appends.processor.append_block_end(append(WRITER, 4, events=3))
    appends.processor.conditional_append(c.ConditionalAppend(WRITER, 5, 99, b"payload", 5))
    appends.conditional(6, 120, b"raw")
    block, single, raw = appends.container.submissions
    assert (block.previous, block.event_number, block.event_count, block.expected_offset) == (
        NULL_ATTRIBUTE_VALUE, 4, 3, None)
    assert (single.previous, single.event_number, single.expected_offset, single.data) == (
        4, 5, 99, envelope(b"payload"))
    assert (raw.previous, raw.event_number, raw.expected_offset, raw.data) == (5, 6, 120, b"raw")


async def test_writers_are_acknowledged_independently(appends):
    """A writer's pending append does not hold back another writer's acks."""
    appends.setup(WRITER)
    appends.setup(OTHER_WRITER, segment=OTHER_SEGMENT)
    appends.append(WRITER, 1)
    appends.append(OTHER_WRITER, 1, request_id=11)
    mine, other = appends.container.submissions
    assert other.segment == OTHER_SEGMENT
    other.land_at(0)
    await settle()
    assert appends.take() == [c.DataAppended(OTHER_WRITER, 1, NULL_ATTRIBUTE_VALUE, 11, len(EVENT))]
    mine.land_at(0)
    await settle()
    assert appends.take() == [c.DataAppended(WRITER, 1, NULL_ATTRIBUTE_VALUE, 1, len(EVENT))]


async def test_duplicates_are_acknowledged_in_order_without_being_written(appends):
    """An event number at or below the last stored one (a resend after a lost ack) is acknowledged with
    the segment's length and never submitted; one resent while its original is in flight is
    acknowledged after it."""
    appends.container.attributes[(SEGMENT, WRITER)] = 5
    appends.container.lengths[SEGMENT] = 100
    appends.setup()
    assert appends.append(event_number=3, request_id=30) == 0
    assert appends.take() == [c.DataAppended(WRITER, 3, 5, 30, 100)]
    appends.append(event_number=6, request_id=60)
    assert appends.append(event_number=6, request_id=61) == 0
    assert [s.event_number for s in appends.container.submissions] == [6]
    await settle()
    assert appends.take() == []
    appends.container.lengths[SEGMENT] = 100 + len(EVENT)
    appends.container.submissions[0].land_at(100)
    await settle()
    assert appends.take() == [c.DataAppended(WRITER, 6, 5, 60, 100 + len(EVENT)),
                              c.DataAppended(WRITER, 6, 6, 61, 100 + len(EVENT))]


async def test_a_duplicate_of_a_failed_append_is_not_acknowledged(appends):
    """If the original fails, its queued duplicate gets no ack: the writer must set up again."""
    appends.setup()
    appends.append(event_number=1)
    appends.append(event_number=1, request_id=2)
    appends.container.submissions[0].fail(errors.SegmentIsSealed(SEGMENT))
    await settle()
    assert appends.take() == [c.SegmentIsSealed(1, SEGMENT, "", 1)]
    assert appends.settled == [len(EVENT), 0]


# ---------------------------------------------------------------- connection-level violations


async def test_event_numbers_going_backwards_close(appends):
    appends.setup()
    appends.append(event_number=5)
    with pytest.raises(CloseConnection):
        appends.append(event_number=4)
    assert [s.event_number for s in appends.container.submissions] == [5]


async def test_append_without_setup_closes(appends):
    with pytest.raises(CloseConnection):
        appends.append(event_number=1)
    assert appends.container.submissions == []


# ---------------------------------------------------------------- failed appends


async def test_conditional_append_at_the_wrong_offset_fails_and_the_writer_retries(appends):
    """BadOffset on a conditional append: ConditionalCheckFailed, the connection stays open and the writer
    state rolls back, so the same event number is submitted again (not taken for a duplicate)."""
    appends.setup()
    appends.conditional(0, 0, b"abc", request_id=9)
    appends.container.submissions[0].fail(errors.BadOffset(SEGMENT, 0, 3))
    await settle()
    assert appends.take() == [c.ConditionalCheckFailed(WRITER, 0, 9)]
    assert appends.closes == []
    appends.conditional(0, 3, b"abc", request_id=10)
    retry = appends.container.submissions[1]
    assert (retry.event_number, retry.previous, retry.expected_offset) == (0, NULL_ATTRIBUTE_VALUE, 3)
    retry.land_at(3)
    await settle()
    assert appends.take() == [c.DataAppended(WRITER, 0, NULL_ATTRIBUTE_VALUE, 10, 6)]


async def test_bad_offset_of_a_plain_append_closes(appends):
    appends.setup()
    appends.append(event_number=1)
    appends.container.submissions[0].fail(errors.BadOffset(SEGMENT, 0, 3))
    await settle()
    assert appends.take() == [] and len(appends.closes) == 1


async def test_zombie_writer_gets_invalid_event_number_then_close(appends):
    """BadAttributeUpdate (another connection stored this writer's event numbers): InvalidEventNumber,
    then the connection closes."""
    appends.setup()
    appends.append(event_number=4, request_id=40)
    appends.container.submissions[0].fail(errors.BadAttributeUpdate(SEGMENT, WRITER, 3, 4))
    await settle()
    assert appends.take() == [c.InvalidEventNumber(WRITER, 40, "", 4)]
    assert len(appends.closes) == 1


@pytest.mark.parametrize("error, expected", [
    (errors.NoSuchSegment(SEGMENT), c.NoSuchSegment(70, SEGMENT, "", -1)),
    (errors.SegmentIsSealed(SEGMENT), c.SegmentIsSealed(70, SEGMENT, "", 7)),  # the offset is the event number
    (errors.WrongHost(SEGMENT), c.WrongHost(70, SEGMENT, "", "")),
], ids=["NoSuchSegment", "SegmentIsSealed", "WrongHost"])
async def test_segment_errors_are_answered_and_the_writer_must_set_up_again(appends, error, expected):
    """The reply of §3.0's append table; the writer must set up again: its appends until then are dropped
    unanswered (sent before it heard), and the connection stays open."""
    appends.setup()
    appends.append(event_number=7, request_id=70)
    appends.container.submissions[0].fail(error)
    await settle()
    assert appends.take() == [expected]
    assert appends.append(event_number=8) == 0
    await settle()
    assert appends.closes == [] and appends.take() == []
    appends.setup()
    appends.append(event_number=8)
    assert [s.event_number for s in appends.container.submissions] == [7, 8]


@pytest.mark.parametrize("error", [RuntimeError("bug"), errors.SegmentIsTruncated(SEGMENT, 5, 0),
                                   errors.ContainerUnavailable(SEGMENT)])
async def test_other_failures_close_without_a_reply(appends, error):
    appends.setup()
    appends.append(event_number=1)
    appends.container.submissions[0].fail(error)
    await settle()
    assert appends.take() == [] and len(appends.closes) == 1


async def test_a_cancelled_append_settles_its_bytes_without_a_reply(appends):
    appends.setup()
    appends.append(event_number=1)
    appends.append(event_number=2)
    first, second = appends.container.submissions
    first.future.cancel()
    second.land_at(0)
    await settle()
    assert appends.take() == [c.DataAppended(WRITER, 2, NULL_ATTRIBUTE_VALUE, 2, len(EVENT))]
    assert appends.settled == [len(EVENT), len(EVENT)]


# ---------------------------------------------------------------- property


@st.composite
def scenarios(draw):
    """Writers (each with a last stored event number), the appends they send in order (non-decreasing
    event numbers, some resent or already stored), and the order the container finishes them in."""
    writer_count = draw(st.integers(1, 3))
    last_stored = [draw(st.sampled_from([NULL_ATTRIBUTE_VALUE, 0, 3])) for _ in range(writer_count)]
    sent: list[tuple[int, int]] = []
    next_number = [draw(st.integers(0, 5)) for _ in range(writer_count)]
    for _ in range(draw(st.integers(1, 24))):
        writer = draw(st.integers(0, writer_count - 1))
        if draw(st.booleans()) or not any(w == writer for w, _ in sent):
            next_number[writer] += draw(st.integers(0, 2))  # 0: the same number again (a resend)
        sent.append((writer, next_number[writer]))
    return last_stored, sent


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_acks_come_out_once_each_in_event_number_order_per_writer(scenario, data):
    """Whatever order the appends of several writers finish in, and wherever the loop runs in between,
    each writer's acks come out exactly once per append, in the order sent (so in event-number order);
    only appends above the writer's last stored event number are written, each acknowledged with
    the previous acked event number and the length after it."""
    last_stored, sent = scenario
    writers = [uuid.UUID(int=index + 1) for index in range(len(last_stored))]
    order = data.draw(st.permutations(range(len(sent))))
    pauses = data.draw(st.lists(st.booleans(), min_size=len(sent), max_size=len(sent)))

    async def run():
        appends = Appends()
        for writer, last in zip(writers, last_stored, strict=True):
            if last != NULL_ATTRIBUTE_VALUE:
                appends.container.attributes[(SEGMENT, writer)] = last
            appends.setup(writer)
        highest = list(last_stored)
        expected_written = []
        for request_id, (index, number) in enumerate(sent):
            appends.append(writers[index], number, payload=b"e" * (request_id + 1), request_id=request_id)
            if number > highest[index]:
                expected_written.append(request_id)
                highest[index] = number
        submissions = appends.container.submissions
        assert [len(s.data) - 8 - 1 for s in submissions] == expected_written  # request_id = payload size - 1
        for position, pause in zip(order, pauses, strict=True):
            if position < len(submissions):
                submissions[position].land_at(1000 * position)
            if pause:
                await settle()
        await settle()
        return appends, submissions

    appends, submissions = asyncio.run(run())
    offsets = {len(s.data) - 9: 1000 * position + len(s.data) for position, s in enumerate(submissions)}
    assert appends.closes == []
    for index, writer in enumerate(writers):
        acks = [reply for reply in appends.sent if reply.writer_id == writer]
        assert all(type(ack) is c.DataAppended for ack in acks)
        mine = [(request_id, number) for request_id, (w, number) in enumerate(sent) if w == index]
        assert [(ack.request_id, ack.event_number) for ack in acks] == mine  # once each, in order sent
        previous = last_stored[index]
        for ack in acks:
            if ack.request_id in offsets:  # written: chained, with the length after it
                assert ack.previous_event_number == previous < ack.event_number
                assert ack.current_segment_write_offset == offsets[ack.request_id]
                previous = ack.event_number
    assert sorted(appends.settled) == sorted([len(s.data) for s in submissions] + [0] * (len(sent) - len(submissions)))
