"""Conversions between the gRPC messages and the services' values (spec §3, presence rules §1.5).

The only place besides ``grpc_service`` that knows the protobuf messages: the services take and
return plain values. Stream configurations, reader-group and key-value-table configurations and
transaction ids use the Controller API's one mapping (``controller_api.protobuf``), shared with the
SDK's controller client; this module raises what it refuses as the services' InvalidArgument.

Every ``SegmentId`` built here carries its ``streamInfo``; key ranges are copied exactly (epochs
tile [0, 1) with the last range ending at exactly 1.0). The configuration's rules (tags always set,
a retention policy only when the stream has one) are ``controller_api.protobuf``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import TypeVar

from controller_api import controller_pb2 as pb
from controller_api import errors as api_errors
from controller_api import protobuf as api_protobuf
from controller_api.key_value_tables import KeyValueTableConfiguration
from controller_api.model import StreamConfiguration
from controller_api.protobuf import segment_id, transaction_id_to
from controller_api.reader_groups import ReaderGroupConfiguration

from .service.errors import InvalidArgument
from .service.transactions import CreatedTransaction, TransactionSegment
from .store.records import NewSegment, SegmentRecord, TransactionRecord
from .store.states import TransactionStatus

M = TypeVar("M")
V = TypeVar("V")


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


# ---------------------------------------------------------------------- values of the Controller API


def _checked(convert: Callable[[M], V], message: M) -> V:
    """``convert(message)``, a value the Controller API's model refuses raised as the services' InvalidArgument."""
    try:
        return convert(message)
    except api_errors.InvalidArgument as error:
        raise InvalidArgument(str(error)) from None


def configuration_from(message: pb.StreamConfig) -> StreamConfiguration:
    """The configuration a createStream/updateStream asks for.

    Raises:
        InvalidArgument: an unknown scale or retention type, or values the Controller API's model refuses.
    """
    return _checked(api_protobuf.configuration_from, message)


def group_id_from(text: str) -> uuid.UUID:
    """A reader group id ("" is the nil id). Raises InvalidArgument for a malformed UUID."""
    return _checked(api_protobuf.reader_group_id_from, text)


def reader_group_from(message: pb.ReaderGroupConfiguration) -> ReaderGroupConfiguration:
    """Raises InvalidArgument for a malformed id or retention type."""
    return _checked(api_protobuf.reader_group_from, message)


def table_from(message: pb.KeyValueTableConfig) -> KeyValueTableConfiguration:
    """Raises InvalidArgument for values the Controller API's model refuses."""
    return _checked(api_protobuf.key_value_table_from, message)


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
