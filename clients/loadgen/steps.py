"""The write phase as a schedule of steps: each lasts ``--duration`` seconds at its own total rate.

``--rate 1000,10000,50000`` makes three steps; a single ``--rate`` is a schedule of one step. The runner
fixes the steps' wall-clock start times (``time.time_ns()``, the clock of the send time in every event
header) just before writing begins; from then on :meth:`StepSchedule.step_at` says which step a moment
belongs to. Writers use it to switch rate, and the statistics to put each write ack and each event read in
the step its event was *sent* in (whenever it was acknowledged or read).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

NS_PER_SECOND = 1_000_000_000


class StepSchedule:
    """``rates`` (total events/s of each step, 0: unlimited), each for ``step_seconds``.

    Before :meth:`start` every moment is in the first step.
    """

    def __init__(self, rates: Sequence[float], step_seconds: float):
        if not rates:
            raise ValueError("a schedule needs at least one step")
        self.rates = tuple(rates)
        self.step_seconds = step_seconds
        self._step_ns = round(step_seconds * NS_PER_SECOND)
        self.starts_ns: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.rates)

    @property
    def total_seconds(self) -> float:
        """How long the schedule lasts: every step's seconds."""
        return self.step_seconds * len(self.rates)

    @property
    def average_rate(self) -> float:
        """The total rate over the whole schedule (steps last as long as each other); 0 if a step is unlimited."""
        if 0 in self.rates:
            return 0.0
        return sum(self.rates) / len(self.rates)

    def start(self, started_ns: int) -> None:
        """Fixes the steps' start times: the first at ``started_ns``, the others ``step_seconds`` apart."""
        self.starts_ns = tuple(started_ns + step * self._step_ns for step in range(len(self.rates)))

    def step_at(self, time_ns: int) -> int:
        """The step that wall-clock time ``time_ns`` falls in (before the start: the first; after the end: the last)."""
        return max(0, bisect_right(self.starts_ns, time_ns) - 1)

    def next_start_ns(self, step: int) -> int | None:
        """When the step after ``step`` starts (None: ``step`` is the last, or the schedule has not started)."""
        return self.starts_ns[step + 1] if step + 1 < len(self.starts_ns) else None

    def seconds_of(self, step: int, write_end_ns: int | None) -> float | None:
        """How long ``step`` was written in, writing having ended at ``write_end_ns``, rounded to ms.

        The last step runs to the end of writing, so a schedule of one step lasts as long as the write phase;
        a step that writing never reached (stopped early) lasts 0. None before the start or the end is known.
        """
        if write_end_ns is None or not self.starts_ns:
            return None
        end = self.next_start_ns(step)
        end = write_end_ns if end is None else min(end, write_end_ns)
        return round(max(0, end - self.starts_ns[step]) / NS_PER_SECOND, 3)


__all__ = ["StepSchedule"]
