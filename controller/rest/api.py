"""The controller's REST admin API (docs/rest.md; the OpenAPI document is ``openapi.py``), on aiohttp.

aiohttp because the controller already runs on asyncio and uvloop, and aiohttp is already installed
(aiobotocore depends on it): its server is a handful of routes on the same loop as the gRPC service,
with no ASGI server or framework to add. Handlers call the same service interfaces as the gRPC adapter
(``controller.service_api``: ``ControllerServices``, the ``TransactionService``), never the store, and
convert plain values to JSON; a stream configuration is the Controller API's value (``controller_api.model``)
both ways.

Errors are JSON ``{"code": ..., "message": ...}`` with the status their kind calls for: 400 for
bad names, bodies and arguments; 404 for unknown scopes, streams, reader groups, tables; 409 for
something that exists already, or work that conflicts with a workflow in progress; 412 for a
precondition (deleting a stream that is not sealed, a scope that is not empty); 503 when a segment
store cannot be reached; 500 for anything else (logged).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from clients.errors import ClientError
from controller_api import errors as api_errors
from controller_api.key_value_tables import KeyValueTableConfiguration
from controller_api.model import (
    NO_MAXIMUM,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfiguration,
)
from controller_api.reader_groups import StreamDataRetention
from wire import auth, naming
from wire.auth import Permission

from ..api_validation import scope_problem, stream_problem, user_name_problem
from ..security import PermissionDenied, Security, Unauthenticated
from ..service import errors
from ..service.scaling import ScaleStatus
from ..service_api import ServiceCalls, TransactionCalls
from .openapi import OPENAPI

log = logging.getLogger("tributary.controller.rest")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
READ, UPDATE = Permission.READ, Permission.READ_UPDATE
SCALE_WAIT_SECONDS = 60.0

_STATUS: list[tuple[type[BaseException], int, str]] = [
    (errors.InvalidName, 400, "InvalidName"),
    (errors.InvalidArgument, 400, "InvalidArgument"),
    (errors.InvalidStreamCut, 400, "InvalidStreamCut"),
    (errors.ScaleRejected, 409, "ScaleRejected"),
    (errors.ScopeNotFound, 404, "ScopeNotFound"),
    (errors.StreamNotFound, 404, "StreamNotFound"),
    (errors.ReaderGroupNotFound, 404, "ReaderGroupNotFound"),
    (errors.TableNotFound, 404, "TableNotFound"),
    (errors.TableExists, 409, "TableExists"),
    (errors.ConcurrentWorkflow, 409, "ConcurrentWorkflow"),
    (errors.StreamSealed, 409, "StreamSealed"),
    (errors.StreamNotReady, 409, "StreamNotReady"),
    (errors.StreamNotSealed, 412, "StreamNotSealed"),
    (errors.ScopeNotEmpty, 412, "ScopeNotEmpty"),
    (errors.WorkflowTimeout, 504, "WorkflowTimeout"),
    (api_errors.InvalidArgument, 400, "InvalidArgument"),  # a value the Controller API's model refuses
    (ClientError, 503, "SegmentStoreUnavailable"),
]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as a JSON error with its status (see the module docstring)."""
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error.status, error.code, str(error))
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return error_response(error.status, error.reason.replace(" ", ""), error.text or error.reason)
    except Exception as error:
        for kind, status, code in _STATUS:
            if isinstance(error, kind):
                return error_response(status, code, str(error) or code)
        log.exception("REST request failed", extra={"path": request.path})
        return error_response(500, "InternalError", f"{type(error).__name__}: {error}")


