"""Hypothesis rule-based test: random appends, truncations and reopens of a local log against a list model.

The model is the list of (sequence, payload) records that must survive. After every reopen the
log must read back exactly the model, from exactly after the truncation point, with an epoch
larger than before; ``read(after=...)`` must return the matching suffix. Files are tiny so that
random runs roll over, recycle and reuse files all the time.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from server.tier1 import LocalDurableDataLog, LogAddress

from .helpers import metadata, read_all

FILE_SIZE = 4 * 1024
MAX_APPEND_SIZE = 1536

payloads = st.one_of(st.binary(max_size=64), st.binary(min_size=500, max_size=MAX_APPEND_SIZE))


class LocalLogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.mkdtemp(prefix="tier1-model-")
        self.model: list[tuple[int, bytes]] = []
        self.next_sequence = 1
        self.truncation = 0
        self.epoch = 0
        self.log = None
        self._open()

    def run(self, awaitable):
        return self.loop.run_until_complete(awaitable)

    def _open(self) -> None:
        self.log = LocalDurableDataLog(self.directory, file_size=FILE_SIZE, max_append_size=MAX_APPEND_SIZE,
                                       batch_bytes_max=4096, spare_files_max=1)
        epoch = self.run(self.log.open())
        assert epoch > self.epoch
        self.epoch = epoch
        assert self.run(read_all(self.log)) == self.model
        assert self.log.truncation_address == (LogAddress(self.truncation) if self.truncation else None)

    def _record(self, address: LogAddress, payload: bytes) -> None:
        assert address == LogAddress(self.next_sequence)
        self.model.append((address.sequence, payload))
        self.next_sequence += 1

    @initialize(count=st.integers(0, 80), size=st.integers(0, MAX_APPEND_SIZE))
    def prefill(self, count, size):
        """Starts from a log spanning several files, so that boundaries and recycling come up early."""
        for number in range(count):
            payload = number.to_bytes(4, "little") * (size // 4)
            self._record(self.run(self.log.append(payload)), payload)

    @rule(payload=payloads)
    def append(self, payload):
        self._record(self.run(self.log.append(payload)), payload)

    @rule(parts=st.lists(st.binary(max_size=700), max_size=4))
    def append_parts(self, parts):
        self._record(self.run(self.log.append(parts)), b"".join(parts))

    @rule(batch=st.lists(payloads, min_size=2, max_size=12))
    def append_concurrently(self, batch):
        async def gathered():
            return await asyncio.gather(*(self.log.append(p) for p in batch))
        for address, payload in zip(self.run(gathered()), batch):
            self._record(address, payload)

    @precondition(lambda self: self.model)
    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction):
        index = min(len(self.model) - 1, int(fraction * len(self.model)))
        self.truncate_at(self.model[index][0])

    @precondition(lambda self: self.model)
    @rule(choice=st.integers(0, 1000), delta=st.integers(-2, 1))
    def truncate_near_file_boundary(self, choice, delta):
        """File boundaries are where an off-by-one in truncation would lose a record: aim there."""
        starts = [entry.first_sequence for entry in metadata(self.directory).files]
        candidates = [s + delta for s in starts[1:] if self.model[0][0] <= s + delta <= self.model[-1][0]]
        if candidates:
            self.truncate_at(candidates[choice % len(candidates)])

    def truncate_at(self, sequence: int) -> None:
        self.run(self.log.truncate(LogAddress(sequence)))
        self.truncation = max(self.truncation, sequence)
        self.model = [(s, p) for s, p in self.model if s > self.truncation]

    @rule(fraction=st.floats(0, 1))
    def reopen_and_read_after(self, fraction):
        self.run(self.log.close())
        self._open()
        after = int(fraction * (self.next_sequence + 1))
        expected = [(s, p) for s, p in self.model if s > after]
        assert self.run(read_all(self.log, LogAddress(after))) == expected

    @invariant()
    def epoch_is_stable_while_open(self):
        assert self.log.epoch == self.epoch

    def teardown(self):
        try:
            self.run(self.log.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.directory, ignore_errors=True)


LocalLogMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)
TestLocalLogModel = LocalLogMachine.TestCase
