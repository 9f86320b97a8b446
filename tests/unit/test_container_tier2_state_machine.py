"""The container state machine again, with Tier-2 under it and everything tiny: a cache of a few KiB
(constant eviction, reads from Tier-2), chunks of 512 bytes (constant rolling), flushes after a few
bytes, checkpoints every 2 KiB (constant log truncation), the storage metadata table compacted past
256 dead bytes. Extra rules flush to Tier-2, evict, and compact user tables. The
committed state, every read, and the state after each restart (log tail + Tier-2) must equal the model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.storage_writer import StorageWriterConfig
from server.tier2.config import StorageConfig
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.replicated import ReplicatedTier1Machine, zookeeper_for_machines  # noqa: F401 - a fixture
from tests.unit.test_container_state_machine import TABLES, ContainerMachine


class Tier2ContainerMachine(ContainerMachine):
    def __init__(self):
        self.chunks = InMemoryChunkStorage()
        self.cache = CacheManager(4096)
        super().__init__()

    def _open(self) -> SegmentContainer:
        tier2 = Tier2Settings(self.chunks, self.cache,
                              storage=StorageConfig(max_chunk_size=512, defrag_min_chunk_size=128,
                                                    defrag_max_size=512, gc_delay_seconds=0.0),
                              writer=StorageWriterConfig(flush_size=64, flush_interval=0.01, max_write_size=300))
        container = SegmentContainer(0, self.tier1(), checkpoint_every_operations=7, checkpoint_every_bytes=2048, tier2=tier2,
                                     table_compaction_threshold=256)
        self.loop.run_until_complete(container.start())
        return container

    def user_segment_names(self) -> set:
        return {name for name in self.container.segment_names() if not name.startswith("_system/")}

    @rule()
    def flush_to_tier2(self):
        """After FlushToStorage, Tier-2 holds every byte, seal and truncation of every segment, and the
        storage metadata table is compacted when its dead records outweigh the rest: bloat does not outlive
        the next pass. (Not "that pass": passes run on in the background every 10 ms here, so when this
        rule looks, the next one may have logged its metadata updates and not yet reached its compaction.
        Hypothesis found that race in one full-suite run of five.)"""
        for _ in range(3):  # the flush, then up to two more whole passes (compaction included)
            self.run(self.container.flush_to_storage())
            metadata = self.container._committed(self.container.storage_metadata_name)
            dead = metadata.length - metadata.start_offset - metadata.table.live_bytes
            if dead <= max(256, metadata.table.live_bytes):
                break
        assert dead <= max(256, metadata.table.live_bytes)
        for name, model in self.segments.items():
            if len(model.data):
                info = self.run(self.container.storage.get_info(name))
                assert (info.length, info.sealed) == (len(model.data), model.sealed)
                assert info.start_offset <= model.start

    @rule()
    def evict(self):
        self.cache.evict()

    @rule(name=st.sampled_from(TABLES))
    def compact_table(self, name):
        """Compaction re-writes live entries and truncates the rest: keys, values and versions unchanged."""
        if name not in self.tables:
            return
        self.run(self.container.compact_table(name))
        self.table_lengths[name] = self.container.get_info(name).length


Tier2ContainerMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None,
                                                   suppress_health_check=[HealthCheck.too_slow])
TestContainerTier2StateMachine = Tier2ContainerMachine.TestCase


class ReplicatedTier2ContainerMachine(ReplicatedTier1Machine, Tier2ContainerMachine):
    """The same over the replicated log: constant log truncation drops whole ledgers (64 KiB each)."""


ReplicatedTier2ContainerMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=30, deadline=None,
                                                             suppress_health_check=[HealthCheck.too_slow])
TestReplicatedContainerTier2StateMachine = pytest.mark.zk(ReplicatedTier2ContainerMachine.TestCase)
