"""How far a container's recovery (the replay of its log) has come, and when it should be done.

The pipeline counts records, bytes and operations as it replays; the total is what the log says it holds
(``DurableDataLog.readable_records``; None when it cannot tell, and then no ETA). Reported in the log every
``LOG_EVERY`` seconds and as metrics (``tributary_segmentstore_recovery_*``) while the container recovers.
"""

from __future__ import annotations

import time

LOG_EVERY = 2.0  # seconds between "recovery progress" lines of one container


class RecoveryProgress:
    __slots__ = ("records_total", "records", "bytes", "operations", "started", "finished", "_logged_at")

    def __init__(self, records_total: int | None):
        self.records_total = records_total
        self.records = 0
        self.bytes = 0  # bytes of the records read, checkpoints included
        self.operations = 0  # operations applied after the first checkpoint
        self.started = time.monotonic()
        self.finished: float | None = None
        self._logged_at = self.started

    @property
    def seconds(self) -> float:
        return (self.finished if self.finished is not None else time.monotonic()) - self.started

    def eta_seconds(self) -> float | None:
        """Seconds still to go at the rate so far (by records), None before any or without a total."""
        if self.finished is not None:
            return 0.0
        if not self.records_total or not self.records:
            return None
        left = max(0, self.records_total - self.records)
        return self.seconds * left / self.records

    def due_for_log(self) -> bool:
        """Whether a progress line is due (at most one per LOG_EVERY seconds)."""
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY:
            return False
        self._logged_at = now
        return True

    def fields(self) -> dict:
        """The structured fields of a progress (or done) line."""
        eta = self.eta_seconds()
        return {"records": self.records, "records_total": self.records_total, "bytes": self.bytes,
                "operations": self.operations, "seconds": round(self.seconds, 3),
                "eta_seconds": None if eta is None else round(eta, 1)}
