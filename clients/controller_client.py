"""The Controller gRPC API as typed async calls (grpcio aio), with one retry policy.

Every call runs under :func:`coordination.retry.retry`: gRPC codes that mean "try
again" (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, FAILED_PRECONDITION,
RESOURCE_EXHAUSTED, ABORTED) and status enums that mean the same (``FAILURE``)
are retried with backoff; the rest become typed errors at once (controller
reference §1.3 lists what the Rust client does; we retry the same set, but with
a bounded budget). A controller that stays unreachable ends in
:class:`ControllerUnavailable` naming its address. Until the controller has
answered once, an UNAVAILABLE call is explained by :mod:`controller_probe`
(at most once per ``PROBE_INTERVAL_SECONDS``): a TLS mistake (untrusted
certificate, tcp:// against TLS, tls:// against plaintext) ends the call at
once in :class:`ControllerTlsMismatch`, instead of 30 s of hopeless retries.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar, cast, overload

import grpc
from google.protobuf.message import Message

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from controller_api.key_value_tables import KeyValueTableConfiguration
from controller_api.protobuf import (
    configuration_from,
    configuration_to,
    key_value_table_from,
    key_value_table_to,
    reader_group_from,
    reader_group_to,
    segment_id,
    stream_cut_to,
    stream_info,
    transaction_id_from,
    transaction_id_to,
)
from controller_api.reader_groups import ReaderGroupConfiguration
from coordination.retry import Backoff, retry

from . import controller_probe
from .controller_endpoints import ControllerEndpoint, ControllerEndpoints, Resolver, parse_controller_uris, resolve
from .errors import (
    AlreadyExists,
    AuthenticationFailed,
    ConflictingOperation,
    ControllerTlsMismatch,
    ControllerUnavailable,
    InvalidArgument,
    KeyValueTableNotFound,
    NotFound,
    OperationFailed,
    PermissionDenied,
    ReaderGroupNotFound,
    RequestTimeout,
    ScopeNotEmpty,
    ScopeNotFound,
    StreamNotFound,
    StreamNotSealed,
    StreamSealed,
    TransactionFailed,
    TransactionNotFound,
    TributaryError,
)
from .model import Segment, SegmentRange, StreamConfiguration, Successors, TransactionState
from .security import basic_authorization, trusted_certificates
from .stream_cut import StreamCut

T = TypeVar("T")
Code = grpc.StatusCode

_RETRIED_CODES = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.INTERNAL, Code.UNKNOWN,
                            Code.FAILED_PRECONDITION, Code.RESOURCE_EXHAUSTED, Code.ABORTED, Code.CANCELLED})
PROBE_INTERVAL_SECONDS = 5.0  # between two TLS diagnoses of a controller not reached yet
DISCOVERY_INTERVAL_SECONDS = 60.0  # how often the client asks which controllers there are (and after a move)
DISCOVERY_TIMEOUT_SECONDS = 10.0
CHANNEL_CLOSE_GRACE_SECONDS = 1.0  # calls still on the channel of a controller left behind
# A call whose controller stops answering (paused, cut off) learns it from HTTP/2 keep-alive pings within
# about 10 s instead of waiting out its deadline; pings are sent only while calls are open. (gRPC waits for a
# ping's answer for grpc.http2.ping_timeout_ms, 60 s by default, whatever keepalive_timeout_ms says.)
_CHANNEL_OPTIONS = (("grpc.keepalive_time_ms", 5_000), ("grpc.keepalive_timeout_ms", 5_000),
                    ("grpc.http2.ping_timeout_ms", 5_000), ("grpc.http2.max_pings_without_data", 0),
                    ("grpc.keepalive_permit_without_calls", 0), ("grpc.max_receive_message_length", 64 * 1024 * 1024))
log = logging.getLogger("tributary.client")
_SCALE_POLL = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=1.0, attempts=None, jitter=0.0)

_TRANSACTION_STATES = {pb.TxnState.OPEN: TransactionState.OPEN, pb.TxnState.COMMITTING: TransactionState.COMMITTING,
                       pb.TxnState.COMMITTED: TransactionState.COMMITTED,
                       pb.TxnState.ABORTING: TransactionState.ABORTING, pb.TxnState.ABORTED: TransactionState.ABORTED,
                       pb.TxnState.UNKNOWN: TransactionState.UNKNOWN}


class _Retry(TributaryError):
    """A reply status that asks for another try (kept as the cause if the budget runs out)."""

    retriable = True


def parse_controller_uri(uri: str) -> tuple[str, int]:
    """``[tcp://|tls://]host:port[,...]`` -> (host, port) of the first controller it names.

    Raises:
        InvalidArgument: an entry that is not a host:port address, or an unknown scheme.
    """
    _, endpoints = parse_controller_uris(uri)
    return endpoints[0].host, endpoints[0].port


async def _resolve_addresses(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


# ---------------------------------------------------------------------- proto conversions


def segment_from(message: pb.SegmentId) -> Segment:
    return Segment(message.streamInfo.scope, message.streamInfo.stream, message.segmentId)


def segment_range_from(message: pb.SegmentRange) -> SegmentRange:
    return SegmentRange(segment_from(message.segmentId), message.minKey, message.maxKey)


def cut_to(cut: StreamCut) -> pb.StreamCut:
    return stream_cut_to(cut.scope, cut.stream, cut.positions)


# ---------------------------------------------------------------------- the seam


class Controller(Protocol):
    """The controller as the SDK's writers, readers, byte streams and segment stores use it.

    :class:`ControllerClient` is the implementation; the pieces take this protocol so that a test
    can hand them any object with these calls. (Stream and scope administration, in
    :class:`~clients.stream_manager.StreamManagement`, uses the whole client.)
    """

    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]: ...

    async def get_epoch_segments(self, scope: str, stream: str, epoch: int) -> list[SegmentRange]: ...

    async def get_head_cut(self, scope: str, stream: str) -> StreamCut: ...

    async def get_successors(self, segment: Segment) -> Successors: ...

    async def get_segments_between(self, scope: str, stream: str, start: StreamCut,
                                   end: StreamCut) -> list[Segment]: ...

    async def get_endpoint(self, segment: Segment) -> tuple[str, int]: ...

    async def get_delegation_token(self, scope: str, stream: str) -> str: ...

    async def create_transaction(self, scope: str, stream: str,
                                 lease_ms: int) -> tuple[uuid.UUID, list[SegmentRange]]: ...

    async def commit_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID, writer_id: str = "",
                                 timestamp: int = -(2**63)) -> None: ...

    async def abort_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID) -> None: ...

    async def ping_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID,
                               lease_ms: int) -> TransactionState: ...

    async def transaction_state(self, scope: str, stream: str, transaction_id: uuid.UUID) -> TransactionState: ...

    async def note_timestamp(self, writer_id: str, position: StreamCut, timestamp: int) -> None: ...

    async def remove_writer(self, writer_id: str, scope: str, stream: str) -> bool: ...

    async def create_reader_group(self, scope: str, group: str,
                                  configuration: ReaderGroupConfiguration) -> ReaderGroupConfiguration: ...

    async def delete_reader_group(self, scope: str, group: str, group_id: str) -> bool: ...

    async def update_subscriber_cut(self, scope: str, group: str, group_id: str, generation: int,
                                    cut: StreamCut) -> None: ...


# ---------------------------------------------------------------------- the client



class ControllerClient:
    """Typed calls of the Controller API. Open with :meth:`connect`; close with :meth:`close`.

    ``uri`` may name several controllers (``tcp://a:9090,b:9090``); the client also learns the others from the
    first that answers (getControllerServerList) and moves to another when the one in use cannot be reached
    (:mod:`clients.controller_endpoints`). A call that fails for that reason is tried again on the next one,
    within the call's retry budget, so the caller sees no error while any controller is up.
    """

    def __init__(self, uri: str, *, retry_policy: Backoff | None = None, rpc_timeout_seconds: float = 120.0,
                 credentials: tuple[str, str] | None = None, tls_trust: str | None = None,
                 resolver: Resolver | None = None):
        self.tls, given = parse_controller_uris(uri)
        self._endpoints = ControllerEndpoints(given)
        self._resolver = resolver or _resolve_addresses
        self._resolved: set[ControllerEndpoint] = set()  # names already expanded to their addresses
        self._tls_trust = tls_trust
        self._metadata = (("authorization", basic_authorization(credentials)),) if credentials is not None else None
        self._retry = retry_policy or Backoff(initial_seconds=0.01, multiplier=3.0, max_delay_seconds=2.0,
                                              attempts=None, total_seconds=30.0)
        self._rpc_timeout = rpc_timeout_seconds
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.ControllerServiceStub | None = None
        self._channel_endpoint: ControllerEndpoint | None = None
        self._reached = False  # a controller has answered a call (its TLS setting and ours agree)
        self._probed_at: float | None = None  # event-loop time of the last TLS diagnosis
        self._discovered_at: float | None = None  # monotonic time of the last getControllerServerList
        self._background: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"<ControllerClient {self.address}>"

    @property
    def address(self) -> str:
        """host:port of the controller in use (its name, when it was given by name)."""
        return self._endpoints.current.given_address

    @property
    def known_addresses(self) -> list[str]:
        """Every controller this client knows of, given or learnt, in the order it tries them."""
        return [endpoint.given_address for endpoint in self._endpoints]

    def open(self) -> ControllerClient:
        """Creates the gRPC channel to the controller in use (it connects lazily, on the first call)."""
        if self._channel is None:
            self._open_channel(self._endpoints.current)
        return self

    def _open_channel(self, endpoint: ControllerEndpoint) -> None:
        options: list[tuple[str, Any]] = [*_CHANNEL_OPTIONS]
        if self.tls:
            if endpoint.name is not None:  # connected by address: the certificate is still checked for the name
                options += [("grpc.ssl_target_name_override", endpoint.name),
                            ("grpc.default_authority", f"{endpoint.name}:{endpoint.port}")]
            channel = grpc.aio.secure_channel(endpoint.address, self._channel_credentials(), options=options)
        else:
            channel = grpc.aio.insecure_channel(endpoint.address, options=options)
        self._channel, self._stub, self._channel_endpoint = channel, pb_grpc.ControllerServiceStub(channel), endpoint

    def _channel_credentials(self) -> grpc.ChannelCredentials:
        roots = trusted_certificates(self._tls_trust) if self._tls_trust is not None else None
        return grpc.ssl_channel_credentials(root_certificates=roots)

    async def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if channel is not None:
            await channel.close()

    # ------------------------------------------------------------------ which controller

    async def _current_stub(self) -> tuple[pb_grpc.ControllerServiceStub, ControllerEndpoint]:
        """The stub of the controller in use (a name given is first expanded to its addresses)."""
        endpoint = self._endpoints.current
        if not endpoint.is_literal and endpoint.name is None and endpoint not in self._resolved:
            self._resolved.add(endpoint)
            self._endpoints.replace(endpoint, await resolve(endpoint, self._resolver))
            endpoint = self._endpoints.current
        if self._channel is None or self._channel_endpoint != endpoint:
            old = self._channel
            self._open_channel(endpoint)
            if old is not None:  # calls still on it (to a controller that failed) are cut off then, and retried
                self._spawn(old.close(grace=CHANNEL_CLOSE_GRACE_SECONDS))
        return cast(pb_grpc.ControllerServiceStub, self._stub), endpoint

    def _unreachable(self, endpoint: ControllerEndpoint) -> None:
        """``endpoint`` could not be reached: the next controller becomes the one in use."""
        now = time.monotonic()
        if self._endpoints.failed(endpoint, now):
            log.info("moving to another controller",
                     extra={"failed": endpoint.address, "next": self._endpoints.current.address})
            self._discovered_at = None  # ask the next one which controllers there are now
        if self._endpoints.all_failed_recently(now):
            self._resolved.clear()  # a name that did not resolve before (kept as it was given) is resolved again

    def _answered(self, endpoint: ControllerEndpoint) -> None:
        self._reached = True
        self._endpoints.succeeded(endpoint)
        now = time.monotonic()
        if self._discovered_at is None or now - self._discovered_at >= DISCOVERY_INTERVAL_SECONDS:
            self._discovered_at = now
            self._spawn(self._discover())

    async def _discover(self) -> None:
        """Learns the other controllers from the one in use (getControllerServerList); quietly nothing when that
        fails (the next successful call asks again)."""
        stub, _ = await self._current_stub()
        try:
            reply = await stub.getControllerServerList(pb.ServerRequest(), timeout=DISCOVERY_TIMEOUT_SECONDS,
                                                       metadata=self._metadata)
        except grpc.aio.AioRpcError:
            self._discovered_at = None
            return
        learnt = self._endpoints.learn(ControllerEndpoint(node.endpoint.strip("[]"), node.port)
                                       for node in reply.nodeURI if node.endpoint and 0 < node.port < 65536)
        if learnt:
            log.info("learnt of other controllers", extra={"controllers": [endpoint.address for endpoint in learnt]})

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ the call

    @overload
    async def _call(self, rpc: str, request: Message, check: Callable[[Any], T], *,
                    not_found: type[NotFound] = NotFound, policy: Backoff | None = None) -> T: ...

    @overload
    async def _call(self, rpc: str, request: Message, *,
                    not_found: type[NotFound] = NotFound, policy: Backoff | None = None) -> Any: ...

    async def _call(self, rpc: str, request: Message, check: Callable[[Any], Any] = lambda reply: reply, *,
                    not_found: type[NotFound] = NotFound, policy: Backoff | None = None) -> Any:
        """Calls ``rpc`` under the retry policy; ``check`` turns the reply into a result or raises.

        A controller that cannot be reached is left for the next one before the call is tried again. The reply
        is the message ``rpc`` answers with (see controller.proto); each ``check`` names it.
        """
        async def attempt() -> Any:
            stub, endpoint = await self._current_stub()
            try:
                reply = await getattr(stub, rpc)(request, timeout=self._rpc_timeout, metadata=self._metadata)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if stub is self._stub or (task is not None and task.cancelling()):
                    raise  # the caller was cancelled
                # grpcio ends a call whose channel is closed with CancelledError: this one was on the channel of a
                # controller left behind (closed after a grace), and is tried again on the one in use now
                raise ControllerUnavailable(f"{rpc} was cut off with the channel to {endpoint.address}, left for "
                                            f"another controller") from None
            except grpc.aio.AioRpcError as error:
                failure = self._translate(rpc, error, not_found, endpoint)
                if isinstance(failure, ControllerUnavailable):
                    failure = await self._explain(failure, endpoint)
                    if not isinstance(failure, ControllerTlsMismatch):
                        self._unreachable(endpoint)
                elif not isinstance(failure, RequestTimeout) and error.code() != Code.CANCELLED:
                    self._answered(endpoint)  # the controller itself answered
                raise failure from None
            self._answered(endpoint)
            return check(reply)

        try:
            return await retry(attempt, policy or self._retry)
        except _Retry as error:
            raise OperationFailed(f"{rpc} on the controller at {self.address} kept failing: {error}") from None

    async def _explain(self, failure: ControllerUnavailable, endpoint: ControllerEndpoint) -> ControllerUnavailable:
        """``failure``, or a ControllerTlsMismatch saying what TLS mistake keeps the controller unreachable
        (diagnosed only until a controller first answers, at most once per PROBE_INTERVAL_SECONDS)."""
        now = asyncio.get_running_loop().time()
        if self._reached or (self._probed_at is not None and now - self._probed_at < PROBE_INTERVAL_SECONDS):
            return failure
        self._probed_at = now
        mistake = await controller_probe.diagnose(endpoint.host, endpoint.port, self.tls, self._tls_trust,
                                                  server_name=endpoint.server_name)
        return ControllerTlsMismatch(mistake) if mistake is not None else failure

    def _translate(self, rpc: str, error: grpc.aio.AioRpcError, not_found: type[NotFound],
                   endpoint: ControllerEndpoint) -> TributaryError:
        code, details, address = error.code(), error.details() or "", endpoint.given_address
        if code == Code.UNAVAILABLE:
            return ControllerUnavailable(f"cannot reach the controller at {address}: {details}")
        if code == Code.DEADLINE_EXCEEDED:
            return RequestTimeout(f"{rpc} on the controller at {address} timed out: {details}")
        if code == Code.NOT_FOUND:
            return not_found(details or f"{rpc}: not found")
        if code == Code.INVALID_ARGUMENT:
            return InvalidArgument(details or f"{rpc}: invalid argument")
        if code == Code.ALREADY_EXISTS:
            return AlreadyExists(details)
        if code == Code.FAILED_PRECONDITION:
            return ConflictingOperation(f"{rpc}: {details}")
        if code == Code.UNAUTHENTICATED:
            return AuthenticationFailed(f"the controller at {address} refused the credentials: {details}")
        if code == Code.PERMISSION_DENIED:
            return PermissionDenied(f"{rpc}: {details}")
        failure = OperationFailed(f"{rpc} failed on the controller at {address}: {code.name} {details}")
        failure.retriable = code in _RETRIED_CODES
        return failure

    # ------------------------------------------------------------------ scopes

    async def create_scope(self, scope: str) -> bool:
        S = pb.CreateScopeStatus

        def check(reply: pb.CreateScopeStatus) -> bool:
            if reply.status == S.INVALID_SCOPE_NAME:
                raise InvalidArgument(f"invalid scope name {scope!r}")
            _retry_on(reply.status == S.FAILURE, "createScope")
            return reply.status == S.SUCCESS

        return await self._call("createScope", pb.ScopeInfo(scope=scope), check)

    async def scope_exists(self, scope: str) -> bool:
        return await self._call("checkScopeExists", pb.ScopeInfo(scope=scope), _exists)

    async def delete_scope(self, scope: str, recursive: bool = False) -> bool:
        S = pb.DeleteScopeStatus

        def check(reply: pb.DeleteScopeStatus) -> bool:
            if reply.status == S.SCOPE_NOT_EMPTY:
                raise ScopeNotEmpty(f"scope {scope!r} still holds streams, reader groups or tables")
            _retry_on(reply.status == S.FAILURE, "deleteScope")
            return reply.status == S.SUCCESS

        rpc = "deleteScopeRecursive" if recursive else "deleteScope"
        return await self._call(rpc, pb.ScopeInfo(scope=scope), check)

    async def list_scopes(self) -> AsyncIterator[str]:
        token = ""
        while True:
            reply: pb.ScopesResponse = await self._call("listScopes", pb.ScopesRequest(
                continuationToken=pb.ContinuationToken(token=token)))
            if not reply.scopes:
                return
            for scope in reply.scopes:
                yield scope
            token = reply.continuationToken.token

    # ------------------------------------------------------------------ streams

    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        S = pb.CreateStreamStatus

        def check(reply: pb.CreateStreamStatus) -> bool:
            if reply.status == S.INVALID_STREAM_NAME:
                raise InvalidArgument(f"invalid stream name {stream!r}")
            if reply.status == S.SCOPE_NOT_FOUND:
                raise ScopeNotFound(f"scope {scope!r} does not exist")
            _retry_on(reply.status == S.FAILURE, "createStream")
            return reply.status == S.SUCCESS

        return await self._call("createStream", configuration_to(scope, stream, config), check)

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        await self._call("updateStream", configuration_to(scope, stream, config),
                         _update_check(scope, stream, "update"), not_found=StreamNotFound)

    async def truncate_stream(self, cut: StreamCut) -> None:
        await self._call("truncateStream", cut_to(cut), _update_check(cut.scope, cut.stream, "truncate"),
                         not_found=StreamNotFound)

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self._call("sealStream", stream_info(scope, stream), _update_check(scope, stream, "seal"),
                         not_found=StreamNotFound)

    async def delete_stream(self, scope: str, stream: str) -> bool:
        S = pb.DeleteStreamStatus

        def check(reply: pb.DeleteStreamStatus) -> bool:
            if reply.status == S.STREAM_NOT_SEALED:
                raise StreamNotSealed(f"stream {scope}/{stream} must be sealed before it is deleted")
            _retry_on(reply.status == S.FAILURE, "deleteStream")
            return reply.status == S.SUCCESS

        return await self._call("deleteStream", stream_info(scope, stream), check)

    async def stream_exists(self, scope: str, stream: str) -> bool:
        return await self._call("checkStreamExists", stream_info(scope, stream), _exists)

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        return await self._call("getStreamConfiguration", stream_info(scope, stream), configuration_from,
                                not_found=StreamNotFound)

    async def list_streams(self, scope: str, tag: str | None = None) -> AsyncIterator[str]:
        token = ""
        while True:
            request: pb.StreamsInScopeRequest | pb.StreamsInScopeWithTagRequest
            if tag is None:
                request = pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=scope),
                                                   continuationToken=pb.ContinuationToken(token=token))
                reply = await self._call("listStreamsInScope", request, _listing_check(scope))
            else:
                request = pb.StreamsInScopeWithTagRequest(scope=pb.ScopeInfo(scope=scope), tag=tag,
                                                          continuationToken=pb.ContinuationToken(token=token))
                reply = await self._call("listStreamsInScopeForTag", request, _listing_check(scope))
            if not reply.streams:
                return
            for info in reply.streams:
                yield info.stream
            token = reply.continuationToken.token

    # ------------------------------------------------------------------ segments

    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The active segments, sorted by key range; empty once the stream is sealed."""
        return await self._call("getCurrentSegments", stream_info(scope, stream), _segment_ranges,
                                not_found=StreamNotFound)

    async def get_epoch_segments(self, scope: str, stream: str, epoch: int) -> list[SegmentRange]:
        request = pb.GetEpochSegmentsRequest(streamInfo=stream_info(scope, stream), epoch=epoch)
        return await self._call("getEpochSegments", request, _segment_ranges, not_found=StreamNotFound)

    async def get_head_cut(self, scope: str, stream: str) -> StreamCut:
        """The stream's head: the first readable offset of each segment at the truncation point."""
        request = pb.GetSegmentsRequest(streamInfo=stream_info(scope, stream), timestamp=0)

        def check(reply: pb.SegmentsAtTime) -> StreamCut:
            return StreamCut(scope, stream,
                             {location.segmentId.segmentId: location.offset for location in reply.segments})

        return await self._call("getSegments", request, check, not_found=StreamNotFound)

    async def get_successors(self, segment: Segment) -> Successors:
        request = segment_id(segment.scope, segment.stream, segment.segment_id)

        def check(reply: pb.SuccessorResponse) -> Successors:
            return Successors(tuple((segment_range_from(entry.segment), frozenset(entry.value))
                                    for entry in reply.segments))

        return await self._call("getSegmentsImmediatelyFollowing", request, check, not_found=StreamNotFound)

    async def get_segments_between(self, scope: str, stream: str, start: StreamCut,
                                   end: StreamCut) -> list[Segment]:
        """Every segment between two cuts of one stream (an unbounded cut: the head / the tail)."""
        request = pb.StreamCutRange(streamInfo=stream_info(scope, stream), **{"from": start.positions},
                                    to=end.positions)

        def check(reply: pb.StreamCutRangeResponse) -> list[Segment]:
            return [segment_from(segment) for segment in reply.segments]

        return await self._call("getSegmentsBetween", request, check, not_found=StreamNotFound)

    async def get_endpoint(self, segment: Segment) -> tuple[str, int]:
        """The segment store that owns ``segment`` (getURI)."""
        request = segment_id(segment.scope, segment.stream, segment.segment_id)

        def check(reply: pb.NodeUri) -> tuple[str, int]:
            return reply.endpoint, reply.port

        return await self._call("getURI", request, check)

    async def get_delegation_token(self, scope: str, stream: str) -> str:
        """A token that lets segment stores serve this client's requests on the stream (getDelegationToken;
        empty when the controller runs without auth)."""
        def check(reply: pb.DelegationToken) -> str:
            return reply.delegationToken

        return await self._call("getDelegationToken", stream_info(scope, stream), check)

    # ------------------------------------------------------------------ scaling

    async def scale(self, scope: str, stream: str, sealed: Iterable[int],
                    new_ranges: Iterable[tuple[float, float]], timeout_seconds: float = 120.0) -> list[SegmentRange]:
        """Seals ``sealed`` and replaces them by ``new_ranges``; returns once the scale is complete.

        Raises:
            InvalidArgument: the ranges do not exactly replace the sealed segments, or a segment is not active.
            StreamSealed / OperationFailed: the controller refused the scale.
        """
        R = pb.ScaleResponse
        request = pb.ScaleRequest(streamInfo=stream_info(scope, stream), sealedSegments=list(sealed),
                                  newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=low, end=high)
                                                for low, high in new_ranges])

        def check(reply: pb.ScaleResponse) -> pb.ScaleResponse:
            if reply.status == R.PRECONDITION_FAILED:
                raise InvalidArgument(f"cannot scale {scope}/{stream}: a sealed segment is not active, or the "
                                      f"result would have too few segments")
            if reply.status == R.FAILURE:
                raise OperationFailed(f"the controller refused to scale {scope}/{stream} (bad ranges, another scale "
                                      f"pending, or the stream is sealed)")
            return reply

        reply = await self._call("scale", request, check, not_found=StreamNotFound)
        await self._wait_for_scale(scope, stream, reply.epoch, timeout_seconds)
        return [segment_range_from(r) for r in reply.segments]

    async def _wait_for_scale(self, scope: str, stream: str, epoch: int, timeout_seconds: float) -> None:
        S = pb.ScaleStatusResponse
        delays = _SCALE_POLL.delays()
        async with asyncio.timeout(timeout_seconds):
            while True:
                reply: pb.ScaleStatusResponse = await self._call(
                    "checkScale", pb.ScaleStatusRequest(streamInfo=stream_info(scope, stream), epoch=epoch))
                if reply.status == S.SUCCESS:
                    return
                if reply.status != S.IN_PROGRESS:
                    raise OperationFailed(f"scale of {scope}/{stream} failed: {S.ScaleStatus.Name(reply.status)}")
                await asyncio.sleep(next(delays))

    # ------------------------------------------------------------------ transactions

    async def create_transaction(self, scope: str, stream: str,
                                 lease_ms: int) -> tuple[uuid.UUID, list[SegmentRange]]:
        request = pb.CreateTxnRequest(streamInfo=stream_info(scope, stream), lease=lease_ms)
        reply: pb.CreateTxnResponse = await self._call("createTransaction", request, not_found=StreamNotFound)
        return transaction_id_from(reply.txnId), [segment_range_from(r) for r in reply.activeSegments]

    async def commit_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID, writer_id: str = "",
                                 timestamp: int = -(2**63)) -> None:
        request = pb.TxnRequest(streamInfo=stream_info(scope, stream), txnId=transaction_id_to(transaction_id),
                                writerId=writer_id, timestamp=timestamp)
        await self._call("commitTransaction", request, _txn_check(transaction_id, "commit"))

    async def abort_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID) -> None:
        request = pb.TxnRequest(streamInfo=stream_info(scope, stream), txnId=transaction_id_to(transaction_id))
        await self._call("abortTransaction", request, _txn_check(transaction_id, "abort"))

    async def ping_transaction(self, scope: str, stream: str, transaction_id: uuid.UUID,
                               lease_ms: int) -> TransactionState:
        """Extends the lease; returns OPEN, or the state that made the ping moot (COMMITTED, ABORTED).

        Raises:
            TransactionFailed: the lease is too large or the transaction ran past its maximum time.
            TransactionNotFound: the controller does not know the transaction.
        """
        P = pb.PingTxnStatus
        request = pb.PingTxnRequest(streamInfo=stream_info(scope, stream), txnId=transaction_id_to(transaction_id),
                                    lease=lease_ms)

        def check(reply: pb.PingTxnStatus) -> TransactionState:
            if reply.status == P.OK:
                return TransactionState.OPEN
            if reply.status == P.COMMITTED:
                return TransactionState.COMMITTED
            if reply.status == P.ABORTED:
                return TransactionState.ABORTED
            if reply.status == P.UNKNOWN:
                raise TransactionNotFound(f"transaction {transaction_id} is unknown to the controller")
            raise TransactionFailed(f"ping of transaction {transaction_id} refused: {P.Status.Name(reply.status)}")

        return await self._call("pingTransaction", request, check)

    async def transaction_state(self, scope: str, stream: str, transaction_id: uuid.UUID) -> TransactionState:
        request = pb.TxnRequest(streamInfo=stream_info(scope, stream), txnId=transaction_id_to(transaction_id))

        def check(reply: pb.TxnState) -> TransactionState:
            return _TRANSACTION_STATES.get(reply.state, TransactionState.UNKNOWN)

        return await self._call("checkTransactionState", request, check)

    # ------------------------------------------------------------------ writer marks

    async def note_timestamp(self, writer_id: str, position: StreamCut, timestamp: int) -> None:
        """Reports a writer's time mark (watermarking). Raises InvalidArgument for a time or position behind."""
        T_ = pb.TimestampResponse

        def check(reply: pb.TimestampResponse) -> None:
            if reply.result == T_.INVALID_TIME:
                raise InvalidArgument(f"time {timestamp} is behind writer {writer_id}'s previous mark")
            if reply.result == T_.INVALID_POSITION:
                raise InvalidArgument(f"the position of writer {writer_id} is behind its previous mark")
            _retry_on(reply.result == T_.INTERNAL_ERROR, "noteTimestampFromWriter")

        await self._call("noteTimestampFromWriter", pb.TimestampFromWriter(
            writer=writer_id, position=cut_to(position), timestamp=timestamp), check)

    async def remove_writer(self, writer_id: str, scope: str, stream: str) -> bool:
        """Tells the controller the writer is gone, so its marks stop holding watermarks back.
        Returns False if the controller knows no marks of it (it never noted a time there)."""
        R = pb.RemoveWriterResponse

        def check(reply: pb.RemoveWriterResponse) -> bool:
            _retry_on(reply.result == R.INTERNAL_ERROR, "removeWriter")
            return reply.result == R.SUCCESS

        return await self._call("removeWriter", pb.RemoveWriterRequest(writer=writer_id,
                                                                       stream=stream_info(scope, stream)), check)

    # ------------------------------------------------------------------ reader groups (controller records)

    async def create_reader_group(self, scope: str, group: str,
                                  configuration: ReaderGroupConfiguration) -> ReaderGroupConfiguration:
        """Registers reader group ``scope/group``; returns the configuration the controller keeps (its id
        chosen), the stored one if the group exists.

        Raises:
            InvalidArgument: a bad group name. ScopeNotFound: no such scope.
        """
        S = pb.CreateReaderGroupResponse

        def check(reply: pb.CreateReaderGroupResponse) -> ReaderGroupConfiguration:
            if reply.status == S.INVALID_RG_NAME:
                raise InvalidArgument(f"invalid reader group name {group!r}")
            if reply.status == S.SCOPE_NOT_FOUND:
                raise ScopeNotFound(f"scope {scope!r} does not exist")
            _retry_on(reply.status == S.FAILURE, "createReaderGroup")
            return reader_group_from(reply.config)

        return await self._call("createReaderGroup", reader_group_to(scope, group, configuration), check)

    async def delete_reader_group(self, scope: str, group: str, group_id: str) -> bool:
        S = pb.DeleteReaderGroupStatus

        def check(reply: pb.DeleteReaderGroupStatus) -> bool:
            _retry_on(reply.status == S.FAILURE, "deleteReaderGroup")
            return reply.status == S.SUCCESS

        return await self._call("deleteReaderGroup", pb.ReaderGroupInfo(scope=scope, readerGroup=group,
                                                                         readerGroupId=group_id), check)

    async def update_subscriber_cut(self, scope: str, group: str, group_id: str, generation: int,
                                    cut: StreamCut) -> None:
        """Reports how far subscriber group ``scope/group`` has read ``cut``'s stream (consumption-based retention).

        Raises:
            StreamNotFound: no such stream.
            ReaderGroupNotFound: the group does not subscribe to the stream (or has another id or generation).
            InvalidArgument: the cut is malformed or behind the group's previous one.
        """
        S = pb.UpdateSubscriberStatus
        subscriber = f"{scope}/{group}"

        def check(reply: pb.UpdateSubscriberStatus) -> None:
            if reply.status == S.STREAM_NOT_FOUND:
                raise StreamNotFound(f"stream {cut.scope}/{cut.stream} does not exist")
            if reply.status in (S.SUBSCRIBER_NOT_FOUND, S.GENERATION_MISMATCH):
                raise ReaderGroupNotFound(f"{subscriber} does not subscribe to {cut.scope}/{cut.stream} "
                                          f"({S.Status.Name(reply.status)})")
            if reply.status == S.STREAM_CUT_NOT_VALID:
                raise InvalidArgument(f"the cut of {subscriber} is malformed or behind its previous one")
            _retry_on(reply.status == S.FAILURE, "updateSubscriberStreamCut")

        await self._call("updateSubscriberStreamCut", pb.SubscriberStreamCut(
            subscriber=subscriber, readerGroupId=group_id, generation=generation, streamCut=cut_to(cut)), check)

    async def list_subscribers(self, scope: str, stream: str) -> list[str]:
        """The ``scope/group`` names of the reader groups subscribed to the stream. Raises StreamNotFound."""
        S = pb.SubscribersResponse

        def check(reply: pb.SubscribersResponse) -> list[str]:
            if reply.status == S.STREAM_NOT_FOUND:
                raise StreamNotFound(f"stream {scope}/{stream} does not exist")
            _retry_on(reply.status == S.FAILURE, "listSubscribers")
            return list(reply.subscribers)

        return await self._call("listSubscribers", stream_info(scope, stream), check)

    # ------------------------------------------------------------------ key-value tables

    async def create_key_value_table(self, scope: str, table: str, config: KeyValueTableConfiguration) -> bool:
        """Creates the table and its partitions; False if it exists.

        Raises:
            InvalidArgument: a bad name or configuration. ScopeNotFound: no such scope.
        """
        S = pb.CreateKeyValueTableStatus

        def check(reply: pb.CreateKeyValueTableStatus) -> bool:
            if reply.status == S.INVALID_TABLE_NAME:
                raise InvalidArgument(f"invalid key-value table name {table!r}")
            if reply.status == S.SCOPE_NOT_FOUND:
                raise ScopeNotFound(f"scope {scope!r} does not exist")
            _retry_on(reply.status == S.FAILURE, "createKeyValueTable")
            return reply.status == S.SUCCESS

        return await self._call("createKeyValueTable", key_value_table_to(scope, table, config), check)

    async def delete_key_value_table(self, scope: str, table: str) -> bool:
        """Deletes the table's partitions, then its record; False if it does not exist."""
        S = pb.DeleteKVTableStatus

        def check(reply: pb.DeleteKVTableStatus) -> bool:
            _retry_on(reply.status == S.FAILURE, "deleteKeyValueTable")
            return reply.status == S.SUCCESS

        return await self._call("deleteKeyValueTable", pb.KeyValueTableInfo(scope=scope, kvtName=table), check)

    async def list_key_value_tables(self, scope: str) -> AsyncIterator[str]:
        """The names of the scope's key-value tables, page by page. Raises ScopeNotFound."""
        S = pb.KVTablesInScopeResponse

        def check(reply: pb.KVTablesInScopeResponse) -> pb.KVTablesInScopeResponse:
            if reply.status == S.SCOPE_NOT_FOUND:
                raise ScopeNotFound(f"scope {scope!r} does not exist")
            _retry_on(reply.status == S.FAILURE, "listKeyValueTablesInScope")
            return reply

        token = ""
        while True:
            reply = await self._call("listKeyValueTablesInScope", pb.KVTablesInScopeRequest(
                scope=pb.ScopeInfo(scope=scope), continuationToken=pb.ContinuationToken(token=token)), check)
            if not reply.kvtables:
                return
            for info in reply.kvtables:
                yield info.kvtName
            token = reply.continuationToken.token

    async def get_key_value_table_configuration(self, scope: str, table: str) -> KeyValueTableConfiguration:
        """Raises KeyValueTableNotFound."""
        S = pb.KeyValueTableConfigResponse

        def check(reply: pb.KeyValueTableConfigResponse) -> KeyValueTableConfiguration:
            if reply.status == S.TABLE_NOT_FOUND:
                raise KeyValueTableNotFound(f"key-value table {scope}/{table} does not exist")
            _retry_on(reply.status == S.FAILURE, "getKeyValueTableConfiguration")
            return key_value_table_from(reply.config)

        return await self._call("getKeyValueTableConfiguration", pb.KeyValueTableInfo(scope=scope, kvtName=table),
                                check, not_found=KeyValueTableNotFound)

    async def get_key_value_table_partitions(self, scope: str, table: str) -> list[SegmentRange]:
        """The table's partitions: their segment ids (the segments' stream is the table's name) and key
        ranges. Raises KeyValueTableNotFound."""
        return await self._call("getCurrentSegmentsKeyValueTable", pb.KeyValueTableInfo(scope=scope, kvtName=table),
                                _segment_ranges, not_found=KeyValueTableNotFound)


