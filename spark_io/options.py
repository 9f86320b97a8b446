"""The options of format ``tributary``, named as the Pravega Spark connector names them, parsed and
checked once at planning: a bad or conflicting option fails the query there with a ValueError that
names it.

Spark hands options over as strings in a case-insensitive map (keys arrive lowercased);
options this module does not know (``path``, ``checkpointLocation``...) are ignored, as Spark's
own sources do.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import overload

from clients.errors import InvalidArgument
from clients.model import (
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    check_scope_name,
    check_stream_name,
    check_user_name,
)

from .access import ServerAccess, server_access

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024  # as Spark's spark.sql.files.maxPartitionBytes
EARLIEST, LATEST, UNBOUNDED = "earliest", "latest", "unbounded"
METADATA_KINDS = ("streaminfo", "streams")

# transaction leases the SDK accepts (WriterConfig.transaction_lease_ms)
_LEASE_MIN_MS, _LEASE_MAX_MS = 10_000, 600_000


@overload
def _text(options: Mapping[str, str], name: str, default: str) -> str: ...


@overload
def _text(options: Mapping[str, str], name: str, default: None = None) -> str | None: ...


def _text(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = options.get(name)
    if value is None:
        return default
    value = str(value).strip()
    return value if value else default


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _text(options, name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}: expected true or false, not {value!r}")


@overload
def _number(options: Mapping[str, str], name: str, default: int, *, minimum: int = 0,
            maximum: int | None = None) -> int: ...


@overload
def _number(options: Mapping[str, str], name: str, default: None = None, *, minimum: int = 0,
            maximum: int | None = None) -> int | None: ...


def _number(options: Mapping[str, str], name: str, default: int | None = None, *, minimum: int = 0,
            maximum: int | None = None) -> int | None:

    value = _text(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"option {name}: expected a whole number, not {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ValueError(f"option {name}: {number} is out of range (it must be {bounds})")
    return number


def _name(check, options: Mapping[str, str], name: str) -> str:
    value = _text(options, name)
    if value is None:
        raise ValueError(f"option {name} is required")
    try:
        return check(value)
    except InvalidArgument as error:
        raise ValueError(f"option {name}: {error}") from None


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """Where the stream is (the server, reached and authenticated as ``access`` says), and what to do
    when it does not exist."""

    access: ServerAccess
    scope: str
    stream: str
    allow_create_scope: bool
    allow_create_stream: bool
    configuration: StreamConfiguration  # used only when the stream is created


def _stream_configuration(options: Mapping[str, str]) -> StreamConfiguration:
    segments = _number(options, "default_num_segments", 1, minimum=1)
    factor = _number(options, "default_scale_factor", 2, minimum=1)
    byte_rate = _number(options, "default_segment_target_rate_bytes_per_sec", minimum=1)
    event_rate = _number(options, "default_segment_target_rate_events_per_sec", minimum=1)
    if byte_rate is not None and event_rate is not None:
        raise ValueError("options default_segment_target_rate_bytes_per_sec and "
                         "default_segment_target_rate_events_per_sec conflict: give at most one")
    if byte_rate is not None:
        scaling = ScalingPolicy.by_data_rate(max(1, math.ceil(byte_rate / 1024)), factor, segments)
    elif event_rate is not None:
        scaling = ScalingPolicy.by_event_rate(event_rate, factor, segments)
    else:
        scaling = ScalingPolicy.fixed(segments)
    duration = _number(options, "default_retention_duration_milliseconds", minimum=1)
    size = _number(options, "default_retention_size_bytes", minimum=1)
    if duration is not None and size is not None:
        raise ValueError("options default_retention_duration_milliseconds and default_retention_size_bytes "
                         "conflict: give at most one")
    retention = (RetentionPolicy.by_time(duration) if duration is not None
                 else RetentionPolicy.by_size(size) if size is not None else None)
    return StreamConfiguration(scaling, retention)


def stream_options(options: Mapping[str, str], *, require_stream: bool = True) -> StreamOptions:
    """The target; without ``require_stream`` (a scope's metadata) the stream may be absent ("")."""
    access = server_access(options, _text)
    stream = _name(check_stream_name, options, "stream") if require_stream or "stream" in options else ""
    return StreamOptions(access, _name(check_scope_name, options, "scope"), stream,
                         _flag(options, "allow_create_scope", True), _flag(options, "allow_create_stream", True),
                         _stream_configuration(options))


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """A read: the stream, its two cuts (``earliest``/``latest``/``unbounded`` or a cut's text form),
    the micro-batch limits and the largest input partition."""

    target: StreamOptions
    start_cut: str
    end_cut: str
    approx_bytes_per_trigger: int | None
    max_events_per_trigger: int | None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES  # a segment's slice is read by partitions of about this
    subscriber: str | None = None  # a streaming read's reader group for consumption-based retention


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    target = stream_options(options)
    start = _cut_option(options, "start_stream_cut", LATEST if streaming else EARLIEST)
    end = _cut_option(options, "end_stream_cut", UNBOUNDED if streaming else LATEST)
    if start == UNBOUNDED:
        start = EARLIEST
    if end == EARLIEST:
        raise ValueError("option end_stream_cut: earliest is not an end (use latest, unbounded or a stream cut)")
    if not streaming and end == UNBOUNDED:
        end = LATEST  # a batch read ends somewhere: at the tail when the query is planned
    byte_limit = _number(options, "approx_bytes_per_trigger", minimum=1)
    event_limit = _number(options, "max_events_per_trigger", minimum=1)
    if byte_limit is not None and event_limit is not None:
        raise ValueError("options approx_bytes_per_trigger and max_events_per_trigger conflict: give at most one")
    subscriber = _text(options, "subscriber")
    if subscriber is not None:
        if not streaming:
            raise ValueError("option subscriber: only a streaming read commits its progress (use readStream)")
        subscriber = _name(lambda name: check_user_name(name, "reader group name"), options, "subscriber")
    return ReadOptions(target, start, end, byte_limit, event_limit,
                       _number(options, "max_partition_bytes", DEFAULT_MAX_PARTITION_BYTES, minimum=1), subscriber)


def _cut_option(options: Mapping[str, str], name: str, default: str) -> str:
    value = _text(options, name, default)
    if value.lower() in (EARLIEST, LATEST, UNBOUNDED):
        return value.lower()
    from clients.stream_cut import StreamCut  # a cut's text form, checked here, parsed again where used

    try:
        StreamCut.from_text(value)
    except InvalidArgument as error:
        raise ValueError(f"option {name}: not earliest, latest, unbounded or a stream cut ({error})") from None
    return value


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """A write: the stream, transactions or not, and how commits are confirmed."""

    target: StreamOptions
    exactly_once: bool
    transaction_timeout_ms: int
    read_after_write_consistency: bool
    transaction_status_poll_interval_ms: int
    checkpoint: str | None = None  # a streaming query's checkpoint location (Spark passes it on)


def write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    return WriteOptions(
        stream_options(options),
        _flag(options, "exactly_once", True),
        _number(options, "transaction_timeout_ms", 30_000 if streaming else 120_000,
                minimum=_LEASE_MIN_MS, maximum=_LEASE_MAX_MS),
        _flag(options, "read_after_write_consistency", True),
        _number(options, "transaction_status_poll_interval_ms", 50, minimum=1, maximum=60_000),
        _text(options, "checkpointlocation") if streaming else None)


def metadata_kind(options: Mapping[str, str]) -> str | None:
    """``streaminfo``, ``streams`` or None (a data read)."""
    value = _text(options, "metadata")
    if value is None:
        return None
    if value.lower() not in METADATA_KINDS:
        raise ValueError(f"option metadata: expected StreamInfo or Streams, not {value!r}")
    return value.lower()


__all__ = ["ReadOptions", "StreamOptions", "WriteOptions", "metadata_kind", "read_options", "stream_options",
           "write_options"]
