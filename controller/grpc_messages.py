"""Conversions between the gRPC messages and the services' values (spec §3, presence rules §1.5).

The only place besides ``grpc_service`` that knows the protobuf messages: the services take and
return plain values. Stream configurations and transaction ids use the Controller API's one
mapping (``controller_api.protobuf``), shared with the SDK's controller client.

Every ``SegmentId`` built here carries its ``streamInfo``; key ranges are copied exactly (epochs
tile [0, 1) with the last range ending at exactly 1.0). The configuration's rules (tags always set,
a retention policy only when the stream has one) are ``controller_api.protobuf``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from controller_api import controller_pb2 as pb
from controller_api import errors as api_errors
from controller_api import protobuf as api_protobuf
from controller_api.model import StreamConfiguration
from controller_api.protobuf import stream_info, transaction_id_to

from .service.errors import InvalidArgument
from .service.key_value_tables import KeyValueTableRecord
from .service.transactions import CreatedTransaction, TransactionSegment
from .store.records import (
    NewSegment,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    SegmentRecord,
    TransactionRecord,
)
from .store.states import TransactionStatus


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
    """The configuration a createStream/updateStream asks for (``controller_api.protobuf``).

    Raises:
        InvalidArgument: an unknown scale or retention type, or values the Controller API's model refuses.
    """
    try:
        return api_protobuf.configuration_from(message)
    except api_errors.InvalidArgument as error:
        raise InvalidArgument(str(error)) from None


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


def created_transaction(scope: str, stream: str, created: CreatedTransaction) -> pb.CreateTxnResponse:
    """The id and the segments to write to (generalised ids, by key), with no delegation token."""
    return pb.CreateTxnResponse(txnId=transaction_id_to(created.transaction_id),
                                activeSegments=[segment_range(scope, stream, segment) for segment in created.segments],
                                delegationToken="")


def completed_transactions(records: Iterable[TransactionRecord]) -> pb.ListCompletedTxnResponse:
    return pb.ListCompletedTxnResponse(response=[
        pb.TxnResponse(txnId=transaction_id_to(record.transaction_id), status=_COMPLETED_STATUS[record.status])
        for record in records])
