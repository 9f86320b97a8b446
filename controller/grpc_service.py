"""The controller's gRPC API: every ControllerService RPC, converting messages (``grpc_messages``)
and delegating to the services (``controller.service``), which take and return plain values;
transactions go to ``TransactionService``.

Errors. A service raises typed operating errors (``controller.service.errors``). RPCs whose
reply carries a status enum map them with one table per RPC (spec §4); RPCs without one, and
errors that the spec answers with a gRPC code whatever the RPC, map through ``_CODES`` (spec §1.4,
§8 item 9): malformed input -> INVALID_ARGUMENT and unknown entities -> NOT_FOUND, which the Rust
client does not retry; busy or half-created streams -> FAILED_PRECONDITION / INTERNAL, and a
workflow past its completion timeout -> DEADLINE_EXCEEDED, which it retries. Anything else
(the metadata store or a segment store failing) is FAILURE or INTERNAL: retried by the client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Never, Protocol, TypeAlias, TypeVar, cast

import grpc

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from controller_api.protobuf import (
    configuration_to,
    key_value_table_to,
    reader_group_to,
    segment_id,
    stream_info,
    transaction_id_from,
)
from controller_api.reader_groups import ReaderGroupConfiguration
from wire import auth

from . import grpc_messages as messages
from .security import CURRENT_PRINCIPAL, Security
from .service.errors import (
    ConcurrentWorkflow,
    EpochNotFound,
    GenerationMismatch,
    InvalidArgument,
    InvalidName,
    InvalidStreamCut,
    ReaderGroupConfigMismatch,
    ReaderGroupNotFound,
    ScalePreconditionFailed,
    ScaleRejected,
    ScopeNotEmpty,
    ScopeNotFound,
    ServiceError,
    StreamNotFound,
    StreamNotReady,
    StreamNotSealed,
    StreamNotWritable,
    StreamSealed,
    SubscriberNotFound,
    TableExists,
    TableNotFound,
    TransactionContention,
    TransactionNotFound,
    TransactionRefused,
    WorkflowTimeout,
    WriterNotFound,
    WriterPositionWentBack,
    WriterTimeWentBack,
)
from .service.scaling import ScaleAccepted
from .service_api import ServiceCalls, TransactionCalls

log = logging.getLogger("tributary.controller")
Code = grpc.StatusCode
Outcome: TypeAlias = int | Code
"""What an error becomes: a value of the reply's status enum, or a gRPC code the call is aborted with."""
Table: TypeAlias = dict[type[Exception], Outcome]
"""Error types to outcomes; the first entry whose type the error is an instance of applies."""


class RpcContext(Protocol):
    """The one part of a grpc.aio servicer context that the servicer uses: ending the call with a code."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> Never: ...


class StatusReply(Protocol):
    """A status reply message (``pb.CreateScopeStatus``, ...), made from its fields, whose ``status``
    enum has SUCCESS and FAILURE. The enum values are typed Any: the protobuf stubs give each reply
    its own enum type, and declare the values per instance, so no narrower protocol member matches."""

    SUCCESS: Any
    FAILURE: Any

    def __init__(self, **fields: Any) -> None: ...


class ListingReply(StatusReply, Protocol):
    """A listing's status reply: also has SCOPE_NOT_FOUND (and a ``continuationToken`` field)."""

    SCOPE_NOT_FOUND: Any


Result = TypeVar("Result")
Reply = TypeVar("Reply")
StatusReplyT = TypeVar("StatusReplyT", bound=StatusReply)
ListingReplyT = TypeVar("ListingReplyT", bound=ListingReply)

