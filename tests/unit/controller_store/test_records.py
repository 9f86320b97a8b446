"""Record serialization: hypothesis round trips for every record type, and the reader's error paths
(truncated value, version 0, leftover bytes, unknown enum, arbitrary bytes) all raising CorruptRecord."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.store import CorruptRecord, RecordTooLarge, State, TransactionStatus
from controller.store import records as r
from controller.store.codec import Encoder
from controller_api.model import (
    NO_MAXIMUM,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfiguration,
)
from controller_api.reader_groups import ReaderGroupConfiguration, StreamDataRetention

from .record_samples import SAMPLES

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(allow_nan=False)
names = st.text(max_size=12)
uuids = st.integers(0, 2**128 - 1).map(lambda value: uuid.UUID(int=value))
cuts = st.dictionaries(int64, int64, max_size=5)
segments = st.builds(r.SegmentRecord, int64, int64, floats, floats)
segment_tuples = st.lists(segments, max_size=5).map(tuple)
ids = st.lists(int64, max_size=5).map(tuple)
history_records = st.builds(r.HistoryTimeSeriesRecord, int32, int32, int64, ids, segment_tuples)
times = st.lists(int64, max_size=8).map(tuple)
non_negative64 = st.integers(0, 2**63 - 1)
positive32 = st.integers(1, 2**31 - 1)
rates = st.sampled_from([ScaleType.BY_RATE_IN_KBYTES_PER_SEC, ScaleType.BY_RATE_IN_EVENTS_PER_SEC])
scaling_policies = st.one_of(  # every policy the Controller API's model accepts
    st.builds(ScalingPolicy, st.just(ScaleType.FIXED_NUM_SEGMENTS), int32, int32, positive32),
    st.builds(ScalingPolicy, rates, positive32, positive32, positive32))


@st.composite
def retention_policies(draw):
    minimum = draw(st.integers(0, NO_MAXIMUM - 1))
    maximum = draw(st.just(0) | st.integers(minimum, NO_MAXIMUM - 1))  # 0: no maximum, stored as NO_MAXIMUM
    return RetentionPolicy(draw(st.sampled_from(RetentionType)), minimum, maximum)


STRATEGIES = {
    r.ScopeRecord: st.builds(r.ScopeRecord, st.booleans()),
    r.CreationRecord: st.builds(r.CreationRecord, int64),
    r.DeletedStreamRecord: st.builds(r.DeletedStreamRecord, int32),
    r.StateRecord: st.builds(r.StateRecord, st.sampled_from(State)),
    r.StreamConfigurationRecord: st.builds(
        r.StreamConfigurationRecord,
        st.builds(StreamConfiguration, scaling_policies, st.none() | retention_policies(),
                  st.lists(names, max_size=4).map(tuple), non_negative64, non_negative64),
        st.booleans(), st.lists(names, max_size=3).map(tuple)),
    r.EpochRecord: st.builds(r.EpochRecord, int32, int32, int64, segment_tuples),
    r.HistoryChunk: st.builds(r.HistoryChunk, int32, st.lists(history_records, max_size=4).map(tuple)),
    r.HistoryIndexRoot: st.builds(r.HistoryIndexRoot, times),
    r.HistoryIndexLeaf: st.builds(r.HistoryIndexLeaf, int32, times),
    r.SealedEpochRecord: st.builds(r.SealedEpochRecord, int32),
    r.SealedSizesShard: st.builds(r.SealedSizesShard, int32, cuts),
    r.EpochTransitionRecord: st.builds(r.EpochTransitionRecord, int32, int64, ids,
                                       st.lists(st.builds(r.NewSegment, int64, floats, floats), max_size=4).map(tuple)),
    r.TruncationRecord: st.builds(r.TruncationRecord, cuts, st.dictionaries(segments, int32, max_size=4),
                                  st.frozensets(int64, max_size=4), int64, st.booleans()),
    r.RetentionSet: st.builds(r.RetentionSet, st.lists(st.tuples(int64, int64), max_size=5).map(tuple)),
    r.StreamCutRecord: st.builds(r.StreamCutRecord, int64, int64, cuts),
    r.TransactionRecord: st.builds(r.TransactionRecord, uuids, int32, st.sampled_from(TransactionStatus), int64, int64,
                                   int64, names, int64, int64, int64, cuts),
    r.CommittingTransactionsRecord: st.builds(r.CommittingTransactionsRecord, int32,
                                              st.lists(uuids, max_size=4).map(tuple), int32),
    r.ReaderGroupConfigRecord: st.builds(r.ReaderGroupConfigRecord, st.builds(
        ReaderGroupConfiguration, uuids, int64, int64, int64, int32, st.sampled_from(StreamDataRetention), int64,
        st.dictionaries(names, cuts, max_size=3), st.dictionaries(names, cuts, max_size=3)), st.booleans()),
    r.SubscriberSet: st.builds(r.SubscriberSet, st.lists(names, max_size=4).map(tuple)),
    r.SubscriberRecord: st.builds(r.SubscriberRecord, int64, int64, cuts),
    r.WriterMarkRecord: st.builds(r.WriterMarkRecord, int64, cuts, st.booleans()),
    r.WorkflowIntentRecord: st.builds(r.WorkflowIntentRecord, st.sampled_from(r.WorkflowKind), int64, int64,
                                      st.binary(max_size=20)),
    r.PendingWorkflowRecord: st.builds(r.PendingWorkflowRecord, st.sampled_from(r.WorkflowKind), int64),
    r.ColdSegmentsRecord: st.builds(r.ColdSegmentsRecord, cuts),
}
RECORD_TYPES = sorted(STRATEGIES, key=lambda record_type: record_type.__name__)


def test_every_record_type_has_a_strategy_and_a_sample():
    """No record type escapes the round-trip tests: each exported record has a strategy and a sample."""
    exported = {value for value in map(vars(r).get, r.__all__) if isinstance(value, type) and hasattr(value, "decode")}
    assert exported == set(STRATEGIES) == {type(sample) for sample in SAMPLES.values()}


@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda record_type: record_type.__name__)
@given(data=st.data())
def test_round_trip(record_type, data):
    """decode(encode(x)) == x, and encoding is deterministic, for arbitrary field values."""
    record = data.draw(STRATEGIES[record_type])
    encoded = record.encode()
    assert record_type.decode(encoded) == record
    assert record_type.decode(encoded).encode() == encoded


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_truncated_values_are_corrupt(name):
    """Every proper prefix of an encoded record fails to decode with CorruptRecord, never silently."""
    record = SAMPLES[name]
    encoded = record.encode()
    for length in range(len(encoded)):
        with pytest.raises(CorruptRecord):
            type(record).decode(encoded[:length])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_version_rules(name):
    """Version 0 and leftover bytes at the known version are corrupt; a newer version's extra
    (appended) fields are ignored."""
    record = SAMPLES[name]
    encoded = record.encode()
    with pytest.raises(CorruptRecord):
        type(record).decode(b"\x00" + encoded[1:])
    with pytest.raises(CorruptRecord):
        type(record).decode(encoded + b"\x00")
    assert type(record).decode(b"\x02" + encoded[1:] + b"new field") == record


def test_unknown_enum_values_are_corrupt():
    """A state, status or kind byte outside its enum is corruption, not a crash."""
    for name in ("state", "workflow", "pending_workflow"):
        record_type = type(SAMPLES[name])
        encoded = bytearray(SAMPLES[name].encode())
        encoded[1] = 200
        with pytest.raises(CorruptRecord):
            record_type.decode(bytes(encoded))


@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda record_type: record_type.__name__)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_corrupt_record(record_type, data):
    """Fuzz invariant: any bytes either decode or raise CorruptRecord, nothing else."""
    try:
        record_type.decode(data)
    except CorruptRecord:
        pass


def test_epoch_record_is_compact():
    """An epoch record costs 21 bytes plus 32 per segment (the PDP-32 size budget relies on it)."""
    assert len(SAMPLES["epoch"].encode()) == 1 + 4 + 4 + 8 + 4 + 32 * 3


def test_over_long_strings_are_refused_when_encoding():
    """A string field over the u16 length limit raises RecordTooLarge instead of writing a bad length."""
    with pytest.raises(RecordTooLarge):
        r.SubscriberSet(("x" * 70_000,)).encode()


def _stored_configuration(scale_type: int, target_rate: int, scale_factor: int, has_retention: bool,
                          retention: tuple[int, int, int]) -> bytes:
    """A configuration record as the controller wrote it before it used the Controller API's model."""
    encoder = (Encoder(1).u8(scale_type).i32(target_rate).i32(scale_factor).i32(2).boolean(has_retention)
               .u8(retention[0]).i64(retention[1]).i64(retention[2]).i64(0).i64(0))
    return encoder.sequence((), Encoder.text).boolean(False).sequence((), Encoder.text).to_bytes()


def test_stream_configurations_the_model_refuses_still_read_back_as_they_behaved():
    """Older controllers stored auto-scaling policies without a target rate (they never scaled: read as
    fixed) or with scale factor 0 (split in two: read as 1), and retention type UNKNOWN as no policy."""
    decode = r.StreamConfigurationRecord.decode
    no_rate = decode(_stored_configuration(2, 0, 3, False, (0, 0, 0))).configuration.scaling
    assert no_rate == ScalingPolicy(ScaleType.FIXED_NUM_SEGMENTS, 0, 3, 2)
    no_factor = decode(_stored_configuration(1, 10, 0, False, (0, 0, 0))).configuration.scaling
    assert no_factor == ScalingPolicy(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 10, 1, 2)
    assert decode(_stored_configuration(0, 0, 0, True, (0, 5, 9))).configuration.retention is None
    unbounded = decode(_stored_configuration(0, 0, 0, True, (1, 5, NO_MAXIMUM))).configuration.retention
    assert unbounded == RetentionPolicy(RetentionType.TIME, 5) and unbounded.upper_bound == NO_MAXIMUM
