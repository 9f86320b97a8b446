"""Runs stream workflows one at a time per stream, with the intent persisted before any work.

Theory of operation. Every workflow that changes a stream (create, update, scale, truncate, seal,
delete) runs as ``run(stream, intent, body)``:

1. take the stream's in-process lock, so this controller runs one workflow per stream at a time,
   and the stream's lease (``context.coordination``), so no other controller of a cluster does:
   while another live controller holds it, wait as for a busy stream;
2. persist the intent (``store.workflows.begin_workflow``). The intent is created only if absent,
   so it is also the exclusion between controllers. A pending intent of the *same* request is
   adopted (a client retry, or a re-drive); a pending intent of another kind that this runner
   knows how to drive was left by a crashed or failed run and is driven to completion first; any
   other (a transaction commit of the transaction service, another controller's work) is waited for
   (``retries.retry_while_busy``, until the deadline of the request if it has one);
3. run the body, whose every step checks what is already done;
4. remove the intent. A body that fails with an operating error (``ServiceError``) also removes
   it: such a workflow cannot complete, and its body undid what needed undoing. Any other failure
   (a crash point, a segment store that is down) leaves the intent for a re-drive.

A controller re-drives on start, every ``redrive_interval_seconds`` and when another controller
leaves the cluster: it lists the global index of pending intents and, for the streams whose bucket
it owns and whose lease is free, runs each intent's handler with the stored payload, which is
exactly what the original request would have run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from coordination.retry import retry

from .. import metrics
from ..cluster import WORKFLOW, LeaseBusy, stream_lease_name
from ..store import AlreadyExists, NotFound, StreamStore
from ..store.records import WorkflowIntentRecord, WorkflowKind
from ..store.workflows import begin_workflow, end_workflow, forget_index_entry, get_workflow, list_pending_workflows
from .context import ControllerContext
from .errors import ConcurrentWorkflow, ServiceError, StreamBusy, StreamNotFound, WorkflowTimeout
from .paging import all_pages
from .retries import is_redrive_retriable, retry_while_busy

log = logging.getLogger("tributary.controller")

Result = TypeVar("Result")
Handler = Callable[[StreamStore, WorkflowIntentRecord], Awaitable[object]]
REDRIVE_CONCURRENCY_MAX = 16


def same_request(first: WorkflowIntentRecord, second: WorkflowIntentRecord) -> bool:
    """Equal up to the start time, which differs between retries of one request."""
    return first.kind == second.kind and first.payload == second.payload


class WorkflowRunner:
    def __init__(self, context: ControllerContext):
        self._context = context
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._lock_users: dict[tuple[str, str], int] = {}
        self._handlers: dict[WorkflowKind, Handler] = {}
        self._tasks: set[asyncio.Task] = set()

    def register(self, kind: WorkflowKind, handler: Handler) -> None:
        """``handler(stream, intent)`` re-drives a pending intent of ``kind`` from its payload."""
        self._handlers[kind] = handler

    # ------------------------------------------------------------------ running

    async def run(self, stream: StreamStore, intent: WorkflowIntentRecord, body: Callable[[], Awaitable[Result]],
                  deadline: float | None = None) -> Result:
        """Runs ``body`` as the stream's workflow (see the module docstring). Returns its result.

        Raises:
            StreamNotFound: the stream's metadata does not exist.
            ConcurrentWorkflow: another workflow still held the stream at ``deadline``.
            ServiceError: whatever operating error the body raises (the intent is then removed).
        """
        key = (stream.scope, stream.name)
        lock = self._acquire_lock(key)
        kind, started, outcome = intent.kind.name.lower(), time.perf_counter(), "interrupted"
        try:
            async with lock, self._leased(stream, deadline):
                await self._begin(stream, intent, deadline)
                try:
                    result = await body()
                except ServiceError:
                    outcome = "failed"
                    await self._end(stream)
                    raise
                await self._end(stream)
                outcome = "completed"
                return result
        finally:
            self._release_lock(key)
            metrics.WORKFLOWS.labels(kind, outcome).inc()
            metrics.WORKFLOW_SECONDS.labels(kind).observe(time.perf_counter() - started)

    @contextlib.asynccontextmanager
    async def _leased(self, stream: StreamStore, deadline: float | None) -> AsyncIterator[None]:
        """Holds the stream's workflow lease, waiting while another controller holds it.

        Raises:
            ConcurrentWorkflow: it was still held elsewhere at ``deadline``.
        """
        coordination = self._context.coordination
        name = stream_lease_name(stream.scope, stream.name)
        stack = contextlib.AsyncExitStack()

        async def take() -> None:
            try:
                await stack.enter_async_context(coordination.lease(WORKFLOW, name))
            except LeaseBusy as error:
                raise StreamBusy(str(error)) from None

        try:
            await retry_while_busy(take, self._context.settings.stream_busy_backoff, deadline)
        except StreamBusy as error:
            raise ConcurrentWorkflow(f"{stream}: another controller runs its workflow ({error})") from None
        async with stack:
            yield

    async def run_with_timeout(self, stream: StreamStore, intent: WorkflowIntentRecord,
                               body: Callable[[], Awaitable[Result]]) -> Result:
        """``run`` bounded by the completion timeout; the workflow goes on after a timeout.

        Raises:
            WorkflowTimeout: not finished within ``workflow_timeout_seconds``.
            (and whatever ``run`` raises)
        """
        timeout = self._context.settings.workflow_timeout_seconds
        deadline = asyncio.get_running_loop().time() + timeout
        task = self.spawn(self.run(stream, intent, body, deadline))
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            raise WorkflowTimeout(f"{stream}: {intent.kind.name} did not finish within {timeout:.0f}s") from None

    def spawn(self, coroutine) -> asyncio.Task:
        """Runs ``coroutine`` in the background; its failure is logged (the intent stays for a re-drive)."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not isinstance(task.exception(), ServiceError):
            log.warning("workflow failed; its intent stays for a re-drive", extra={"error": repr(task.exception())})

    async def stop(self) -> None:
        """Cancels background workflows (their intents stay; a controller re-drives them)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def is_running(self, scope: str, stream: str) -> bool:
        return (scope, stream) in self._locks and self._locks[(scope, stream)].locked()

    # ------------------------------------------------------------------ intents

    async def _begin(self, stream: StreamStore, intent: WorkflowIntentRecord, deadline: float | None) -> None:
        """Persists ``intent`` (step 2 above), waiting while a workflow this runner cannot drive holds the stream.

        Raises:
            StreamNotFound: the stream's metadata does not exist.
            ConcurrentWorkflow: the stream was still held at ``deadline`` (event-loop time).
        """
        try:
            await retry_while_busy(lambda: self._claim(stream, intent), self._context.settings.stream_busy_backoff,
                                   deadline)
        except StreamBusy as error:
            raise ConcurrentWorkflow(str(error)) from None

    async def _claim(self, stream: StreamStore, intent: WorkflowIntentRecord) -> None:
        """One try at making the stream ours: a pending intent this runner has a handler for is driven
        to completion first.

        Raises:
            StreamNotFound: the stream's metadata does not exist.
            StreamBusy: another workflow holds the stream, or its intent changed meanwhile.
        """
        pending = await self._write_intent(stream, intent)
        if pending is not None and pending.kind in self._handlers:
            await self._drive(stream, pending)
            pending = await self._write_intent(stream, intent)
        if pending is not None:
            raise StreamBusy(f"{stream}: a {pending.kind.name} workflow is still running")

    async def _write_intent(self, stream: StreamStore, intent: WorkflowIntentRecord) -> WorkflowIntentRecord | None:
        """Writes ``intent`` unless an intent is pending.

        Returns:
            None if the stream is ours (written now, or the pending intent is the same request);
            otherwise the pending intent of the other request.
        Raises:
            StreamNotFound: the stream's metadata does not exist.
            StreamBusy: the pending intent ended between our write and our read.
        """
        try:
            await begin_workflow(stream, intent)
            return None
        except NotFound:
            raise StreamNotFound(f"stream {stream.scope}/{stream.name} does not exist") from None
        except AlreadyExists:
            pass
        found = await get_workflow(stream)
        if found is None:
            raise StreamBusy(f"{stream}: its pending workflow ended meanwhile")
        pending, _ = found
        return None if same_request(pending, intent) else pending

    async def _end(self, stream: StreamStore) -> None:
        try:
            await end_workflow(stream)
        except NotFound:  # the workflow deleted the stream's tables, intent included
            await forget_index_entry(stream.kv, stream.scope, stream.name)

    async def _drive(self, stream: StreamStore, intent: WorkflowIntentRecord) -> None:
        log.info("re-driving a pending workflow", extra={"stream": f"{stream.scope}/{stream.name}",
                                                         "kind": intent.kind.name})
        try:
            await self._handlers[intent.kind](stream, intent)
        except ServiceError as error:
            log.info("pending workflow cannot complete", extra={"kind": intent.kind.name, "error": repr(error)})
        await self._end(stream)

    # ------------------------------------------------------------------ re-driving

    async def pending_streams(self) -> list[tuple[str, str]]:
        """(scope, stream) of every entry in the index of pending intents."""
        entries = await all_pages(lambda token: list_pending_workflows(self._context.store.kv, token), b"")
        return [(scope, stream) for scope, stream, _ in entries]

    async def redrive_all(self, streams: list[tuple[str, str]] | None = None) -> int:
        """Re-drives the pending intents (of ``streams``, or all indexed ones) this runner has a
        handler for. Returns how many streams were looked at.

        Intents whose stream is busy in this process are skipped (their workflow is running).
        """
        if streams is None:
            streams = await self.pending_streams()
        owns = self._context.coordination.owns
        streams = [(scope, stream) for scope, stream in streams if owns(scope, stream)]
        semaphore = asyncio.Semaphore(REDRIVE_CONCURRENCY_MAX)

        async def redrive_one(scope: str, stream: str) -> None:
            async with semaphore:
                try:
                    await self.redrive_retrying(scope, stream)
                except Exception as error:  # one stream's failure must not stop the others
                    log.warning("re-drive failed; the periodic re-drive tries again",
                                extra={"stream": f"{scope}/{stream}", "error": repr(error)}, exc_info=error)

        await asyncio.gather(*(redrive_one(scope, stream) for scope, stream in streams))
        return len(streams)

    async def redrive_retrying(self, scope: str, stream_name: str) -> None:
        """``redrive``, tried again after transient failures (``retries.REDRIVE``), each one logged.

        Raises:
            The last failure, when it is not transient or the policy is spent.
        """
        def failed(error: BaseException, delay: float) -> None:
            log.info("re-drive failed; trying again", extra={"stream": f"{scope}/{stream_name}",
                                                             "error": repr(error), "delay_seconds": round(delay, 3)})

        await retry(lambda: self.redrive(scope, stream_name), self._context.settings.redrive_backoff,
                    retriable=is_redrive_retriable, on_retry=failed)

    async def redrive(self, scope: str, stream_name: str) -> None:
        """Drives the stream's pending intent, if any, to completion (no-op if it is running here)."""
        key = (scope, stream_name)
        if self.is_running(scope, stream_name):
            return
        stream = self._context.store.stream(scope, stream_name)
        lock = self._acquire_lock(key)
        try:
            async with lock, self._context.coordination.lease(WORKFLOW, stream_lease_name(scope, stream_name)):
                try:
                    found = await get_workflow(stream)
                except NotFound:
                    found = None
                if found is None:
                    await forget_index_entry(stream.kv, scope, stream_name)
                elif found[0].kind in self._handlers:
                    await self._drive(stream, found[0])
        except LeaseBusy:
            return  # another live controller runs the stream's workflow
        finally:
            self._release_lock(key)

    async def redrive_forever(self) -> None:
        """Re-drives pending intents every ``redrive_interval_seconds`` (failed workflows retry this way)."""
        while True:
            await asyncio.sleep(self._context.settings.redrive_interval_seconds)
            try:
                await self.redrive_all()
            except Exception as error:  # noqa: BLE001 - the store may be briefly unreachable
                log.warning("periodic re-drive failed", extra={"error": repr(error)})

    # ------------------------------------------------------------------ locks

    def _acquire_lock(self, key: tuple[str, str]) -> asyncio.Lock:
        self._lock_users[key] = self._lock_users.get(key, 0) + 1
        return self._locks.setdefault(key, asyncio.Lock())

    def _release_lock(self, key: tuple[str, str]) -> None:
        self._lock_users[key] -= 1
        if self._lock_users[key] == 0:
            del self._lock_users[key]
            del self._locks[key]
