"""Shrinking a failing seed to a shorter fault schedule that still fails the same way.

Theory of operation
-------------------
A seed's faults are drawn up front (``scenario.fault_schedule``), so a run can keep any subset of them and
the kept ones happen as they did. ``shrink`` is delta debugging (Zeller's ddmin, complements only): it splits
the kept faults into ``n`` chunks and tries each run without one chunk. A run that still fails the same
way (``same_failure``: the same broken invariant, or the same kind of error) is kept and the chunks are
counted again; when no chunk can go, the chunks are halved, down to single faults. The result is
1-minimal: leaving out any one more fault makes the failure go away (or change). It first tries no faults
at all (a bug that needs none). Every try is a whole run, so a schedule of ``n`` faults costs O(n log n)
runs at worst, far fewer when few faults matter.

The failure a shrunk schedule shows is the same kind, not necessarily the same events: a run without some
faults takes another course, so it may break the same invariant on other keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_NUMBERS = re.compile(r"\d+")


def failure_kind(failure: str) -> str:
    """What a failure is, without its particulars: ``invariant broken: 7 events read more than once, e.g. ...``
    is ``invariant broken: events read more than once``; ``Quiescent: ...`` is ``Quiescent``."""
    head, _, rest = failure.partition(": ")
    if head != "invariant broken":
        return head
    what = rest.split(", e.g.")[0].split(";")[0]
    return f"{head}: {_NUMBERS.sub('', what).strip()}"


def shrink(faults: Sequence[int], fails: Callable[[list[int]], bool],
           progress: Callable[[list[int]], None] | None = None) -> list[int]:
    """The smallest subset of ``faults`` found for which ``fails(subset)`` still holds (see the module
    docstring); ``fails(list(faults))`` is taken to hold. ``progress`` is told each smaller failing subset."""
    kept = list(faults)
    if kept and fails([]):
        return []
    chunks = 2
    while len(kept) >= 2:
        size = -(-len(kept) // chunks)
        for start in range(0, len(kept), size):
            rest = kept[:start] + kept[start + size:]
            if fails(rest):
                kept = rest
                chunks = max(chunks - 1, 2)
                if progress is not None:
                    progress(kept)
                break
        else:
            if chunks >= len(kept):
                break
            chunks = min(len(kept), chunks * 2)
    return kept
