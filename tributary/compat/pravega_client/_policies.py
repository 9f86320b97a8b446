"""Stream policies as the binding builds them: ``StreamScalingPolicy`` and ``StreamRetentionPolicy``.

Like the binding's, they only record numbers (nothing is checked until the stream is created or
updated, where a bad value raises ValueError) and are made only by their static methods.
"""

from __future__ import annotations

from clients.model import RetentionPolicy, ScalingPolicy

from ._common import Internal


class StreamScalingPolicy(Internal):
    """How many segments a stream has: fixed, or scaled automatically by data or event rate."""

    _scaling: tuple[str, int, int, int]

    @staticmethod
    def fixed_scaling_policy(initial_segments: int) -> StreamScalingPolicy:
        """Exactly ``initial_segments`` segments."""
        return StreamScalingPolicy._of(("fixed", 0, 0, initial_segments))

    @staticmethod
    def auto_scaling_policy_by_data_rate(target_rate_kbytes_per_sec: int, scale_factor: int,
                                         initial_segments: int) -> StreamScalingPolicy:
        """Split segments above ``target_rate_kbytes_per_sec`` KiB/s, starting with ``initial_segments``."""
        return StreamScalingPolicy._of(("data", target_rate_kbytes_per_sec, scale_factor, initial_segments))

    @staticmethod
    def auto_scaling_policy_by_event_rate(target_events_per_sec: int, scale_factor: int,
                                          initial_segments: int) -> StreamScalingPolicy:
        """Split segments above ``target_events_per_sec`` events/s, starting with ``initial_segments``."""
        return StreamScalingPolicy._of(("events", target_events_per_sec, scale_factor, initial_segments))

    @staticmethod
    def _of(numbers: tuple[str, int, int, int]) -> StreamScalingPolicy:
        policy = StreamScalingPolicy._new()
        policy._scaling = numbers
        return policy

    def _sdk(self) -> ScalingPolicy:
        """The SDK's policy (raises InvalidArgument for values the server would refuse)."""
        kind, rate, factor, segments = self._scaling
        if kind == "fixed":
            return ScalingPolicy.fixed(segments)
        if kind == "data":
            return ScalingPolicy.by_data_rate(rate, factor, segments)
        return ScalingPolicy.by_event_rate(rate, factor, segments)


class StreamRetentionPolicy(Internal):
    """How much of a stream is kept: everything, at least some bytes, or at least some time."""

    _retention: tuple[str, int]

    @staticmethod
    def none() -> StreamRetentionPolicy:
        """Keep everything."""
        return StreamRetentionPolicy._of(("none", 0))

    @staticmethod
    def by_size(size_in_bytes: int) -> StreamRetentionPolicy:
        """Keep at least ``size_in_bytes`` bytes."""
        return StreamRetentionPolicy._of(("size", size_in_bytes))

    @staticmethod
    def by_time(time_in_millis: int) -> StreamRetentionPolicy:
        """Keep at least ``time_in_millis`` milliseconds of data."""
        return StreamRetentionPolicy._of(("time", time_in_millis))

    @staticmethod
    def _of(numbers: tuple[str, int]) -> StreamRetentionPolicy:
        policy = StreamRetentionPolicy._new()
        policy._retention = numbers
        return policy

    def _sdk(self) -> RetentionPolicy | None:
        kind, amount = self._retention
        if kind == "none":
            return None
        return RetentionPolicy.by_size(amount) if kind == "size" else RetentionPolicy.by_time(amount)
