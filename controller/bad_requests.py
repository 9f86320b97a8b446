"""Bad requests at the controller's gRPC boundary: refused without a traceback, counted per RPC,
and logged rate-limited.

``add_guarded_servicer`` registers a ControllerServiceServicer so that every request goes through
three steps before the servicer sees it:

1. decoding that never raises: bytes that are no valid protobuf message of the RPC's request
   type (or strings that are not UTF-8) become ``Undecodable`` and get INVALID_ARGUMENT, where
   grpcio would log a full traceback per request and answer UNKNOWN;
2. ``api_validation.validate``: a refused request gets the RPC's own status reply or
   INVALID_ARGUMENT;
3. the servicer. Its INVALID_ARGUMENT answers (an unknown listing token, a malformed cut) are
   counted too. Anything it raises unexpectedly is a genuine internal error and is still logged
   by grpcio with its traceback.

Every call, refused or not, is also counted by status code and timed (``metrics.measured``).

Every refusal is counted in a ``BadRequestLog``, which writes at most one warning line per
``interval_seconds`` summarising how many requests were refused, for which RPCs, with one
example reason. A client sending garbage cannot flood the log.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable

import grpc

from controller_api import controller_pb2 as pb

from .api_validation import Rejection, validate
from .metrics import measured
from .security import CURRENT_PRINCIPAL, PermissionDenied, Security, Unauthenticated, check_rpc

log = logging.getLogger("tributary.controller")
SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]
INTERVAL_SECONDS_DEFAULT = 10.0
RPCS_PER_LINE_MAX = 8
REASON_LENGTH_MAX = 200
CUT_OFF_CHECK_SECONDS = 0.5  # how often a running call looks whether its controller was cut off


class Undecodable:
    """What the tolerant decoder hands on for bytes that are not a request of the RPC's type."""

    __slots__ = ("size", "error")

    def __init__(self, size: int, error: str):
        self.size = size
        self.error = error


def tolerant(deserialize: Callable[[bytes], object]) -> Callable[[bytes], object]:
    """``deserialize``, returning ``Undecodable`` instead of raising."""
    def decode(data: bytes) -> object:
        try:
            return deserialize(data)
        except Exception as error:  # noqa: BLE001 - DecodeError, RecursionError, ...: all are bad input
            return Undecodable(len(data), type(error).__name__)
    return decode


