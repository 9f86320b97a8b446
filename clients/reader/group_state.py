"""A reader group's shared state and the pure transitions that change it.

The state lives in one table-segment entry and changes only by compare-and-set
(``group_store``); every transition here is a pure function of the state (no
I/O, no clock), so it can be tested against a model. Segments are named by
their qualified names; offsets are byte offsets in them.

* ``readers``: the online readers.
* ``assigned[reader]``: the segments a reader owns, with the offset recorded
  when it got them (updated at checkpoints and releases).
* ``unassigned``: segments nobody owns yet, with the offset to start at.
* ``future``: successors of finished segments, each with the predecessors still
  unfinished. A successor becomes unassigned only when all its predecessors
  are finished (successor gating, client reference §4.5): per-key order holds
  across scaling on the read side too.
* ``completed``: finished segments (with their end offsets) that some future
  segment still waits for. Stream cuts list them at their end offsets, so a
  group restarted from a cut knows they are done (Java achieves this by
  reporting finished segments only after a checkpoint).
* ``end_offsets``: where reading stops (from the end cuts; absent = unbounded).
* ``checkpoints``: outstanding checkpoints, each with the readers that still owe
  their positions and the positions collected so far; ``last_checkpoint`` is
  the newest completed one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable

from ..errors import CheckpointFailed, InvalidArgument, ReinitializationRequired


@dataclasses.dataclass
class Checkpoint:
    name: str
    silent: bool
    pending: list[str]
    positions: dict[str, int]


@dataclasses.dataclass
class GroupState:
    generation: int = 0
    readers: list[str] = dataclasses.field(default_factory=list)
    assigned: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    unassigned: dict[str, int] = dataclasses.field(default_factory=dict)
    future: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    completed: dict[str, int] = dataclasses.field(default_factory=dict)
    end_offsets: dict[str, int] = dataclasses.field(default_factory=dict)
    checkpoints: list[Checkpoint] = dataclasses.field(default_factory=list)
    last_checkpoint: Checkpoint | None = None

    # ------------------------------------------------------------------ encoding

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> GroupState:
        fields = json.loads(bytes(data))
        fields["checkpoints"] = [Checkpoint(**checkpoint) for checkpoint in fields["checkpoints"]]
        if fields["last_checkpoint"] is not None:
            fields["last_checkpoint"] = Checkpoint(**fields["last_checkpoint"])
        return cls(**fields)

    @classmethod
    def starting_at(cls, positions: dict[str, int], end_offsets: dict[str, int],
                    generation: int = 0) -> GroupState:
        """A fresh state reading ``positions`` (negative offsets: not readable yet, treated as 0)."""
        return cls(generation=generation, unassigned={name: max(0, offset) for name, offset in positions.items()},
                   end_offsets=dict(end_offsets))

    # ------------------------------------------------------------------ queries

    def owned(self, reader: str) -> dict[str, int]:
        return self.assigned.get(reader, {})

    def check_member(self, reader: str) -> None:
        if reader not in self.readers:
            raise ReinitializationRequired(f"reader {reader!r} is not (any more) a member of its group")

    @property
    def segment_count(self) -> int:
        """Segments readable now: owned by someone or waiting for an owner."""
        return len(self.unassigned) + sum(len(segments) for segments in self.assigned.values())

    def target_count(self) -> int:
        """How many segments each reader should own: the readable ones spread evenly."""
        if not self.readers:
            return 0
        return math.ceil(self.segment_count / len(self.readers))

    def to_acquire(self, reader: str) -> list[str]:
        """Unassigned segments this reader should take now (oldest epochs first)."""
        want = self.target_count() - len(self.owned(reader))
        if want <= 0 or not self.unassigned:
            return []
        return sorted(self.unassigned, key=_segment_order)[:want]

    def excess(self, reader: str) -> int:
        """How many segments this reader owns beyond its share (while others could take them)."""
        owned = len(self.owned(reader))
        return max(0, owned - self.target_count()) if len(self.readers) > 1 else 0

    def owes_checkpoint(self, reader: str) -> Checkpoint | None:
        for checkpoint in self.checkpoints:
            if reader in checkpoint.pending:
                return checkpoint
        return None

    def is_end_of_data(self) -> bool:
        """Nothing left to read, now or later (every segment finished, nothing waiting)."""
        return not self.unassigned and not self.future and not any(self.assigned.values())

    def positions(self, reported: dict[str, dict[str, int]] | None = None) -> dict[str, int]:
        """Every segment's position: offsets recorded here, overridden by readers' ``reported`` ones.

        Finished segments that a future segment still waits for appear at their end offsets.
        """
        result = dict(self.completed)
        result.update(self.unassigned)
        for reader, segments in self.assigned.items():
            result.update(segments)
            for segment, offset in (reported or {}).get(reader, {}).items():
                if segment in segments:
                    result[segment] = offset
        return result

    # ------------------------------------------------------------------ membership

    def add_reader(self, reader: str) -> None:
        if reader in self.readers:
            raise InvalidArgument(f"reader {reader!r} is already online in this group")
        self.readers.append(reader)
        self.assigned[reader] = {}

    def remove_reader(self, reader: str, positions: dict[str, int] | None) -> None:
        """Takes ``reader`` offline; its segments return to unassigned at ``positions`` (or as recorded)."""
        if reader not in self.readers:
            return
        segments = self.assigned.pop(reader, {})
        for segment, offset in segments.items():
            self.unassigned[segment] = (positions or {}).get(segment, offset)
        self.readers.remove(reader)
        for checkpoint in self.checkpoints:
            if reader in checkpoint.pending:
                checkpoint.pending.remove(reader)
                checkpoint.positions.update({segment: self.unassigned[segment] for segment in segments})
        self._finish_checkpoints()

    # ------------------------------------------------------------------ segments

    def acquire(self, reader: str, segments: Iterable[str]) -> dict[str, int]:
        """Moves ``segments`` from unassigned to ``reader``; returns them with their start offsets."""
        self.check_member(reader)
        taken = {}
        for segment in segments:
            if segment in self.unassigned:
                taken[segment] = self.unassigned.pop(segment)
        self.assigned[reader].update(taken)
        return taken

    def release(self, reader: str, segment: str, offset: int) -> None:
        self.check_member(reader)
        if self.assigned[reader].pop(segment, None) is not None:
            self.unassigned[segment] = offset

    def complete(self, reader: str, segment: str, end_offset: int,
                 successors: dict[str, list[str]]) -> None:
        """``reader`` read ``segment`` to its end; ``successors`` maps each successor to all its predecessors.

        A successor becomes unassigned once every one of its predecessors is finished. A checkpoint the reader
        still owes gets the segment at its end offset: the reader owned it when the checkpoint began, so nothing
        else puts it in the cut, and neither are its successors (a reader owing a checkpoint acquires none). Without
        it, a group reset to that checkpoint knew neither, and never read the successors (found by the simulation,
        seed 68: a segment and every event in it were lost to the group).
        """
        self.check_member(reader)
        if self.assigned[reader].pop(segment, None) is None:
            return
        for checkpoint in self.checkpoints:
            if reader in checkpoint.pending:  # finished before this reader reached the checkpoint: its cut has the
                checkpoint.positions[segment] = end_offset  # segment at its end, so a reset to it finds the successors
        if segment in self.end_offsets:
            successors = {}  # the end cut stops the group here
        for successor, predecessors in successors.items():
            if not (successor in self.future or successor in self.unassigned or successor in self.completed
                    or self._owner_of(successor)):
                self.future[successor] = sorted(predecessors)
        self.completed[segment] = end_offset
        for successor, predecessors in list(self.future.items()):
            if all(predecessor in self.completed for predecessor in predecessors):
                del self.future[successor]
                self.unassigned[successor] = 0
        awaited = {predecessor for predecessors in self.future.values() for predecessor in predecessors}
        self.completed = {name: offset for name, offset in self.completed.items() if name in awaited}

    def _owner_of(self, segment: str) -> str | None:
        for reader, segments in self.assigned.items():
            if segment in segments:
                return reader
        return None

    # ------------------------------------------------------------------ checkpoints

    def create_checkpoint(self, name: str, silent: bool, max_outstanding: int) -> None:
        if any(checkpoint.name == name for checkpoint in self.checkpoints):
            raise CheckpointFailed(f"a checkpoint named {name!r} is already outstanding")
        if not silent and sum(not c.silent for c in self.checkpoints) >= max_outstanding:
            raise CheckpointFailed(f"{max_outstanding} checkpoints are already outstanding")
        positions = dict(self.completed)
        positions.update(self.unassigned)
        self.checkpoints.append(Checkpoint(name, silent, list(self.readers), positions))
        self._finish_checkpoints()

    def checkpoint(self, reader: str, name: str, positions: dict[str, int]) -> None:
        """``reader`` reached checkpoint ``name`` at ``positions`` (offsets of every segment it owns)."""
        self.check_member(reader)
        for checkpoint in self.checkpoints:
            if checkpoint.name == name and reader in checkpoint.pending:
                checkpoint.pending.remove(reader)
                owned = self.assigned[reader]
                reached = {segment: positions.get(segment, offset) for segment, offset in owned.items()}
                checkpoint.positions.update(reached)
                if not checkpoint.silent:
                    owned.update(reached)
        self._finish_checkpoints()

    def _finish_checkpoints(self) -> None:
        for checkpoint in self.checkpoints:
            if not checkpoint.pending and not checkpoint.silent:
                self.last_checkpoint = checkpoint

    def completed_checkpoint(self, name: str) -> Checkpoint | None:
        """The checkpoint ``name`` if every reader reported it, else None. Raises CheckpointFailed if unknown."""
        for checkpoint in self.checkpoints:
            if checkpoint.name == name:
                return checkpoint if not checkpoint.pending else None
        if self.last_checkpoint is not None and self.last_checkpoint.name == name:
            return self.last_checkpoint
        raise CheckpointFailed(f"checkpoint {name!r} is not outstanding (cleared, or the group was reset)")

    def clear_checkpoint(self, name: str) -> None:
        """Drops checkpoint ``name`` and every one created before it."""
        for index, checkpoint in enumerate(self.checkpoints):
            if checkpoint.name == name:
                del self.checkpoints[:index + 1]
                return


def _segment_order(name: str) -> tuple[int, int, str]:

    """Older epochs first, then segment number: predecessors before successors when both are free."""
    _, _, tail = name.rpartition("/")
    number, _, epoch = tail.partition(".#epoch.")
    try:
        return (int(epoch or 0), int(number), name)
    except ValueError:
        return (0, 0, name)
