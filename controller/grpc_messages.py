"""Conversions between the gRPC messages and the services' values (spec §3, presence rules §1.5).

The only place besides ``grpc_service`` that knows the protobuf messages: the services take and
return plain values.

Every ``SegmentId`` built here carries its ``streamInfo``; key ranges are copied exactly (epochs
tile [0, 1) with the last range ending at exactly 1.0); tags are always set on a configuration
reply; a retention policy is left unset when the stream has none.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import cast

from clients.grpc_api import controller_pb2 as pb

from .service.errors import InvalidArgument
from .service.key_value_tables import KeyValueTableRecord
from .service.transactions import CreatedTransaction, TransactionSegment
from .service.transactions.ids import from_signed_halves, to_signed_halves
from .store.records import (
    NewSegment,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRecord,
    StreamConfiguration,
    TransactionRecord,
)
from .store.states import TransactionStatus


def stream_info(scope: str, stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


def segment_id(scope: str, stream: str, value: int) -> pb.SegmentId:
    return pb.SegmentId(streamInfo=stream_info(scope, stream), segmentId=value)


def key_range(scope: str, stream: str, value: int, key_start: float, key_end: float) -> pb.SegmentRange:
    return pb.SegmentRange(segmentId=segment_id(scope, stream, value), minKey=key_start, maxKey=key_end)


def segment_range(scope: str, stream: str, segment: SegmentRecord | NewSegment | TransactionSegment) -> pb.SegmentRange:
    return key_range(scope, stream, segment.segment_id, segment.key_start, segment.key_end)


def _by_key(segments: Iterable[SegmentRecord]) -> list[SegmentRecord]:
    return sorted(segments, key=lambda segment: segment.key_start)


def segment_ranges(scope: str, stream: str, segments: Iterable[SegmentRecord]) -> list[pb.SegmentRange]:
    """Ranges sorted by key start."""
    return [segment_range(scope, stream, segment) for segment in _by_key(segments)]


def segment_locations(scope: str, stream: str,
                      head: dict[SegmentRecord, int]) -> list[pb.SegmentsAtTime.SegmentLocation]:
    """The head's segments with their starting offsets, by key start."""
    return [pb.SegmentsAtTime.SegmentLocation(segmentId=segment_id(scope, stream, segment.segment_id),
                                              offset=head[segment]) for segment in _by_key(head)]


def successor_entries(scope: str, stream: str, successors: dict[SegmentRecord, list[int]]
                      ) -> list[pb.SuccessorResponse.SegmentEntry]:
    """Each successor with all its predecessors, by key start."""
    return [pb.SuccessorResponse.SegmentEntry(segment=segment_range(scope, stream, segment), value=successors[segment])
            for segment in _by_key(successors)]


def token(value: str) -> pb.ContinuationToken:
    return pb.ContinuationToken(token=value)


# ---------------------------------------------------------------------- stream configuration


def configuration_from(message: pb.StreamConfig) -> StreamConfiguration:
    """The configuration a createStream/updateStream asks for.

    Raises:
        InvalidArgument: an unknown scale or retention type.
    """
    policy = message.scalingPolicy
    retention = message.retentionPolicy
    try:
        scaling = ScalingPolicy(ScaleType(policy.scaleType), policy.targetRate, policy.scaleFactor,
                                policy.minNumSegments)
        retention_type = RetentionType(retention.retentionType)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None
    retention_policy = None
    if message.HasField("retentionPolicy") and retention_type != RetentionType.UNKNOWN:
        retention_policy = RetentionPolicy(retention_type, retention.retentionParam, retention.retentionMax)
    return StreamConfiguration(scaling, retention_policy, tuple(message.tags.tag),
                               timestamp_aggregation_timeout=message.timestampAggregationTimeout,
                               rollover_size_bytes=message.rolloverSizeBytes)


def configuration_to(scope: str, stream: str, configuration: StreamConfiguration) -> pb.StreamConfig:
    scaling = configuration.scaling
    scale_type = cast(pb.ScalingPolicy.ScalingPolicyType, int(scaling.scale_type))  # the same numbers
    message = pb.StreamConfig(
        streamInfo=stream_info(scope, stream),
        scalingPolicy=pb.ScalingPolicy(scaleType=scale_type, targetRate=scaling.target_rate,
                                       scaleFactor=scaling.scale_factor, minNumSegments=scaling.min_num_segments),
        tags=pb.Tags(tag=list(configuration.tags)),
        timestampAggregationTimeout=configuration.timestamp_aggregation_timeout,
        rolloverSizeBytes=configuration.rollover_size_bytes)
    if configuration.retention is not None:
        retention = configuration.retention
        retention_type = cast(pb.RetentionPolicy.RetentionPolicyType, int(retention.retention_type))  # the same numbers
        message.retentionPolicy.CopyFrom(pb.RetentionPolicy(retentionType=retention_type,
                                                            retentionParam=retention.retention_param,
                                                            retentionMax=retention.retention_max))
    return message


