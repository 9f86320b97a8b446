"""Rule-based state machine: a real SegmentContainer over a real local durable log, against a plain
Python model of segments and table segments. Rules cover creates, appends (with writer event-number
dedup and offset conditions), seals, truncations, merges, attribute compare-and-set, conditional
table updates and removals, and restarts (recovery by replaying the log). After every step the
container's committed state must equal the model."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from server import errors
from server.containers import attributes as attrs
from server.containers.container import SegmentContainer
from server.containers.metadata import SegmentType
from server.tier1 import LocalDurableDataLog
from tests.support.replicated import ReplicatedTier1Machine, zookeeper_for_machines  # noqa: F401 - a fixture
from wire.constants import NO_VERSION, NOT_EXISTS, NULL_ATTRIBUTE_VALUE

NAMES = [f"sc/st/{n}.#epoch.0" for n in range(4)]
TABLES = [f"sc/t{n}_kvtable/0.#epoch.0" for n in range(2)]
WRITERS = [uuid.UUID(int=n + 1) for n in range(3)]
KEYS = [b"k1", b"k2", b"k3", b"longer-key-4"]


class ModelSegment:
    def __init__(self):
        self.data = bytearray()
        self.start = 0
        self.sealed = False
        self.attributes: dict = {}


class ContainerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.mkdtemp(prefix="tributary-sm-")
        self.segments: dict[str, ModelSegment] = {}
        self.tables: dict[str, dict] = {}  # name -> {key: (version, value)}
        self.merged: dict[str, str] = {}  # merged source -> its target (a retried merge succeeds)
        self.table_lengths: dict[str, int] = {}
        self.tier1 = self.start_tier1()
        self.container = self._open()

    def start_tier1(self):
        """What makes the container's log (the replicated variant below starts log stores here)."""
        return lambda: LocalDurableDataLog(self.directory, file_size=1 << 20, max_append_size=256 << 10)

    def stop_tier1(self):
        pass

    def _open(self) -> SegmentContainer:
        container = SegmentContainer(0, self.tier1(), checkpoint_every_operations=7)
        self.loop.run_until_complete(container.start())
        return container

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def teardown(self):
        try:
            self.run(self.container.stop())
            self.stop_tier1()
        finally:
            self.loop.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ rules: streams

    @rule(name=st.sampled_from(NAMES))
    def create(self, name):
        try:
            self.run(self.container.create_segment(name))
            assert name not in self.segments
            self.segments[name] = ModelSegment()
            self.merged.pop(name, None)
        except errors.SegmentAlreadyExists:
            assert name in self.segments

    @rule(name=st.sampled_from(NAMES), data=st.binary(min_size=1, max_size=300),
          writer=st.sampled_from(WRITERS), number_step=st.integers(-1, 3), conditional=st.booleans())
    def append(self, name, data, writer, number_step, conditional):
        model = self.segments.get(name)
        previous = model.attributes.get(writer, NULL_ATTRIBUTE_VALUE) if model else NULL_ATTRIBUTE_VALUE
        number = max(previous, 0) + number_step
        updates = (attrs.AttributeUpdate(writer, attrs.REPLACE_IF_EQUALS, number, previous),)
        expected_offset = len(model.data) if (model and conditional) else None
        try:
            length = self.run(self.container.append(name, data, updates, expected_offset))
        except errors.NoSuchSegment:
            assert model is None
            return
        except errors.SegmentIsSealed:
            assert model.sealed
            return
        assert model is not None and not model.sealed
        model.data += data
        model.attributes[writer] = number
        assert length == len(model.data)

    @rule(name=st.sampled_from(NAMES), writer=st.sampled_from(WRITERS))
    def stale_writer_is_rejected(self, name, writer):
        """An append expecting a stale event number fails the attribute condition and adds nothing; on a sealed
        segment too (the writer must learn where it is, not write its events to the successor again)."""
        model = self.segments.get(name)
        if model is None or writer not in model.attributes:
            return
        stale = model.attributes[writer] - 1
        updates = (attrs.AttributeUpdate(writer, attrs.REPLACE_IF_EQUALS, stale + 5, stale),)
        try:
            self.run(self.container.append(name, b"zombie", updates))
            raise AssertionError("a stale writer's append was accepted")
        except errors.BadAttributeUpdate:
            pass

    @rule(name=st.sampled_from(NAMES), wrong=st.integers(1, 50))
    def conditional_append_at_wrong_offset(self, name, wrong):
        model = self.segments.get(name)
        if model is None or model.sealed:
            return
        try:
            self.run(self.container.append(name, b"nope", (), len(model.data) + wrong))
            raise AssertionError("an append at a wrong offset was accepted")
        except errors.BadOffset:
            pass

    @rule(name=st.sampled_from(NAMES))
    def seal(self, name):
        model = self.segments.get(name)
        try:
            self.run(self.container.seal(name))
            assert model is not None and not model.sealed
            model.sealed = True
        except errors.SegmentIsSealed:
            assert model.sealed
        except errors.NoSuchSegment:
            assert model is None

    @rule(name=st.sampled_from(NAMES), fraction=st.floats(0, 1.2))
    def truncate(self, name, fraction):
        model = self.segments.get(name)
        if model is None:
            return
        offset = int(len(model.data) * fraction)
        try:
            self.run(self.container.truncate(name, offset))
            assert model.start <= offset <= len(model.data)
            model.start = offset
        except errors.SegmentIsTruncated:
            assert not model.start <= offset <= len(model.data)

    @rule(merge_target=st.sampled_from(NAMES), source=st.sampled_from(NAMES))
    def merge(self, merge_target, source):
        target_model, source_model = self.segments.get(merge_target), self.segments.get(source)
        try:
            length = self.run(self.container.merge(merge_target, source))
        except errors.NoSuchSegment:
            assert target_model is None or source_model is None
            return
        except errors.SegmentIsSealed:
            assert target_model.sealed
            return
        except errors.SegmentIsTruncated:
            assert source_model.start > 0
            return
        except errors.IllegalArgument:
            assert merge_target == source
            return
        if source_model is None:  # a retry of a merge that already happened
            assert self.merged.get(source) == merge_target and target_model is not None
        else:
            target_model.data += source_model.data
            del self.segments[source]
            self.merged[source] = merge_target
        assert length == len(target_model.data)

    @rule(name=st.sampled_from(NAMES), new=st.integers(-5, 5), use_current=st.booleans())
    def attribute_compare_and_set(self, name, new, use_current):
        model = self.segments.get(name)
        attribute = uuid.UUID(int=999)
        current = model.attributes.get(attribute, NULL_ATTRIBUTE_VALUE) if model else NULL_ATTRIBUTE_VALUE
        expected = current if use_current else current + 1
        update = attrs.AttributeUpdate(attribute, attrs.REPLACE_IF_EQUALS, new, expected)
        try:
            self.run(self.container.update_attributes(name, (update,)))
            assert model is not None and not model.sealed and use_current
            model.attributes[attribute] = new
        except errors.NoSuchSegment:
            assert model is None
        except errors.SegmentIsSealed:
            assert model.sealed
        except errors.BadAttributeUpdate:
            assert not use_current

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name):
        try:
            self.run(self.container.delete(name))
            del self.segments[name]
        except errors.NoSuchSegment:
            assert name not in self.segments

    # ------------------------------------------------------------------ rules: tables

    @rule(name=st.sampled_from(TABLES))
    def create_table(self, name):
        try:
            self.run(self.container.create_segment(name, SegmentType.TABLE))
            self.tables[name], self.table_lengths[name] = {}, 0
        except errors.SegmentAlreadyExists:
            assert name in self.tables

    @rule(name=st.sampled_from(TABLES), batch=st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from(["none", "current", "not-exists", "wrong"]),
                  st.binary(max_size=40)), min_size=1, max_size=4, unique_by=lambda item: item[0]))
    def table_update(self, name, batch):
        model = self.tables.get(name)
        entries, missing, bad = [], False, False
        for key, condition, value in batch:
            current = model.get(key, (None,))[0] if model is not None else None
            version = {"none": NO_VERSION, "not-exists": NOT_EXISTS, "wrong": 10**9,
                       "current": current if current is not None else NOT_EXISTS}[condition]
            entries.append((key, version, value))
            if version == NO_VERSION:
                continue
            if current is None:
                missing = missing or version >= 0
                bad = bad or (version != NOT_EXISTS and version < 0)
            else:
                bad = bad or version != current
        # Java's rule: a missing key given a version fails at once; bad versions are reported after the scan.
        expected_failure = errors.TableKeyDoesNotExist if missing else errors.TableKeyBadVersion if bad else None
        try:
            versions = self.run(self.container.update_table(name, entries))
        except errors.NoSuchSegment:
            assert model is None
            return
        except (errors.TableKeyDoesNotExist, errors.TableKeyBadVersion) as error:
            assert type(error) is expected_failure, f"got {error!r}, expected {expected_failure}"
            return
        assert expected_failure is None, f"expected {expected_failure}"
        for (key, _, value), version in zip(entries, versions):
            assert version == self.table_lengths[name]
            model[key] = (version, value)
            self.table_lengths[name] += 17 + len(key) + len(value)

    @rule(name=st.sampled_from(TABLES), key=st.sampled_from(KEYS), conditional=st.booleans())
    def table_remove(self, name, key, conditional):
        model = self.tables.get(name)
        current = model.get(key, (None,))[0] if model is not None else None
        version = (current if current is not None else NOT_EXISTS) if conditional else NO_VERSION
        try:
            self.run(self.container.remove_table_keys(name, [(key, version)]))
        except errors.NoSuchSegment:
            assert model is None
            return
        model.pop(key, None)
        self.table_lengths[name] += 17 + len(key)

    # ------------------------------------------------------------------ restart

    @rule()
    def restart(self):
        """Stop the container and recover a new one from the same log."""
        self.run(self.container.stop())
        self.container = self._open()

    @precondition(lambda self: self.segments)
    @rule(name=st.sampled_from(NAMES), offset_fraction=st.floats(0, 1))
    def read_matches(self, name, offset_fraction):
        model = self.segments.get(name)
        if model is None or len(model.data) == model.start:
            return
        offset = model.start + int((len(model.data) - model.start) * offset_fraction)
        if offset == len(model.data):
            return
        result = self.run(self.container.read(name, offset, 1 << 20, wait_timeout=1))
        assert bytes(result.data()) == bytes(model.data[offset:offset + result.length])

    # ------------------------------------------------------------------ invariants

    def user_segment_names(self) -> set:
        return set(self.container.segment_names())

    @invariant()
    def committed_state_equals_model(self):
        assert self.user_segment_names() == set(self.segments) | set(self.tables)
        for name, model in self.segments.items():
            info = self.container.get_info(name)
            assert (info.length, info.start_offset, info.sealed) == (len(model.data), model.start, model.sealed)
            for attribute, value in model.attributes.items():
                assert info.attributes.get(attribute) == value
        for name, model in self.tables.items():
            assert self.container.get_table_info(name).table_entry_count == len(model)
            found = self.container.read_table(name, list(model))
            for (key, (version, value)), entry in zip(model.items(), found):
                assert entry is not None and (entry.key, entry.version, bytes(entry.value)) == (key, version, value)
            assert self.container.get_info(name).length == self.table_lengths[name]


ContainerMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestContainerStateMachine = ContainerMachine.TestCase


class ReplicatedContainerMachine(ReplicatedTier1Machine, ContainerMachine):
    """The same machine over the replicated log: three in-process log stores (3/3/2) and a real ZooKeeper."""


ReplicatedContainerMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None,
                                                        suppress_health_check=[HealthCheck.too_slow])
TestReplicatedContainerStateMachine = pytest.mark.zk(ReplicatedContainerMachine.TestCase)
