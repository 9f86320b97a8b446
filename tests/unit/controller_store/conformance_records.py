"""Conformance suite, part 3: transactions, retention, reader-side records, workflow intents, and a
round trip of every record type through the store.

Subclass ``RecordConformance`` and provide a ``kv`` fixture yielding a fresh, empty store.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from controller.store import (AlreadyExists, IllegalStateTransition, NotFound, TransactionStatus, WriteConflict,
                              readers, records, retention, transactions, workflows)
from controller.store.records import (CommittingTransactionsRecord, ReaderGroupConfigRecord, StreamCutRecord,
                                      TransactionRecord, WorkflowIntentRecord, WorkflowKind, WriterMarkRecord)
from controller_api.reader_groups import ReaderGroupConfiguration

from .conformance_streams import active_stream, make_metadata
from .record_samples import SAMPLES


def transaction(number: int, epoch: int = 0) -> TransactionRecord:
    return TransactionRecord(uuid.UUID(int=(epoch << 96) | number), epoch, TransactionStatus.OPEN, creation_time=10,
                             lease_expiry_time=20, max_execution_expiry_time=30, writer_id=f"writer{number}")


class RecordConformance:
    @pytest.fixture
    async def stream(self, kv):
        return await active_stream(await make_metadata(kv))

    async def test_every_record_type_round_trips_through_the_store(self, kv):
        """A sample of every record type, stored and read back, decodes to an equal record."""
        await kv.create_table("_system/_tables/samples")
        for name, record in SAMPLES.items():
            await kv.put("_system/_tables/samples", name, record.encode())
        for name, record in SAMPLES.items():
            stored = await kv.get("_system/_tables/samples", name)
            assert type(record).decode(stored.value) == record, name

    async def test_transaction_lifecycle(self, stream):
        """A transaction is created once, pinged with CAS, moves only along the status table, and is
        stamped with its completion time."""
        record = transaction(1)
        version = await transactions.create_transaction(stream, record)
        with pytest.raises(AlreadyExists):
            await transactions.create_transaction(stream, record)
        pinged = dataclasses.replace(record, lease_expiry_time=25)
        await transactions.replace_transaction(stream, pinged, version)
        with pytest.raises(WriteConflict):
            await transactions.replace_transaction(stream, record, version)
        committing = await transactions.transition_transaction(stream, record.transaction_id,
                                                               TransactionStatus.COMMITTING, 40, commit_order=7)
        assert (committing.commit_order, committing.lease_expiry_time) == (7, 25)
        with pytest.raises(IllegalStateTransition):
            await transactions.transition_transaction(stream, record.transaction_id, TransactionStatus.ABORTING, 41)
        await transactions.transition_transaction(stream, record.transaction_id, TransactionStatus.COMMITTED, 42)
        stored, _ = await transactions.get_transaction(stream, record.transaction_id)
        assert (stored.status, stored.completion_time) == (TransactionStatus.COMMITTED, 42)
        await transactions.remove_transaction(stream, record.transaction_id)
        with pytest.raises(NotFound):
            await transactions.get_transaction(stream, record.transaction_id)

    async def test_transactions_list_with_tokens(self, stream):
        """Every transaction of the stream is listed once across pages."""
        for number in range(9):
            await transactions.create_transaction(stream, transaction(number, epoch=number % 2))
        listed, token = [], b""
        while True:
            page, token = await transactions.list_transactions(stream, token, 4)
            if not page:
                break
            listed += page
        assert sorted(record.transaction_id.int & 0xFF for record in listed) == list(range(9))

    async def test_committing_record_is_compare_and_swap(self, stream):
        """The committing-transactions record starts empty and is replaced only at its version."""
        empty, version = await transactions.get_committing_transactions(stream)
        assert empty.is_empty
        batch = CommittingTransactionsRecord(0, (transaction(1).transaction_id, transaction(2).transaction_id))
        await transactions.replace_committing_transactions(stream, batch, version)
        with pytest.raises(WriteConflict):
            await transactions.replace_committing_transactions(stream, batch, version)
        assert (await transactions.get_committing_transactions(stream))[0] == batch

    async def test_retention_set_and_stream_cuts(self, stream):
        """Cuts are recorded in time order with the set in one batch, and dropped set-first."""
        for time in (100, 200, 300):
            await retention.add_stream_cut(stream, StreamCutRecord(time, time * 10, {0: time, 1: time}))
        with pytest.raises(WriteConflict):
            await retention.add_stream_cut(stream, StreamCutRecord(250, 0, {}))
        assert (await retention.get_retention_set(stream))[0].records == ((100, 1000), (200, 2000), (300, 3000))
        assert (await retention.get_stream_cut(stream, 200)).stream_cut == {0: 200, 1: 200}
        assert await retention.remove_stream_cuts_through(stream, 200) == 2
        assert (await retention.get_retention_set(stream))[0].records == ((300, 3000),)
        with pytest.raises(NotFound):
            await retention.get_stream_cut(stream, 100)

    async def test_sealed_sizes_are_sharded_by_creation_epoch(self, stream):
        """Sizes land in the shard of their segment's creation epoch and read back in one call."""
        sizes = {(epoch << 32) | number: epoch * 100 + number for epoch in range(5) for number in range(2)}
        await retention.record_sealed_sizes(stream, dict(list(sizes.items())[:5]))
        await retention.record_sealed_sizes(stream, dict(list(sizes.items())[5:]))
        assert await retention.get_sealed_sizes(stream, list(sizes) + [99 << 32]) == sizes

    async def test_truncation_record_admits_one_truncation_at_a_time(self, stream):
        """A running truncation (updating) refuses another, accepts its own re-drive, and completes once."""
        first = records.TruncationRecord({0: 5, 1: 5}, {}, frozenset({7}), size_till=10)
        await retention.start_truncation(stream, first)
        await retention.start_truncation(stream, first)
        with pytest.raises(WriteConflict):
            await retention.start_truncation(stream, dataclasses.replace(first, size_till=11))
        completed = await retention.complete_truncation(stream)
        assert not completed.updating and completed.to_delete == frozenset()
        assert (await retention.get_truncation(stream))[0] == completed

    async def test_reader_group_configurations(self, kv):
        """Reader-group configs are created once per scope, replaced with CAS, listed, and deleted."""
        metadata = await make_metadata(kv)
        await metadata.scopes.create_scope("scope")
        config = ReaderGroupConfigRecord(ReaderGroupConfiguration(uuid.UUID(int=5),
                                                                  starting_cuts={"scope/stream": {0: 1}}))
        version = await metadata.scopes.create_reader_group("scope", "group", config)
        with pytest.raises(AlreadyExists):
            await metadata.scopes.create_reader_group("scope", "group", config)
        newer = ReaderGroupConfigRecord(dataclasses.replace(config.configuration, generation=1))
        await metadata.scopes.replace_reader_group("scope", "group", newer, version)
        with pytest.raises(WriteConflict):
            await metadata.scopes.replace_reader_group("scope", "group", config, version)
        assert (await metadata.scopes.get_reader_group("scope", "group"))[0] == newer
        assert (await metadata.scopes.list_reader_groups("scope"))[0] == ["group"]
        await metadata.scopes.delete_reader_group("scope", "group")
        with pytest.raises(NotFound):
            await metadata.scopes.get_reader_group("scope", "group")

    async def test_subscribers(self, stream):
        """Subscribers are added once, their cuts never go back a generation, and removal is clean."""
        await readers.add_subscriber(stream, "group", 1, 100)
        with pytest.raises(AlreadyExists):
            await readers.add_subscriber(stream, "group", 1, 100)
        await readers.update_subscriber_cut(stream, "group", 2, {0: 50}, 200)
        with pytest.raises(WriteConflict):
            await readers.update_subscriber_cut(stream, "group", 1, {0: 60}, 300)
        assert (await readers.get_subscriber(stream, "group"))[0] == records.SubscriberRecord(2, 200, {0: 50})
        assert await readers.list_subscribers(stream) == ("group",)
        await readers.remove_subscriber(stream, "group")
        assert await readers.list_subscribers(stream) == ()
        with pytest.raises(NotFound):
            await readers.update_subscriber_cut(stream, "group", 3, {}, 400)

    async def test_writer_marks(self, stream):
        """Marks only move forward in time (and past the caller's check), are listed page by page, and can be
        shut down and removed."""
        assert await readers.note_writer_mark(stream, "w1", WriterMarkRecord(100, {0: 10}))
        assert not await readers.note_writer_mark(stream, "w1", WriterMarkRecord(90, {0: 5}))
        assert await readers.note_writer_mark(stream, "w2", WriterMarkRecord(100, {1: 10}))

        def refuse(stored: WriterMarkRecord) -> None:
            raise ValueError(f"refused after seeing {stored}")

        with pytest.raises(ValueError):  # the caller's check sees the stored mark and can refuse the write
            await readers.note_writer_mark(stream, "w1", WriterMarkRecord(200, {0: 20}), refuse)
        await readers.shut_down_writer(stream, "w2")
        marks, token = await readers.list_writer_marks(stream, b"", 1)
        more, _ = await readers.list_writer_marks(stream, token, 5)
        assert {**marks, **more} == {"w1": WriterMarkRecord(100, {0: 10}),
                                     "w2": WriterMarkRecord(100, {1: 10}, is_alive=False)}
        _, version = await readers.get_writer_mark(stream, "w1")
        with pytest.raises(WriteConflict):
            await readers.remove_writer_mark(stream, "w1", version + 1000)
        await readers.remove_writer_mark(stream, "w1", version)
        with pytest.raises(NotFound):
            await readers.get_writer_mark(stream, "w1")

    async def test_workflow_intents_are_exclusive_and_indexed(self, stream):
        """One intent per stream (re-beginning the same one is fine), listed in the global index until ended."""
        intent = WorkflowIntentRecord(WorkflowKind.SCALE, 100, request_id=9, payload=b"ranges")
        version = await workflows.begin_workflow(stream, intent)
        assert await workflows.begin_workflow(stream, intent) == version
        with pytest.raises(AlreadyExists):
            await workflows.begin_workflow(stream, WorkflowIntentRecord(WorkflowKind.SEAL, 101))
        assert await workflows.get_workflow(stream) == (intent, version)
        pending, _ = await workflows.list_pending_workflows(stream.kv)
        assert [(scope, name) for scope, name, _ in pending] == [("scope", "stream")]
        with pytest.raises(WriteConflict):
            await workflows.end_workflow(stream, version + 1000)
        await workflows.end_workflow(stream, version)
        assert await workflows.get_workflow(stream) is None
        assert (await workflows.list_pending_workflows(stream.kv))[0] == []
