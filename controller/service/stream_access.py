"""Finding a stream and moving its state, shared by every stream workflow.

``move_state`` is how a workflow takes the stream: ACTIVE -> its own state (SCALING, UPDATING,
TRUNCATING, SEALING) by compare-and-swap. A stream busy with another short workflow (a
transaction commit, which the transaction service runs, or a scale) is waited for with backoff
(``retries.retry_while_busy``); a sealed one is refused. Any state may be "moved" to itself, so a
re-driven step passes.
"""

from __future__ import annotations

from ..store import IllegalStateTransition, NotFound, State, StreamStore, WriteConflict
from .context import ControllerContext
from .errors import StreamBusy, StreamNotFound, StreamNotReady, StreamSealed, WorkflowTimeout
from .retries import retry_while_busy

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
    try:
        await retry_while_busy(lambda: _try_move_state(stream, requested, expected),
                               context.settings.stream_busy_backoff, deadline)
    except StreamBusy:
        raise WorkflowTimeout(f"stream {stream.scope}/{stream.name} stayed busy") from None


async def _try_move_state(stream: StreamStore, requested: State, expected: State) -> None:
    """One compare-and-swap of the state (see ``move_state``). Raises StreamBusy while another workflow holds it."""
    try:
        await stream.transition_state(requested, expected=expected)
    except NotFound:
        raise StreamNotFound(f"stream {stream.scope}/{stream.name} does not exist") from None
    except IllegalStateTransition as error:
        if error.current in SEALED_STATES and requested not in SEALED_STATES:
            raise StreamSealed(f"stream {stream.scope}/{stream.name} is {error.current.name}") from None
        if error.current == State.SEALED:
            raise StreamSealed(f"stream {stream.scope}/{stream.name} is sealed") from None
        if error.current == State.CREATING:
            raise StreamNotReady(f"stream {stream.scope}/{stream.name} is being created") from None
        raise StreamBusy(f"stream {stream.scope}/{stream.name} is {error.current.name}") from None
    except WriteConflict:
        raise StreamBusy(f"the state of stream {stream.scope}/{stream.name} changed meanwhile") from None
