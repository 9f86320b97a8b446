"""createStream (spec §4.2, §6.3): records in CREATING, epoch-0 segments on the stores, the mark
stream, then ACTIVE.

A stream left in CREATING by an interrupted attempt is finished by the next createStream of the
same name (which then answers STREAM_EXISTS, as Java does) or by the re-drive of its intent.
Every user stream ``S`` gets its mark stream ``_MARK<S>`` (one segment, where the watermarking
job writes ``S``'s watermarks) before it becomes ACTIVE, in the same workflow, so a re-drive
finishes both; internal (``_``-named) streams get none.
"""

from __future__ import annotations

from controller_api.model import ScalingPolicy, StreamConfiguration
from wire import naming
from wire.watermark import is_internal_stream, mark_stream

from ..store import NotFound, State, StreamStore
from ..store.records import WorkflowIntentRecord, WorkflowKind
from . import payloads
from .configuration import checked_configuration
from .context import ControllerContext
from .errors import ScopeNotFound
from .scopes import checked_name, require_open_scope
from .segment_calls import SegmentCalls
from .stream_access import state_or_none
from .workflows import WorkflowRunner

MARK_STREAM_CONFIGURATION = StreamConfiguration(ScalingPolicy(min_num_segments=1))


class StreamCreation:
    def __init__(self, context: ControllerContext, runner: WorkflowRunner):
        self._context = context
        self._runner = runner
        runner.register(WorkflowKind.CREATE, self._redrive)

    async def create_stream(self, scope: str, stream: str, configuration: StreamConfiguration) -> bool:
        """Creates the stream. Returns False if it already exists (in any state; the config is not compared).

        Raises:
            InvalidName: the stream name breaks the naming rules.
            InvalidArgument: the configuration is not acceptable.
            ScopeNotFound: the scope does not exist or is being deleted.
        """
        checked_name(naming.validate_stream_name, stream)
        configuration = checked_configuration(configuration, self._context.settings)
        await require_open_scope(self._context.store.scopes, scope)
        handle = self._context.store.stream(scope, stream)
        state = await state_or_none(handle)
        if state is not None and state != State.CREATING:
            return False
        creation_time = self._context.now_ms()
        intent = WorkflowIntentRecord(WorkflowKind.CREATE, creation_time,
                                      payload=payloads.encode_create(creation_time, configuration))
        await self._context.store.kv.create_table(handle.tables.metadata)  # the intent lives in it
        return await self._runner.run(handle, intent,
                                      lambda: self._create(handle, configuration, creation_time))

    async def _create(self, handle: StreamStore, configuration: StreamConfiguration, creation_time: int) -> bool:
        """The workflow body. Returns True if this request created the stream."""
        state = await state_or_none(handle)
        if state is not None and state != State.CREATING:
            return False
        try:
            _, created = await self._context.store.create_stream(handle.scope, handle.name, configuration,
                                                                 creation_time)
        except NotFound:
            raise ScopeNotFound(f"scope {handle.scope!r} does not exist or is being deleted") from None
        self._context.fault_points.reach("create.records_written")
        if not created:  # an earlier attempt's records: finish that stream as it was asked for
            stored, _ = await handle.get_configuration()
            await self._finish(handle, stored.configuration)
            return False
        await self._finish(handle, configuration)
        return True

    async def _finish(self, handle: StreamStore, configuration: StreamConfiguration) -> None:
        epoch, _ = await handle.get_current_epoch()
        await SegmentCalls(self._context, handle.scope, handle.name).create(epoch.segment_ids, configuration)
        self._context.fault_points.reach("create.segments_created")
        if not is_internal_stream(handle.name):
            await self.ensure_mark_stream(handle.scope, handle.name)
        await handle.transition_state(State.ACTIVE, expected=State.CREATING)

    async def ensure_mark_stream(self, scope: str, stream: str) -> None:
        """Creates ``stream``'s mark stream unless it is there (and finishes one left in CREATING).

        Raises:
            ScopeNotFound: the scope does not exist or is being deleted.
        """
        mark = self._context.store.stream(scope, mark_stream(stream))
        state = await state_or_none(mark)
        if state is None or state == State.CREATING:
            await self._create(mark, MARK_STREAM_CONFIGURATION, self._context.now_ms())

    async def _redrive(self, handle: StreamStore, intent: WorkflowIntentRecord) -> None:
        creation_time, configuration = payloads.decode_create(intent.payload)
        await self._create(handle, configuration, creation_time)
