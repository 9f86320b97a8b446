"""Background workers of the transaction service: one commit worker per stream, one abort worker
per transaction, each running its job (``jobs``) until done.

A worker retries a busy stream or a failed segment-store call with capped exponential back-off
(``TransactionSettings.job_backoff``, ``retries.is_transient``), and gives up (until the next
sweep asks again) when the stream is gone or sealed under it, or on any other failure.
Requesting work for a stream whose commit worker is running makes that worker look once more
before it exits, so a commit request is never lost between its batch check and its exit.
Cancelling a worker is safe at any await: every step of a job is durable and re-runnable.

A stream's commit worker holds the stream's commits lease (``context.coordination``). In a
cluster, while another controller's worker holds it, this one's waits for the lease
(``retries.COMMITS_LEASE``) and then looks for itself: the other worker may have run its last
batch before this controller's transaction turned COMMITTING, and giving up at once would leave
the commit to the next sweep (a minute). After 30 s of a lease never free it gives up all the
same: a worker that long in another controller's hands commits what there is; the sweep of the
stream's bucket owner looks again later, and at once when a controller leaves the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from coordination.retry import retry

from ...cluster import COMMITS, LeaseBusy, stream_lease_name
from ...store import NotFound
from ..context import ControllerContext
from ..retries import COMMITS_LEASE, is_transient
from .jobs import StreamUncommittable, abort_transaction, commit_next_batch
from .rules import TransactionSettings

log = logging.getLogger(__name__)

StreamKey = tuple[str, str]
TransactionKey = tuple[str, str, uuid.UUID]


class TransactionWorkers:
    def __init__(self, context: ControllerContext, settings: TransactionSettings):
        self.context = context
        self.settings = settings
        self._commits: dict[StreamKey, asyncio.Task] = {}
        self._commit_again: set[StreamKey] = set()
        self._aborts: dict[TransactionKey, asyncio.Task] = {}

    def __repr__(self) -> str:
        return f"TransactionWorkers(commits={len(self._commits)}, aborts={len(self._aborts)})"

    def is_committing(self, scope: str, name: str) -> bool:
        return (scope, name) in self._commits

    def request_commit(self, scope: str, name: str) -> None:
        key = (scope, name)
        task = self._commits.get(key)
        if task is not None and not task.done():
            self._commit_again.add(key)
            return
        self._commits[key] = asyncio.create_task(self._run_commits(key), name=f"transaction-commit {scope}/{name}")

    def request_abort(self, scope: str, name: str, transaction_id: uuid.UUID) -> None:
        key = (scope, name, transaction_id)
        task = self._aborts.get(key)
        if task is None or task.done():
            self._aborts[key] = asyncio.create_task(self._run(self._aborts, key, f"abort of {transaction_id}",
                                                              lambda: self._abort_step(key)),
                                                    name=f"transaction-abort {transaction_id}")

    async def drain(self) -> None:
        """Waits until no worker is running."""
        while True:
            tasks = [task for task in [*self._commits.values(), *self._aborts.values()] if not task.done()]
            if not tasks:
                return
            await asyncio.wait(tasks)

    async def stop(self) -> None:
        tasks = [*self._commits.values(), *self._aborts.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._commits.clear()
        self._aborts.clear()
        self._commit_again.clear()

    async def _commit_step(self, key: StreamKey) -> bool:
        """One batch. Done when nothing was committing and nobody asked again meanwhile."""
        self._commit_again.discard(key)
        stream = self.context.store.stream(*key)
        committed = await commit_next_batch(self.context, stream, self.settings, self.context.now_ms())
        return not committed and key not in self._commit_again

    async def _abort_step(self, key: TransactionKey) -> bool:
        scope, name, transaction_id = key
        await abort_transaction(self.context, self.context.store.stream(scope, name), transaction_id,
                                self.context.now_ms())
        return True

    async def _run_commits(self, key: StreamKey) -> None:
        async def under_lease() -> None:
            async with self.context.coordination.lease(COMMITS, stream_lease_name(*key)):
                await self._run(self._commits, key, f"commits of {key[0]}/{key[1]}", lambda: self._commit_step(key))

        try:
            await retry(under_lease, COMMITS_LEASE, retriable=lambda error: isinstance(error, LeaseBusy))
        except LeaseBusy as error:
            log.info("commits of %s/%s stay another controller's; the sweep looks again: %s", key[0], key[1], error)
        finally:
            if self._commits.get(key) is asyncio.current_task():
                del self._commits[key]

    async def _run(self, registry: dict, key, description: str, step: Callable[[], Awaitable[bool]]) -> None:
        """Runs ``step`` until it reports done; each step retries transient failures with a fresh back-off."""
        def note_retry(error: BaseException, delay_seconds: float) -> None:
            log.info("%s retry in %d ms: %r", description, delay_seconds * 1000, error)

        try:
            while not await retry(step, self.settings.job_backoff, retriable=is_transient, on_retry=note_retry):
                pass
        except NotFound as error:
            log.info("%s stopped (gone): %r", description, error)
        except StreamUncommittable as error:
            log.warning("%s wait for the next sweep: %s", description, error)
        except Exception:  # a worker must not die silently; the next sweep restarts the job
            log.exception("%s failed; the next sweep restarts it", description)
        finally:
            if registry.get(key) is asyncio.current_task():
                del registry[key]
