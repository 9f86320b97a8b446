"""All controller services over one context: what the gRPC layer and the app talk to."""

from __future__ import annotations

import asyncio

from controller_api.model import StreamConfiguration

from ..store import NotFound
from .auto_scale import AutoScaler
from .context import ControllerContext
from .errors import StreamNotFound, StreamNotReady, TableNotFound
from .key_value_tables import KeyValueTables
from .paging import all_pages
from .reader_groups import ReaderGroups
from .retention import Retention
from .scaling import Scaling
from .scopes import Scopes
from .segment_queries import SegmentQueries
from .stream_access import require_state
from .stream_creation import StreamCreation
from .stream_deletion import StreamDeletion
from .stream_descriptions import StreamDescriptions
from .stream_sealing import StreamSealing
from .stream_update import StreamUpdate
from .transactions.sealing import Abort
from .truncation import Truncation
from .watermarks import Watermarking
from .workflows import WorkflowRunner
from .writer_marks import WriterMarks


class ControllerServices:
    def __init__(self, context: ControllerContext, abort_transaction: Abort):
        """``abort_transaction`` is the transaction service's abort of an open transaction (sealing uses it)."""
        self.context = context
        self.runner = WorkflowRunner(context)
        self.key_value_tables = KeyValueTables(context)
        self.scopes = Scopes(context, self.key_value_tables)
        self.creation = StreamCreation(context, self.runner)
        self.scaling = Scaling(context, self.runner)
        self.update = StreamUpdate(context, self.runner, self.scaling)
        self.sealing = StreamSealing(context, self.runner, abort_transaction)
        self.deletion = StreamDeletion(context, self.runner)
        self.truncation = Truncation(context, self.runner)
        self.queries = SegmentQueries(context)
        self.descriptions = StreamDescriptions(context)
        self.reader_groups = ReaderGroups(context, self.creation, self.sealing, self.deletion)
        self.writer_marks = WriterMarks(context)
        self.retention = Retention(context, self.truncation)
        self.auto_scaler = AutoScaler(context, self.scaling, self.runner)
        self.watermarking = Watermarking(context, self.creation)
        self._background: list[asyncio.Task] = []
        self._takeover: asyncio.Task | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> int:
        """Re-drives pending workflows, then keeps re-driving, retention, auto-scaling and watermarking periodically.

        Waits at most ``startup_redrive_wait_seconds`` for the re-drives (a re-driven scale may wait
        for a transaction commit, which the transaction service finishes); the rest goes on in the
        background. Returns how many streams had a pending workflow.
        """
        pending = await self.runner.pending_streams()
        loop = asyncio.get_running_loop()
        redrive = loop.create_task(self.runner.redrive_all(pending))
        await asyncio.wait([redrive], timeout=self.context.settings.startup_redrive_wait_seconds)
        self._background = [redrive, loop.create_task(self.runner.redrive_forever()),
                            loop.create_task(self.retention.run_forever()),
                            loop.create_task(self.auto_scaler.run_forever()),
                            loop.create_task(self.watermarking.run_forever())]
        self.context.coordination.on_controllers_lost(self._take_over)
        return len(pending)

    def _take_over(self) -> None:
        """Another controller left the cluster: re-drive what it left in our buckets, now."""
        if self._background and (self._takeover is None or self._takeover.done()):
            self._takeover = self.runner.spawn(self.runner.redrive_all())

    async def stop(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []
        await self.runner.stop()

    # ------------------------------------------------------------------ stream facts

    async def configuration(self, scope: str, stream: str) -> StreamConfiguration:
        """Raises StreamNotFound."""
        try:
            stored, _ = await self.context.store.stream(scope, stream).get_configuration()
        except NotFound:
            raise StreamNotFound(f"stream {scope}/{stream} does not exist") from None
        return stored.configuration

    async def stream_exists(self, scope: str, stream: str) -> bool:
        try:
            await require_state(self.context.store.stream(scope, stream))
        except StreamNotFound:
            return False
        return True

    # ------------------------------------------------------------------ recursive scope deletion

    async def delete_scope_recursive(self, scope: str) -> None:
        """Deletes the scope with everything in it (a missing scope is fine, spec §4.1).

        From the first step on the scope counts as existing for createScope and as missing for
        createStream, so nothing new appears in it meanwhile.
        """
        store = self.context.store
        try:
            await store.scopes.seal_scope(scope)
        except NotFound:
            return
        for group in await self.reader_groups.list_reader_groups(scope):
            configuration = await self.reader_groups.get_reader_group(scope, group)
            await self.reader_groups.delete_reader_group(scope, group, configuration.reader_group_id)
        for stream in await all_pages(lambda token: self.scopes.list_streams(scope, token)):
            try:
                await self.sealing.seal_stream(scope, stream)
            except (StreamNotFound, StreamNotReady):
                pass
            await self.deletion.delete_stream(scope, stream)
        for table in await all_pages(lambda token: self.key_value_tables.list_tables(scope, token)):
            try:
                await self.key_value_tables.delete_table(scope, table)
            except TableNotFound:
                pass
        await self.scopes.delete_scope(scope)
