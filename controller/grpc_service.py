"""The controller's gRPC API: every ControllerService RPC, converting messages and delegating to
the services (``controller.service``); transactions go to ``TransactionService``.

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
from typing import Awaitable, TypeVar

import grpc

from .grpc_api import controller_pb2 as pb
from .grpc_api import controller_pb2_grpc as pb_grpc
from .service import messages
from .service.errors import (ConcurrentWorkflow, EpochNotFound, GenerationMismatch, InvalidArgument, InvalidName,
                             InvalidStreamCut, ReaderGroupConfigMismatch, ReaderGroupNotFound, ScaleRejected,
                             ScopeNotEmpty, ScopeNotFound, ServiceError, StreamNotFound, StreamNotReady,
                             StreamNotSealed, StreamSealed, SubscriberNotFound, TableExists, TableNotFound,
                             WorkflowTimeout, WriterMarkRejected, WriterNotFound)
from .service.key_value_tables import KeyValueTableRecord
from .service.scaling import ScaleStatus
from .service.services import ControllerServices

log = logging.getLogger("tributary.controller")
Result = TypeVar("Result")
Code = grpc.StatusCode

_CODES: dict[type[Exception], Code] = {
    InvalidName: Code.INVALID_ARGUMENT, InvalidArgument: Code.INVALID_ARGUMENT,
    InvalidStreamCut: Code.INVALID_ARGUMENT, ScaleRejected: Code.INVALID_ARGUMENT,
    StreamNotFound: Code.NOT_FOUND, ScopeNotFound: Code.NOT_FOUND, EpochNotFound: Code.NOT_FOUND,
    ReaderGroupNotFound: Code.NOT_FOUND, TableNotFound: Code.NOT_FOUND, WriterNotFound: Code.NOT_FOUND,
    SubscriberNotFound: Code.NOT_FOUND, TableExists: Code.ALREADY_EXISTS,
    ScopeNotEmpty: Code.FAILED_PRECONDITION, ConcurrentWorkflow: Code.FAILED_PRECONDITION,
    StreamNotSealed: Code.FAILED_PRECONDITION, StreamNotReady: Code.INTERNAL, StreamSealed: Code.INTERNAL,
    WorkflowTimeout: Code.DEADLINE_EXCEEDED,
}
# Errors answered with a gRPC code even by RPCs that have a status enum.
_ALWAYS_CODES: dict[type[Exception], Code] = {
    InvalidArgument: Code.INVALID_ARGUMENT, WorkflowTimeout: Code.DEADLINE_EXCEEDED,
}

_CREATE_SCOPE = {InvalidName: pb.CreateScopeStatus.INVALID_SCOPE_NAME}
_DELETE_SCOPE = {ScopeNotEmpty: pb.DeleteScopeStatus.SCOPE_NOT_EMPTY}
_CREATE_STREAM = {InvalidName: pb.CreateStreamStatus.INVALID_STREAM_NAME,
                  ScopeNotFound: pb.CreateStreamStatus.SCOPE_NOT_FOUND}
_UPDATE_STREAM = {StreamNotFound: pb.UpdateStreamStatus.STREAM_NOT_FOUND,
                  StreamSealed: pb.UpdateStreamStatus.STREAM_SEALED}
_TRUNCATE_STREAM = {**_UPDATE_STREAM, InvalidStreamCut: Code.INVALID_ARGUMENT}
_SEAL_STREAM = {StreamNotFound: pb.UpdateStreamStatus.STREAM_NOT_FOUND}
_DELETE_STREAM = {StreamNotSealed: pb.DeleteStreamStatus.STREAM_NOT_SEALED}
_CREATE_GROUP = {InvalidName: pb.CreateReaderGroupResponse.INVALID_RG_NAME,
                 ScopeNotFound: pb.CreateReaderGroupResponse.SCOPE_NOT_FOUND}
_UPDATE_GROUP = {ReaderGroupNotFound: pb.UpdateReaderGroupResponse.RG_NOT_FOUND,
                 ReaderGroupConfigMismatch: pb.UpdateReaderGroupResponse.INVALID_CONFIG}
_UPDATE_SUBSCRIBER = {StreamNotFound: pb.UpdateSubscriberStatus.STREAM_NOT_FOUND,
                      SubscriberNotFound: pb.UpdateSubscriberStatus.SUBSCRIBER_NOT_FOUND,
                      GenerationMismatch: pb.UpdateSubscriberStatus.GENERATION_MISMATCH,
                      InvalidStreamCut: pb.UpdateSubscriberStatus.STREAM_CUT_NOT_VALID}
_CREATE_TABLE = {InvalidName: pb.CreateKeyValueTableStatus.INVALID_TABLE_NAME,
                 ScopeNotFound: pb.CreateKeyValueTableStatus.SCOPE_NOT_FOUND,
                 TableExists: pb.CreateKeyValueTableStatus.TABLE_EXISTS}


def _lookup(error: Exception, table: dict) -> int | Code | None:
    for error_type, outcome in table.items():
        if isinstance(error, error_type):
            return outcome
    return None


def _unexpected(error: Exception) -> None:
    if not isinstance(error, ServiceError):
        log.warning("controller request failed", extra={"error": repr(error)})


class ControllerServicer(pb_grpc.ControllerServiceServicer):
    """The gRPC face of ``ControllerServices`` (and of the transaction service, when there is one)."""

    def __init__(self, services: ControllerServices, transactions=None,
                 advertised_endpoints: tuple[tuple[str, int], ...] = ()):
        self._services = services
        self._transactions = transactions
        self.advertised_endpoints = advertised_endpoints  # set once the port is bound

    # ------------------------------------------------------------------ error mapping

    async def _query(self, context, awaitable: Awaitable[Result]) -> Result:
        """The result, or the call aborted with the error's gRPC code."""
        try:
            return await awaitable
        except Exception as error:  # noqa: BLE001 - every failure becomes a status code
            _unexpected(error)
            await context.abort(_lookup(error, _CODES) or Code.INTERNAL, str(error) or type(error).__name__)

    async def _status(self, context, awaitable: Awaitable[Result], table: dict,
                      failure: int) -> tuple[Result | None, int | None]:
        """(result, None), or (None, status) for an error the RPC's table (or FAILURE) answers.

        Errors that ``table`` or ``_ALWAYS_CODES`` map to a gRPC code abort the call instead.
        """
        try:
            return await awaitable, None
        except Exception as error:  # noqa: BLE001 - every failure becomes a status
            outcome = _lookup(error, table)
            if outcome is None:
                outcome = _lookup(error, _ALWAYS_CODES)
            if outcome is None:
                _unexpected(error)
                outcome = failure
            if isinstance(outcome, Code):
                await context.abort(outcome, str(error) or type(error).__name__)
            return None, outcome

    # ------------------------------------------------------------------ scopes

    async def createScope(self, request: pb.ScopeInfo, context) -> pb.CreateScopeStatus:
        S = pb.CreateScopeStatus
        created, status = await self._status(context, self._services.scopes.create_scope(request.scope),
                                             _CREATE_SCOPE, S.FAILURE)
        if status is None:
            status = S.SUCCESS if created else S.SCOPE_EXISTS
        return S(status=status)

    async def checkScopeExists(self, request: pb.ScopeInfo, context) -> pb.ExistsResponse:
        return pb.ExistsResponse(exists=await self._query(context, self._services.scopes.scope_exists(request.scope)))

    async def deleteScope(self, request: pb.ScopeInfo, context) -> pb.DeleteScopeStatus:
        S = pb.DeleteScopeStatus
        deleted, status = await self._status(context, self._services.scopes.delete_scope(request.scope),
                                             _DELETE_SCOPE, S.FAILURE)
        if status is None:
            status = S.SUCCESS if deleted else S.SCOPE_NOT_FOUND
        return S(status=status)

    async def deleteScopeRecursive(self, request: pb.ScopeInfo, context) -> pb.DeleteScopeStatus:
        S = pb.DeleteScopeStatus
        _, status = await self._status(context, self._services.delete_scope_recursive(request.scope), {}, S.FAILURE)
        return S(status=S.SUCCESS if status is None else status)

    async def listScopes(self, request: pb.ScopesRequest, context) -> pb.ScopesResponse:
        names, token = await self._query(context, self._services.scopes.list_scopes(request.continuationToken.token))
        return pb.ScopesResponse(scopes=names, continuationToken=messages.token(token))

    async def listStreamsInScope(self, request: pb.StreamsInScopeRequest, context) -> pb.StreamsInScopeResponse:
        scope = request.scope.scope
        return await self._stream_page(context, scope, self._services.scopes.list_streams(
            scope, request.continuationToken.token))

    async def listStreamsInScopeForTag(self, request: pb.StreamsInScopeWithTagRequest,
                                       context) -> pb.StreamsInScopeResponse:
        scope = request.scope.scope
        return await self._stream_page(context, scope, self._services.scopes.list_streams_for_tag(
            scope, request.tag, request.continuationToken.token))

    async def _stream_page(self, context, scope: str, page) -> pb.StreamsInScopeResponse:
        S = pb.StreamsInScopeResponse
        result, status = await self._status(context, page, {ScopeNotFound: S.SCOPE_NOT_FOUND}, S.FAILURE)
        if status is not None:
            return S(status=status, continuationToken=messages.token(""))
        names, token = result
        return S(streams=[messages.stream_info(scope, name) for name in names],
                 continuationToken=messages.token(token), status=S.SUCCESS)

    # ------------------------------------------------------------------ streams

    async def createStream(self, request: pb.StreamConfig, context) -> pb.CreateStreamStatus:
        S = pb.CreateStreamStatus
        info = request.streamInfo

        async def create() -> bool:
            return await self._services.creation.create_stream(info.scope, info.stream,
                                                               messages.configuration_from(request))

        created, status = await self._status(context, create(), _CREATE_STREAM, S.FAILURE)
        if status is None:
            status = S.SUCCESS if created else S.STREAM_EXISTS
        return S(status=status)

    async def getStreamConfiguration(self, request: pb.StreamInfo, context) -> pb.StreamConfig:
        configuration = await self._query(context, self._services.configuration(request.scope, request.stream))
        return messages.configuration_to(request.scope, request.stream, configuration)

    async def checkStreamExists(self, request: pb.StreamInfo, context) -> pb.ExistsResponse:
        exists = await self._query(context, self._services.stream_exists(request.scope, request.stream))
        return pb.ExistsResponse(exists=exists)

    async def updateStream(self, request: pb.StreamConfig, context) -> pb.UpdateStreamStatus:
        info = request.streamInfo

        async def update() -> None:
            await self._services.update.update_stream(info.scope, info.stream, messages.configuration_from(request))

        return await self._update_status(context, update(), _UPDATE_STREAM)

    async def truncateStream(self, request: pb.StreamCut, context) -> pb.UpdateStreamStatus:
        info = request.streamInfo
        return await self._update_status(context, self._services.truncation.truncate_stream(
            info.scope, info.stream, dict(request.cut)), _TRUNCATE_STREAM)

    async def sealStream(self, request: pb.StreamInfo, context) -> pb.UpdateStreamStatus:
        return await self._update_status(context, self._services.sealing.seal_stream(request.scope, request.stream),
                                         _SEAL_STREAM)

    async def _update_status(self, context, work, table) -> pb.UpdateStreamStatus:
        S = pb.UpdateStreamStatus
        _, status = await self._status(context, work, table, S.FAILURE)
        return S(status=S.SUCCESS if status is None else status)

    async def deleteStream(self, request: pb.StreamInfo, context) -> pb.DeleteStreamStatus:
        S = pb.DeleteStreamStatus
        deleted, status = await self._status(context, self._services.deletion.delete_stream(
            request.scope, request.stream), _DELETE_STREAM, S.FAILURE)
        if status is None:
            status = S.SUCCESS if deleted else S.STREAM_NOT_FOUND
        return S(status=status)

    # ------------------------------------------------------------------ segment queries

    async def getCurrentSegments(self, request: pb.StreamInfo, context) -> pb.SegmentRanges:
        segments = await self._query(context, self._services.queries.current_segments(request.scope, request.stream))
        return pb.SegmentRanges(segmentRanges=messages.segment_ranges(request.scope, request.stream, segments))

    async def getEpochSegments(self, request: pb.GetEpochSegmentsRequest, context) -> pb.SegmentRanges:
        info = request.streamInfo
        segments = await self._query(context, self._services.queries.epoch_segments(info.scope, info.stream,
                                                                                    request.epoch))
        return pb.SegmentRanges(segmentRanges=messages.segment_ranges(info.scope, info.stream, segments))

    async def getSegments(self, request: pb.GetSegmentsRequest, context) -> pb.SegmentsAtTime:
        info = request.streamInfo
        head = await self._query(context, self._services.queries.head_segments(info.scope, info.stream))
        locations = [pb.SegmentsAtTime.SegmentLocation(segmentId=messages.segment_id(info.scope, info.stream,
                                                                                     segment.segment_id),
                                                       offset=offset)
                     for segment, offset in sorted(head.items(), key=lambda item: item[0].key_start)]
        return pb.SegmentsAtTime(segments=locations)

    async def getSegmentsImmediatelyFollowing(self, request: pb.SegmentId, context) -> pb.SuccessorResponse:
        info = request.streamInfo
        successors = await self._query(context, self._services.queries.successors(info.scope, info.stream,
                                                                                  request.segmentId))
        entries = [pb.SuccessorResponse.SegmentEntry(segment=messages.segment_range(info.scope, info.stream, segment),
                                                     value=predecessors)
                   for segment, predecessors in sorted(successors.items(), key=lambda item: item[0].key_start)]
        return pb.SuccessorResponse(segments=entries)

    async def getSegmentsImmediatlyFollowing(self, request: pb.SegmentId, context) -> pb.SuccessorResponse:
        """The misspelled alias old Java clients call (spec §2 #10)."""
        return await self.getSegmentsImmediatelyFollowing(request, context)

    async def getSegmentsBetween(self, request: pb.StreamCutRange, context) -> pb.StreamCutRangeResponse:
        info = request.streamInfo
        segments = await self._query(context, self._services.queries.segments_between(
            info.scope, info.stream, dict(getattr(request, "from")), dict(request.to)))
        return pb.StreamCutRangeResponse(segments=[messages.segment_id(info.scope, info.stream, segment.segment_id)
                                                   for segment in sorted(segments)])

    async def isSegmentValid(self, request: pb.SegmentId, context) -> pb.SegmentValidityResponse:
        info = request.streamInfo
        valid = await self._query(context, self._services.queries.is_segment_valid(info.scope, info.stream,
                                                                                   request.segmentId))
        return pb.SegmentValidityResponse(response=valid)

    async def isStreamCutValid(self, request: pb.StreamCut, context) -> pb.StreamCutValidityResponse:
        info = request.streamInfo
        valid = await self._query(context, self._services.queries.is_stream_cut_valid(info.scope, info.stream,
                                                                                      dict(request.cut)))
        return pb.StreamCutValidityResponse(response=valid)

    async def getURI(self, request: pb.SegmentId, context) -> pb.NodeUri:
        info = request.streamInfo
        host, port = self._services.queries.uri(info.scope, info.stream, request.segmentId)
        return pb.NodeUri(endpoint=host, port=port)

    # ------------------------------------------------------------------ scaling

    async def scale(self, request: pb.ScaleRequest, context) -> pb.ScaleResponse:
        R = pb.ScaleResponse
        info = request.streamInfo
        ranges = [(entry.start, entry.end) for entry in request.newKeyRanges]
        try:
            accepted = await self._services.scaling.request_scale(info.scope, info.stream,
                                                                  list(request.sealedSegments), ranges)
        except ScaleRejected as error:
            return R(status=R.PRECONDITION_FAILED if error.precondition else R.FAILURE)
        except (StreamNotFound, StreamNotReady) as error:
            await context.abort(_CODES[type(error)], str(error))
        except Exception as error:  # noqa: BLE001 - the store failed: FAILURE
            _unexpected(error)
            return R(status=R.FAILURE)
        segments = [pb.SegmentRange(segmentId=messages.segment_id(info.scope, info.stream, new.segment_id),
                                    minKey=new.key_start, maxKey=new.key_end)
                    for new in accepted.transition.new_segments]
        return R(status=R.STARTED, segments=segments, epoch=accepted.epoch)

    async def checkScale(self, request: pb.ScaleStatusRequest, context) -> pb.ScaleStatusResponse:
        info = request.streamInfo
        try:
            status = await self._services.scaling.check_scale(info.scope, info.stream, request.epoch)
        except Exception as error:  # noqa: BLE001 - answered as INTERNAL_ERROR (spec §4.4)
            _unexpected(error)
            status = ScaleStatus.INTERNAL_ERROR
        return pb.ScaleStatusResponse(status=int(status))

    # ------------------------------------------------------------------ transactions

    async def _transaction_call(self, context, method: str, request):
        """Delegates to the transaction service; its typed errors carry their gRPC ``status_code``."""
        if self._transactions is None:
            await context.abort(Code.UNIMPLEMENTED, "transactions are not available in this controller build "
                                                    "(controller.service.transactions is missing)")
        try:
            return await getattr(self._transactions, method)(request)
        except Exception as error:  # noqa: BLE001 - every failure becomes a status code
            code = getattr(error, "status_code", None)
            if not isinstance(code, Code):
                log.warning("transaction request failed", extra={"error": repr(error)})
                code = Code.INTERNAL
            await context.abort(code, str(error) or type(error).__name__)

    async def createTransaction(self, request: pb.CreateTxnRequest, context) -> pb.CreateTxnResponse:
        return await self._transaction_call(context, "create_transaction", request)

    async def pingTransaction(self, request: pb.PingTxnRequest, context) -> pb.PingTxnStatus:
        return await self._transaction_call(context, "ping_transaction", request)

    async def commitTransaction(self, request: pb.TxnRequest, context) -> pb.TxnStatus:
        return await self._transaction_call(context, "commit_transaction", request)

    async def abortTransaction(self, request: pb.TxnRequest, context) -> pb.TxnStatus:
        return await self._transaction_call(context, "abort_transaction", request)

    async def checkTransactionState(self, request: pb.TxnRequest, context) -> pb.TxnState:
        return await self._transaction_call(context, "check_transaction_state", request)

    async def listCompletedTransactions(self, request: pb.ListCompletedTxnRequest,
                                        context) -> pb.ListCompletedTxnResponse:
        return await self._transaction_call(context, "list_completed_transactions", request)

    # ------------------------------------------------------------------ reader groups and subscribers

    async def createReaderGroup(self, request: pb.ReaderGroupConfiguration, context) -> pb.CreateReaderGroupResponse:
        S = pb.CreateReaderGroupResponse

        async def create():
            return await self._services.reader_groups.create_reader_group(
                request.scope, request.readerGroupName, messages.reader_group_from(request))

        record, status = await self._status(context, create(), _CREATE_GROUP, S.FAILURE)
        if status is not None:
            return S(status=status)
        return S(status=S.SUCCESS, config=messages.reader_group_to(request.scope, request.readerGroupName, record))

    async def getReaderGroupConfig(self, request: pb.ReaderGroupInfo, context) -> pb.ReaderGroupConfigResponse:
        S = pb.ReaderGroupConfigResponse
        record, status = await self._status(context, self._services.reader_groups.get_reader_group(
            request.scope, request.readerGroup), {ReaderGroupNotFound: S.RG_NOT_FOUND}, S.FAILURE)
        if status is not None:
            return S(status=status, config=pb.ReaderGroupConfiguration(scope=request.scope,
                                                                       readerGroupName=request.readerGroup))
        return S(status=S.SUCCESS, config=messages.reader_group_to(request.scope, request.readerGroup, record))

    async def updateReaderGroup(self, request: pb.ReaderGroupConfiguration, context) -> pb.UpdateReaderGroupResponse:
        S = pb.UpdateReaderGroupResponse

        async def update() -> int:
            return await self._services.reader_groups.update_reader_group(
                request.scope, request.readerGroupName, messages.reader_group_from(request))

        generation, status = await self._status(context, update(), _UPDATE_GROUP, S.FAILURE)
        return S(status=status) if status is not None else S(status=S.SUCCESS, generation=generation)

    async def deleteReaderGroup(self, request: pb.ReaderGroupInfo, context) -> pb.DeleteReaderGroupStatus:
        S = pb.DeleteReaderGroupStatus

        async def delete() -> None:
            await self._services.reader_groups.delete_reader_group(request.scope, request.readerGroup,
                                                                   messages.group_id_from(request.readerGroupId))

        _, status = await self._status(context, delete(), {ReaderGroupNotFound: S.RG_NOT_FOUND}, S.FAILURE)
        return S(status=S.SUCCESS if status is None else status)

    async def listSubscribers(self, request: pb.StreamInfo, context) -> pb.SubscribersResponse:
        S = pb.SubscribersResponse
        names, status = await self._status(context, self._services.reader_groups.list_subscribers(
            request.scope, request.stream), {StreamNotFound: S.STREAM_NOT_FOUND}, S.FAILURE)
        return S(status=status) if status is not None else S(status=S.SUCCESS, subscribers=names)

    async def updateSubscriberStreamCut(self, request: pb.SubscriberStreamCut, context) -> pb.UpdateSubscriberStatus:
        S = pb.UpdateSubscriberStatus
        info = request.streamCut.streamInfo

        async def update() -> None:
            await self._services.reader_groups.update_subscriber_cut(
                info.scope, info.stream, request.subscriber, messages.group_id_from(request.readerGroupId),
                request.generation, dict(request.streamCut.cut))

        _, status = await self._status(context, update(), _UPDATE_SUBSCRIBER, S.FAILURE)
        return S(status=S.SUCCESS if status is None else status)

    # ------------------------------------------------------------------ writers

    async def noteTimestampFromWriter(self, request: pb.TimestampFromWriter, context) -> pb.TimestampResponse:
        R = pb.TimestampResponse
        info = request.position.streamInfo
        try:
            await self._services.writer_marks.note_timestamp(info.scope, info.stream, request.writer,
                                                             request.timestamp, dict(request.position.cut))
        except WriterMarkRejected as error:
            return R(result=R.INVALID_TIME if error.time_went_back else R.INVALID_POSITION)
        except Exception as error:  # noqa: BLE001 - INTERNAL_ERROR, as Java answers
            _unexpected(error)
            return R(result=R.INTERNAL_ERROR)
        return R(result=R.SUCCESS)

    async def removeWriter(self, request: pb.RemoveWriterRequest, context) -> pb.RemoveWriterResponse:
        R = pb.RemoveWriterResponse
        try:
            await self._services.writer_marks.remove_writer(request.stream.scope, request.stream.stream,
                                                            request.writer)
        except WriterNotFound:
            return R(result=R.UNKNOWN_WRITER)
        except Exception as error:  # noqa: BLE001 - INTERNAL_ERROR, as Java answers
            _unexpected(error)
            return R(result=R.INTERNAL_ERROR)
        return R(result=R.SUCCESS)

    # ------------------------------------------------------------------ key-value tables

    async def createKeyValueTable(self, request: pb.KeyValueTableConfig, context) -> pb.CreateKeyValueTableStatus:
        S = pb.CreateKeyValueTableStatus
        record = KeyValueTableRecord(request.partitionCount, request.primaryKeyLength, request.secondaryKeyLength,
                                     request.rolloverSizeBytes)
        _, status = await self._status(context, self._services.key_value_tables.create_table(
            request.scope, request.kvtName, record), _CREATE_TABLE, S.FAILURE)
        return S(status=S.SUCCESS if status is None else status)

    async def getCurrentSegmentsKeyValueTable(self, request: pb.KeyValueTableInfo, context) -> pb.SegmentRanges:
        partitions = await self._query(context, self._services.key_value_tables.partitions(request.scope,
                                                                                           request.kvtName))
        return pb.SegmentRanges(segmentRanges=[
            pb.SegmentRange(segmentId=messages.segment_id(request.scope, request.kvtName, segment_id),
                            minKey=start, maxKey=end) for segment_id, start, end in partitions])

    async def listKeyValueTablesInScope(self, request: pb.KVTablesInScopeRequest,
                                        context) -> pb.KVTablesInScopeResponse:
        S = pb.KVTablesInScopeResponse
        scope = request.scope.scope
        page, status = await self._status(context, self._services.key_value_tables.list_tables(
            scope, request.continuationToken.token), {ScopeNotFound: S.SCOPE_NOT_FOUND}, S.FAILURE)
        if status is not None:
            return S(status=status, continuationToken=messages.token(""))
        names, token = page
        return S(kvtables=[pb.KeyValueTableInfo(scope=scope, kvtName=name) for name in names],
                 continuationToken=messages.token(token), status=S.SUCCESS)

    async def getKeyValueTableConfiguration(self, request: pb.KeyValueTableInfo,
                                            context) -> pb.KeyValueTableConfigResponse:
        S = pb.KeyValueTableConfigResponse
        record, status = await self._status(context, self._services.key_value_tables.get_table(
            request.scope, request.kvtName), {TableNotFound: S.TABLE_NOT_FOUND}, S.FAILURE)
        if status is not None:
            return S(status=status)
        return S(status=S.SUCCESS, config=pb.KeyValueTableConfig(
            scope=request.scope, kvtName=request.kvtName, partitionCount=record.partition_count,
            primaryKeyLength=record.primary_key_length, secondaryKeyLength=record.secondary_key_length,
            rolloverSizeBytes=record.rollover_size_bytes))

    async def deleteKeyValueTable(self, request: pb.KeyValueTableInfo, context) -> pb.DeleteKVTableStatus:
        S = pb.DeleteKVTableStatus
        _, status = await self._status(context, self._services.key_value_tables.delete_table(
            request.scope, request.kvtName), {TableNotFound: S.TABLE_NOT_FOUND}, S.FAILURE)
        return S(status=S.SUCCESS if status is None else status)

    # ------------------------------------------------------------------ cluster and auth

    async def getControllerServerList(self, request: pb.ServerRequest, context) -> pb.ServerResponse:
        return pb.ServerResponse(nodeURI=[pb.NodeUri(endpoint=host, port=port) for host, port in self.advertised_endpoints])

    async def getDelegationToken(self, request: pb.StreamInfo, context) -> pb.DelegationToken:
        return pb.DelegationToken(delegationToken="")  # auth is off: "" means "no token, no expiry"

    async def getControllerToBucketMapping(self, request: pb.ControllerToBucketMappingRequest,
                                           context) -> pb.ControllerToBucketMappingResponse:
        """One controller and no bucket services: an empty mapping."""
        return pb.ControllerToBucketMappingResponse()