def _retry_on(condition: bool, rpc: str) -> None:
    if condition:
        raise _Retry(f"{rpc} answered FAILURE")


def _exists(reply: pb.ExistsResponse) -> bool:
    return reply.exists


def _segment_ranges(reply: pb.SegmentRanges) -> list[SegmentRange]:
    return [segment_range_from(r) for r in reply.segmentRanges]


def _update_check(scope: str, stream: str, what: str) -> Callable[[pb.UpdateStreamStatus], None]:
    S = pb.UpdateStreamStatus

    def check(reply: pb.UpdateStreamStatus) -> None:
        if reply.status in (S.STREAM_NOT_FOUND, S.SCOPE_NOT_FOUND):
            raise StreamNotFound(f"stream {scope}/{stream} does not exist")
        if reply.status == S.STREAM_SEALED:
            raise StreamSealed(f"stream {scope}/{stream} is sealed: cannot {what} it")
        _retry_on(reply.status == S.FAILURE, f"{what} stream")

    return check


def _listing_check(scope: str) -> Callable[[pb.StreamsInScopeResponse], pb.StreamsInScopeResponse]:
    S = pb.StreamsInScopeResponse

    def check(reply: pb.StreamsInScopeResponse) -> pb.StreamsInScopeResponse:
        if reply.status == S.SCOPE_NOT_FOUND:
            raise ScopeNotFound(f"scope {scope!r} does not exist")
        _retry_on(reply.status == S.FAILURE, "listStreams")
        return reply

    return check


def _txn_check(transaction_id: uuid.UUID, what: str) -> Callable[[pb.TxnStatus], None]:
    S = pb.TxnStatus

    def check(reply: pb.TxnStatus) -> None:

        if reply.status == S.TRANSACTION_NOT_FOUND:
            raise TransactionNotFound(f"transaction {transaction_id} is unknown (finished long ago, or never existed)")
        if reply.status == S.STREAM_NOT_FOUND:
            raise StreamNotFound(f"the stream of transaction {transaction_id} does not exist")
        if reply.status == S.FAILURE:
            raise TransactionFailed(f"cannot {what} transaction {transaction_id}: it is already "
                                    f"{'aborted' if what == 'commit' else 'committed'} or being so")

    return check
