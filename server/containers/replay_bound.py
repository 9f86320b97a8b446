"""The bound on what a container's log holds to replay, and when appends must wait for it (issue 25).

Recovery replays the log from its first checkpoint: every byte and operation logged since, which Tier-2
did not let the log drop yet. Without a bound that is as much as the cache can pin (a 3 GiB cache let a
burst leave 2.9 GB to replay: 83 s before the store served a read). With one, appends wait store-wide
(the cache's append throttle) once any container's backlog comes within ``HOLD_AT`` of its bound, and the
storage writer catches up (everything is flushed, a checkpoint logged, the log truncated) until the backlog is
back under ``RELIEVED_AT`` of it. Appends accepted before the hold still land, so the bound can be passed by
what was in flight then (at most the connections' outstanding append bytes). Pure rules: the caller measures
and acts.
"""

from __future__ import annotations

import dataclasses

HOLD_AT = 0.9  # appends wait once a backlog passes this fraction of a bound ...
RELIEVED_AT = 0.8  # ... until it is back under this fraction of both


@dataclasses.dataclass(frozen=True)
class ReplayBound:
    """At most ``bytes_max`` logged bytes (checkpoints aside) and ``operations_max`` operations to replay."""

    bytes_max: int = 256 * 1024 * 1024
    operations_max: int = 250_000

    def __post_init__(self) -> None:
        if self.bytes_max <= 0 or self.operations_max <= 0:
            raise ValueError("replay bounds must be positive")

    def over(self, throttled: bool, backlog_bytes: int, backlog_operations: int) -> bool:
        """Whether appends must wait for this backlog: past ``HOLD_AT`` of a bound to start, and while it is
        still past ``RELIEVED_AT`` of one."""
        fraction = RELIEVED_AT if throttled else HOLD_AT
        return backlog_bytes > self.bytes_max * fraction or backlog_operations > self.operations_max * fraction
