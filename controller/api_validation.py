"""Request validation at the controller's API boundary: every ControllerService request is checked
before any service or the metadata store sees it.

``validate(method, request)`` returns None for a request the services may take, or a ``Rejection``:
either the RPC's own reply (its status enum, spec §4) or a gRPC code (INVALID_ARGUMENT), never
INTERNAL. What is checked:

* names: scopes and streams follow ``wire.naming``'s controller rules (optional leading ``_``,
  then ``[A-Za-z0-9.-]+``, at most 255 characters; internal names such as ``_system`` or
  ``_MARK<stream>`` pass); reader groups, key-value tables and writer ids follow the user-name
  rule. The rules themselves are ``wire.naming``'s, the ones the services apply on creation;
* segment ids (``epoch << 32 | number``, both non-negative int32s), epochs, stream cuts (their
  segment ids), key ranges (``0 <= low < high <= 1``), counts, transaction ids (a present
  ``txnId`` with a non-negative epoch), leases, reader-group ids (UUIDs) and settings;
* policies: scaling and retention types are known values; segment counts, rates, scale factors,
  retention values, rollover sizes and timeouts are not negative.

Outcomes follow one rule. A name that breaks the rules can never name an existing entity, so
creations answer their INVALID_*_NAME status, and lookups whose reply has a "not found" answer
(a status enum value or ``exists=false``) give that answer: exactly what Java answers for a
non-empty invalid name, where an empty one made Java fail with INTERNAL. RPCs without such an
answer, and malformed values other than names, get INVALID_ARGUMENT (final for the Rust client,
spec §1.3) unless the RPC has its own status for it (scale: FAILURE / PRECONDITION_FAILED;
checkScale: INVALID_INPUT; writer marks: INVALID_POSITION; subscriber cuts: STREAM_CUT_NOT_VALID).
Limits that depend on the controller's settings (segments per epoch, tags, lease range) stay with
the services, which answer INVALID_ARGUMENT for them too.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeAlias

import grpc
from google.protobuf.message import Message

from controller_api import controller_pb2 as pb
from controller_api.model import RetentionType, ScaleType
from controller_api.reader_groups import AUTOMATIC_CHECKPOINTS_OFF, StreamDataRetention
from wire import naming

Code = grpc.StatusCode
SHOWN_NAME_LENGTH = 40  # how much of a rejected name a message repeats (details travel in gRPC metadata)
SEGMENT_NUMBER_LIMIT = 2**31
GETURI_STREAM_LENGTH_MAX = naming.MAX_SCOPE_NAME_LENGTH + len(naming.TABLE_SUFFIX)
WRITER_ID_LENGTH_MAX = 1024  # commit's writerId is only stored; Rust sends a decimal u128

Validator: TypeAlias = Callable[[Any], None]
"""Checks a request of one RPC (of that RPC's request type); raises ``_Rejected``."""


class _ListingReply(Protocol):
    """A listing reply message (``pb.StreamsInScopeResponse``, ...), whose status enum has SCOPE_NOT_FOUND.
    Typed Any: the protobuf stubs give each reply its own enum type, declared per instance."""

    SCOPE_NOT_FOUND: Any

    def __init__(self, **fields: Any) -> None: ...


class _ScopedListingRequest(Protocol):
    """A listing request (``pb.StreamsInScopeRequest``, ...) naming its scope."""

    @property
    def scope(self) -> pb.ScopeInfo: ...


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why a request is refused, and how: ``reply`` (the RPC's status reply) or an abort with ``code``."""

    message: str
    reply: object | None = None
    code: Code = Code.INVALID_ARGUMENT


class _Rejected(Exception):
    def __init__(self, rejection: Rejection):
        super().__init__(rejection.message)
        self.rejection = rejection


def shown(text: str) -> str:
    """``text`` for a message: quoted, and cut to SHOWN_NAME_LENGTH characters."""
    if len(text) <= SHOWN_NAME_LENGTH:
        return repr(text)
    return f"{text[:SHOWN_NAME_LENGTH]!r}... ({len(text)} characters)"


# ---------------------------------------------------------------------- field checks (None: fine)


def _rule_problem(rule: Callable[[str], str], name: str, kind: str) -> str | None:
    try:
        rule(name)
    except naming.InvalidName:
        return f"invalid {kind} {shown(name)}"
    return None


def scope_problem(name: str) -> str | None:
    return _rule_problem(naming.validate_scope_name, name, "scope name")


def stream_problem(name: str) -> str | None:
    return _rule_problem(naming.validate_stream_name, name, "stream name")


def user_name_problem(name: str, kind: str) -> str | None:
    """Reader groups, key-value tables and writer ids: ``[A-Za-z0-9.-]+``, at most 250 characters."""
    return _rule_problem(lambda value: naming.validate_user_name(value, kind), name, kind)


def stream_info_problem(info: pb.StreamInfo) -> str | None:
    return scope_problem(info.scope) or stream_problem(info.stream)


def segment_id_problem(value: int) -> str | None:
    """A segment id is ``epoch << 32 | number`` with both parts non-negative int32s."""
    if value < 0 or naming.segment_number_of(value) >= SEGMENT_NUMBER_LIMIT:
        return f"segment id {value} is not a segment id (epoch << 32 | number, both non-negative)"
    return None


def segment_ids_problem(values: Iterable[int]) -> str | None:
    for value in values:
        problem = segment_id_problem(value)
        if problem:
            return problem
    return None


def cut_problem(cut: Mapping[int, int]) -> str | None:
    """A stream cut's segment ids (offsets are the services' business: negative marks a future segment)."""
    return segment_ids_problem(cut)


def key_range_problem(low: float, high: float) -> str | None:
    """``0 <= low < high <= 1`` (NaN fails every comparison)."""
    if not 0.0 <= low < high <= 1.0:
        return f"key range [{low!r}, {high!r}) is not within [0, 1] with low < high"
    return None


def not_negative_problem(**values: int) -> str | None:
    for field, value in values.items():
        if value < 0:
            return f"{field} must not be negative, got {value}"
    return None


def group_id_problem(text: str) -> str | None:
    """A reader group id: "" (not assigned yet) or a UUID."""
    if text:
        try:
            uuid.UUID(text)
        except ValueError:
            return f"readerGroupId {shown(text)} is not a UUID"
    return None


def txn_id_problem(message: pb.TxnRequest | pb.PingTxnRequest) -> str | None:
    """The request's ``txnId``: present, with a non-negative epoch (its top 32 bits)."""
    if not message.HasField("txnId"):
        return "the request carries no txnId"
    if message.txnId.highBits < 0:
        return f"txnId has a negative epoch (highBits {message.txnId.highBits})"
    return None


def _unknown(enum_type: type[enum.IntEnum], value: int) -> bool:
    try:
        enum_type(value)
    except ValueError:
        return True
    return False


def scaling_problem(policy: pb.ScalingPolicy) -> str | None:
    if _unknown(ScaleType, policy.scaleType):
        return f"unknown scaleType {policy.scaleType}"
    if policy.minNumSegments < 1:
        return f"minNumSegments must be at least 1, got {policy.minNumSegments}"
    return not_negative_problem(targetRate=policy.targetRate, scaleFactor=policy.scaleFactor)


def retention_problem(policy: pb.RetentionPolicy) -> str | None:
    if policy.retentionType == pb.RetentionPolicy.UNKNOWN:
        return None  # no retention: the values are ignored
    if _unknown(RetentionType, policy.retentionType):
        return f"unknown retentionType {policy.retentionType}"
    problem = not_negative_problem(retentionParam=policy.retentionParam, retentionMax=policy.retentionMax)
    if problem is None and policy.retentionMax < policy.retentionParam:
        problem = "retentionMax must not be below retentionParam"
    return problem


def configuration_problem(config: pb.StreamConfig) -> str | None:
    """A stream configuration's policies and limits (tag counts and lengths are the services')."""
    return (scaling_problem(config.scalingPolicy) or retention_problem(config.retentionPolicy)
            or not_negative_problem(timestampAggregationTimeout=config.timestampAggregationTimeout,
                                    rolloverSizeBytes=config.rolloverSizeBytes))


def stream_cut_problem(cut: pb.StreamCut) -> str | None:
    """A stream cut naming its stream (reader-group cuts): the names and the segment ids."""
    return stream_info_problem(cut.streamInfo) or cut_problem(cut.cut)


def reader_group_settings_problem(config: pb.ReaderGroupConfiguration) -> str | None:
    """Everything in a reader-group configuration but its scope and name."""
    if _unknown(StreamDataRetention, config.retentionType):
        return f"unknown reader group retentionType {config.retentionType}"
    if config.automaticCheckpointIntervalMillis < AUTOMATIC_CHECKPOINTS_OFF:
        return f"automaticCheckpointIntervalMillis must be -1 or more, got {config.automaticCheckpointIntervalMillis}"
    problem = (group_id_problem(config.readerGroupId)
               or not_negative_problem(groupRefreshTimeMillis=config.groupRefreshTimeMillis,
                                       maxOutstandingCheckpointRequest=config.maxOutstandingCheckpointRequest,
                                       generation=config.generation, rolloverSizeBytes=config.rolloverSizeBytes))
    for cut in (*config.startingStreamCuts, *config.endingStreamCuts):
        problem = problem or stream_cut_problem(cut)
    return problem


def subscriber_problem(subscriber: str) -> str | None:
    """A subscriber is ``scope/readerGroup``."""
    scope, slash, group = subscriber.partition("/")
    if not slash:
        return f"subscriber {shown(subscriber)} is not scope/readerGroup"
    return scope_problem(scope) or user_name_problem(group, "reader group name")


# ---------------------------------------------------------------------- per RPC


def _check(problem: str | None, reply: object | None = None, code: Code = Code.INVALID_ARGUMENT) -> None:
    if problem:
        raise _Rejected(Rejection(problem, reply, code))


def _scope_only(status_reply: Callable[[], object] | None = None) -> Callable[[pb.ScopeInfo], None]:
    """RPCs naming one scope: ``status_reply()`` (its "not found" answer) or INVALID_ARGUMENT."""
    def check(request: pb.ScopeInfo) -> None:
        _check(scope_problem(request.scope), status_reply() if status_reply else None)
    return check


def _stream_only(status_reply: Callable[[], object] | None = None) -> Callable[[pb.StreamInfo], None]:
    """RPCs taking a bare StreamInfo: ``status_reply()`` for bad names, INVALID_ARGUMENT without one."""
    def check(request: pb.StreamInfo) -> None:
        _check(stream_info_problem(request), status_reply() if status_reply else None)
    return check


def _create_scope(request: pb.ScopeInfo) -> None:
    _check(scope_problem(request.scope), pb.CreateScopeStatus(status=pb.CreateScopeStatus.INVALID_SCOPE_NAME))


def _listing(reply_type: type[_ListingReply]) -> Callable[[_ScopedListingRequest], None]:
    """listStreamsInScope(ForTag), listKeyValueTablesInScope: SCOPE_NOT_FOUND (with a token, spec §1.5)."""
    def check(request: _ScopedListingRequest) -> None:
        _check(scope_problem(request.scope.scope),
               reply_type(status=reply_type.SCOPE_NOT_FOUND, continuationToken=pb.ContinuationToken(token="")))
    return check


def _create_stream(request: pb.StreamConfig) -> None:
    S = pb.CreateStreamStatus
    _check(stream_problem(request.streamInfo.stream), S(status=S.INVALID_STREAM_NAME))
    _check(configuration_problem(request))
    _check(scope_problem(request.streamInfo.scope), S(status=S.SCOPE_NOT_FOUND))


def _update_stream(request: pb.StreamConfig) -> None:
    U = pb.UpdateStreamStatus
    _check(stream_info_problem(request.streamInfo), U(status=U.STREAM_NOT_FOUND))
    _check(configuration_problem(request))


def _truncate_stream(request: pb.StreamCut) -> None:
    U = pb.UpdateStreamStatus
    _check(stream_info_problem(request.streamInfo), U(status=U.STREAM_NOT_FOUND))
    _check(cut_problem(request.cut))


def _epoch_segments(request: pb.GetEpochSegmentsRequest) -> None:
    _check(stream_info_problem(request.streamInfo) or not_negative_problem(epoch=request.epoch))


def _stream_of(field: str) -> Callable[[Message], None]:
    """RPCs whose request names its stream in ``field`` and has nothing else to check."""
    def check(request: Message) -> None:
        _check(stream_info_problem(getattr(request, field)))
    return check


def _segment(request: pb.SegmentId) -> None:
    _check(stream_info_problem(request.streamInfo) or segment_id_problem(request.segmentId))


def _uri(request: pb.SegmentId) -> None:
    """getURI reads no metadata and is asked for segments no stream owns (a Rust reader group's
    ``<group>_kvtable``), so its stream name only has to be a path component."""
    stream = request.streamInfo.stream
    problem = scope_problem(request.streamInfo.scope) or segment_id_problem(request.segmentId)
    if problem is None and (not stream or "/" in stream or len(stream) > GETURI_STREAM_LENGTH_MAX):
        problem = f"invalid stream name {shown(stream)}"
    _check(problem)


def _segments_between(request: pb.StreamCutRange) -> None:
    _check(stream_info_problem(request.streamInfo) or cut_problem(getattr(request, "from")) or cut_problem(request.to))


def _stream_cut(request: pb.StreamCut) -> None:
    _check(stream_info_problem(request.streamInfo) or cut_problem(request.cut))


def _scale(request: pb.ScaleRequest) -> None:
    R = pb.ScaleResponse
    _check(stream_info_problem(request.streamInfo))
    # an id that is no segment id is not in the active epoch: Java's PRECONDITION_FAILED
    _check(segment_ids_problem(request.sealedSegments), R(status=R.PRECONDITION_FAILED))
    problem = None if request.sealedSegments and request.newKeyRanges else "a scale seals and creates segments"
    for entry in request.newKeyRanges:
        problem = problem or key_range_problem(entry.start, entry.end)
    _check(problem, R(status=R.FAILURE))  # Java's answer to invalid ranges


def _check_scale(request: pb.ScaleStatusRequest) -> None:
    R = pb.ScaleStatusResponse
    _check(stream_info_problem(request.streamInfo) or not_negative_problem(epoch=request.epoch),
           R(status=R.INVALID_INPUT))


def _create_transaction(request: pb.CreateTxnRequest) -> None:
    _check(stream_info_problem(request.streamInfo))
    if request.lease <= 0:
        _check(f"lease must be positive, got {request.lease}")


def _ping_transaction(request: pb.PingTxnRequest) -> None:
    unknown = pb.PingTxnStatus(status=pb.PingTxnStatus.UNKNOWN)
    _check(stream_info_problem(request.streamInfo) or txn_id_problem(request), unknown)
    if request.lease <= 0:
        _check(f"lease must be positive, got {request.lease}")


def _change_transaction(request: pb.TxnRequest) -> None:
    """commit and abort: STREAM_NOT_FOUND / TRANSACTION_NOT_FOUND (final for Rust, spec §4.5 Rec.)."""
    S = pb.TxnStatus
    _check(stream_info_problem(request.streamInfo), S(status=S.STREAM_NOT_FOUND))
    _check(txn_id_problem(request), S(status=S.TRANSACTION_NOT_FOUND))
    if len(request.writerId) > WRITER_ID_LENGTH_MAX:
        _check(f"writerId {shown(request.writerId)} is longer than {WRITER_ID_LENGTH_MAX} characters")


def _transaction_state(request: pb.TxnRequest) -> None:
    _check(stream_info_problem(request.streamInfo) or txn_id_problem(request),
           pb.TxnState(state=pb.TxnState.UNKNOWN))


def _remove_writer(request: pb.RemoveWriterRequest) -> None:
    R = pb.RemoveWriterResponse  # what the service answers for a writer or stream it does not know
    _check(stream_info_problem(request.stream) or user_name_problem(request.writer, "writer id"),
           R(result=R.UNKNOWN_WRITER))


def _note_timestamp(request: pb.TimestampFromWriter) -> None:
    R = pb.TimestampResponse
    _check(stream_info_problem(request.position.streamInfo) or user_name_problem(request.writer, "writer id"))
    _check(cut_problem(request.position.cut), R(result=R.INVALID_POSITION))


def _create_table(request: pb.KeyValueTableConfig) -> None:
    S = pb.CreateKeyValueTableStatus
    _check(user_name_problem(request.kvtName, "key-value table name"), S(status=S.INVALID_TABLE_NAME))
    if (request.partitionCount < 1 or request.primaryKeyLength < 1 or request.secondaryKeyLength < 0
            or request.rolloverSizeBytes < 0):
        _check("a key-value table needs partitionCount > 0, primaryKeyLength > 0, secondaryKeyLength >= 0 "
               "and rolloverSizeBytes >= 0")
    _check(scope_problem(request.scope), S(status=S.SCOPE_NOT_FOUND))


def _table(status_reply: Callable[[], object] | None = None) -> Callable[[pb.KeyValueTableInfo], None]:
    def check(request: pb.KeyValueTableInfo) -> None:
        _check(scope_problem(request.scope) or user_name_problem(request.kvtName, "key-value table name"),
               status_reply() if status_reply else None)
    return check


def _create_reader_group(request: pb.ReaderGroupConfiguration) -> None:
    S = pb.CreateReaderGroupResponse
    _check(user_name_problem(request.readerGroupName, "reader group name"), S(status=S.INVALID_RG_NAME))
    _check(reader_group_settings_problem(request))
    _check(scope_problem(request.scope), S(status=S.SCOPE_NOT_FOUND))


def _update_reader_group(request: pb.ReaderGroupConfiguration) -> None:
    U = pb.UpdateReaderGroupResponse
    _check(scope_problem(request.scope) or user_name_problem(request.readerGroupName, "reader group name"),
           U(status=U.RG_NOT_FOUND))
    _check(reader_group_settings_problem(request))


def _reader_group_config(request: pb.ReaderGroupInfo) -> None:
    S = pb.ReaderGroupConfigResponse
    _check(scope_problem(request.scope) or user_name_problem(request.readerGroup, "reader group name"),
           S(status=S.RG_NOT_FOUND,
             config=pb.ReaderGroupConfiguration(scope=request.scope, readerGroupName=request.readerGroup)))


def _delete_reader_group(request: pb.ReaderGroupInfo) -> None:
    S = pb.DeleteReaderGroupStatus
    _check(scope_problem(request.scope) or user_name_problem(request.readerGroup, "reader group name"),
           S(status=S.RG_NOT_FOUND))
    _check(group_id_problem(request.readerGroupId))


def _update_subscriber(request: pb.SubscriberStreamCut) -> None:
    S = pb.UpdateSubscriberStatus
    _check(stream_info_problem(request.streamCut.streamInfo), S(status=S.STREAM_NOT_FOUND))
    _check(subscriber_problem(request.subscriber), S(status=S.SUBSCRIBER_NOT_FOUND))
    _check(group_id_problem(request.readerGroupId) or not_negative_problem(generation=request.generation))
    _check(cut_problem(request.streamCut.cut), S(status=S.STREAM_CUT_NOT_VALID))


def _nothing(request: Message) -> None:
    """RPCs whose request cannot be wrong (or is not used: no auth, one controller)."""


VALIDATORS: dict[str, Validator] = {
    "getControllerServerList": _nothing,
    "createStream": _create_stream,
    "updateStream": _update_stream,
    "truncateStream": _truncate_stream,
    "sealStream": _stream_only(lambda: pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_NOT_FOUND)),
    "deleteStream": _stream_only(lambda: pb.DeleteStreamStatus(status=pb.DeleteStreamStatus.STREAM_NOT_FOUND)),
    "getCurrentSegments": _stream_only(),
    "getEpochSegments": _epoch_segments,
    "getSegments": _stream_of("streamInfo"),  # the timestamp is ignored, as in Java
    "getSegmentsImmediatlyFollowing": _segment,
    "getSegmentsImmediatelyFollowing": _segment,
    "getSegmentsBetween": _segments_between,
    "scale": _scale,
    "checkScale": _check_scale,
    "getURI": _uri,
    "isSegmentValid": _segment,
    "isStreamCutValid": _stream_cut,
    "createTransaction": _create_transaction,
    "commitTransaction": _change_transaction,
    "abortTransaction": _change_transaction,
    "pingTransaction": _ping_transaction,
    "checkTransactionState": _transaction_state,
    "listCompletedTransactions": _stream_of("streamInfo"),
    "createScope": _create_scope,
    "listScopes": _nothing,  # a bad token is the store's to refuse (INVALID_ARGUMENT)
    "checkScopeExists": _scope_only(lambda: pb.ExistsResponse(exists=False)),
    "checkStreamExists": _stream_only(lambda: pb.ExistsResponse(exists=False)),
    "listStreamsInScope": _listing(pb.StreamsInScopeResponse),
    "deleteScope": _scope_only(lambda: pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SCOPE_NOT_FOUND)),
    "deleteScopeRecursive": _scope_only(lambda: pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SCOPE_NOT_FOUND)),
    "getDelegationToken": _nothing,  # auth is off: "" for any stream
    "removeWriter": _remove_writer,
    "noteTimestampFromWriter": _note_timestamp,
    "createKeyValueTable": _create_table,
    "getCurrentSegmentsKeyValueTable": _table(),
    "listKeyValueTablesInScope": _listing(pb.KVTablesInScopeResponse),
    "getKeyValueTableConfiguration": _table(
        lambda: pb.KeyValueTableConfigResponse(status=pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND)),
    "deleteKeyValueTable": _table(lambda: pb.DeleteKVTableStatus(status=pb.DeleteKVTableStatus.TABLE_NOT_FOUND)),
    "listSubscribers": _stream_only(lambda: pb.SubscribersResponse(status=pb.SubscribersResponse.STREAM_NOT_FOUND)),
    "updateSubscriberStreamCut": _update_subscriber,
    "createReaderGroup": _create_reader_group,
    "getReaderGroupConfig": _reader_group_config,
    "deleteReaderGroup": _delete_reader_group,
    "updateReaderGroup": _update_reader_group,
    "getStreamConfiguration": _stream_only(),
    "listStreamsInScopeForTag": _listing(pb.StreamsInScopeResponse),
    "getControllerToBucketMapping": _nothing,
}


def validate(method: str, request: object) -> Rejection | None:
    """None if ``request`` (a decoded request of RPC ``method``) may go to the services, else why not.

    Raises:
        KeyError: ``method`` is not a ControllerService RPC.
    """
    try:
        VALIDATORS[method](request)
    except _Rejected as rejected:
        return rejected.rejection
    return None