class RestApi:
    """The routes over ``services`` (ControllerServices) and ``transactions`` (TransactionService).
    ``cluster()`` describes where containers run (a JSON-able dict)."""

    def __init__(self, services: ServiceCalls, transactions: TransactionCalls,
                 cluster: Callable[[], Awaitable[dict[str, Any]]], security: Security | None = None):
        self._services = services
        self._transactions = transactions
        self._cluster = cluster
        self._security = security

    def application(self, console: web.Application | None = None) -> web.Application:
        app = web.Application(middlewares=[json_errors, self._authenticate], client_max_size=1024 * 1024)
        route = app.router
        route.add_get("/openapi.json", self.openapi)
        route.add_get("/v1/scopes", self.list_scopes)
        route.add_post("/v1/scopes", self.create_scope)
        route.add_get("/v1/scopes/{scope}", self.get_scope)
        route.add_delete("/v1/scopes/{scope}", self.delete_scope)
        route.add_get("/v1/scopes/{scope}/streams", self.list_streams)
        route.add_post("/v1/scopes/{scope}/streams", self.create_stream)
        route.add_get("/v1/scopes/{scope}/streams/{stream}", self.get_stream)
        route.add_put("/v1/scopes/{scope}/streams/{stream}", self.update_stream)
        route.add_delete("/v1/scopes/{scope}/streams/{stream}", self.delete_stream)
        route.add_put("/v1/scopes/{scope}/streams/{stream}/state", self.seal_stream)
        route.add_post("/v1/scopes/{scope}/streams/{stream}/scale", self.scale_stream)
        route.add_post("/v1/scopes/{scope}/streams/{stream}/truncate", self.truncate_stream)
        route.add_get("/v1/scopes/{scope}/streams/{stream}/segments", self.stream_segments)
        route.add_get("/v1/scopes/{scope}/streams/{stream}/epochs", self.stream_epochs)
        route.add_get("/v1/scopes/{scope}/streams/{stream}/transactions", self.stream_transactions)
        route.add_get("/v1/scopes/{scope}/readergroups", self.list_reader_groups)
        route.add_get("/v1/scopes/{scope}/readergroups/{group}", self.get_reader_group)
        route.add_get("/v1/scopes/{scope}/kvtables", self.list_tables)
        route.add_post("/v1/scopes/{scope}/kvtables", self.create_table)
        route.add_get("/v1/scopes/{scope}/kvtables/{table}", self.get_table)
        route.add_delete("/v1/scopes/{scope}/kvtables/{table}", self.delete_table)
        route.add_get("/v1/cluster", self.cluster)
        if console is not None:
            app.add_subapp("/console/", console)
        return app

    # ------------------------------------------------------------------ who may do what

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """With security on, every /v1 call needs Basic credentials (the console's page and script do not:
        the browser asks for them when the page's first call is answered 401)."""
        if self._security is not None and request.path.startswith("/v1/"):
            try:
                request["principal"] = self._security.authenticate(request.headers.get("Authorization"))
            except Unauthenticated as error:
                response = error_response(401, "Unauthenticated", str(error))
                response.headers["WWW-Authenticate"] = 'Basic realm="tributary", charset="UTF-8"'
                return response
        return await handler(request)

    def _allow(self, request: web.Request, resource: str, permission: Permission) -> None:
        """Raises ApiError 403 unless the caller has ``permission`` on ``resource`` (anything goes without auth)."""
        if self._security is None:
            return
        try:
            self._security.require(request["principal"], resource, permission)
        except PermissionDenied as error:
            raise ApiError(403, "PermissionDenied", str(error)) from None

    def _readable(self, request: web.Request, names: list[str], resource: Callable[[str], str]) -> list[str]:
        if self._security is None:
            return names
        return [name for name in names if self._security.may_read(request["principal"], resource(name))]

    # ------------------------------------------------------------------ document

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    # ------------------------------------------------------------------ scopes

    async def list_scopes(self, request: web.Request) -> web.Response:
        scopes = self._readable(request, await _all(self._services.scopes.list_scopes), auth.scope_resource)
        return web.json_response({"scopes": [{"scopeName": scope} for scope in scopes]})

    async def create_scope(self, request: web.Request) -> web.Response:
        body = await _body(request)
        scope = _string(body, "scopeName")
        _check(scope_problem(scope))
        self._allow(request, auth.ROOT, UPDATE)
        if not await self._services.scopes.create_scope(scope):
            raise ApiError(409, "ScopeExists", f"scope {scope} exists")
        return web.json_response({"scopeName": scope}, status=201)

    async def get_scope(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        self._allow(request, auth.scope_resource(scope), READ)
        if not await self._services.scopes.scope_exists(scope):
            raise ApiError(404, "ScopeNotFound", f"scope {scope} does not exist")
        return web.json_response({"scopeName": scope})

    async def delete_scope(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        self._allow(request, auth.scope_resource(scope), UPDATE)
        if not await self._services.scopes.scope_exists(scope):
            raise ApiError(404, "ScopeNotFound", f"scope {scope} does not exist")
        if _flag(request, "recursive"):
            await self._services.delete_scope_recursive(scope)
        else:
            await self._services.scopes.delete_scope(scope)
        return web.Response(status=204)

    # ------------------------------------------------------------------ streams

    async def list_streams(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        self._allow(request, auth.scope_resource(scope), READ)
        tag = request.query.get("tag")
        if tag is not None:
            names = await _all(lambda token: self._services.scopes.list_streams_for_tag(scope, tag, token))
        else:
            names = await _all(lambda token: self._services.scopes.list_streams(scope, token))
        names = self._readable(request, names, lambda name: auth.stream_resource(scope, name))
        return web.json_response({"streams": [{"scopeName": scope, "streamName": name} for name in names
                                              if not name.startswith("_")]})

    async def create_stream(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        body = await _body(request)
        stream = _string(body, "streamName")
        _check(stream_problem(stream))
        self._allow(request, auth.stream_resource(scope, stream), UPDATE)
        configuration = configuration_of(body)
        if not await self._services.creation.create_stream(scope, stream, configuration):
            raise ApiError(409, "StreamExists", f"stream {scope}/{stream} exists")
        return web.json_response(await self._describe(scope, stream), status=201)

    async def get_stream(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), READ)
        return web.json_response(await self._describe(scope, stream))

    async def update_stream(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), UPDATE)
        body = await _body(request)
        await self._services.configuration(scope, stream)  # StreamNotFound first
        await self._services.update.update_stream(scope, stream, configuration_of(body))
        return web.json_response(await self._describe(scope, stream))

    async def delete_stream(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), UPDATE)
        if not await self._services.deletion.delete_stream(scope, stream):
            raise ApiError(404, "StreamNotFound", f"stream {scope}/{stream} does not exist")
        return web.Response(status=204)

    async def seal_stream(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), UPDATE)
        body = await _body(request)
        if body.get("streamState") != "SEALED":
            raise ApiError(400, "InvalidArgument", 'the only state a stream can be put in is {"streamState": "SEALED"}')
        await self._services.sealing.seal_stream(scope, stream)
        return web.json_response({"streamState": "SEALED"})

    async def scale_stream(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), UPDATE)
        body = await _body(request)
        sealed = body.get("sealedSegments")
        ranges = body.get("newRanges")
        if not isinstance(sealed, list) or not all(isinstance(item, int) and not isinstance(item, bool)
                                                   for item in sealed) or not sealed:
            raise ApiError(400, "InvalidArgument", "sealedSegments must be a non-empty list of segment ids")
        if not isinstance(ranges, list) or not ranges or not all(
                isinstance(item, list) and len(item) == 2 and all(isinstance(bound, (int, float))
                                                                  and not isinstance(bound, bool) for bound in item)
                for item in ranges):
            raise ApiError(400, "InvalidArgument", "newRanges must be a non-empty list of [low, high] pairs")
        accepted = await self._services.scaling.request_scale(scope, stream, sealed,
                                                              [(float(low), float(high)) for low, high in ranges])
        deadline = time.monotonic() + SCALE_WAIT_SECONDS
        while (status := await self._services.scaling.check_scale(scope, stream, accepted.epoch)) \
                == ScaleStatus.IN_PROGRESS and time.monotonic() < deadline:
            await _sleep(0.05)
        if status != ScaleStatus.SUCCESS:
            raise ApiError(409 if status == ScaleStatus.IN_PROGRESS else 500, "ScaleNotCompleted",
                           f"the scale of {scope}/{stream} is {status.name}")
        return web.json_response(await self._describe(scope, stream))

    async def truncate_stream(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), UPDATE)
        body = await _body(request)
        cut = body.get("streamCut")
        if not isinstance(cut, dict):
            raise ApiError(400, "InvalidArgument", 'streamCut must be an object {"<segment id>": <offset>}')
        try:
            positions = {int(segment): int(offset) for segment, offset in cut.items()}
        except (TypeError, ValueError):
            raise ApiError(400, "InvalidArgument", "streamCut maps segment ids to offsets (integers)") from None
        if any(offset < 0 or segment < 0 for segment, offset in positions.items()):
            raise ApiError(400, "InvalidArgument", "segment ids and offsets cannot be negative")
        await self._services.truncation.truncate_stream(scope, stream, positions)
        return web.json_response(await self._describe(scope, stream))

    async def stream_segments(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), READ)
        segments = await self._services.queries.current_segments(scope, stream)
        described = []
        for segment in segments:
            entry = _segment_json(segment)
            try:
                info = await self._services.descriptions.segment_info(scope, stream, segment.segment_id)
                entry.update(startOffset=info.start_offset, tailOffset=info.write_offset,
                             bytesKept=info.write_offset - info.start_offset, sealed=info.is_sealed)
            except ClientError:
                pass  # sizes unknown while the store is unreachable
            described.append(entry)
        return web.json_response({"segments": described})

    async def stream_epochs(self, request: web.Request) -> web.Response:
        """The stream's scaling history: every epoch's segments and key ranges (oldest first)."""
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), READ)
        limit = _int_query(request, "limit", 100, 1, 10_000)
        current, epochs = await self._services.descriptions.epochs(scope, stream, limit)
        return web.json_response({"currentEpoch": current, "epochs": [
            {"epoch": epoch.epoch, "referenceEpoch": epoch.reference_epoch, "creationTime": epoch.creation_time,
             "segments": [_segment_json(segment) for segment in epoch.segments]} for epoch in epochs]})

    async def stream_transactions(self, request: web.Request) -> web.Response:
        scope, stream = self._stream(request)
        self._allow(request, auth.stream_resource(scope, stream), READ)
        await self._services.configuration(scope, stream)
        records = await self._services.descriptions.transactions(scope, stream)
        return web.json_response({"transactions": [
            {"transactionId": str(record.transaction_id), "status": record.status.name, "epoch": record.epoch,
             "creationTime": record.creation_time, "leaseExpiryTime": record.lease_expiry_time,
             "writerId": record.writer_id} for record in records]})

    async def _describe(self, scope: str, stream: str) -> dict[str, Any]:
        configuration = await self._services.configuration(scope, stream)
        described = await self._services.descriptions.describe(scope, stream)
        current, truncation = described.current_epoch, described.truncation
        return {"scopeName": scope, "streamName": stream, "state": described.state.name,
                **configuration_json(configuration), "currentEpoch": current.epoch,
                "segments": [_segment_json(segment) for segment in current.segments],
                "truncation": {"streamCut": _cut_json(truncation.stream_cut), "bytesBefore": truncation.size_till},
                "subscribers": [{"name": name, "streamCut": _cut_json(record.stream_cut),
                                 "updateTime": record.update_time} for name, record in described.subscribers]}

    # ------------------------------------------------------------------ reader groups

    async def list_reader_groups(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        if not await self._services.scopes.scope_exists(scope):
            raise ApiError(404, "ScopeNotFound", f"scope {scope} does not exist")
        self._allow(request, auth.scope_resource(scope), READ)
        groups = self._readable(request, await self._services.reader_groups.list_reader_groups(scope),
                                lambda group: auth.reader_group_resource(scope, group))
        return web.json_response({"readerGroups": [{"readerGroupName": group} for group in groups]})

    async def get_reader_group(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        group = request.match_info["group"]
        self._allow(request, auth.reader_group_resource(scope, group), READ)
        configuration = await self._services.reader_groups.get_reader_group(scope, group)
        streams = sorted(set(configuration.starting_cuts) | set(configuration.ending_cuts))
        lag: dict[str, int] = {}
        for scoped in streams:
            stream_scope, _, stream = scoped.partition("/")
            lag[scoped] = await self._lag(stream_scope, stream, f"{scope}/{group}")
        return web.json_response({
            "scopeName": scope, "readerGroupName": group, "readerGroupId": str(configuration.reader_group_id),
            "generation": configuration.generation, "streams": streams,
            "startingCuts": {name: _cut_json(cut) for name, cut in configuration.starting_cuts.items()},
            "endingCuts": {name: _cut_json(cut) for name, cut in configuration.ending_cuts.items()},
            "retentionType": _RETENTION_TYPE_NAMES[configuration.retention_type], "lagBytes": lag})

    async def _lag(self, scope: str, stream: str, subscriber: str) -> int:
        """Bytes between the group's last reported position (its subscriber cut) and the stream's tail;
        -1 when the group reports no position (it is not a subscriber)."""
        cut = await self._services.reader_groups.subscriber_cut(scope, stream, subscriber)
        if cut is None:
            return -1
        if not cut:  # subscribed, no position reported yet: everything from the head is ahead of it
            head = await self._services.queries.head_segments(scope, stream)
            cut = {segment.segment_id: offset for segment, offset in head.items()}
        segments = await self._services.queries.segments_between(scope, stream, cut, {})
        behind = 0
        for segment in segments:
            info = await self._services.descriptions.segment_info(scope, stream, segment.segment_id)
            behind += max(0, info.write_offset - cut.get(segment.segment_id, 0))
        return behind

    # ------------------------------------------------------------------ key-value tables

    async def list_tables(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        self._allow(request, auth.scope_resource(scope), READ)
        tables = self._readable(request, await _all(lambda token: self._services.key_value_tables.list_tables(
            scope, token)), lambda table: auth.table_resource(scope, table))
        return web.json_response({"kvtables": [{"scopeName": scope, "kvtName": table} for table in tables]})

    async def create_table(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        body = await _body(request)
        table = _string(body, "kvtName")
        _check(user_name_problem(table, "key-value table"))
        self._allow(request, auth.table_resource(scope, table), UPDATE)
        configuration = KeyValueTableConfiguration(_integer(body, "partitionCount"), _integer(body, "primaryKeyLength"),
                                                   _integer(body, "secondaryKeyLength", 0))
        await self._services.key_value_tables.create_table(scope, table, configuration)
        return web.json_response(await self._table(scope, table), status=201)

    async def get_table(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        self._allow(request, auth.table_resource(scope, request.match_info["table"]), READ)
        return web.json_response(await self._table(scope, request.match_info["table"]))

    async def delete_table(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        self._allow(request, auth.table_resource(scope, request.match_info["table"]), UPDATE)
        await self._services.key_value_tables.delete_table(scope, request.match_info["table"])
        return web.Response(status=204)

    async def _table(self, scope: str, table: str) -> dict[str, Any]:
        configuration = await self._services.key_value_tables.get_table(scope, table)
        partitions = await self._services.key_value_tables.partitions(scope, table)
        return {"scopeName": scope, "kvtName": table, "partitionCount": configuration.partition_count,
                "primaryKeyLength": configuration.primary_key_length,
                "secondaryKeyLength": configuration.secondary_key_length,
                "partitions": [{"segmentId": segment, "keyStart": start, "keyEnd": end}
                               for segment, start, end in partitions]}

    # ------------------------------------------------------------------ cluster

    async def cluster(self, request: web.Request) -> web.Response:
        self._allow(request, auth.ROOT, READ)
        return web.json_response(await self._cluster())

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _scope(request: web.Request) -> str:
        scope = request.match_info["scope"]
        _check(scope_problem(scope))
        return scope

    def _stream(self, request: web.Request) -> tuple[str, str]:
        stream = request.match_info["stream"]
        _check(stream_problem(stream))
        return self._scope(request), stream


# ---------------------------------------------------------------------- JSON <-> values


def configuration_json(configuration: StreamConfiguration) -> dict[str, Any]:
    """The Controller API's configuration value as JSON ("no maximum" of a retention policy is 2**63 - 1)."""
    scaling = configuration.scaling
    retention = configuration.retention
    return {"scalingPolicy": {"type": scaling.scale_type.name, "targetRate": scaling.target_rate,
                              "scaleFactor": scaling.scale_factor, "minSegments": scaling.min_num_segments},
            "retentionPolicy": None if retention is None else
            {"type": retention.retention_type.name, "value": retention.minimum, "maxValue": retention.upper_bound},
            "tags": list(configuration.tags)}


def configuration_of(body: dict[str, Any]) -> StreamConfiguration:
    """The configuration (the Controller API's value) a request body describes (absent fields take their defaults).

    Raises:
        ApiError: 400 for a field of the wrong type or out of range.
    """
    scaling_json = body.get("scalingPolicy") or {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}
    if not isinstance(scaling_json, dict):
        raise ApiError(400, "InvalidArgument", "scalingPolicy must be an object")
    try:
        scale_type = ScaleType[str(scaling_json.get("type", "FIXED_NUM_SEGMENTS"))]
    except KeyError:
        raise ApiError(400, "InvalidArgument", f"unknown scaling type {scaling_json.get('type')!r}; one of "
                       f"{', '.join(member.name for member in ScaleType)}") from None
    target_rate, scale_factor = _integer(scaling_json, "targetRate", 0), _integer(scaling_json, "scaleFactor", 0)
    min_segments = _integer(scaling_json, "minSegments", 1)
    if min_segments < 1 or min_segments > 10_000:
        raise ApiError(400, "InvalidArgument", "minSegments must be between 1 and 10000")
    if scale_type != ScaleType.FIXED_NUM_SEGMENTS and (target_rate <= 0 or scale_factor <= 0):
        raise ApiError(400, "InvalidArgument", "a rate-based scaling policy needs targetRate > 0 and scaleFactor > 0")
    scaling = ScalingPolicy(scale_type, target_rate, scale_factor, min_segments)
    retention = None
    retention_json = body.get("retentionPolicy")
    if retention_json is not None:
        if not isinstance(retention_json, dict):
            raise ApiError(400, "InvalidArgument", "retentionPolicy must be an object or null")
        if retention_json.get("type") not in ("TIME", "SIZE"):
            raise ApiError(400, "InvalidArgument", "retentionPolicy.type must be TIME (milliseconds) or SIZE (bytes)")
        value = _integer(retention_json, "value")
        maximum = _integer(retention_json, "maxValue", NO_MAXIMUM)
        if value < 0 or maximum < value:
            raise ApiError(400, "InvalidArgument", "retention needs 0 <= value <= maxValue")
        retention = RetentionPolicy(RetentionType[retention_json["type"]], value,
                                    0 if maximum == NO_MAXIMUM else maximum)
    tags = body.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) and 0 < len(tag) < 256 for tag in tags) \
            or len(tags) > 127:
        raise ApiError(400, "InvalidArgument", "tags must be a list of at most 127 strings of 1-255 characters")
    return StreamConfiguration(scaling=scaling, retention=retention, tags=tuple(dict.fromkeys(tags)))


def _segment_json(segment) -> dict[str, Any]:
    return {"segmentId": segment.segment_id, "number": naming.segment_number_of(segment.segment_id),
            "epoch": naming.epoch_of(segment.segment_id), "creationTime": segment.creation_time,
            "keyStart": segment.key_start, "keyEnd": segment.key_end}


_RETENTION_TYPE_NAMES = {  # the wire's names
    StreamDataRetention.NONE: "NONE", StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT: "MANUAL",
    StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT: "AUTOMATIC"}


def _cut_json(cut: dict[int, int]) -> dict[str, int]:
    return {str(segment): offset for segment, offset in sorted(cut.items())}


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        raise ApiError(400, "InvalidJson", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidArgument", "the request body must be a JSON object")
    return body


def _string(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise ApiError(400, "InvalidArgument", f"{field} must be a non-empty string")
    return value


def _integer(body: dict[str, Any], field: str, default: int | None = None) -> int:
    value = body.get(field, default)
    if not isinstance(value, int) or isinstance(value, bool) or not -2**63 <= value < 2**63:
        raise ApiError(400, "InvalidArgument", f"{field} must be an integer")
    return value


def _int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise ApiError(400, "InvalidArgument", f"{name} must be an integer from {low} to {high}")
    return int(text)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("true", "1", "yes")


def _check(problem: str | None) -> None:
    if problem is not None:
        raise ApiError(400, "InvalidName", problem)


async def _all(page: Callable[[str], Awaitable[tuple[list[str], str]]]) -> list[str]:
    items: list[str] = []
    token = ""
    while True:
        names, token = await page(token)
        items += names
        if not token or not names:
            return items


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
