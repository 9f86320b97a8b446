"""Hypothesis rule-based test: SLTS against a plain bytes model.

Random creates, writes (some failing in chunk storage or in the metadata store, their outcome
then invisible), reads, seals, truncations, concats, deletes, garbage collections and restarts
(a new instance with a higher epoch: bootstrap plus finish_bootstrap, the old one's garbage queue
lost) on tiny chunks, with and without append. One of the segments is a system segment, whose
layout lives in the system journal. After every step each segment reads back exactly as the
model says, and every chunk of every segment exists (G1 safety); after a garbage collection no
other segment chunk is left in storage (G1 liveness) and only the current epoch's journal files.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from server.tier2 import chunk_index
from server.tier2.chunk_names import journal_prefix, parse_journal_file, parse_segment_chunk
from server.tier2.chunk_storage import ChunkStorageUnavailable
from server.tier2.chunked_storage import ChunkedSegmentStorage
from server.tier2.config import StorageConfig
from server.tier2.errors import (BadOffset, SegmentExists, SegmentNotFound, SegmentNotSealed, SegmentSealed,
                                 SegmentTruncated)
from server.tier2.metadata_store import MetadataStoreUnavailable
from server.tier2.records import decode
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.doubles.slts_metadata import InMemoryMetadataStore
from tests.support.faults.tier2 import FaultyChunkStorage

pytestmark = pytest.mark.timeout(120)

SYSTEM = "_system/containers/storage_metadata_0"
ORDINARY = ["a", "b", "c"]
CONFIG = StorageConfig(max_chunk_size=16, journal_snapshot_every=4, defrag_min_chunk_size=6, defrag_max_size=12)

ordinary_names = st.sampled_from(ORDINARY)
any_names = st.sampled_from(ORDINARY + [SYSTEM])
payloads = st.binary(min_size=1, max_size=40)


@dataclasses.dataclass
class ModelSegment:
    data: bytearray = dataclasses.field(default_factory=bytearray)
    start_offset: int = 0
    sealed: bool = False


class SltsMachine(RuleBasedStateMachine):
    supports_append = True

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.chunks = FaultyChunkStorage(InMemoryChunkStorage(supports_append=self.supports_append))
        self.metadata = InMemoryMetadataStore()
        self.model = {SYSTEM: ModelSegment()}
        self.epoch = 0
        self.storage = None
        self.hints_seen = 0
        # Index blocks of two chunks (32 bytes), so that these small segments get chunk index hints.
        self._block_chunks, chunk_index.BLOCK_CHUNKS = chunk_index.BLOCK_CHUNKS, 2
        self._start()

    def run(self, awaitable):
        return self.loop.run_until_complete(awaitable)

    def _start(self):
        self.epoch += 1
        self.storage = ChunkedSegmentStorage(0, self.chunks, self.metadata, config=CONFIG, system_segments=[SYSTEM])
        self.run(self.storage.bootstrap(self.epoch))
        self.run(self.storage.finish_bootstrap())

    def teardown(self):
        chunk_index.BLOCK_CHUNKS = self._block_chunks
        self.run(self.storage.close())
        self.loop.close()

    def expect(self, error, awaitable):
        """Runs ``awaitable``; it must raise ``error`` (an exception class), or succeed if ``error`` is None."""
        if error is None:
            return self.run(awaitable)
        with pytest.raises(error):
            self.run(awaitable)

    @rule(name=any_names)
    def create(self, name):
        self.expect(SegmentExists if name in self.model else None, self.storage.create(name))
        self.model.setdefault(name, ModelSegment())

    @rule(name=any_names, data=payloads)
    def write(self, name, data):
        segment = self.model.get(name)
        error = SegmentNotFound if segment is None else SegmentSealed if segment.sealed else None
        self.expect(error, self.storage.write(name, len(segment.data) if segment else 0, data))
        if error is None:
            segment.data += data

    @precondition(lambda self: self.model)
    @rule(data=st.data(), payload=payloads, fault=st.sampled_from(["chunk lost", "chunk kept", "metadata"]))
    def failed_write(self, data, payload, fault):
        """A write with a fault injected: it fails and changes nothing, or (the injected chunk storage
        failure hit a call that failed anyway, and the write recovered from that) it succeeds.
        Later writes at the same offset retry it; they must not duplicate bytes."""
        name = data.draw(st.sampled_from(sorted(name for name, s in self.model.items() if not s.sealed)
                                         or [SYSTEM]), label="name")
        segment = self.model[name]
        if segment.sealed:
            return
        if fault == "metadata" and name != SYSTEM:
            self.metadata.fail_writes = 1
            error = MetadataStoreUnavailable
        else:
            self.chunks.fail_next(1, after_inner=fault == "chunk kept")
            error = ChunkStorageUnavailable
        try:
            self.run(self.storage.write(name, len(segment.data), payload))
        except error:
            return
        segment.data += payload

    @rule(name=any_names, start=st.floats(0, 1), length=st.integers(0, 70))
    def read(self, name, start, length):
        segment = self.model.get(name)
        if segment is None:
            self.expect(SegmentNotFound, self.storage.read(name, 0, length))
            return
        offset = int(start * (len(segment.data) + 2))
        if offset > len(segment.data):
            self.expect(BadOffset, self.storage.read(name, offset, length))
        elif offset < segment.start_offset:
            self.expect(SegmentTruncated, self.storage.read(name, offset, length))
        else:
            assert self.run(self.storage.read(name, offset, length)) == segment.data[offset:offset + length]

    @rule(name=ordinary_names)
    def seal(self, name):
        self.expect(None if name in self.model else SegmentNotFound, self.storage.seal(name))
        if name in self.model:
            self.model[name].sealed = True

    @rule(name=any_names, fraction=st.floats(0, 1))
    def truncate(self, name, fraction):
        segment = self.model.get(name)
        if segment is None:
            self.expect(SegmentNotFound, self.storage.truncate(name, 0))
            return
        offset = int(fraction * len(segment.data))
        self.run(self.storage.truncate(name, offset))
        segment.start_offset = max(segment.start_offset, offset)

    @rule(target_name=ordinary_names, source=ordinary_names)
    def concat(self, target_name, source):
        if target_name == source:
            return
        target = target_name
        target_segment, source_segment = self.model.get(target), self.model.get(source)
        offset = len(target_segment.data) if target_segment else 0
        if target_segment is None or source_segment is None:
            error = SegmentNotFound
        elif target_segment.sealed:
            error = SegmentSealed
        elif not source_segment.sealed:
            error = SegmentNotSealed
        elif source_segment.start_offset:
            error = SegmentTruncated
        else:
            error = None
        result = self.expect(error, self.storage.concat(target, offset, source))
        if error is None:
            target_segment.data += self.model.pop(source).data
            assert result == len(target_segment.data)

    @rule(name=ordinary_names)
    def delete(self, name):
        self.expect(None if name in self.model else SegmentNotFound, self.storage.delete(name))
        self.model.pop(name, None)

    @rule()
    def restart(self):
        self.run(self.storage.close())
        self._start()

    @rule()
    def collect_garbage(self):
        self.run(self.storage.collect_garbage())
        referenced = set()
        for name in self.model:
            referenced |= {chunk.name for chunk in self.run(self.storage.list_chunks(name))}
        stored = {name for name in self.run(self.chunks.list()) if parse_segment_chunk(name)}
        assert stored == referenced
        journal = [parse_journal_file(0, name) for name in self.run(self.chunks.list(journal_prefix(0)))]
        assert {file.epoch for file in journal} == {self.epoch}

    @invariant()
    def segments_match_the_model(self):
        for name in ORDINARY:
            assert self.run(self.storage.exists(name)) == (name in self.model)
        for name, segment in self.model.items():
            info = self.run(self.storage.get_info(name))
            assert (info.length, info.start_offset, info.sealed) == \
                (len(segment.data), segment.start_offset, segment.sealed)
            assert self.run(self.storage.read(name, segment.start_offset, 1000)) == segment.data[segment.start_offset:]
            layout = self.run(self.storage.list_chunks(name))
            assert all(chunk.exists_in_storage and chunk.length <= CONFIG.max_chunk_size for chunk in layout)
            assert len(layout) == info.chunk_count
            if layout:
                assert layout[0].start_offset <= segment.start_offset
                assert layout[-1].start_offset + layout[-1].length == len(segment.data)
        starts = {name: {chunk.start_offset: chunk.name for chunk in self.run(self.storage.list_chunks(name))}
                  for name in self.model}
        for key in self.run(self.metadata.keys()):  # chunk index hints: only of live segments, to linked chunks
            name, separator, _ = key.rpartition("\0")
            if separator:
                hint = decode(self.run(self.metadata.get(key)).value)
                self.hints_seen += 1
                assert starts.get(name, {}).get(hint.start_offset) == hint.chunk, (key, hint)


class SltsWithoutAppendMachine(SltsMachine):
    supports_append = False


MODEL_SETTINGS = settings(max_examples=30, stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

TestSltsWithAppend = SltsMachine.TestCase
TestSltsWithAppend.settings = MODEL_SETTINGS
TestSltsWithoutAppend = SltsWithoutAppendMachine.TestCase
TestSltsWithoutAppend.settings = MODEL_SETTINGS
