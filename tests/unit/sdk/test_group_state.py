"""A reader group's state transitions (clients/reader/group_state.py), pure: a checkpoint's cut must let a group
reset to it read on through every segment, however the readers' completions, acquisitions and reports interleave
with the checkpoint."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from clients.reader.group_state import GroupState


def name(number: int, epoch: int) -> str:
    return f"sc/st/{number}.#epoch.{epoch}"


# A stream's history: two segments, one split, then a merge across the split, then a rolling transaction's duplicate.
A, B = name(0, 0), name(1, 0)
A_LOW, A_HIGH = name(2, 1), name(3, 1)  # A split
MERGED = name(4, 2)  # A_HIGH and B merged
A_LOW_COPY = name(2, 3)  # A_LOW duplicated (a rolling transaction)
RANGES = {A: (0.0, 0.5), B: (0.5, 1.0), A_LOW: (0.0, 0.25), A_HIGH: (0.25, 0.5), MERGED: (0.25, 1.0),
          A_LOW_COPY: (0.0, 0.25)}
SUCCESSORS = {A: {A_LOW: [A], A_HIGH: [A]}, B: {MERGED: [A_HIGH, B]}, A_HIGH: {MERGED: [A_HIGH, B]},
              A_LOW: {A_LOW_COPY: [A_LOW]}, MERGED: {}, A_LOW_COPY: {}}
END = 100  # every segment's end offset


def covers_key_space(positions: dict[str, int]) -> bool:
    """Whether the segments of a cut together cover every routing key (what a reset from it must read on from)."""
    reach = 0.0
    for low, high in sorted(RANGES[segment] for segment in positions):
        if low > reach + 1e-9:
            return False
        reach = max(reach, high)
    return reach >= 1.0 - 1e-9


def test_a_segment_finished_while_its_reader_owes_a_checkpoint_is_in_the_checkpoint_at_its_end():
    """The reader owned A when the checkpoint began and finished it before reaching the checkpoint; A's successors
    became unassigned and were not acquired (a reader owing a checkpoint acquires nothing). The cut must still hold
    A (at its end), or a group reset to it would read neither A nor its successors (the simulation, seed 68)."""
    state = GroupState.starting_at({A: 0, B: 0}, {})
    state.add_reader("r")
    state.acquire("r", [A, B])
    state.create_checkpoint("c", silent=False, max_outstanding=3)
    state.complete("r", A, END, SUCCESSORS[A])
    assert set(state.unassigned) == {A_LOW, A_HIGH}
    state.checkpoint("r", "c", {B: 40})
    checkpoint = state.completed_checkpoint("c")
    assert checkpoint is not None and checkpoint.positions == {A: END, B: 40}

    reset = GroupState.starting_at(checkpoint.positions, {}, generation=1)
    reset.add_reader("r")
    reset.acquire("r", [A, B])
    reset.complete("r", A, END, SUCCESSORS[A])  # read from its end: nothing more, and the successors follow
    assert set(reset.unassigned) == {A_LOW, A_HIGH}


class GroupStateMachine(RuleBasedStateMachine):
    """Two readers over the history above, in any interleaving of acquisitions, completions, checkpoints and their
    reports (as EventReader makes them: a reader owing a checkpoint neither acquires nor releases) and resets to a
    completed checkpoint. Every completed checkpoint's cut covers the key space, and so does what the group holds
    (the last segments are the stream's active ones, which never end)."""

    def __init__(self) -> None:
        super().__init__()
        self.state = GroupState.starting_at({A: 0, B: 0}, {})
        self.checkpoints = 0
        for reader in ("r1", "r2"):
            self.state.add_reader(reader)

    @rule(reader=st.sampled_from(["r1", "r2"]))
    def acquire(self, reader: str) -> None:
        if self.state.owes_checkpoint(reader) is None:
            self.state.acquire(reader, self.state.to_acquire(reader))

    @rule(reader=st.sampled_from(["r1", "r2"]), pick=st.integers(0, 5))
    def finish_a_segment(self, reader: str, pick: int) -> None:
        sealed = sorted(segment for segment in self.state.owned(reader) if SUCCESSORS[segment])  # (the last ones
        if sealed:  # are the stream's active segments: they never end)
            segment = sealed[pick % len(sealed)]
            self.state.complete(reader, segment, END, SUCCESSORS[segment])

    @rule(reader=st.sampled_from(["r1", "r2"]), pick=st.integers(0, 5))
    def release(self, reader: str, pick: int) -> None:
        owned = self.state.owned(reader)
        if owned and self.state.owes_checkpoint(reader) is None:
            segment = sorted(owned)[pick % len(owned)]
            self.state.release(reader, segment, owned[segment])

    @precondition(lambda self: len(self.state.checkpoints) < 2)
    @rule()
    def begin_checkpoint(self) -> None:
        self.checkpoints += 1
        self.state.create_checkpoint(f"c{self.checkpoints}", silent=False, max_outstanding=3)

    @rule(reader=st.sampled_from(["r1", "r2"]), read=st.integers(0, END))
    def reach_checkpoint(self, reader: str, read: int) -> None:
        owed = self.state.owes_checkpoint(reader)
        if owed is not None:
            positions = {segment: max(offset, min(read, END)) for segment, offset in self.state.owned(reader).items()}
            self.state.checkpoint(reader, owed.name, positions)

    @precondition(lambda self: self.state.last_checkpoint is not None)
    @rule()
    def reset_to_the_last_checkpoint(self) -> None:
        checkpoint = self.state.last_checkpoint
        assert checkpoint is not None
        self.state = GroupState.starting_at(checkpoint.positions, {}, self.state.generation + 1)
        for reader in ("r1", "r2"):
            self.state.add_reader(reader)

    @invariant()
    def every_completed_checkpoint_covers_the_key_space(self) -> None:
        checkpoint = self.state.last_checkpoint
        if checkpoint is not None:
            assert covers_key_space(checkpoint.positions), (checkpoint, self.state)

    @invariant()
    def the_group_holds_the_key_space(self) -> None:
        held = self.state.positions()
        held.update({segment: 0 for segment in self.state.future})
        assert covers_key_space(held), self.state


GroupStateMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_group_state_machine = GroupStateMachine.TestCase
