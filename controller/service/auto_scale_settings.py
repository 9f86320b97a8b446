"""Timings of the report-driven auto-scaler (spec §6.10); tests shrink them to seconds.

The load windows, cooldown and mute are the segment stores' (``server.containers.LoadSettings``:
they measure and decide hot or cold); the controller only acts on their reports. Kept apart from
``auto_scale`` so that ``context.ServiceSettings`` can hold them without an import cycle.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class AutoScaleSettings:
    """Defaults follow Java's controller (``AutoScaleTask``)."""

    enabled: bool = True
    # A DOWN report marks its segment cold this long (a silent one: until the segment is sealed); a report older
    # than this is ignored, and report segments are truncated behind it (Java's REQUEST_VALIDITY_PERIOD).
    cold_mark_seconds: float = 600.0
    retry_seconds: float = 2.0  # a stream that was busy when its reports came is looked at again after this
    # A round starts this long after reports woke it, so that the reports several containers make in the same
    # tick about one stream (its segments live in different containers) are acted on together.
    batch_seconds: float = 1.0
    truncate_interval_seconds: float = 60.0  # report segments are truncated behind expired reports at most this often
    missing_segment_wait_seconds: float = 5.0  # a container without a report segment yet is looked at again after this
    read_bytes_max: int = 1024 * 1024  # one read of a report segment

    def __post_init__(self) -> None:
        if min(self.cold_mark_seconds, self.retry_seconds, self.truncate_interval_seconds,
               self.missing_segment_wait_seconds) <= 0 or self.batch_seconds < 0:
            raise ValueError("auto-scale timings must be positive")

    @property
    def cold_mark_ms(self) -> int:
        return int(self.cold_mark_seconds * 1000)
