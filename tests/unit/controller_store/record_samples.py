"""One hand-written, non-trivial sample of every record type (every field away from its default)."""

from __future__ import annotations

import uuid

from controller.store import State, TransactionStatus
from controller.store import records as r
from controller_api.model import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfiguration
from controller_api.reader_groups import ReaderGroupConfiguration, StreamDataRetention

SEGMENT = r.SegmentRecord((3 << 32) | 7, 1234, 0.25, 0.5)
EPOCH = r.EpochRecord(4, 3, 5000, (r.SegmentRecord(9, 10, 0.0, 0.25), SEGMENT, r.SegmentRecord(5, 11, 0.5, 1.0)))
TRANSACTION_ID = uuid.UUID(int=(3 << 96) | 42)

SAMPLES = {
    "scope": r.ScopeRecord(sealed=True),
    "creation": r.CreationRecord(1_700_000_000_000),
    "deleted": r.DeletedStreamRecord(77),
    "state": r.StateRecord(State.COMMITTING_TXN),
    "configuration": r.StreamConfigurationRecord(StreamConfiguration(
        ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 3, 4),
        RetentionPolicy(RetentionType.SIZE, 1 << 30, 1 << 40), ("tag-é", "t2"), 1 << 20, 5000), True, ("old",)),
    "epoch": EPOCH,
    "history_chunk": r.HistoryChunk(2, (r.HistoryTimeSeriesRecord(2000, 2000, 99, (1, 2), (SEGMENT,)),
                                        r.HistoryTimeSeriesRecord(2001, 1999, 100, (), ()))),
    "history_root": r.HistoryIndexRoot((0, 1000, 2500)),
    "history_leaf": r.HistoryIndexLeaf(2, (2500, 2600, 2601)),
    "sealed_epoch": r.SealedEpochRecord(12),
    "sealed_sizes": r.SealedSizesShard(3, {SEGMENT.segment_id: 1 << 33, 4: 0}),
    "epoch_transition": r.EpochTransitionRecord(4, 777, (9, 5), (r.NewSegment((5 << 32) | 10, 0.0, 0.1),
                                                                  r.NewSegment((5 << 32) | 11, 0.1, 1.0))),
    "truncation": r.TruncationRecord({SEGMENT.segment_id: 100, 9: -1},
                                     {SEGMENT: 4, r.SegmentRecord(9, 10, 0.0, 0.25): 5},
                                     frozenset({1, 2}), 12345, True),
    "retention_set": r.RetentionSet(((100, 1000), (200, 3000))),
    "stream_cut": r.StreamCutRecord(200, 3000, {SEGMENT.segment_id: 100, 9: 50}),
    "transaction": r.TransactionRecord(TRANSACTION_ID, 3, TransactionStatus.COMMITTING, 10, 20, 30, "writer-1", 15,
                                       8, -1, {SEGMENT.segment_id: 4096}),
    "committing": r.CommittingTransactionsRecord(3, (TRANSACTION_ID, uuid.UUID(int=5)), 6),
    "reader_group": r.ReaderGroupConfigRecord(ReaderGroupConfiguration(
        uuid.UUID(int=99), 3, 100, 200, 5, StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT, 1 << 20,
        {"s/a": {1: 2}}, {"s/a": {3: 4}, "s/b": {}}), updating=True),
    "subscriber_set": r.SubscriberSet(("g1", "g2")),
    "subscriber": r.SubscriberRecord(4, 300, {1: 2, 3: -1}),
    "writer_mark": r.WriterMarkRecord(123, {1: 2}, is_alive=False),
    "workflow": r.WorkflowIntentRecord(r.WorkflowKind.TRUNCATE, 55, 66, b"\x00payload"),
    "pending_workflow": r.PendingWorkflowRecord(r.WorkflowKind.DELETE, 56),
    "cold_segments": r.ColdSegmentsRecord({SEGMENT.segment_id: 1_700_000_600_000, 9: 2**63 - 1}),
}
