"""Minimal in-memory ControllerService for the wire-codec capture test.

This is TEST SCAFFOLDING, not the real Tributary controller. It exists only so that the real
Pravega Python client (``pravega_client``) can be pointed at a plain TCP listener that stands in
for a segment store: every ``getURI`` answer names that listener. It keeps scopes and streams in
memory, gives every stream a fixed number of epoch-0 segments tiling [0, 1], never scales,
never seals, and does not talk to any segment store itself. Replies follow the presence rules of
the spec (/work/shared/spec/controller-api.md §1.5): every SegmentId carries its streamInfo, the
last key range ends at exactly 1.0, delegation tokens are "" and list replies always carry a
continuation token. RPCs not overridden here fall through to the generated base class, which
answers UNIMPLEMENTED.
"""

from __future__ import annotations

import grpc

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc

_END_OF_LISTING = "end"


class MinimalControllerServicer(pb_grpc.ControllerServiceServicer):
    """Just enough of ControllerService for create scope/stream, a writer and a reader."""

    def __init__(self, segment_store_host: str, segment_store_port: int, call_log: list[str] | None = None):
        self._host = segment_store_host
        self._port = segment_store_port
        self._scopes: set[str] = set()
        self._streams: dict[tuple[str, str], pb.StreamConfig] = {}
        # Names of the RPCs received, in order (handy when checking what a client does).
        self.calls: list[str] = call_log if call_log is not None else []

    # ----------------------------------------------------------------- helpers

    def _log(self, name: str) -> None:
        self.calls.append(name)

    async def _config_or_abort(self, info: pb.StreamInfo, context) -> pb.StreamConfig:
        config = self._streams.get((info.scope, info.stream))
        if config is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"stream {info.scope}/{info.stream} not found")
        return config

    @staticmethod
    def _segment_ranges(scope: str, stream: str, count: int) -> list[pb.SegmentRange]:
        """Epoch-0 segments 0..count-1; segment i owns [i/count, (i+1)/count), last ends at 1.0."""
        ranges = []
        for i in range(count):
            max_key = 1.0 if i == count - 1 else (i + 1) / count
            ranges.append(
                pb.SegmentRange(
                    segmentId=pb.SegmentId(streamInfo=pb.StreamInfo(scope=scope, stream=stream), segmentId=i),
                    minKey=i / count,
                    maxKey=max_key,
                )
            )
        return ranges

    def _ranges_for(self, config: pb.StreamConfig) -> list[pb.SegmentRange]:
        info = config.streamInfo
        return self._segment_ranges(info.scope, info.stream, config.scalingPolicy.minNumSegments)

    # ------------------------------------------------------------------ scopes

    async def createScope(self, request: pb.ScopeInfo, context) -> pb.CreateScopeStatus:
        self._log("createScope")
        if request.scope in self._scopes:
            return pb.CreateScopeStatus(status=pb.CreateScopeStatus.SCOPE_EXISTS)
        self._scopes.add(request.scope)
        return pb.CreateScopeStatus(status=pb.CreateScopeStatus.SUCCESS)

    async def checkScopeExists(self, request: pb.ScopeInfo, context) -> pb.ExistsResponse:
        self._log("checkScopeExists")
        return pb.ExistsResponse(exists=request.scope in self._scopes)

    async def listScopes(self, request: pb.ScopesRequest, context) -> pb.ScopesResponse:
        self._log("listScopes")
        token = pb.ContinuationToken(token=_END_OF_LISTING)
        if request.continuationToken.token == _END_OF_LISTING:
            return pb.ScopesResponse(continuationToken=token)
        return pb.ScopesResponse(scopes=sorted(self._scopes), continuationToken=token)

    async def listStreamsInScope(self, request: pb.StreamsInScopeRequest, context) -> pb.StreamsInScopeResponse:
        self._log("listStreamsInScope")
        token = pb.ContinuationToken(token=_END_OF_LISTING)
        scope = request.scope.scope
        if scope not in self._scopes:
            return pb.StreamsInScopeResponse(
                continuationToken=token, status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND
            )
        streams = []
        if request.continuationToken.token != _END_OF_LISTING:
            streams = [pb.StreamInfo(scope=sc, stream=st) for (sc, st) in sorted(self._streams) if sc == scope]
        return pb.StreamsInScopeResponse(streams=streams, continuationToken=token)

    # ----------------------------------------------------------------- streams

    async def createStream(self, request: pb.StreamConfig, context) -> pb.CreateStreamStatus:
        self._log("createStream")
        info = request.streamInfo
        if info.scope not in self._scopes:
            return pb.CreateStreamStatus(status=pb.CreateStreamStatus.SCOPE_NOT_FOUND)
        if request.scalingPolicy.minNumSegments < 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "minNumSegments must be >= 1")
        key = (info.scope, info.stream)
        if key in self._streams:
            return pb.CreateStreamStatus(status=pb.CreateStreamStatus.STREAM_EXISTS)
        config = pb.StreamConfig()
        config.CopyFrom(request)
        config.streamInfo.accessOperation = pb.StreamInfo.UNSPECIFIED
        config.tags.SetInParent()  # Java always returns a (possibly empty) Tags message
        if config.retentionPolicy.retentionType == pb.RetentionPolicy.UNKNOWN:
            config.ClearField("retentionPolicy")  # "no retention" is reported as unset
        self._streams[key] = config
        return pb.CreateStreamStatus(status=pb.CreateStreamStatus.SUCCESS)

    async def checkStreamExists(self, request: pb.StreamInfo, context) -> pb.ExistsResponse:
        self._log("checkStreamExists")
        return pb.ExistsResponse(exists=(request.scope, request.stream) in self._streams)

    async def getStreamConfiguration(self, request: pb.StreamInfo, context) -> pb.StreamConfig:
        self._log("getStreamConfiguration")
        return await self._config_or_abort(request, context)

    # --------------------------------------------------------- segment queries

    async def getCurrentSegments(self, request: pb.StreamInfo, context) -> pb.SegmentRanges:
        self._log("getCurrentSegments")
        config = await self._config_or_abort(request, context)
        return pb.SegmentRanges(segmentRanges=self._ranges_for(config), delegationToken="")

    async def getEpochSegments(self, request: pb.GetEpochSegmentsRequest, context) -> pb.SegmentRanges:
        self._log("getEpochSegments")
        config = await self._config_or_abort(request.streamInfo, context)
        if request.epoch != 0:  # streams here never scale: epoch 0 is the only one
            await context.abort(grpc.StatusCode.NOT_FOUND, f"epoch {request.epoch} not found")
        return pb.SegmentRanges(segmentRanges=self._ranges_for(config), delegationToken="")

    async def getSegments(self, request: pb.GetSegmentsRequest, context) -> pb.SegmentsAtTime:
        self._log("getSegments")
        config = await self._config_or_abort(request.streamInfo, context)
        locations = [pb.SegmentsAtTime.SegmentLocation(segmentId=r.segmentId, offset=0) for r in self._ranges_for(config)]
        return pb.SegmentsAtTime(segments=locations, delegationToken="")

    async def getSegmentsImmediatelyFollowing(self, request: pb.SegmentId, context) -> pb.SuccessorResponse:
        self._log("getSegmentsImmediatelyFollowing")
        return pb.SuccessorResponse(delegationToken="")  # nothing is ever scaled

    async def getSegmentsImmediatlyFollowing(self, request: pb.SegmentId, context) -> pb.SuccessorResponse:
        self._log("getSegmentsImmediatlyFollowing")
        return pb.SuccessorResponse(delegationToken="")

    async def isSegmentValid(self, request: pb.SegmentId, context) -> pb.SegmentValidityResponse:
        self._log("isSegmentValid")
        return pb.SegmentValidityResponse(response=True)

    async def getURI(self, request: pb.SegmentId, context) -> pb.NodeUri:
        self._log("getURI")
        return pb.NodeUri(endpoint=self._host, port=self._port)

    async def getDelegationToken(self, request: pb.StreamInfo, context) -> pb.DelegationToken:
        self._log("getDelegationToken")
        return pb.DelegationToken(delegationToken="")


async def start_minimal_controller(
    segment_store_host: str, segment_store_port: int, call_log: list[str] | None = None
) -> tuple[grpc.aio.Server, int]:
    """Start the stub controller on 127.0.0.1 (ephemeral port); return ``(server, port)``.

    Every getURI reply points at ``segment_store_host:segment_store_port``. If ``call_log`` is
    given, the name of each RPC received is appended to it. Stop with ``await server.stop(None)``.
    """
    server = grpc.aio.server()
    servicer = MinimalControllerServicer(segment_store_host, segment_store_port, call_log)
    pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    if port == 0:
        raise RuntimeError("could not bind the minimal controller on 127.0.0.1")
    await server.start()
    return server, port
