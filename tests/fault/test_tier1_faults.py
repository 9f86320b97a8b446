"""Tier-1 under the faults we promise to survive: failed fsync, torn write, crash mid-batch, SIGKILL.

The promise, checked after every fault: the failure surfaces as a failed append (LogWriteFailed),
the log closes and fails every later append, and a new instance on the same directory recovers
exactly a prefix of the appended records that holds every acknowledged one, each exactly once,
in order, intact, with no partial record.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from server.tier1 import LogAddress, LogClosed, LogWriteFailed
from tests.support.faults.tier1 import FaultyDurableDataLog
from tests.unit.tier1.helpers import TEST_FILE_SIZE, assert_prefix, recover, small_local_log

from ._log_writer_child import make_payload, number_of

ROUNDS = 4  # batches of gathered appends per scenario


RECORD_BYTES = 32 + 640  # header + payload: every record in these scenarios has the same size


def numbered(number: int) -> bytes:
    return random.Random(number).randbytes(636) + number.to_bytes(4, "little")


async def append_rounds(log, first_number: int, rounds: int = ROUNDS, per_round: int = 12):
    """Gathers ``per_round`` appends ``rounds`` times; returns (payloads in call order, outcomes)."""
    payloads, outcomes = [], []
    for round_number in range(rounds):
        batch = [numbered(first_number + round_number * per_round + i) for i in range(per_round)]
        payloads += batch
        outcomes += await asyncio.gather(*(log.append(p) for p in batch), return_exceptions=True)
    return payloads, outcomes


def acknowledged_count(outcomes) -> int:
    """How many leading appends succeeded; checks that no append succeeds after one failed."""
    count = 0
    while count < len(outcomes) and isinstance(outcomes[count], LogAddress):
        count += 1
    assert all(isinstance(o, (LogWriteFailed, LogClosed)) for o in outcomes[count:]), outcomes[count:]
    return count


async def run_fault(directory: Path, arm, *, rounds: int = ROUNDS, seed: int = 0):
    """Opens a faulty log, appends a healthy prefix, arms the fault, appends more; returns what recovery saw."""
    log = FaultyDurableDataLog(small_local_log(directory), seed=seed)
    await log.open()
    healthy = [numbered(i) for i in range(5)]
    for payload in healthy:
        await log.append(payload)
    arm(log)
    payloads, outcomes = await append_rounds(log, first_number=100, rounds=rounds)
    acknowledged = acknowledged_count(outcomes)
    failed = acknowledged < len(outcomes)
    if failed:
        with pytest.raises(LogWriteFailed):
            await log.append(b"after the failure")
    await log.close()
    records, _, _ = await recover(directory)
    recovered = [payload for _, payload in records]
    assert [sequence for sequence, _ in records] == list(range(1, len(records) + 1))
    assert_prefix(recovered, healthy + payloads, len(healthy) + acknowledged)
    return failed, acknowledged, len(recovered) - len(healthy)


async def test_fsync_failure_fails_the_batch_and_everything_after(tmp_path):
    """fdatasync fails but the data was written: that batch and all later appends fail; recovery keeps the batch."""
    failed, acknowledged, recovered = await run_fault(tmp_path, lambda log: log.fail_next_sync())
    assert failed and acknowledged == 0
    assert recovered == 12  # the whole first gathered round was one batch, and its bytes are on disk


async def test_fsync_failure_that_lost_the_data(tmp_path):
    """fdatasync fails and the batch's bytes never reached the disk: recovery holds exactly the acknowledged records."""
    failed, acknowledged, recovered = await run_fault(
        tmp_path, lambda log: log.fail_next_sync(lose_unsynced_data=True))
    assert failed and recovered == acknowledged == 0


async def test_fsync_failure_in_a_later_batch(tmp_path):
    """The third batch's fdatasync fails and loses its data: the two acknowledged batches survive, nothing else."""
    failed, acknowledged, recovered = await run_fault(
        tmp_path, lambda log: log.fail_next_sync(skip=2, lose_unsynced_data=True))
    assert failed and recovered == acknowledged == 24


