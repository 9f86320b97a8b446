"""Checking what readers got against what writers wrote, by sequence number.

Each *source* (a writer and a key, or a writer alone when events carry no key) numbers
its events 0, 1, 2, ... The checker keeps, per source, the sequence numbers seen as a
sorted list of disjoint ranges (one range when all is well), so it notices:

* duplicates: a number seen before;
* out-of-order arrivals: a number below the highest seen so far, in ``ordered`` mode
  (events of one writer and key must be read in the order written; without keys
  there is no order to check, so they are only counted as ``reordered``);
* gaps (holes between the ranges) and missing events, once the writers' final counts
  are known (``result``). For sources no local writer made (another loadgen process),
  only holes between what was seen count, since where they started is unknown.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any


class _Source:
    """The sequence numbers seen from one source, as ranges ``[starts[i], ends[i])``."""

    __slots__ = ("ends", "highest", "starts")

    def __init__(self, sequence: int):
        self.starts = [sequence]
        self.ends = [sequence + 1]
        self.highest = sequence

    def add(self, sequence: int) -> bool:
        """Records ``sequence``; False if it was seen already."""
        starts, ends = self.starts, self.ends
        if ends[-1] == sequence:  # the usual case: the next one
            ends[-1] = sequence + 1
        else:
            index = bisect_right(starts, sequence) - 1
            if index >= 0 and sequence < ends[index]:
                return False
            joins_left = index >= 0 and ends[index] == sequence
            joins_right = index + 1 < len(starts) and starts[index + 1] == sequence + 1
            if joins_left and joins_right:
                ends[index] = ends[index + 1]
                del starts[index + 1], ends[index + 1]
            elif joins_left:
                ends[index] = sequence + 1
            elif joins_right:
                starts[index + 1] = sequence
            else:
                starts.insert(index + 1, sequence)
                ends.insert(index + 1, sequence + 1)
        self.highest = max(self.highest, sequence)
        return True

    def count(self) -> int:
        """Distinct sequence numbers seen."""
        return sum(end - start for start, end in zip(self.starts, self.ends, strict=True))

    def holes(self, expected: int | None) -> tuple[int, int, int]:
        """(gaps, missing events, events numbered ``expected`` or more) given the writer's count.

        With ``expected`` None (not written here) only the holes between what was seen count."""
        pairs = list(zip(self.starts, self.ends, strict=True))
        if expected is None:
            return len(pairs) - 1, sum(pairs[i + 1][0] - pairs[i][1] for i in range(len(pairs) - 1)), 0
        beyond = sum(end - max(start, expected) for start, end in pairs if end > expected)
        gaps = missing = cursor = 0
        for start, end in pairs:
            if start >= expected:
                break
            if start > cursor:
                gaps, missing = gaps + 1, missing + start - cursor
            cursor = min(end, expected)
        if cursor < expected:
            gaps, missing = gaps + 1, missing + expected - cursor
        return gaps, missing, beyond


class SequenceChecker:
    """Sequence numbers seen per source; ``ordered`` when keys make per-source order a promise."""

    def __init__(self, ordered: bool):
        self.ordered = ordered
        self.duplicates = 0
        self.out_of_order = 0
        self.foreign = 0
        self._sources: dict[tuple[int, int], _Source] = {}

    def observe(self, writer: int, key: int, sequence: int) -> bool:
        """Records one event read; False for a duplicate (already read once)."""
        source = self._sources.get((writer, key))
        if source is None:
            self._sources[(writer, key)] = _Source(sequence)
            return True
        late = sequence < source.highest
        if not source.add(sequence):
            self.duplicates += 1
            return False
        if late:
            self.out_of_order += 1
        return True

    def not_loadgen(self) -> None:
        """Counts an event that is not in the loadgen's format (someone else's data)."""
        self.foreign += 1

    def result(self, expected: dict[tuple[int, int], int], local_writers: set[int]) -> dict[str, Any]:
        """The verdict, given how many events each local source wrote (``expected``)."""
        gaps = missing = unexpected = 0
        for key, source in self._sources.items():
            known = expected.get(key, 0) if key[0] in local_writers else None
            source_gaps, source_missing, beyond = source.holes(known)
            gaps, missing, unexpected = gaps + source_gaps, missing + source_missing, unexpected + beyond
        for key, count in expected.items():
            if count and key not in self._sources:
                gaps, missing = gaps + 1, missing + count
        return {
            "mode": "per writer and key, in order" if self.ordered else "per writer, in any order (no keys)",
            "sources": len(set(self._sources) | {key for key, count in expected.items() if count}),
            "events_checked": sum(source.count() for source in self._sources.values()),
            "duplicates": self.duplicates,
            "out_of_order": self.out_of_order if self.ordered else 0,
            "reordered": 0 if self.ordered else self.out_of_order,
            "gaps": gaps,
            "missing": missing,
            "unexpected": unexpected,
            "foreign": self.foreign,
            "ok": not (self.duplicates or gaps or missing or unexpected or (self.ordered and self.out_of_order)),
        }


__all__ = ["SequenceChecker"]
