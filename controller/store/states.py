"""Stream states and transaction statuses, with the transitions each allows (spec §6.2, §6.5).

Theory of operation. Every workflow that changes a stream's segments or configuration first moves
the stream from ACTIVE to its own state (SCALING, TRUNCATING, UPDATING, COMMITTING_TXN) with a
compare-and-swap on the state record, and moves it back to ACTIVE when done. Because each of
them needs ACTIVE -> X, at most one runs per stream; the loser of the race sees a WriteConflict
or an IllegalStateTransition and retries later. Any state may be "transitioned" to itself, so a
re-driven step that already happened is not an error.

There is no DELETING state (Java has none either): deletion is allowed from SEALED, or from a
CREATING stream that a crashed create left behind, and is re-driven through the stream's
persisted workflow intent instead.
"""

from __future__ import annotations

import enum


class State(enum.IntEnum):
    """A stream's state (numbers are our storage codes, not a wire enum)."""

    UNKNOWN = 0
    CREATING = 1
    ACTIVE = 2
    UPDATING = 3
    SCALING = 4
    COMMITTING_TXN = 5
    TRUNCATING = 6
    SEALING = 7
    SEALED = 8


ALLOWED_STATE_TRANSITIONS: dict[State, frozenset[State]] = {
    State.UNKNOWN: frozenset({State.CREATING}),
    State.CREATING: frozenset({State.ACTIVE}),
    State.ACTIVE: frozenset({State.SCALING, State.TRUNCATING, State.COMMITTING_TXN, State.SEALING,
                             State.SEALED, State.UPDATING}),
    State.SCALING: frozenset({State.ACTIVE}),
    State.COMMITTING_TXN: frozenset({State.ACTIVE}),
    State.TRUNCATING: frozenset({State.ACTIVE}),
    State.UPDATING: frozenset({State.ACTIVE}),
    State.SEALING: frozenset({State.SEALED}),
    State.SEALED: frozenset(),
}

# States from which a stream's metadata may be deleted.
DELETABLE_STATES = frozenset({State.SEALED, State.CREATING})


def state_transition_allowed(current: State, requested: State) -> bool:
    return requested == current or requested in ALLOWED_STATE_TRANSITIONS[current]


class TransactionStatus(enum.IntEnum):
    """A transaction's status; the numbers are the wire's ``TxnState.State`` values."""

    UNKNOWN = 0
    OPEN = 1
    COMMITTING = 2
    COMMITTED = 3
    ABORTING = 4
    ABORTED = 5


ALLOWED_TRANSACTION_TRANSITIONS: dict[TransactionStatus, frozenset[TransactionStatus]] = {
    TransactionStatus.UNKNOWN: frozenset({TransactionStatus.OPEN}),
    TransactionStatus.OPEN: frozenset({TransactionStatus.COMMITTING, TransactionStatus.ABORTING}),
    TransactionStatus.COMMITTING: frozenset({TransactionStatus.COMMITTED}),
    TransactionStatus.ABORTING: frozenset({TransactionStatus.ABORTED}),
    TransactionStatus.COMMITTED: frozenset(),
    TransactionStatus.ABORTED: frozenset(),
}


def transaction_transition_allowed(current: TransactionStatus, requested: TransactionStatus) -> bool:
    return requested == current or requested in ALLOWED_TRANSACTION_TRANSITIONS[current]