_CODES: Table = {
    InvalidName: Code.INVALID_ARGUMENT, InvalidArgument: Code.INVALID_ARGUMENT,
    InvalidStreamCut: Code.INVALID_ARGUMENT, ScaleRejected: Code.INVALID_ARGUMENT,
    StreamNotFound: Code.NOT_FOUND, ScopeNotFound: Code.NOT_FOUND, EpochNotFound: Code.NOT_FOUND,
    ReaderGroupNotFound: Code.NOT_FOUND, TableNotFound: Code.NOT_FOUND, WriterNotFound: Code.NOT_FOUND,
    SubscriberNotFound: Code.NOT_FOUND, TableExists: Code.ALREADY_EXISTS,
    ScopeNotEmpty: Code.FAILED_PRECONDITION, ConcurrentWorkflow: Code.FAILED_PRECONDITION,
    StreamNotSealed: Code.FAILED_PRECONDITION, StreamNotReady: Code.INTERNAL, StreamSealed: Code.INTERNAL,
    WorkflowTimeout: Code.DEADLINE_EXCEEDED, TransactionNotFound: Code.NOT_FOUND,
    TransactionContention: Code.FAILED_PRECONDITION, StreamNotWritable: Code.INTERNAL,
}
# Errors answered with a gRPC code even by RPCs that have a status enum.
_ALWAYS_CODES: Table = {
    InvalidArgument: Code.INVALID_ARGUMENT, WorkflowTimeout: Code.DEADLINE_EXCEEDED,
}

_CREATE_SCOPE: Table = {InvalidName: pb.CreateScopeStatus.INVALID_SCOPE_NAME}
_DELETE_SCOPE: Table = {ScopeNotEmpty: pb.DeleteScopeStatus.SCOPE_NOT_EMPTY}
_CREATE_STREAM: Table = {InvalidName: pb.CreateStreamStatus.INVALID_STREAM_NAME,
                         ScopeNotFound: pb.CreateStreamStatus.SCOPE_NOT_FOUND}
_UPDATE_STREAM: Table = {StreamNotFound: pb.UpdateStreamStatus.STREAM_NOT_FOUND,
                         StreamSealed: pb.UpdateStreamStatus.STREAM_SEALED}
_TRUNCATE_STREAM: Table = {**_UPDATE_STREAM, InvalidStreamCut: Code.INVALID_ARGUMENT}
_SEAL_STREAM: Table = {StreamNotFound: pb.UpdateStreamStatus.STREAM_NOT_FOUND}
_DELETE_STREAM: Table = {StreamNotSealed: pb.DeleteStreamStatus.STREAM_NOT_SEALED}
_CREATE_GROUP: Table = {InvalidName: pb.CreateReaderGroupResponse.INVALID_RG_NAME,
                        ScopeNotFound: pb.CreateReaderGroupResponse.SCOPE_NOT_FOUND}
_UPDATE_GROUP: Table = {ReaderGroupNotFound: pb.UpdateReaderGroupResponse.RG_NOT_FOUND,
                        ReaderGroupConfigMismatch: pb.UpdateReaderGroupResponse.INVALID_CONFIG}
_UPDATE_SUBSCRIBER: Table = {StreamNotFound: pb.UpdateSubscriberStatus.STREAM_NOT_FOUND,
                             SubscriberNotFound: pb.UpdateSubscriberStatus.SUBSCRIBER_NOT_FOUND,
                             GenerationMismatch: pb.UpdateSubscriberStatus.GENERATION_MISMATCH,
                             InvalidStreamCut: pb.UpdateSubscriberStatus.STREAM_CUT_NOT_VALID}
_CREATE_TABLE: Table = {InvalidName: pb.CreateKeyValueTableStatus.INVALID_TABLE_NAME,
                        ScopeNotFound: pb.CreateKeyValueTableStatus.SCOPE_NOT_FOUND,
                        TableExists: pb.CreateKeyValueTableStatus.TABLE_EXISTS}


def _chain(*tables: Table) -> Table:
    """One table answering each error as the first of ``tables`` that maps it (or a base class of it)."""
    merged: Table = {}
    for table in tables:
        for error_type, outcome in table.items():
            merged.setdefault(error_type, outcome)
    return merged


# Complete tables (each ends with ``Exception``) of the RPCs that do not go through ``_reply``.
_QUERY: Table = _chain(_CODES, {Exception: Code.INTERNAL})
_SCALE: Table = {ScalePreconditionFailed: pb.ScaleResponse.PRECONDITION_FAILED, ScaleRejected: pb.ScaleResponse.FAILURE,
                 StreamNotFound: Code.NOT_FOUND, StreamNotReady: Code.INTERNAL, Exception: pb.ScaleResponse.FAILURE}