@pytest.mark.parametrize("seed", range(12))
async def test_torn_write_recovers_a_prefix_without_partial_records(tmp_path, seed):
    """Only a random prefix of a batch reaches the file, then the write fails: no partial record survives."""
    prefix = random.Random(seed).choice([0, 1, 31, 32, 33, 100, RECORD_BYTES, RECORD_BYTES + 1, None])
    failed, acknowledged, recovered = await run_fault(tmp_path, lambda log: log.tear_next_write(prefix), seed=seed)
    assert failed and acknowledged == 0 and recovered <= 12


@pytest.mark.parametrize("mode", ["keep", "lose", "scramble"])
@pytest.mark.parametrize("seed", range(8))
async def test_crash_mid_batch_recovers_a_prefix(tmp_path, mode, seed):
    """Writing stops for good at a random byte, mid-batch, sometimes after a rollover; unsynced pages are kept,
    lost, or lost at random (power cut). Recovery never raises LogCorrupted and returns a prefix."""
    rounds = 9  # 5 + 108 records of 672 bytes: the last rounds roll into a second 64 KiB file
    budget = random.Random(seed).randrange(1, rounds * 12 * RECORD_BYTES)
    failed, acknowledged, recovered = await run_fault(
        tmp_path, lambda log: log.crash_after(budget, unsynced_data=mode), rounds=rounds, seed=seed)
    assert failed
    assert acknowledged <= budget // RECORD_BYTES
    if mode == "lose":
        assert recovered == acknowledged


@pytest.mark.parametrize("mode", ["keep", "lose", "scramble"])
@pytest.mark.parametrize("past_rollover", [-1, 0, 1, 2 * RECORD_BYTES + 5])
async def test_crash_around_a_rollover(tmp_path, mode, past_rollover):
    """The crash hits just before, exactly at, or just after the batch that rolls into a new file (whose
    metadata was already replaced). The synced part before the roll may survive although its batch failed."""
    records_in_first_file = TEST_FILE_SIZE // RECORD_BYTES
    rollover = (records_in_first_file - 5) * RECORD_BYTES  # bytes written after arming (5 healthy records first)
    failed, acknowledged, recovered = await run_fault(
        tmp_path, lambda log: log.crash_after(rollover + past_rollover, unsynced_data=mode), rounds=9)
    assert failed and acknowledged == rollover // RECORD_BYTES // 12 * 12  # the rounds before the rolling one
    if past_rollover >= 0:  # the part before the roll was synced before the log moved on: it survives
        assert recovered >= rollover // RECORD_BYTES


@pytest.mark.parametrize("data_reaches_disk", [False, True])
async def test_injected_append_failure_closes_the_log(tmp_path, data_reaches_disk):
    """The wrapper fails one append (its record written or not); every later one fails; recovery is a prefix."""
    failed, acknowledged, recovered = await run_fault(
        tmp_path, lambda log: log.fail_next_append(skip=17, data_reaches_disk=data_reaches_disk))
    assert failed and acknowledged == 17
    assert recovered == (18 if data_reaches_disk else 17)


async def test_latency_does_not_reorder_or_lose_anything(tmp_path):
    """Slow writes, slow syncs and delayed acknowledgements change timing only."""
    def arm(log):
        log.add_latency(0.001, jitter_seconds=0.002)
        log.file_faults.add_latency(write_seconds=0.001, sync_seconds=0.002)
    failed, acknowledged, recovered = await run_fault(tmp_path, arm)
    assert not failed and acknowledged == recovered == ROUNDS * 12


# ---------------------------------------------------------------------- SIGKILL

CHILD = Path(__file__).with_name("_log_writer_child.py")
KILL_CYCLES = 12


