"""Named points inside the workflows and transaction jobs where a test can make the controller "crash".

A workflow or job calls ``fault_points.reach("scale.epoch_written")`` between its steps. In
production nothing is armed and the call does nothing. A test arms a point to raise
``SimulatedCrash`` there: the work stops half done, exactly as if the process had died, with its
persisted intent (or, for a transaction job, its transaction records) left behind for another
controller to re-drive. The names are listed in ``POINTS`` so a typo in a test fails loudly
instead of never firing.

For tests that kill a real controller process in the middle of its work, the environment variable
``TRIBUTARY_FAULT_STOP`` (comma-separated point names) makes the process stop itself (SIGSTOP) on
reaching one of those points, so that the test can SIGKILL it exactly there.
"""

from __future__ import annotations

import asyncio
import os
import signal

STOP_VARIABLE = "TRIBUTARY_FAULT_STOP"

POINTS = frozenset({
    "create.records_written",
    "create.segments_created",
    "scale.segments_created",
    "scale.epoch_written",
    "scale.segments_sealed",
    "scale.epoch_moved",
    "seal.state_sealing",
    "seal.segments_sealed",
    "delete.segments_deleted",
    "truncate.record_written",
    "truncate.segments_truncated",
    "update.configuration_written",
    "update.policies_updated",
    # The transaction jobs (``transactions.jobs``): each is right *before* the step it names.
    "commit.batch",
    "commit.merge",
    "commit.rolling.duplicates",
    "commit.rolling.epochs",
    "commit.rolling.seal",
    "commit.complete",
    "abort.delete",
})


class SimulatedCrash(Exception):
    """Raised at an armed fault point."""


class FaultPoints:
    def __init__(self, stops: frozenset[str] = frozenset()) -> None:
        self._armed: dict[str, int] = {}
        self.crashed: asyncio.Event = asyncio.Event()  # set once an armed point has raised (tests wait on it)
        unknown = stops - POINTS
        if unknown:
            raise ValueError(f"unknown fault points {sorted(unknown)}")
        self._stops = stops

    @classmethod
    def from_environment(cls) -> FaultPoints:
        """Points that stop the process, from ``TRIBUTARY_FAULT_STOP`` (none when it is unset)."""
        names = os.environ.get(STOP_VARIABLE, "")
        return cls(frozenset(name.strip() for name in names.split(",") if name.strip()))

    def arm(self, point: str, times: int = 1) -> None:
        """Makes the next ``times`` arrivals at ``point`` raise SimulatedCrash.

        Raises:
            ValueError: ``point`` is not one of ``POINTS``.
        """
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}")
        self._armed[point] = times

    def reach(self, point: str) -> None:
        """Called by workflows between steps.

        Raises:
            SimulatedCrash: the point is armed.
        """
        if point in self._stops:
            os.kill(os.getpid(), signal.SIGSTOP)  # a test kills the process here
        remaining = self._armed.get(point, 0)
        if remaining > 0:
            self._armed[point] = remaining - 1
            self.crashed.set()
            raise SimulatedCrash(f"simulated crash at {point}")