_CHECK_SCALE: Table = {Exception: pb.ScaleStatusResponse.INTERNAL_ERROR}  # spec §4.4
_COMMIT_TRANSACTION: Table = _chain({StreamNotFound: pb.TxnStatus.STREAM_NOT_FOUND,
                                     TransactionNotFound: pb.TxnStatus.TRANSACTION_NOT_FOUND,
                                     TransactionRefused: pb.TxnStatus.FAILURE}, _QUERY)
_ABORT_TRANSACTION: Table = _COMMIT_TRANSACTION
_PING_TRANSACTION: Table = _chain({TransactionNotFound: pb.PingTxnStatus.UNKNOWN}, _QUERY)
_CHECK_TRANSACTION_STATE: Table = _chain({TransactionNotFound: pb.TxnState.UNKNOWN}, _QUERY)
_NOTE_TIMESTAMP: Table = {WriterTimeWentBack: pb.TimestampResponse.INVALID_TIME,  # INTERNAL_ERROR as Java answers
                          WriterPositionWentBack: pb.TimestampResponse.INVALID_POSITION,
                          Exception: pb.TimestampResponse.INTERNAL_ERROR}
_REMOVE_WRITER: Table = {WriterNotFound: pb.RemoveWriterResponse.UNKNOWN_WRITER,
                         Exception: pb.RemoveWriterResponse.INTERNAL_ERROR}


def _lookup(error: Exception, table: Table) -> Outcome:
    """The outcome a complete ``table`` (one mapping ``Exception``, as every table passed here does) gives."""
    for error_type, outcome in table.items():
        if isinstance(error, error_type):
            return outcome
    raise ValueError(f"the error table maps no base class of {type(error).__name__}") from error


def _unexpected(error: Exception) -> None:
    if not isinstance(error, ServiceError):
        log.warning("controller request failed", extra={"error": repr(error)})


