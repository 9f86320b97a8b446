"""Finding a stream and moving its state, shared by every stream workflow.

``move_state`` is how a workflow takes the stream: ACTIVE -> its own state (SCALING, UPDATING,
TRUNCATING, SEALING) by compare-and-swap. A stream busy with another short workflow (a
transaction commit, which the transaction service runs, or a scale) is waited for with backoff;
a sealed one is refused. Any state may be "moved" to itself, so a re-driven step passes.
"""

from __future__ import annotations

import asyncio

from ..store import IllegalStateTransition, NotFound, State, StreamStore, WriteConflict
from .context import ControllerContext
from .errors import StreamNotFound, StreamNotReady, StreamSealed, WorkflowTimeout

SEALED_STATES = frozenset({State.SEALING, State.SEALED})


async def state_or_none(stream: StreamStore) -> State | None:
    """The stream's state, or None if it does not exist."""
    try:
        state, _ = await stream.get_state()
    except NotFound:
        return None
    return state




async def require_state(stream: StreamStore) -> State:
    """The stream's state.

    Raises:
        StreamNotFound: the stream does not exist.
    """
    state = await state_or_none(stream)
    if state is None:
        raise StreamNotFound(f"stream {stream.scope}/{stream.name} does not exist")
    return state


async def require_usable(stream: StreamStore) -> State:
    """The state of a stream that exists and has finished being created.

    Raises:
        StreamNotFound: no such stream.
        StreamNotReady: the stream is still CREATING.
    """
    state = await require_state(stream)
    if state == State.CREATING:
        raise StreamNotReady(f"stream {stream.scope}/{stream.name} is being created")
    return state


async def move_state(context: ControllerContext, stream: StreamStore, requested: State,
                     expected: State = State.ACTIVE, deadline: float | None = None) -> None:
    """Moves the stream from ``expected`` (or ``requested`` already) to ``requested``, waiting while busy.

    Raises:
        StreamNotFound: the stream is gone.
        StreamSealed: the stream is sealing or sealed (and ``requested`` is not a sealing state).
        StreamNotReady: the stream is still CREATING.
        WorkflowTimeout: still busy at ``deadline`` (event-loop time).
    """
    settings = context.settings
    delay = settings.workflow_retry_delay_seconds
    loop = asyncio.get_running_loop()
    while True:
        try:
            await stream.transition_state(requested, expected=expected)
            return
        except NotFound:
            raise StreamNotFound(f"stream {stream.scope}/{stream.name} does not exist") from None
        except IllegalStateTransition as error:
            if error.current in SEALED_STATES and requested not in SEALED_STATES:
                raise StreamSealed(f"stream {stream.scope}/{stream.name} is {error.current.name}") from None
            if error.current == State.SEALED:
                raise StreamSealed(f"stream {stream.scope}/{stream.name} is sealed") from None
            if error.current == State.CREATING:
                raise StreamNotReady(f"stream {stream.scope}/{stream.name} is being created") from None
        except WriteConflict:
            pass
        if deadline is not None and loop.time() + delay > deadline:
            raise WorkflowTimeout(f"stream {stream.scope}/{stream.name} stayed busy")
        await asyncio.sleep(delay)
        delay = min(delay * 2, settings.workflow_retry_delay_seconds_max)