# ---------------------------------------------------------------------- reader groups


def group_id_from(text: str) -> uuid.UUID:
    """A reader group id ("" is the all-zero id). Raises InvalidArgument for a malformed UUID."""
    if not text:
        return uuid.UUID(int=0)
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidArgument(f"readerGroupId {text[:40]!r} is not a UUID") from None


def _cuts_from(cuts: Iterable[pb.StreamCut]) -> dict[str, dict[int, int]]:
    return {f"{cut.streamInfo.scope}/{cut.streamInfo.stream}": dict(cut.cut) for cut in cuts}


def _cuts_to(cuts: dict[str, dict[int, int]]) -> list[pb.StreamCut]:
    result = []
    for scoped, cut in sorted(cuts.items()):
        scope, _, stream = scoped.partition("/")
        result.append(pb.StreamCut(streamInfo=stream_info(scope, stream), cut=cut))
    return result


def reader_group_from(message: pb.ReaderGroupConfiguration) -> ReaderGroupConfigRecord:
    """Raises InvalidArgument for a malformed id or retention type."""
    try:
        retention = ReaderGroupRetentionType(message.retentionType)
    except ValueError:
        raise InvalidArgument(f"unknown reader group retention type {message.retentionType}") from None
    return ReaderGroupConfigRecord(
        group_id_from(message.readerGroupId), message.generation, message.groupRefreshTimeMillis,
        message.automaticCheckpointIntervalMillis, message.maxOutstandingCheckpointRequest, retention,
        message.rolloverSizeBytes, False, _cuts_from(message.startingStreamCuts), _cuts_from(message.endingStreamCuts))


def reader_group_to(scope: str, group: str, record: ReaderGroupConfigRecord) -> pb.ReaderGroupConfiguration:
    return pb.ReaderGroupConfiguration(
        scope=scope, readerGroupName=group, groupRefreshTimeMillis=record.group_refresh_time_ms,
        automaticCheckpointIntervalMillis=record.checkpoint_interval_ms,
        maxOutstandingCheckpointRequest=record.max_outstanding_checkpoints, retentionType=int(record.retention_type),
        generation=record.generation, readerGroupId=str(record.reader_group_id),
        startingStreamCuts=_cuts_to(record.starting_cuts), endingStreamCuts=_cuts_to(record.ending_cuts),
        rolloverSizeBytes=record.rollover_size_bytes)


# ---------------------------------------------------------------------- key-value tables


def table_from(message: pb.KeyValueTableConfig) -> KeyValueTableRecord:
    return KeyValueTableRecord(message.partitionCount, message.primaryKeyLength, message.secondaryKeyLength,
                               message.rolloverSizeBytes)


def table_to(scope: str, table: str, record: KeyValueTableRecord) -> pb.KeyValueTableConfig:
    return pb.KeyValueTableConfig(scope=scope, kvtName=table, partitionCount=record.partition_count,
                                  primaryKeyLength=record.primary_key_length,
                                  secondaryKeyLength=record.secondary_key_length,
                                  rolloverSizeBytes=record.rollover_size_bytes)


# ---------------------------------------------------------------------- transactions

_COMPLETED_STATUS = {TransactionStatus.COMMITTED: pb.TxnResponse.COMMITTED,
                     TransactionStatus.ABORTED: pb.TxnResponse.ABORTED}


def transaction_id_to(transaction_id: uuid.UUID) -> pb.TxnId:
    high_bits, low_bits = to_signed_halves(transaction_id)
    return pb.TxnId(highBits=high_bits, lowBits=low_bits)


def transaction_id_from(message: pb.TxnId) -> uuid.UUID:
    return from_signed_halves(message.highBits, message.lowBits)


def created_transaction(scope: str, stream: str, created: CreatedTransaction) -> pb.CreateTxnResponse:
    """The id and the segments to write to (generalised ids, by key), with no delegation token."""
    return pb.CreateTxnResponse(txnId=transaction_id_to(created.transaction_id),
                                activeSegments=[segment_range(scope, stream, segment) for segment in created.segments],
                                delegationToken="")


def completed_transactions(records: Iterable[TransactionRecord]) -> pb.ListCompletedTxnResponse:
    return pb.ListCompletedTxnResponse(response=[
        pb.TxnResponse(txnId=transaction_id_to(record.transaction_id), status=_COMPLETED_STATUS[record.status])
        for record in records])