def parse_child_output(text: str) -> tuple[dict[int, int], int | None]:
    """(number -> sequence of every acknowledged record, epoch) from complete lines only."""
    acknowledged, epoch = {}, None
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # the last line may have been cut by the kill
        kind, *fields = line.split()
        if kind == "ACK":
            acknowledged[int(fields[0])] = int(fields[1])
        elif kind == "OPEN":
            epoch = int(fields[0])
    return acknowledged, epoch


def check_log_after_kill(directory: Path, acknowledged: dict[int, int]) -> tuple[int, int]:
    """Every acknowledged record still above the truncation point is present once, in order, intact.

    Returns (the next number the writer should use, the epoch of this check's open).
    """
    from tests.fault._log_writer_child import FILE_SIZE, MAX_APPEND_SIZE

    records, epoch, truncation = asyncio.run(recover(directory, file_size=FILE_SIZE, max_append_size=MAX_APPEND_SIZE))
    sequences = [sequence for sequence, _ in records]
    numbers = [number_of(payload) for _, payload in records]
    assert sequences == list(range(truncation + 1, truncation + 1 + len(records))), "sequence gap or repeat"
    if numbers:
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "number gap or repeat"
    for (sequence, payload), number in zip(records, numbers):
        assert payload == make_payload(number), f"record {sequence} (number {number}) is damaged"
    by_number = dict(zip(numbers, sequences))
    for number, sequence in acknowledged.items():
        if sequence > truncation:
            assert by_number.get(number) == sequence, f"acknowledged number {number} at {sequence} is missing"
    return (numbers[-1] + 1 if numbers else max(acknowledged, default=-1) + 1), epoch


def wait_for_open(output_path: Path, child: subprocess.Popen, timeout: float = 60.0) -> None:
    """Returns once the child has said it opened the log (or has exited)."""
    deadline = time.monotonic() + timeout
    while b"OPEN " not in output_path.read_bytes() and child.poll() is None:
        assert time.monotonic() < deadline, f"the child did not open the log within {timeout} s"
        time.sleep(0.005)


@pytest.mark.slow
@pytest.mark.process
def test_sigkill_at_random_moments_loses_no_acknowledged_record(tmp_path):
    """A child appends numbered records (several in flight, rolling and truncating files) and is SIGKILLed at
    random moments, including during startup and recovery; after each kill every acknowledged record is
    present exactly once, in order and intact, and each owner's epoch is larger than the last."""
    seed = int(os.environ.get("TIER1_KILL_SEED", random.randrange(1 << 30)))
    generator = random.Random(seed)
    directory = tmp_path / "log"
    next_number, last_epoch, total_acknowledged = 0, 0, 0
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    for cycle in range(KILL_CYCLES):
        output_path = tmp_path / f"child-{cycle}.out"
        with open(output_path, "wb") as output:
            child = subprocess.Popen([sys.executable, str(CHILD), str(directory), str(next_number)],
                                     stdout=output, stderr=subprocess.PIPE, env=environment)
            # One kill in four lands while the child starts, opens and recovers; the rest mid-stream, counted from
            # its open (on a loaded host the interpreter's start alone can take longer than any fixed delay).
            if generator.random() < 0.25:
                time.sleep(generator.uniform(0.0, 0.15))
            else:
                delay = generator.uniform(0.0, 0.55)
                wait_for_open(output_path, child)
                time.sleep(delay)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
            error_output = child.stderr.read().decode()
        acknowledged, child_epoch = parse_child_output(output_path.read_text())
        context = f"seed {seed}, cycle {cycle}, {len(acknowledged)} acknowledged; child stderr: {error_output[-2000:]}"
        assert child.returncode == -signal.SIGKILL, context
        if acknowledged:
            assert min(acknowledged) == next_number, context
        next_number, epoch = check_log_after_kill(directory, acknowledged)
        if child_epoch is not None:
            assert last_epoch < child_epoch < epoch, context
        assert epoch > last_epoch, context
        last_epoch = epoch
        total_acknowledged += len(acknowledged)
    assert total_acknowledged > 0, f"seed {seed}: the child never got to append"
