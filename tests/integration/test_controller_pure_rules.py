"""The controller's pure rules, without servers: stream-cut validity and ordering (spec §6.6),
retention's choice of cut (§6.9), workflow payload round trips, configuration checks and the
busy-stream retry."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.service import payloads
from controller.service.configuration import checked_configuration
from controller.service.context import ServiceSettings
from controller.service.errors import InvalidArgument, StreamBusy
from controller.service.retention_bounds import RecordedCut, bound_cuts
from controller.service.retries import STREAM_BUSY, retry_while_busy
from controller.service.stream_cut_rules import cut_error, is_equal_or_after
from controller_api import controller_pb2 as pb
from controller_api import errors as api_errors
from controller_api.model import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfiguration
from controller_api.protobuf import configuration_from
from tests.support.stream_history import ALL, cut


@pytest.mark.parametrize("offsets, valid", [
    ({"A": 0, "B": 0}, True),
    ({"C": 1, "D": 2, "B": 3}, True),
    ({"E": 0, "B": 0}, True),
    ({"C": 4, "E": -1, "B": 0}, True),  # D finished, E waits for C
    ({"A": 0}, False),  # [.5, 1) uncovered
    ({"A": 0, "C": 0, "B": 0}, False),  # A and C overlap
    ({"E": -1, "B": 0}, False),  # a future segment without an unfinished predecessor
    ({"C": 0, "E": -1, "D": -1, "B": 0}, False),  # two future segments overlap
    ({"A": 0, "E": -1, "B": 0}, True),  # like Java: overlapping cut segments of E only need smaller ids
])
def test_cut_validity(offsets, valid):
    """Hand-made cuts of the history above, valid and not."""
    result = cut_error(cut(**offsets), ALL)
    assert (result is None) == valid, result


def test_cut_ordering():
    """Same segment: offsets compare; overlapping segments: the later (larger id) one is ahead."""
    assert is_equal_or_after(cut(A=5, B=5), ALL, cut(A=5, B=5), ALL)
    assert is_equal_or_after(cut(C=0, D=0, B=5), ALL, cut(A=9, B=5), ALL)
    assert not is_equal_or_after(cut(A=4, B=5), ALL, cut(A=5, B=5), ALL)
    assert not is_equal_or_after(cut(A=100, B=5), ALL, cut(C=0, D=0, B=5), ALL)


def test_retention_picks_the_newest_cut_keeping_the_minimum():
    """TIME keeps now - recording time, SIZE keeps newest size - recording size."""
    def min_cut(policy, now, rows):
        _, minimum = bound_cuts(policy, now, [RecordedCut(time, size, {}) for time, size in rows])
        return None if minimum is None else (minimum.time, minimum.size)

    by_time = RetentionPolicy(RetentionType.TIME, 1000)
    records = ((1000, 10), (2000, 20), (2600, 30))
    assert min_cut(by_time, 3500, records) == (2000, 20)  # 1500 and 2500 keep enough; the newer wins
    assert min_cut(by_time, 2500, records) == (1000, 10)
    assert min_cut(by_time, 1900, records) is None
    by_size = RetentionPolicy(RetentionType.SIZE, 15)
    assert min_cut(by_size, 0, records) == (1000, 10)  # 30 - 10 = 20 >= 15; 30 - 20 = 10 is not
    assert min_cut(by_size, 0, ()) is None


@given(st.dictionaries(st.integers(0, 2**62), st.integers(-1, 2**62), max_size=20))
def test_truncate_payload_round_trips(stream_cut):
    """Any stream cut survives the truncate intent's payload encoding."""
    assert payloads.decode_truncate(payloads.encode_truncate(stream_cut)) == stream_cut


@given(st.lists(st.integers(0, 2**62), max_size=10),
       st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), max_size=10))
def test_scale_payload_round_trips(sealed, ranges):
    """Sealed ids and key ranges survive the scale intent's payload encoding exactly."""
    assert payloads.decode_scale(payloads.encode_scale(sealed, ranges)) == (tuple(sealed), tuple(ranges))


def test_create_payload_round_trips():
    """The creation time and configuration survive the create intent's payload encoding."""
    configuration = StreamConfiguration(ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, 2, 3),
                                        RetentionPolicy(RetentionType.SIZE, 1 << 30), ("a", "b"))
    assert payloads.decode_create(payloads.encode_create(12345, configuration)) == (12345, configuration)


def test_configuration_checks():
    """Tags are deduplicated, UNKNOWN retention means none, and out-of-range settings are refused: by the
    Controller API's model (which the gRPC request becomes), or by the controller's own limits."""
    settings = ServiceSettings()
    checked = checked_configuration(StreamConfiguration(tags=("x", "y", "x")), settings)
    assert checked.tags == ("x", "y")
    unknown = pb.StreamConfig(retentionPolicy=pb.RetentionPolicy(retentionType=pb.RetentionPolicy.UNKNOWN))
    assert configuration_from(unknown).retention is None
    for refused in (lambda: ScalingPolicy(min_num_segments=0), lambda: RetentionPolicy(RetentionType.TIME, -1),
                    lambda: StreamConfiguration(rollover_size_bytes=-1)):
        with pytest.raises(api_errors.InvalidArgument):
            refused()
    for bad in (StreamConfiguration(ScalingPolicy(min_num_segments=settings.segments_per_epoch_max + 1)),
                StreamConfiguration(tags=tuple(f"t{n}" for n in range(128))),
                StreamConfiguration(tags=("x" * 256,))):
        with pytest.raises(InvalidArgument):
            checked_configuration(bad, settings)


QUICK_BUSY = dataclasses.replace(STREAM_BUSY, initial_seconds=0.001, max_delay_seconds=0.004)


async def test_busy_stream_retry_waits_until_free_and_gives_up_at_the_deadline():
    """retry_while_busy tries again after StreamBusy until the operation succeeds; with a deadline
    it gives up, raising StreamBusy, before a wait would end past it; other errors are not retried."""
    calls = []

    async def busy_twice() -> str:
        calls.append(None)
        if len(calls) < 3:
            raise StreamBusy("busy")
        return "done"

    assert await retry_while_busy(busy_twice, QUICK_BUSY, None) == "done" and len(calls) == 3

    async def always_busy() -> None:
        raise StreamBusy("still busy")

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.05
    with pytest.raises(StreamBusy):
        await retry_while_busy(always_busy, QUICK_BUSY, deadline)
    assert loop.time() < deadline + 1.0  # not waiting on: only event-loop slack past the deadline

    failures = []

    async def broken() -> None:
        failures.append(None)
        raise InvalidArgument("never retried")

    with pytest.raises(InvalidArgument):
        await retry_while_busy(broken, QUICK_BUSY, None)
    assert len(failures) == 1
