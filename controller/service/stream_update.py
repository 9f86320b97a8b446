"""updateStream (spec §4.2, §6.8): new configuration, segment policies, and a rescale if needed.

Steps (each idempotent; the intent's payload is the new configuration):

1. store the configuration with ``updating`` set (and the tags it drops);
2. ACTIVE -> UPDATING, UpdateSegmentPolicy on every active segment, UPDATING -> ACTIVE;
3. if the policy is FIXED and the active count differs from ``minNumSegments``, or the count is
   below it, scale: seal every active segment, create ``minNumSegments`` equal ones;
4. clear ``updating``.
"""

from __future__ import annotations

from controller_api.model import ScaleType, StreamConfiguration

from ..store import State, StreamStore
from ..store.records import StreamConfigurationRecord, WorkflowIntentRecord, WorkflowKind
from . import payloads
from .configuration import checked_configuration
from .context import ControllerContext
from .errors import StreamSealed
from .scaling import Scaling
from .segment_calls import SegmentCalls
from .stream_access import SEALED_STATES, move_state, require_usable
from .workflows import WorkflowRunner


def needs_rescale(configuration: StreamConfiguration, active_count: int) -> bool:
    minimum = configuration.scaling.min_num_segments
    fixed = configuration.scaling.scale_type == ScaleType.FIXED_NUM_SEGMENTS
    return (fixed and active_count != minimum) or active_count < minimum


class StreamUpdate:
    def __init__(self, context: ControllerContext, runner: WorkflowRunner, scaling: Scaling):
        self._context = context
        self._runner = runner
        self._scaling = scaling
        runner.register(WorkflowKind.UPDATE, self._redrive)

    async def update_stream(self, scope: str, stream: str, configuration: StreamConfiguration) -> None:
        """Applies a new configuration and waits until it is in force.

        Raises:
            StreamNotFound / StreamNotReady: no such stream, or it is still being created.
            StreamSealed: the stream is sealing or sealed.
            InvalidArgument: the configuration is not acceptable.
            WorkflowTimeout / ConcurrentWorkflow: not done within the completion timeout.
        """
        configuration = checked_configuration(configuration, self._context.settings)
        handle = self._context.store.stream(scope, stream)
        if await require_usable(handle) in SEALED_STATES:
            raise StreamSealed(f"stream {scope}/{stream} is sealed")
        intent = WorkflowIntentRecord(WorkflowKind.UPDATE, self._context.now_ms(),
                                      payload=payloads.encode_update(configuration))
        await self._runner.run_with_timeout(handle, intent, lambda: self._update(handle, configuration))

    async def _update(self, handle: StreamStore, configuration: StreamConfiguration) -> None:
        stored, version = await handle.get_configuration()
        if not (stored.updating and stored.configuration == configuration):
            dropped = tuple(tag for tag in stored.configuration.tags if tag not in configuration.tags)
            await handle.replace_configuration(StreamConfigurationRecord(configuration, True, dropped), version)
        self._context.fault_points.reach("update.configuration_written")
        await move_state(self._context, handle, State.UPDATING)
        current, _ = await handle.get_current_epoch()
        await SegmentCalls(self._context, handle.scope, handle.name).update_policy(current.segment_ids, configuration)
        self._context.fault_points.reach("update.policies_updated")
        await handle.transition_state(State.ACTIVE, expected=State.UPDATING)
        if needs_rescale(configuration, len(current.segments)):
            await self._scaling.rescale_evenly(handle, configuration.scaling.min_num_segments)
        stored, version = await handle.get_configuration()
        if stored.updating:
            await handle.replace_configuration(StreamConfigurationRecord(stored.configuration), version)

    async def _redrive(self, handle: StreamStore, intent: WorkflowIntentRecord) -> None:
        await self._update(handle, payloads.decode_update(intent.payload))