class ControllerServicer(pb_grpc.ControllerServiceServicer):
    """The gRPC face of ``ControllerServices`` and of the ``TransactionService``."""

    def __init__(self, services: ServiceCalls, transactions: TransactionCalls,
                 advertised_endpoints: Callable[[], Iterable[tuple[str, int]]] = tuple,
                 bucket_mapping: Callable[[], dict[str, list[int]]] = dict) -> None:
        self._services = services
        self._transactions = transactions
        self.advertised_endpoints = advertised_endpoints  # the live controllers' addresses (set once bound)
        self._bucket_mapping = bucket_mapping
        self.security: Security | None = None  # set by the app when authentication is on

    # ------------------------------------------------------------------ error mapping

    async def _answer(self, context: RpcContext, awaitable: Awaitable[Result], table: Table,
                      success: Callable[[Result], Reply], failure: Callable[[int], Reply] | None = None) -> Reply:
        """``success(result)``; for an error, ``failure(status)`` with the status the complete ``table``
        maps it to, or the call aborted with the gRPC code it maps it to (``failure`` None: only codes)."""
        try:
            result = await awaitable
        except Exception as error:  # noqa: BLE001 - every failure becomes a status or a code
            _unexpected(error)
            outcome = _lookup(error, table)
            if isinstance(outcome, Code):
                await context.abort(outcome, str(error) or type(error).__name__)
            assert failure is not None, f"a table of codes only maps {type(error).__name__} to status {outcome}"
            return failure(outcome)
        return success(result)

    async def _query(self, context: RpcContext, awaitable: Awaitable[Result]) -> Result:
        """The result, or the call aborted with the error's gRPC code (``_QUERY``)."""
        return await self._answer(context, awaitable, _QUERY, lambda result: result)

    async def _reply(self, context: RpcContext, awaitable: Awaitable[Result], table: Table,
                     reply: type[StatusReplyT], *, when_false: int | None = None,
                     fields: Callable[[Result], dict[str, object]] | None = None,
                     failure_fields: dict[str, object] | None = None) -> StatusReplyT:
        """The RPC's status reply: ``reply(status=SUCCESS, **fields(result))``, or ``reply(status=when_false)``
        when given and the work returned a false value (the entity existed already, or did not exist).

        An error becomes ``reply(status=..., **failure_fields)`` with the status ``table`` maps it to
        (FAILURE if none); errors that ``table`` or ``_ALWAYS_CODES`` map to a gRPC code abort the call.
        """
        def success(result: Result) -> StatusReplyT:
            if when_false is not None and not result:
                return reply(status=when_false)
            return reply(status=reply.SUCCESS, **(fields(result) if fields else {}))

        return await self._answer(context, awaitable, _chain(table, _ALWAYS_CODES, {Exception: reply.FAILURE}),
                                  success, lambda status: reply(status=status, **(failure_fields or {})))

    async def _status(self, context: RpcContext, awaitable: Awaitable[Result], table: Table,
                      reply: Callable[..., Reply], field: str, value: Callable[[Result], int]) -> Reply:
        """A reply of one enum ``field``: ``value(result)``, or the status ``table`` maps an error to."""
        return await self._answer(context, awaitable, table, lambda result: reply(**{field: value(result)}),
                                  lambda status: reply(**{field: status}))

    async def _page(self, context: RpcContext, page: Awaitable[tuple[list[str], str]], reply: type[ListingReplyT],
                    field: str, entry: Callable[[str], object]) -> ListingReplyT:
        """A listing reply: the page's entries and the next token (SCOPE_NOT_FOUND/FAILURE with an empty token)."""
        return await self._reply(context, page, {ScopeNotFound: reply.SCOPE_NOT_FOUND}, reply,
                                 fields=lambda result: {field: [entry(name) for name in result[0]],
                                                        "continuationToken": messages.token(result[1])},
                                 failure_fields={"continuationToken": messages.token("")})

    # ------------------------------------------------------------------ scopes

    async def createScope(self, request: pb.ScopeInfo, context: RpcContext) -> pb.CreateScopeStatus:
        S = pb.CreateScopeStatus
        return await self._reply(context, self._services.scopes.create_scope(request.scope), _CREATE_SCOPE, S,
                                 when_false=S.SCOPE_EXISTS)

    async def checkScopeExists(self, request: pb.ScopeInfo, context: RpcContext) -> pb.ExistsResponse:
        return pb.ExistsResponse(exists=await self._query(context, self._services.scopes.scope_exists(request.scope)))

    async def deleteScope(self, request: pb.ScopeInfo, context: RpcContext) -> pb.DeleteScopeStatus:
        S = pb.DeleteScopeStatus
        return await self._reply(context, self._services.scopes.delete_scope(request.scope), _DELETE_SCOPE, S,
                                 when_false=S.SCOPE_NOT_FOUND)

    async def deleteScopeRecursive(self, request: pb.ScopeInfo, context: RpcContext) -> pb.DeleteScopeStatus:
        return await self._reply(context, self._services.delete_scope_recursive(request.scope), {},
                                 pb.DeleteScopeStatus)

    async def listScopes(self, request: pb.ScopesRequest, context: RpcContext) -> pb.ScopesResponse:
        names, token = await self._query(context, self._visible(
            self._services.scopes.list_scopes, request.continuationToken.token, auth.scope_resource))
        return pb.ScopesResponse(scopes=names, continuationToken=messages.token(token))

    async def listStreamsInScope(self, request: pb.StreamsInScopeRequest,
                                 context: RpcContext) -> pb.StreamsInScopeResponse:
        scope = request.scope.scope
        return await self._page(context, self._visible(
            lambda token: self._services.scopes.list_streams(scope, token), request.continuationToken.token,
            lambda name: auth.stream_resource(scope, name)),
                                pb.StreamsInScopeResponse, "streams", lambda name: stream_info(scope, name))

    async def listStreamsInScopeForTag(self, request: pb.StreamsInScopeWithTagRequest,
                                       context: RpcContext) -> pb.StreamsInScopeResponse:
        scope = request.scope.scope
        return await self._page(context, self._visible(
            lambda token: self._services.scopes.list_streams_for_tag(scope, request.tag, token),
            request.continuationToken.token, lambda name: auth.stream_resource(scope, name)),
                                pb.StreamsInScopeResponse, "streams", lambda name: stream_info(scope, name))

    async def _visible(self, fetch: Callable[[str], Awaitable[tuple[list[str], str]]], token: str,
                       resource: Callable[[str], str]) -> tuple[list[str], str]:
        """A listing page with only what the caller may read (pages left empty by that are skipped)."""
        principal = CURRENT_PRINCIPAL.get()
        while True:
            names, token = await fetch(token)
            if self.security is None or principal is None:
                return names, token
            kept = [name for name in names if self.security.may_read(principal, resource(name))]
            if kept or not token or not names:
                return kept, token

    # ------------------------------------------------------------------ streams

    async def createStream(self, request: pb.StreamConfig, context: RpcContext) -> pb.CreateStreamStatus:
        S = pb.CreateStreamStatus
        info = request.streamInfo

        async def create() -> bool:
            return await self._services.creation.create_stream(info.scope, info.stream,
                                                               messages.configuration_from(request))

        return await self._reply(context, create(), _CREATE_STREAM, S, when_false=S.STREAM_EXISTS)

    async def getStreamConfiguration(self, request: pb.StreamInfo, context: RpcContext) -> pb.StreamConfig:
        configuration = await self._query(context, self._services.configuration(request.scope, request.stream))
        return configuration_to(request.scope, request.stream, configuration)

    async def checkStreamExists(self, request: pb.StreamInfo, context: RpcContext) -> pb.ExistsResponse:
        exists = await self._query(context, self._services.stream_exists(request.scope, request.stream))
        return pb.ExistsResponse(exists=exists)

    async def updateStream(self, request: pb.StreamConfig, context: RpcContext) -> pb.UpdateStreamStatus:
        info = request.streamInfo

        async def update() -> None:
            await self._services.update.update_stream(info.scope, info.stream, messages.configuration_from(request))

        return await self._reply(context, update(), _UPDATE_STREAM, pb.UpdateStreamStatus)

    async def truncateStream(self, request: pb.StreamCut, context: RpcContext) -> pb.UpdateStreamStatus:
        info = request.streamInfo
        return await self._reply(context, self._services.truncation.truncate_stream(
            info.scope, info.stream, dict(request.cut)), _TRUNCATE_STREAM, pb.UpdateStreamStatus)

    async def sealStream(self, request: pb.StreamInfo, context: RpcContext) -> pb.UpdateStreamStatus:
        return await self._reply(context, self._services.sealing.seal_stream(request.scope, request.stream),
                                 _SEAL_STREAM, pb.UpdateStreamStatus)

    async def deleteStream(self, request: pb.StreamInfo, context: RpcContext) -> pb.DeleteStreamStatus:
        S = pb.DeleteStreamStatus
        return await self._reply(context, self._services.deletion.delete_stream(request.scope, request.stream),
                                 _DELETE_STREAM, S, when_false=S.STREAM_NOT_FOUND)

    # ------------------------------------------------------------------ segment queries

    async def getCurrentSegments(self, request: pb.StreamInfo, context: RpcContext) -> pb.SegmentRanges:
        segments = await self._query(context, self._services.queries.current_segments(request.scope, request.stream))
        return pb.SegmentRanges(segmentRanges=messages.segment_ranges(request.scope, request.stream, segments),
                                delegationToken=self._token(request.scope, request.stream))

    async def getEpochSegments(self, request: pb.GetEpochSegmentsRequest, context: RpcContext) -> pb.SegmentRanges:
        info = request.streamInfo
        segments = await self._query(context, self._services.queries.epoch_segments(info.scope, info.stream,
                                                                                    request.epoch))
        return pb.SegmentRanges(segmentRanges=messages.segment_ranges(info.scope, info.stream, segments),
                                delegationToken=self._token(info.scope, info.stream))

    async def getSegments(self, request: pb.GetSegmentsRequest, context: RpcContext) -> pb.SegmentsAtTime:
        info = request.streamInfo
        head = await self._query(context, self._services.queries.head_segments(info.scope, info.stream))
        return pb.SegmentsAtTime(segments=messages.segment_locations(info.scope, info.stream, head))

    async def getSegmentsImmediatelyFollowing(self, request: pb.SegmentId, context: RpcContext) -> pb.SuccessorResponse:
        info = request.streamInfo
        successors = await self._query(context, self._services.queries.successors(info.scope, info.stream,
                                                                                  request.segmentId))
        return pb.SuccessorResponse(segments=messages.successor_entries(info.scope, info.stream, successors))

    async def getSegmentsImmediatlyFollowing(self, request: pb.SegmentId, context: RpcContext) -> pb.SuccessorResponse:
        """The misspelled alias old Java clients call (spec §2 #10)."""
        return await self.getSegmentsImmediatelyFollowing(request, context)

    async def getSegmentsBetween(self, request: pb.StreamCutRange, context: RpcContext) -> pb.StreamCutRangeResponse:
        info = request.streamInfo
        segments = await self._query(context, self._services.queries.segments_between(
            info.scope, info.stream, dict(getattr(request, "from")), dict(request.to)))
        return pb.StreamCutRangeResponse(segments=[segment_id(info.scope, info.stream, segment.segment_id)
                                                   for segment in sorted(segments)])

    async def isSegmentValid(self, request: pb.SegmentId, context: RpcContext) -> pb.SegmentValidityResponse:
        info = request.streamInfo
        valid = await self._query(context, self._services.queries.is_segment_valid(info.scope, info.stream,
                                                                                   request.segmentId))
        return pb.SegmentValidityResponse(response=valid)

    async def isStreamCutValid(self, request: pb.StreamCut, context: RpcContext) -> pb.StreamCutValidityResponse:
        info = request.streamInfo
        valid = await self._query(context, self._services.queries.is_stream_cut_valid(info.scope, info.stream,
                                                                                      dict(request.cut)))
        return pb.StreamCutValidityResponse(response=valid)

    async def getURI(self, request: pb.SegmentId, context: RpcContext) -> pb.NodeUri:
        info = request.streamInfo
        host, port = self._services.queries.uri(info.scope, info.stream, request.segmentId)
        return pb.NodeUri(endpoint=host, port=port)

    # ------------------------------------------------------------------ scaling

    async def scale(self, request: pb.ScaleRequest, context: RpcContext) -> pb.ScaleResponse:
        R = pb.ScaleResponse
        info = request.streamInfo
        ranges = [(entry.start, entry.end) for entry in request.newKeyRanges]

        def started(accepted: ScaleAccepted) -> pb.ScaleResponse:
            segments = [messages.segment_range(info.scope, info.stream, new)
                        for new in accepted.transition.new_segments]
            return R(status=R.STARTED, segments=segments, epoch=accepted.epoch)

        def failed(status: int) -> pb.ScaleResponse:
            return R(status=cast(pb.ScaleResponse.ScaleStreamStatus, status))  # a ScaleResponse status (``_SCALE``)

        return await self._answer(context, self._services.scaling.request_scale(
            info.scope, info.stream, list(request.sealedSegments), ranges), _SCALE, started, failed)

    async def checkScale(self, request: pb.ScaleStatusRequest, context: RpcContext) -> pb.ScaleStatusResponse:
        info = request.streamInfo
        return await self._status(context, self._services.scaling.check_scale(info.scope, info.stream, request.epoch),
                                  _CHECK_SCALE, pb.ScaleStatusResponse, "status", int)

    # ------------------------------------------------------------------ transactions

    async def createTransaction(self, request: pb.CreateTxnRequest, context: RpcContext) -> pb.CreateTxnResponse:
        info = request.streamInfo
        created = await self._query(context, self._transactions.create_transaction(info.scope, info.stream,
                                                                                   request.lease))
        return messages.created_transaction(info.scope, info.stream, created)

    async def pingTransaction(self, request: pb.PingTxnRequest, context: RpcContext) -> pb.PingTxnStatus:
        info = request.streamInfo
        return await self._status(context, self._transactions.ping_transaction(
            info.scope, info.stream, transaction_id_from(request.txnId), request.lease),
                                  _PING_TRANSACTION, pb.PingTxnStatus, "status", int)

    async def commitTransaction(self, request: pb.TxnRequest, context: RpcContext) -> pb.TxnStatus:
        """SUCCESS once the transaction is COMMITTING (the commit itself goes on in the background)."""
        info = request.streamInfo
        return await self._status(context, self._transactions.commit_transaction(
            info.scope, info.stream, transaction_id_from(request.txnId), request.writerId, request.timestamp),
                                  _COMMIT_TRANSACTION, pb.TxnStatus, "status", lambda _: pb.TxnStatus.SUCCESS)

    async def abortTransaction(self, request: pb.TxnRequest, context: RpcContext) -> pb.TxnStatus:
        info = request.streamInfo
        return await self._status(context, self._transactions.abort_transaction(
            info.scope, info.stream, transaction_id_from(request.txnId)),
                                  _ABORT_TRANSACTION, pb.TxnStatus, "status", lambda _: pb.TxnStatus.SUCCESS)

    async def checkTransactionState(self, request: pb.TxnRequest, context: RpcContext) -> pb.TxnState:
        info = request.streamInfo
        return await self._status(context, self._transactions.check_transaction_state(
            info.scope, info.stream, transaction_id_from(request.txnId)),
                                  _CHECK_TRANSACTION_STATE, pb.TxnState, "state", int)

    async def listCompletedTransactions(self, request: pb.ListCompletedTxnRequest,
                                        context: RpcContext) -> pb.ListCompletedTxnResponse:
        info = request.streamInfo
        records = await self._query(context, self._transactions.list_completed_transactions(info.scope, info.stream))
        return messages.completed_transactions(records)

    # ------------------------------------------------------------------ reader groups and subscribers

    async def createReaderGroup(self, request: pb.ReaderGroupConfiguration,
                                context: RpcContext) -> pb.CreateReaderGroupResponse:
        S = pb.CreateReaderGroupResponse

        async def create() -> ReaderGroupConfiguration:
            return await self._services.reader_groups.create_reader_group(
                request.scope, request.readerGroupName, messages.reader_group_from(request))

        return await self._reply(context, create(), _CREATE_GROUP, S, fields=lambda configuration: {
            "config": reader_group_to(request.scope, request.readerGroupName, configuration)})

    async def getReaderGroupConfig(self, request: pb.ReaderGroupInfo,
                                   context: RpcContext) -> pb.ReaderGroupConfigResponse:
        S = pb.ReaderGroupConfigResponse
        return await self._reply(
            context, self._services.reader_groups.get_reader_group(request.scope, request.readerGroup),
            {ReaderGroupNotFound: S.RG_NOT_FOUND}, S,
            fields=lambda configuration: {"config": reader_group_to(request.scope, request.readerGroup, configuration)},
            failure_fields={"config": pb.ReaderGroupConfiguration(scope=request.scope,
                                                                  readerGroupName=request.readerGroup)})

    async def updateReaderGroup(self, request: pb.ReaderGroupConfiguration,
                                context: RpcContext) -> pb.UpdateReaderGroupResponse:
        async def update() -> int:
            return await self._services.reader_groups.update_reader_group(
                request.scope, request.readerGroupName, messages.reader_group_from(request))

        return await self._reply(context, update(), _UPDATE_GROUP, pb.UpdateReaderGroupResponse,
                                 fields=lambda generation: {"generation": generation})

    async def deleteReaderGroup(self, request: pb.ReaderGroupInfo, context: RpcContext) -> pb.DeleteReaderGroupStatus:
        S = pb.DeleteReaderGroupStatus

        async def delete() -> None:
            await self._services.reader_groups.delete_reader_group(request.scope, request.readerGroup,
                                                                   messages.group_id_from(request.readerGroupId))

        return await self._reply(context, delete(), {ReaderGroupNotFound: S.RG_NOT_FOUND}, S)

    async def listSubscribers(self, request: pb.StreamInfo, context: RpcContext) -> pb.SubscribersResponse:
        S = pb.SubscribersResponse
        return await self._reply(context, self._services.reader_groups.list_subscribers(request.scope, request.stream),
                                 {StreamNotFound: S.STREAM_NOT_FOUND}, S, fields=lambda names: {"subscribers": names})

    async def updateSubscriberStreamCut(self, request: pb.SubscriberStreamCut,
                                        context: RpcContext) -> pb.UpdateSubscriberStatus:
        info = request.streamCut.streamInfo

        async def update() -> None:
            await self._services.reader_groups.update_subscriber_cut(
                info.scope, info.stream, request.subscriber, messages.group_id_from(request.readerGroupId),
                request.generation, dict(request.streamCut.cut))

        return await self._reply(context, update(), _UPDATE_SUBSCRIBER, pb.UpdateSubscriberStatus)

    # ------------------------------------------------------------------ writers

    async def noteTimestampFromWriter(self, request: pb.TimestampFromWriter,
                                      context: RpcContext) -> pb.TimestampResponse:
        R = pb.TimestampResponse
        info = request.position.streamInfo
        return await self._status(context, self._services.writer_marks.note_timestamp(
            info.scope, info.stream, request.writer, request.timestamp, dict(request.position.cut)),
                                  _NOTE_TIMESTAMP, R, "result", lambda _: R.SUCCESS)

    async def removeWriter(self, request: pb.RemoveWriterRequest, context: RpcContext) -> pb.RemoveWriterResponse:
        R = pb.RemoveWriterResponse
        return await self._status(context, self._services.writer_marks.remove_writer(
            request.stream.scope, request.stream.stream, request.writer), _REMOVE_WRITER, R, "result",
                                  lambda _: R.SUCCESS)

    # ------------------------------------------------------------------ key-value tables

    async def createKeyValueTable(self, request: pb.KeyValueTableConfig,
                                  context: RpcContext) -> pb.CreateKeyValueTableStatus:
        async def create() -> None:
            await self._services.key_value_tables.create_table(request.scope, request.kvtName,
                                                               messages.table_from(request))

        return await self._reply(context, create(), _CREATE_TABLE, pb.CreateKeyValueTableStatus)

    async def getCurrentSegmentsKeyValueTable(self, request: pb.KeyValueTableInfo,
                                              context: RpcContext) -> pb.SegmentRanges:
        partitions = await self._query(context, self._services.key_value_tables.partitions(request.scope,
                                                                                           request.kvtName))
        return pb.SegmentRanges(segmentRanges=[messages.key_range(request.scope, request.kvtName, *partition)
                                               for partition in partitions])

    async def listKeyValueTablesInScope(self, request: pb.KVTablesInScopeRequest,
                                        context: RpcContext) -> pb.KVTablesInScopeResponse:
        scope = request.scope.scope
        return await self._page(context, self._visible(
            lambda token: self._services.key_value_tables.list_tables(scope, token), request.continuationToken.token,
            lambda name: auth.table_resource(scope, name)), pb.KVTablesInScopeResponse, "kvtables",
                                lambda name: pb.KeyValueTableInfo(scope=scope, kvtName=name))

    async def getKeyValueTableConfiguration(self, request: pb.KeyValueTableInfo,
                                            context: RpcContext) -> pb.KeyValueTableConfigResponse:
        S = pb.KeyValueTableConfigResponse
        return await self._reply(context, self._services.key_value_tables.get_table(request.scope, request.kvtName),
                                 {TableNotFound: S.TABLE_NOT_FOUND}, S, fields=lambda configuration: {
                                     "config": key_value_table_to(request.scope, request.kvtName, configuration)})

    async def deleteKeyValueTable(self, request: pb.KeyValueTableInfo, context: RpcContext) -> pb.DeleteKVTableStatus:
        S = pb.DeleteKVTableStatus
        return await self._reply(context, self._services.key_value_tables.delete_table(request.scope, request.kvtName),
                                 {TableNotFound: S.TABLE_NOT_FOUND}, S)

    # ------------------------------------------------------------------ cluster and auth

    async def getControllerServerList(self, request: pb.ServerRequest, context: RpcContext) -> pb.ServerResponse:
        return pb.ServerResponse(nodeURI=[pb.NodeUri(endpoint=host, port=port)
                                          for host, port in self.advertised_endpoints()])

    async def getDelegationToken(self, request: pb.StreamInfo, context: RpcContext) -> pb.DelegationToken:
        """A token for the stream granting the caller's permission on it ("" when auth is off: no token, no
        expiry)."""
        return pb.DelegationToken(delegationToken=self._token(request.scope, request.stream))

    def _token(self, scope: str, stream: str) -> str:
        principal = CURRENT_PRINCIPAL.get()
        if self.security is None or principal is None:
            return ""
        return self.security.token_for(principal, scope, stream)

    async def getControllerToBucketMapping(self, request: pb.ControllerToBucketMappingRequest,
                                           context: RpcContext) -> pb.ControllerToBucketMappingResponse:
        """Which controller owns which buckets of streams (one table for retention and watermarks alike);
        empty for a controller alone."""
        return pb.ControllerToBucketMappingResponse(mapping={controller: pb.BucketIds(id=buckets)
                                                             for controller, buckets in self._bucket_mapping().items()})
