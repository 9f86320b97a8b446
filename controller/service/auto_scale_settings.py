"""Timings of the auto-scaler (spec §6.10, segment-store design §3.12); tests shrink them to seconds.

Kept apart from ``auto_scale`` so that ``context.ServiceSettings`` can hold them without an import cycle.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class AutoScaleSettings:
    """Defaults follow Java's ``AutoScalerConfig`` and ``AutoScaleProcessor``."""

    enabled: bool = True
    sample_interval_seconds: float = 10.0  # how often the active segments of rate-policy streams are sampled
    short_window_seconds: float = 120.0  # scale up when this rate > 5x target ...
    medium_window_seconds: float = 300.0  # ... or this one > 2x target ...
    long_window_seconds: float = 600.0  # ... or this one > target
    idle_window_seconds: float = 1200.0  # scale down when all rates < target and this one < target / 2
    cooldown_seconds: float = 600.0  # no decision about a segment this soon after its creation
    mute_seconds: float = 600.0  # no new request about a segment this soon after the last one

    @property
    def longest_window_ms(self) -> int:
        return int(1000 * max(self.short_window_seconds, self.medium_window_seconds, self.long_window_seconds,
                              self.idle_window_seconds))
