"""The DurableDataLog conformance suite (habit 9): one set of checks for every implementation.

Subclass ``DurableDataLogConformance`` in a test module and give it a ``make_log`` fixture: a
callable returning a new, unopened instance on *one* underlying log each time it is called (a
second call is "another process opening the same log"). test_conformance.py does this for the
local log and for the faulty wrapper with no faults armed; a replicated log joins by adding its
factory there. The implementation may size things small so that these tests roll over files.
"""

from __future__ import annotations

import array
import asyncio

import pytest

from server.tier1 import LogAddress, LogBusy, LogClosed, RecordTooLarge

from .helpers import read_all


def payload(number: int, size: int = 100) -> bytes:
    stem = f"record-{number:06d}|".encode()
    return (stem * (size // len(stem) + 1))[:size]


class DurableDataLogConformance:
    """The promises of design §2.9, checked through the public API only."""

    async def test_append_then_read_returns_records_in_order(self, make_log):
        """Sequential appends come back from read() on the same instance, in order, byte for byte."""
        log = make_log()
        await log.open()
        payloads = [payload(i, size=i * 37 % 500) for i in range(50)]
        addresses = [await log.append(p) for p in payloads]
        assert [(a.sequence, p) for a, p in zip(addresses, payloads)] == await read_all(log)
        await log.close()

    async def test_addresses_start_at_one_and_increase_by_one(self, make_log):
        """The first record of a log is 1 and every append gets the next sequence."""
        log = make_log()
        await log.open()
        addresses = [await log.append(payload(i)) for i in range(10)]
        assert addresses == [LogAddress(i) for i in range(1, 11)]
        assert addresses == sorted(addresses) and LogAddress(1) < LogAddress(2)
        await log.close()

    async def test_empty_log_reads_nothing(self, make_log):
        """A brand-new log has no records and no truncation point."""
        log = make_log()
        await log.open()
        assert await read_all(log) == []
        assert log.truncation_address is None
        await log.close()

    async def test_reopen_bumps_epoch_and_sees_everything(self, make_log):
        """Each open gets a larger epoch and reads every record appended by earlier owners."""
        appended, epochs = [], []
        for round_number in range(3):
            log = make_log()
            epochs.append(await log.open())
            assert await read_all(log) == [(i + 1, p) for i, p in enumerate(appended)]
            for i in range(5):
                appended.append(payload(round_number * 10 + i))
                await log.append(appended[-1])
            await log.close()
        assert epochs == sorted(epochs) and len(set(epochs)) == 3
        assert log.epoch == epochs[-1]

    async def test_appends_continue_the_sequence_after_reopen(self, make_log):
        """A new owner's first append follows the last record of the previous owner."""
        log = make_log()
        await log.open()
        for i in range(3):
            await log.append(payload(i))
        await log.close()
        log = make_log()
        await log.open()
        assert await log.append(b"next") == LogAddress(4)
        await log.close()

    async def test_truncate_then_reopen_reads_after_truncation_point(self, make_log):
        """Truncated records never come back, in this instance or after a reopen."""
        log = make_log()
        await log.open()
        addresses = [await log.append(payload(i, size=900)) for i in range(200)]
        await log.truncate(addresses[149])
        assert log.truncation_address == addresses[149]
        await log.close()
        log = make_log()
        await log.open()
        assert log.truncation_address == addresses[149]
        records = await read_all(log)
        assert [sequence for sequence, _ in records] == list(range(151, 201))
        assert [p for _, p in records] == [payload(i, size=900) for i in range(150, 200)]
        await log.close()

    async def test_truncate_never_goes_back(self, make_log):
        """A truncation below the current point changes nothing; truncating to the end empties the log."""
        log = make_log()
        await log.open()
        addresses = [await log.append(payload(i)) for i in range(20)]
        await log.truncate(addresses[9])
        await log.truncate(addresses[4])
        assert log.truncation_address == addresses[9]
        await log.truncate(addresses[-1])
        await log.close()
        log = make_log()
        await log.open()
        assert await read_all(log) == []
        assert await log.append(b"after") == LogAddress(21)
        await log.close()

    async def test_truncate_beyond_acknowledged_is_rejected(self, make_log):
        """Truncating records that do not exist yet is a programming error."""
        log = make_log()
        await log.open()
        await log.append(b"one")
        with pytest.raises(ValueError):
            await log.truncate(LogAddress(2))
        await log.close()

    async def test_concurrent_appends_are_acknowledged_in_call_order(self, make_log):
        """200 gathered appends all succeed, get consecutive addresses in call order, and read back so."""
        log = make_log()
        await log.open()
        await log.append(b"first")
        payloads = [payload(i, size=i % 300) for i in range(200)]
        addresses = await asyncio.gather(*(log.append(p) for p in payloads))
        assert addresses == [LogAddress(i) for i in range(2, 202)]
        await log.close()
        log = make_log()
        await log.open()
        assert await read_all(log) == [(1, b"first")] + [(i + 2, p) for i, p in enumerate(payloads)]
        await log.close()

    async def test_list_of_parts_is_one_record(self, make_log):
        """A list or tuple of bytes-like parts becomes one record holding their concatenation."""
        log = make_log()
        await log.open()
        first = await log.append([b"head|", bytearray(b"middle|"), memoryview(b"tail")])
        second = await log.append((b"", b"x" * 5000, b"y"))
        third = await log.append([])
        await log.close()
        log = make_log()
        await log.open()
        assert await read_all(log) == [(first.sequence, b"head|middle|tail"),
                                       (second.sequence, b"x" * 5000 + b"y"), (third.sequence, b"")]
        await log.close()

    async def test_bytes_like_inputs(self, make_log):
        """bytes, bytearray, memoryview slices and other buffers (array) are accepted and stored as bytes."""
        log = make_log()
        await log.open()
        numbers = array.array("I", [1, 2, 3])
        inputs = [b"bytes", bytearray(b"bytearray"), memoryview(b"..view..")[2:6], numbers, b""]
        for data in inputs:
            await log.append(data)
        assert [p for _, p in await read_all(log)] == [b"bytes", b"bytearray", b"view", numbers.tobytes(), b""]
        await log.close()

    async def test_max_append_size_is_enforced(self, make_log):
        """A record of exactly max_append_size is accepted; one byte more is RecordTooLarge and the log stays open."""
        log = make_log()
        await log.open()
        largest = log.max_append_size
        assert (await log.append(b"a" * largest)).sequence == 1
        with pytest.raises(RecordTooLarge):
            await log.append(b"a" * (largest + 1))
        with pytest.raises(RecordTooLarge):
            await log.append([b"a" * largest, b"b"])
        assert (await log.append(b"still open")).sequence == 2
        await log.close()

    async def test_append_after_close_fails(self, make_log):
        """A closed log refuses appends, truncates and reads with LogClosed; closing twice is fine."""
        log = make_log()
        await log.open()
        address = await log.append(b"one")
        await log.close()
        await log.close()
        with pytest.raises(LogClosed):
            await log.append(b"two")
        with pytest.raises(LogClosed):
            await log.truncate(address)
        with pytest.raises(LogClosed):
            await read_all(log)

    async def test_append_before_open_fails(self, make_log):
        """An instance that was never opened refuses appends."""
        log = make_log()
        with pytest.raises(LogClosed):
            await log.append(b"too early")
        await log.close()

    async def test_second_open_while_first_is_open_is_busy(self, make_log):
        """A second owner cannot open a log that a live owner holds; it can once the owner closed it."""
        first = make_log()
        first_epoch = await first.open()
        await first.append(b"owned")
        second = make_log()
        with pytest.raises(LogBusy) as raised:
            await second.open()
        assert raised.value.retriable
        assert (await first.append(b"still owned")).sequence == 2
        await first.close()
        third = make_log()
        assert await third.open() > first_epoch
        assert [p for _, p in await read_all(third)] == [b"owned", b"still owned"]
        await third.close()

    async def test_read_after_address(self, make_log):
        """read(after=A) starts right after A, also across a truncation point below A."""
        log = make_log()
        await log.open()
        payloads = [payload(i, size=700) for i in range(120)]
        addresses = [await log.append(p) for p in payloads]
        await log.truncate(addresses[9])
        await log.close()
        log = make_log()
        await log.open()
        records = await read_all(log, after=addresses[99])
        assert records == [(a.sequence, p) for a, p in zip(addresses[100:], payloads[100:])]
        assert await read_all(log, after=addresses[2]) == [(a.sequence, p)
                                                           for a, p in zip(addresses[10:], payloads[10:])]
        assert await read_all(log, after=addresses[-1]) == []
        await log.close()

    async def test_close_lets_queued_appends_finish_or_fail_cleanly(self, make_log):
        """Appends still in flight at close() either get acknowledged (and survive) or fail with LogClosed."""
        log = make_log()
        await log.open()
        tasks = [asyncio.ensure_future(log.append(payload(i))) for i in range(100)]
        await asyncio.sleep(0)
        await log.close()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        acknowledged = [o for o in outcomes if isinstance(o, LogAddress)]
        assert all(isinstance(o, (LogAddress, LogClosed)) for o in outcomes)
        assert acknowledged == [LogAddress(i) for i in range(1, len(acknowledged) + 1)]
        log = make_log()
        await log.open()
        records = await read_all(log)
        assert records[:len(acknowledged)] == [(i + 1, payload(i)) for i in range(len(acknowledged))]
        await log.close()

    async def test_large_volume_across_many_files(self, make_log):
        """Enough data to roll over files many times, truncated as it goes, reads back exactly."""
        log = make_log()
        await log.open()
        expected = []
        for round_number in range(6):
            batch = [payload(round_number * 100 + i, size=(i * 131) % 4000) for i in range(60)]
            addresses = await asyncio.gather(*(log.append(p) for p in batch))
            expected += list(zip((a.sequence for a in addresses), batch))
            if round_number % 2:
                await log.truncate(addresses[30])
                expected = [(s, p) for s, p in expected if s > addresses[30].sequence]
        await log.close()
        log = make_log()
        await log.open()
        assert await read_all(log) == expected
        await log.close()