class BadRequestLog:
    """Counts refused requests per RPC; at most one warning line per ``interval_seconds``.

    The first refusal after a quiet interval is logged at once; later ones are summed up and
    written at the end of the interval (by a timer on the running event loop, or by the next
    refusal or ``flush()`` when there is none), so no count is lost and no burst floods the log.
    """

    def __init__(self, interval_seconds: float = INTERVAL_SECONDS_DEFAULT,
                 clock: Callable[[], float] | None = None, logger: logging.Logger = log):
        self.interval_seconds = interval_seconds
        self.totals: collections.Counter[str] = collections.Counter()  # refusals per RPC since start
        self.lines = 0  # warning lines written
        self._clock = clock or time.monotonic  # looked up now: a patched clock (the simulation) counts
        self._logger = logger
        self._pending: collections.Counter[str] = collections.Counter()
        self._example = ""
        self._last_line: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    def note(self, rpc: str, reason: str) -> None:
        """Counts one refused request of ``rpc`` (``reason`` may become the line's example)."""
        self.totals[rpc] += 1
        self._pending[rpc] += 1
        if not self._example:
            self._example = f"{rpc}: {reason[:REASON_LENGTH_MAX]}"
        now = self._clock()
        if self._last_line is None or now - self._last_line >= self.interval_seconds:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop: the next refusal or flush() writes the line
            self._timer = loop.call_later(self._last_line + self.interval_seconds - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Writes the summary of the refusals counted since the last line, if there were any."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        count = sum(self._pending.values())
        by_rpc = dict(self._pending.most_common(RPCS_PER_LINE_MAX))
        listed = ", ".join(f"{rpc} {number}" for rpc, number in by_rpc.items())
        more = len(self._pending) - len(by_rpc)
        since = "" if self._last_line is None else f" in the last {self._clock() - self._last_line:.0f} s"
        self._logger.warning(
            f"refused {count} bad controller request(s){since}: {listed}{f' and {more} more RPCs' if more else ''}"
            f" (e.g. {self._example})",
            extra={"bad_requests": count, "by_rpc": by_rpc, "example": self._example})
        self.lines += 1
        self._pending.clear()
        self._example = ""
        self._last_line = self._clock()


def _guarded(rpc: str, behavior, request_type: str, bad_requests: BadRequestLog,
             check: Callable[[str, object], Rejection | None], security: Security | None,
             cut_off: Callable[[], str | None] | None):
    async def handle(request, context):
        reason = cut_off() if cut_off is not None else None
        if reason is not None:  # the client tries another controller
            await context.abort(grpc.StatusCode.UNAVAILABLE, reason)
        if isinstance(request, Undecodable):
            bad_requests.note(rpc, f"undecodable {request_type} ({request.size} bytes, {request.error})")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {request_type}")
        rejection = check(rpc, request)
        if rejection is not None:
            bad_requests.note(rpc, rejection.message)
            if rejection.reply is not None:
                return rejection.reply
            await context.abort(rejection.code, rejection.message)
        if security is not None:
            try:
                principal = check_rpc(security, rpc, request, _metadata(context, "authorization"))
            except Unauthenticated as error:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(error))
            except PermissionDenied as error:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(error))
            CURRENT_PRINCIPAL.set(principal)
        try:
            if cut_off is None:
                return await behavior(request, context)
            return await _unless_cut_off(behavior(request, context), cut_off, context)
        except grpc.aio.AbortError:
            if context.code() == grpc.StatusCode.INVALID_ARGUMENT:
                bad_requests.note(rpc, context.details() or "INVALID_ARGUMENT from the service")
            raise

    return handle


async def _unless_cut_off(call, cut_off: Callable[[], str | None], context):
    """``call``'s result, or UNAVAILABLE (the call cancelled) once ``cut_off()`` gives a reason while it runs: a
    call that waits on what the controller cannot reach any more is tried again on another controller."""
    task = asyncio.ensure_future(call)
    while True:
        done, _ = await asyncio.wait({task}, timeout=CUT_OFF_CHECK_SECONDS)
        if done:
            return task.result()
        reason = cut_off()
        if reason is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await context.abort(grpc.StatusCode.UNAVAILABLE, reason)


def _metadata(context, name: str) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None


def add_guarded_servicer(servicer, server: grpc.aio.Server, bad_requests: BadRequestLog | None = None,
                         check: Callable[[str, object], Rejection | None] = validate,
                         security: Security | None = None,
                         cut_off: Callable[[], str | None] | None = None) -> BadRequestLog:
    """Registers ``servicer`` (a ControllerServiceServicer) on ``server`` behind the tolerant decoder,
    ``check`` and, with ``security``, authentication and authorization (UNAUTHENTICATED without valid
    credentials, PERMISSION_DENIED without the permission the method needs); returns the BadRequestLog
    that counts refusals. While ``cut_off()`` gives a reason, every call is answered UNAVAILABLE with it
    (a clustered controller cut off from ZooKeeper: controller.cluster)."""
    bad_requests = bad_requests if bad_requests is not None else BadRequestLog()
    handlers = {}
    for method in SERVICE.methods:
        request_type = getattr(pb, method.input_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            measured(method.name, _guarded(method.name, getattr(servicer, method.name), method.input_type.name,
                                           bad_requests, check, security, cut_off)),
            request_deserializer=tolerant(request_type.FromString),
            response_serializer=getattr(pb, method.output_type.name).SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(SERVICE.full_name, handlers)
    return bad_requests
